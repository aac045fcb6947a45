"""Continuous-control experiments: point maze (DT on Minari maze data) and brax locomotion."""

from icrl_jax.core.config import base_config
from icrl_jax.methods.fields import dt_model_config


def gpt_dtma_dt_config(experiment: str, rtg_scale: float, max_timestep: int):
    """A continuous-action DT at GPT-DTMA App. A's scale, its data still to add: a GPT-2-sized
    DT (12 layers, 12 heads, d_model 768, dropout 0.1), context 20, lr 1e-4 with 10K warm-up,
    weight decay 1e-4, batch 64, 100K updates; greedy (tanh head) evaluation of one episode
    (`max_timestep` steps) per held-out env."""
    config = base_config()
    config.experiment = experiment
    config.method = "dt"
    config.model.update(dt_model_config())
    config.model.update(dict(d_model=768, num_layers=12, num_heads=12, embedding_dropout=0.1,
                             residual_dropout=0.1, attention_dropout=0.1, rtg_scale=rtg_scale,
                             max_timestep=max_timestep))
    config.train.update(dict(num_steps=100_000, batch_size=64, seq_len=20, learning_rate=1e-4,
                             warmup_steps=10_000, weight_decay=1e-4, steps_per_call=100,
                             log_every=500, checkpoint_every=5000))
    config.eval.update(dict(tasks="test", greedy=True, num_envs_per_task=1,
                            num_steps=max_timestep))
    return config
