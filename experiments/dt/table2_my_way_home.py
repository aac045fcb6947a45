"""M-SAT Table 2 on ViZDoom My Way Home: DT, M-SAT, MAT and M-SAT no-PE x 3 seeds on one dataset
(`icrl-jax report --config experiments/dt/table2_my_way_home.py:quick_mixed`); presets in vizdoom.py."""

from icrl_jax.experiments.dt.vizdoom import presets, table2_config

PRESETS = presets("my_way_home")


def get_config(preset: str = ""):
    return table2_config("my_way_home", preset)
