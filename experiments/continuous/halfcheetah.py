"""Decision Transformer on brax halfcheetah, D4RL-style medium / medium-replay / medium-expert data made
by on-device PPO; the data, model and presets are hopper's (experiments/continuous/hopper.py)."""

from icrl_jax.experiments.continuous.hopper import locomotion_config


def get_config(preset: str = ""):
    return locomotion_config("halfcheetah", preset)
