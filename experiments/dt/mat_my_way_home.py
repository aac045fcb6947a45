"""mat on ViZDoom My Way Home; presets (:quick, paper default) in vizdoom.py."""

from icrl_jax.experiments.dt.vizdoom import make_config, presets

PRESETS = presets("my_way_home")


def get_config(preset: str = ""):
    return make_config("mat", "my_way_home", preset, no_pe=False)
