"""msat on ViZDoom my way home; see `vizdoom.py` for the presets (`:quick`, default = paper scale)."""

from experiments.dt.vizdoom import make_config


def get_config(preset: str = ""):
    return make_config("msat", "my_way_home", preset, no_pe=False)
