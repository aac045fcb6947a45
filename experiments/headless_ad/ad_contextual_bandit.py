"""AD baselines on contextual bandits with a fixed arm count (Headless-AD Figure 6), from LinUCB
histories; the presets and the rest are `ad_bandit.py`'s (Table 4's contextual bandit column)."""

from icrl_jax.experiments.headless_ad import ad_bandit

PRESETS = ad_bandit.PRESETS


def get_config(preset: str = ""):
    return ad_bandit.fixed_arms_config(contextual=True, preset=preset)
