"""mat on ViZDoom Deadly Corridor; presets (:quick, paper default) in vizdoom.py."""

from icrl_jax.experiments.dt.vizdoom import make_config, presets

PRESETS = presets("deadly_corridor")


def get_config(preset: str = ""):
    return make_config("mat", "deadly_corridor", preset, no_pe=False)
