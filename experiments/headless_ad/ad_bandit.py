"""AD baselines on bandits with a fixed arm count (Headless-AD Figures 5 and 6): AD's output
layer fixes the action count, so one AD is trained per evaluated count.

Presets: `arms{N}` (paper scale) and `quick_arms{N}` for N in 20, 25, 30, 40, 50; `contextual_`
prefixes (e.g. `contextual_quick_arms30`) switch to the contextual bandit with LinUCB data.
Bernoulli: trained on the "train" reward distribution, evaluated on uniform rewards.
"""

from icrl_jax.methods.fields import ad_config
from icrl_jax.experiments.headless_ad.common import quick_preset
from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.headless_ad.common import (EVAL_ARMS, add_report_fields, bernoulli_variants,
                                                     contextual_variants)

QUICK = quick_preset(120, **{"data.num_train_tasks": 2000, "data.num_test_tasks": 50})


def _arms(n):
    return {"env.kwargs.arms": n, "env.kwargs.max_arms": n}


PRESETS = {}
for _n in EVAL_ARMS:
    PRESETS[f"arms{_n}"] = _arms(_n)
    PRESETS[f"quick_arms{_n}"] = dict(QUICK, **_arms(_n))
    PRESETS[f"contextual_arms{_n}"] = _arms(_n)
    PRESETS[f"contextual_quick_arms{_n}"] = dict(QUICK, **_arms(_n))


def get_config(preset: str = "arms20"):
    config = ad_config()
    contextual = preset.startswith("contextual")
    n = int(preset.rsplit("arms", 1)[1]) if "arms" in preset else 20
    config.experiment = f"ad_{'contextual' if contextual else 'bernoulli'}"
    config.method = "ad"
    config.env.kwargs.arms = n
    config.env.kwargs.max_arms = n
    if contextual:
        config.env.name = "contextual_bandit"
        config.data.source = "linucb"
        config.variants = contextual_variants(arms=(n,), held_out=False)
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
        config.variants = bernoulli_variants(arms=(n,), distributions=False)
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
    return apply_preset(config, PRESETS, preset)
