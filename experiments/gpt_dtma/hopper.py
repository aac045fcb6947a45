"""GPT-DTMA Table 3's analogue on hopper (`icrl-jax report --config
experiments/gpt_dtma/hopper.py[:quick]`): DT, DTMA, GPT-DT, GPT-DTMA and GPT-DTMA-R, 3 seeds,
D4RL-normalised score; CLIP-DT too when `--config.report.clip=DIR` names a CLIP text encoder.
Paper scale and the `_mjx` presets run gymnasium's Hopper-v5 on MJX and score against D4RL's
references; `:quick` and `:smollm2` run brax's hopper (much faster on a CPU) and score
against our PPO data's random and expert returns (experiments/continuous/hopper.py).

Data and DT recipe: `experiments/continuous/hopper.py` (medium by default;
`--config.data.dataset_id=hopper/medium-replay-v0` or `hopper/medium-expert-v0` for the other
rows). Paper scale: GPT-2 small (`--config.report.pretrained=DIR`), App. A's fine-tuning recipe.
`:quick`: starts from `lm.py:quick`'s checkpoint (run `icrl-jax pretrain-lm` first), the 4 x 128
model, 1000 steps; hopper's quick PPO data. `:smollm2`: the quick data with SmolLM2's first
blocks (`smollm2_model`) in DT, GPT-DT and GPT-DTMA.
"""

from icrl_jax.core.errors import UnknownNameError, did_you_mean
from icrl_jax.experiments.continuous.hopper import locomotion_config
from icrl_jax.experiments.gpt_dtma import (SMOLLM2_COLUMNS, add_columns, apply_quick,
                                           quick_columns, smollm2_model)

TABLE3 = ("DT", "DTMA", "GPT-DT", "CLIP-DT", "GPT-DTMA", "GPT-DTMA-R")


#: Table presets -> the DT experiment's preset whose env and data they use (brax for `quick` and
#: `smollm2`, gymnasium's v5 task on MJX for the `_mjx` ones and paper scale).
DATA_PRESETS = {"quick": "quick", "smollm2": "quick", "quick_mjx": "quick_mjx",
                "smollm2_mjx": "quick_mjx"}
PRESETS = tuple(DATA_PRESETS)


def locomotion_table(name: str, preset: str = ""):
    """Table 3's analogue on `name` (hopper, walker2d or halfcheetah): `preset` "" (paper
    scale, on MJX), "quick" / "smollm2" (brax data) or "quick_mjx" / "smollm2_mjx"."""
    if preset and preset not in DATA_PRESETS:
        raise UnknownNameError(f"unknown preset {preset!r}{did_you_mean(preset, DATA_PRESETS)} "
                               f"(available: {', '.join(DATA_PRESETS)}; or none for paper scale)")
    config = locomotion_config(name, DATA_PRESETS.get(preset, preset))
    config.experiment = f"gpt_dtma_{name}"
    add_columns(config, TABLE3, ("d4rl_score", "first_episode_return"))
    if preset.startswith("quick"):
        apply_quick(config)
        quick_columns(config)
    if preset.startswith("smollm2"):
        smollm2_model(config)
        quick_columns(config, SMOLLM2_COLUMNS)
    return config


def get_config(preset: str = ""):
    return locomotion_table("hopper", preset)
