"""M-SAT Table 2 on ViZDoom Deadly Corridor: DT, M-SAT, MAT and M-SAT no-PE x 3 seeds on one dataset
(`icrl-jax report --config experiments/dt/table2_deadly_corridor.py:quick_mixed`); presets in vizdoom.py."""

from icrl_jax.experiments.dt.vizdoom import presets, table2_config

PRESETS = presets("deadly_corridor")


def get_config(preset: str = ""):
    return table2_config("deadly_corridor", preset)
