"""What the AD grid-world experiments share (n-gram paper, appendix B-D)."""

from icrl_jax.methods.fields import ad_config
from icrl_jax.core.config import cpu_preset


def q_learning_grid_config(experiment: str, env_name: str):
    """The n-gram paper's grid-world layout, shared by AD and the n-gram sweeps: Q-learning
    histories of 200 episodes of 50 steps, hidden 512 (4 blocks, 8 heads), batch 1024, 10K
    updates, context 200 steps (4 episodes), 40 in-context evaluation episodes."""
    config = ad_config()
    config.experiment = experiment
    config.env.name = env_name
    config.data.source = "q_learning"
    config.data.source_kwargs.lr = 0.3
    config.data.source_kwargs.discount = 0.9
    config.data.source_kwargs.decay_fraction = 0.5
    config.data.num_steps = 10_000  # 200 episodes of 50 steps
    config.model.update(dict(d_model=512, num_layers=4, num_heads=8))
    config.train.update(dict(num_steps=10_000, batch_size=1024, seq_len=200, warmup_steps=500,
                             steps_per_call=100, log_every=100, checkpoint_every=1000))
    config.eval.num_steps = 2000  # 40 in-context episodes
    return config


def grid_config(experiment: str, env_name: str):
    """AD at paper scale (`q_learning_grid_config`). The paper searches the Q-learning rates,
    dropouts and learning rate (Table 2); the values here are one point of that search."""
    config = q_learning_grid_config(experiment, env_name)
    config.model.update(dict(label_smoothing=0.1, embedding_dropout=0.1, residual_dropout=0.1))
    config.train.learning_rate = 3e-4
    return config


def quick_oracle_preset(**extra):
    """`quick`: a 2-core CPU cannot afford the paper's data and updates, so it distils a noisy
    oracle whose epsilon decays from 1 to 0 over the first 10 of 12 episodes (noise distillation,
    Zisman et al.): its learning histories improve within a few episodes, which a small model
    learns to reproduce in context in ~2,000 updates. Cells also get (row, column) features.
    `extra` adds the experiment's own dotted keys."""
    return cpu_preset(train_steps=2000, batch_size=64, seq_len=100, **{  # context: 2 episodes
        "data.source": "noisy_oracle",
        "data.source_kwargs": {"decay_fraction": 0.8},
        "data.num_steps": 600,  # 12 episodes
        "model.grid_observations": True,
        "eval.num_steps": 600,  # 12 in-context episodes
        **extra,
    })
