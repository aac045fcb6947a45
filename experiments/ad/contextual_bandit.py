"""AD on contextual bandits (Headless-AD section 4.2, AD baseline; Table 4 hyperparameters).

2-d arm features and contexts ~ N(0, I)/sqrt(2), reward ~ N(<context, arm>, 1). Paper scale
(default): LinUCB histories of 300 steps on 10-arm bandits, 8 layers, d_model 1024, 8 heads,
argmax ("mode") action selection.
"""

from icrl_jax.experiments.ad.bandit_common import QUICK, bandit_config
from icrl_jax.core.config import apply_preset

PRESETS = {"quick": QUICK}


def get_config(preset: str = ""):
    config = bandit_config("ad_contextual_bandit", "contextual_bandit", "linucb")
    config.env.kwargs.arms = 10
    config.data.source_kwargs.alpha = 1.0
    config.model.update(dict(d_model=1024, num_layers=8, num_heads=8, label_smoothing=0.2,
                             attention_dropout=0.28, residual_dropout=0.45))
    config.train.update(dict(learning_rate=1.3e-5, weight_decay=0.25, b1=0.58))
    config.eval.greedy = True
    return apply_preset(config, PRESETS, preset)
