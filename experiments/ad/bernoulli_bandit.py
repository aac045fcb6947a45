"""AD on Bernoulli bandits (Headless-AD section 4.1, AD baseline; Table 4 hyperparameters).

Paper scale (default): 10,000 Thompson-sampling histories of 300 steps on 20-arm bandits from the
train distribution (95% of bandits: arms 1, 3, 5, ... (1-based) high), context 300, 4 layers,
d_model 512, 64 heads. Evaluation: 300 in-context steps on held-out bandits of the same
distribution, next to Thompson sampling and a random policy (normalised score: random 0, TS 1).
"""

from icrl_jax.experiments.ad.bandit_common import QUICK, bandit_config
from icrl_jax.core.config import apply_preset

PRESETS = {"quick": QUICK}


def get_config(preset: str = ""):
    config = bandit_config("ad_bernoulli_bandit", "bernoulli_bandit", "thompson_sampling")
    config.env.kwargs.arms = 20
    config.env.kwargs.distribution = "train"
    config.model.update(dict(d_model=512, num_layers=4, num_heads=64, label_smoothing=5e-3,
                             attention_dropout=0.1, residual_dropout=0.1))
    config.train.update(dict(learning_rate=1.1e-5, weight_decay=1.5e-4, b1=0.82))
    return apply_preset(config, PRESETS, preset)
