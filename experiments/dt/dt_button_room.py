"""dt on Button Room; see `button_room.py` for the presets (`:quick`, default = paper scale)."""

from icrl_jax.experiments.dt import button_room

PRESETS = button_room.PRESETS


def get_config(preset: str = ""):
    return button_room.make_config("dt", preset)
