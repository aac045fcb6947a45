"""GPT-DTMA Table 4's analogue on the point maze (`icrl-jax report --config
experiments/gpt_dtma/point_maze.py[:quick|:context]`): DT, DTMA, GPT-DT and GPT-DTMA, 3 seeds,
episode length to the goal (lower is better) and the fraction of goals reached.

Data and DT recipe: `experiments/continuous/point_maze.py` (medium maze by default;
`--config.env.kwargs.layout=umaze|large` with the matching `data.dataset_id` for the other rows).
Paper scale: GPT-2 small (`--config.report.pretrained=DIR`). `:quick`: the U maze, `lm.py:quick`'s
checkpoint (run `icrl-jax pretrain-lm` first) and the 4 x 128 model. `:context`: Table 5, GPT-DTMA
with context k = 10 ... 50 on the large maze, G_Markov per k; `:quick_context` is Table 5 at
`:quick`'s scale on the large maze of the README's quick large-maze row (so its k = 10 column is
that row's GPT-DTMA column). `:smollm2`: `:quick`'s U-maze data with SmolLM2's first blocks
(`smollm2_model`) in DT, GPT-DT and GPT-DTMA (`--config.env.kwargs.layout=medium|large` with the
matching `data.dataset_id`, and `QUICK_LARGE_MAZE`'s settings on the large maze, for the other
rows); `:smollm2_context`: Table 5 so, on the large maze.
"""

from icrl_jax.experiments.continuous.point_maze import get_config as maze_config
from icrl_jax.core.config import set_dotted
from icrl_jax.core.errors import UnknownNameError, did_you_mean
from icrl_jax.experiments.gpt_dtma import (COLUMNS, SMOLLM2_COLUMNS, add_columns, apply_quick,
                                           quick_columns, smollm2_model)

TABLE4 = ("DT", "DTMA", "GPT-DT", "GPT-DTMA")

#: Table 5's context lengths.
CONTEXTS = (10, 20, 30, 40, 50)

#: `:quick`'s U-maze settings that the large maze replaces (with the paper-scale episode length,
#: return scale and target).
QUICK_LARGE_MAZE = {"env.kwargs.episode_length": 600, "eval.num_steps": 600,
                    "model.max_timestep": 600, "model.rtg_scale": 10.0,
                    "eval.target_returns": (5.0,)}


PRESETS = ("quick", "context", "quick_context", "smollm2", "smollm2_context")


def get_config(preset: str = ""):
    if preset and preset not in PRESETS:
        raise UnknownNameError(f"unknown preset {preset!r}{did_you_mean(preset, PRESETS)} "
                               f"(available: {', '.join(PRESETS)}; or none for paper scale)")
    quick, smollm2 = preset.startswith("quick"), preset.startswith("smollm2")
    config = maze_config("quick" if quick or smollm2 else "")
    config.experiment = "gpt_dtma_point_maze"
    add_columns(config, TABLE4, ("episode_length", "goal_reached"))
    if quick:
        apply_quick(config)
        quick_columns(config)
    if smollm2:
        smollm2_model(config)
        quick_columns(config, SMOLLM2_COLUMNS)
    if preset in ("quick_context", "smollm2_context"):
        for dotted, value in QUICK_LARGE_MAZE.items():
            set_dotted(config, dotted, value)
    if preset.endswith("context"):  # Table 5: one GPT-DTMA column per context length
        config.env.kwargs.layout = "large"
        config.data.dataset_id = "point_maze/large-waypoint-v0"
        config.columns = type(config.columns)(
            {f"k={k}": COLUMNS["GPT-DTMA"] + (("train.seq_len", k),) for k in CONTEXTS})
    config.preset = preset
    return config
