"""Decision Transformer on walker2d, D4RL-style medium / medium-replay / medium-expert data made by
on-device PPO: gymnasium's v5 task on MJX at paper scale and `:quick_mjx`, brax's `walker2d` for
`:quick`; the data, model and presets are hopper's (experiments/continuous/hopper.py)."""

from icrl_jax.experiments.continuous.hopper import locomotion_config, locomotion_presets

PRESETS = locomotion_presets("walker2d")


def get_config(preset: str = ""):
    return locomotion_config("walker2d", preset)
