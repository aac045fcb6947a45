"""AD baselines on the composite-action Dark Room (Headless-AD Figures 3, 7 and 8).

AD is trained on the 50 train actions and evaluated on the action sets of the same width
(train, permuted_train, sliced_test) x (train, test) goals; wider sets need a new output layer.
Preset `permuted` / `quick_permuted`: AD trained on randomly permuted action sets (appendix C).
Same data as `darkroom.py` (`quick_replay`: its episode-replay histories).
"""

from icrl_jax.experiments.headless_ad.common import DARKROOM_REPLAY, darkroom_config, darkroom_quick_preset
from icrl_jax.core.config import apply_preset

QUICK = darkroom_quick_preset()
PERMUTED = {"method": "ad_permuted", "report.label": "AD (permuted training)"}
PRESETS = {"quick": QUICK, "permuted": PERMUTED, "quick_permuted": dict(QUICK, **PERMUTED),
           "quick_replay": dict(QUICK, **DARKROOM_REPLAY)}


def get_config(preset: str = ""):
    config = darkroom_config("ad_darkroom_composite", "ad", max_eval_actions=50, label="AD")
    # Table 4, darkroom column.
    config.model.update(dict(num_layers=2, num_heads=8, label_smoothing=0.05,
                             attention_dropout=3.0e-2, residual_dropout=1.0e-2))
    config.train.update(dict(learning_rate=4.0e-4, weight_decay=8.0e-6, b1=0.95))
    config.eval.greedy = True  # Table 4: mode
    return apply_preset(config, PRESETS, preset)
