"""msat on Button Room; see `button_room.py` for the presets (`:quick`, default = paper scale)."""

from icrl_jax.experiments.dt.button_room import make_config


def get_config(preset: str = ""):
    return make_config("msat", preset)
