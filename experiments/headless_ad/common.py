"""What the Headless-AD experiments share: the `quick` preset (a small model, 2,000 updates) and
the way the ablations (Tables 5-7) become presets."""

from icrl_jax.config import cpu_preset


def quick_preset(seq_len: int, **extra):
    """Dotted overrides for a CPU-sized run; `extra` adds the experiment's own keys."""
    return cpu_preset(train_steps=2000, batch_size=32, seq_len=seq_len,
                      **{"train.weight_decay": 1e-4, "train.b1": 0.9, **extra})


#: The ablations as bare switches (quick presets keep the quick hyperparameters).
ABLATION_SWITCHES = {"no_prompt": {"model.prompt": False},
                     "mse": {"model.loss": "mse", "eval.greedy": True},
                     "normal": {"model.embeddings": "normal"}}


def ablation_presets(quick, tuned):
    """`quick`, the paper-tuned ablations `tuned` (name -> overrides, Tables 5-7) and
    `quick_<ablation>` (the quick preset with the ablation switched on)."""
    presets = {"quick": quick, **tuned}
    presets.update({f"quick_{name}": dict(quick, **switch)
                    for name, switch in ABLATION_SWITCHES.items()})
    return presets
