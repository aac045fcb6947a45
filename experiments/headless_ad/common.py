"""What the Headless-AD experiments' `quick` presets share: a small model, 2,000 updates."""

from icrl_jax.config import cpu_preset


def quick_preset(seq_len: int, **extra):
    """Dotted overrides for a CPU-sized run; `extra` adds the experiment's own keys."""
    return cpu_preset(train_steps=2000, batch_size=32, seq_len=seq_len,
                      **{"train.weight_decay": 1e-4, "train.b1": 0.9, **extra})
