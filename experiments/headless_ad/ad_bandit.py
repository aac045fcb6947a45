"""AD baselines on Bernoulli bandits with a fixed arm count (Headless-AD Figure 5): AD's output
layer fixes the action count, so one AD is trained per evaluated count, on the "train" reward
distribution, and evaluated on uniform rewards.

Paper scale (Table 4's Bernoulli column): 20 arms by default, `arms{N}` for N = 25, 30, 40, 50.
`quick`: 20 arms at CPU scale. The contextual bandit's AD baselines (Figure 6), with the same
presets, are `ad_contextual_bandit.py`.
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.headless_ad.common import (EVAL_ARMS, add_report_fields, bernoulli_variants,
                                                     contextual_variants, quick_preset)
from icrl_jax.methods.fields import ad_config


def _arms(n: int) -> dict:
    return {"env.kwargs.arms": n, "env.kwargs.max_arms": n}


PRESETS = {f"arms{n}": _arms(n) for n in EVAL_ARMS[1:]}
PRESETS["quick"] = quick_preset(120, **{"data.num_train_tasks": 2000, "data.num_test_tasks": 50})


def fixed_arms_config(contextual: bool, preset: str = ""):
    """AD on `EVAL_ARMS[0]` arms (or the preset's count) of the Bernoulli or contextual bandit,
    evaluated on held-out bandits with the same count."""
    config = ad_config()
    config.experiment = f"ad_{'contextual' if contextual else 'bernoulli'}"
    config.method = "ad"
    config.env.kwargs.arms = config.env.kwargs.max_arms = EVAL_ARMS[0]
    if contextual:
        config.env.name = "contextual_bandit"
        config.data.source = "linucb"
        # Table 4, contextual bandit column.
        config.model.d_model, config.model.num_layers, config.model.num_heads = 1024, 8, 8
        config.model.label_smoothing = 0.2
        config.model.attention_dropout, config.model.residual_dropout = 0.28, 0.45
        config.train.learning_rate, config.train.weight_decay, config.train.b1 = 1.3e-5, 0.25, 0.58
        config.eval.greedy = True
    else:
        config.env.name = "bernoulli_bandit"
        config.env.kwargs.distribution = "train"
        config.data.source = "thompson_sampling"
        # Table 4, Bernoulli bandit column.
        config.model.d_model, config.model.num_layers, config.model.num_heads = 512, 4, 64
        config.model.label_smoothing = 5.0e-3
        config.model.attention_dropout, config.model.residual_dropout = 0.1, 0.1
        config.train.learning_rate, config.train.weight_decay, config.train.b1 = 1.1e-5, 1.5e-4, 0.82
        config.eval.greedy = False
    config.model.position = "rotary"
    config.data.num_train_tasks = 10_000
    config.data.num_test_tasks = 100
    config.data.num_steps = 300
    config.train.num_steps = 20_000
    config.train.batch_size = 128
    config.train.seq_len = 300
    config.train.warmup_steps = 1000
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.num_steps = 300
    add_report_fields(config, label="AD (fixed arm count)")
    config = apply_preset(config, PRESETS, preset)
    arms = (config.env.kwargs.arms,)  # the one count AD's output layer fits
    config.variants = (contextual_variants(arms=arms, held_out=False) if contextual
                       else bernoulli_variants(arms=arms, distributions=False))
    return config


def get_config(preset: str = ""):
    return fixed_arms_config(contextual=False, preset=preset)
