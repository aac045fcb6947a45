"""What the DPT experiments share: the authors' model and optimiser (`net.py`, `train.py`)."""

from icrl_jax.core.config import cpu_preset
from icrl_jax.papers.dpt.fields import dpt_config


def authors_config(experiment: str, env_name: str):
    """DPT as the authors train it: transformers' GPT-2 (LayerNorm epsilon 1e-5, tanh GELU,
    no dropout) of width 32 with 4 layers and one head (`net.py` builds `n_head=1`; the run
    scripts' `--head 4` never reaches the model), batches of 64, AdamW with weight decay 1e-4,
    torch's betas (0.9, 0.999) at a constant learning rate and no gradient clipping. No
    positions: the context is read as a set (theirs adds GPT-2's learned positions to shuffled
    contexts; `model.position="learned"` is exactly their model)."""
    config = dpt_config()
    config.experiment = experiment
    config.env.name = env_name
    config.model.update(dict(d_model=32, num_layers=4, num_heads=1, norm_epsilon=1e-5,
                             position="none"))
    config.train.update(dict(batch_size=64, weight_decay=1e-4, b1=0.9, b2=0.999, min_lr_ratio=1.0,
                             warmup_steps=0, grad_clip=1e9, steps_per_call=100, log_every=1000,
                             checkpoint_every=10_000))
    config.eval.baselines = ("source", "random")
    return config


def quick_preset(**extra):
    """`quick`: 2 layers of width 32 (one head), 3,000 updates of 64 in-context datasets of 100
    transitions at learning rate 1e-3, 3 seeds in the claims report; `extra` adds the
    experiment's own dotted keys."""
    return cpu_preset(train_steps=3000, batch_size=64, seq_len=100, d_model=32, num_layers=2,
                      num_heads=1, **{"train.warmup_steps": 0, "train.log_every": 500,
                                      "train.checkpoint_every": 1500, "report.num_seeds": 3,
                                      **extra})
