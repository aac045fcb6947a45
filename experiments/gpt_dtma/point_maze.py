"""GPT-DTMA Table 4's analogue on the point maze (`icrl-jax report --config
experiments/gpt_dtma/point_maze.py[:quick|:context]`): DT, DTMA, GPT-DT and GPT-DTMA, 3 seeds,
episode length to the goal (lower is better) and the fraction of goals reached.

Data and DT recipe: `experiments/continuous/point_maze.py` (medium maze by default;
`--config.env.kwargs.layout=umaze|large` with the matching `data.dataset_id` for the other rows).
Paper scale: GPT-2 small (`--config.report.pretrained=DIR`). `:quick`: the U maze, `lm.py:quick`'s
checkpoint (run `icrl-jax pretrain-lm` first) and the 4 x 128 model. `:context`: Table 5, GPT-DTMA
with context k = 10 ... 50 on the large maze, G_Markov per k.
"""

from experiments.continuous.point_maze import get_config as maze_config
from icrl_jax.errors import UnknownNameError
from experiments.gpt_dtma import COLUMNS, add_columns, apply_quick, quick_columns

TABLE4 = ("DT", "DTMA", "GPT-DT", "GPT-DTMA")


def get_config(preset: str = ""):
    config = maze_config("quick" if preset == "quick" else "")
    config.experiment = "gpt_dtma_point_maze"
    add_columns(config, TABLE4, ("episode_length", "goal_reached"))
    if preset == "quick":
        apply_quick(config)
        quick_columns(config)
    elif preset == "context":  # Table 5: one GPT-DTMA column per context length
        config.env.kwargs.layout = "large"
        config.data.dataset_id = "point_maze/large-waypoint-v0"
        config.columns = type(config.columns)(
            {f"k={k}": COLUMNS["GPT-DTMA"] + (("train.seq_len", k),) for k in (10, 20, 30, 40, 50)})
    elif preset:
        raise UnknownNameError(f"unknown preset {preset!r} (available: context, quick; or none "
                               "for paper scale)")
    config.preset = preset
    return config
