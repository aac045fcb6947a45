"""mat on ViZDoom deadly corridor; see `vizdoom.py` for the presets (`:quick`, default = paper scale)."""

from experiments.dt.vizdoom import make_config


def get_config(preset: str = ""):
    return make_config("mat", "deadly_corridor", preset, no_pe=False)
