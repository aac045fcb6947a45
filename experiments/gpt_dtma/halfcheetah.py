"""GPT-DTMA Table 3's analogue on halfcheetah (`icrl-jax report --config
experiments/gpt_dtma/halfcheetah.py[:quick|:smollm2|:quick_mjx|:smollm2_mjx]`): the columns, presets
and recipe of `hopper.py` on halfcheetah's data (`experiments/continuous/halfcheetah.py`; medium by default,
`--config.data.dataset_id=halfcheetah/medium-replay-v0` or `halfcheetah/medium-expert-v0` for the other
rows; `halfcheetah_v5/...` for the MJX data of paper scale and the `_mjx` presets).
"""

from icrl_jax.experiments.gpt_dtma.hopper import DATA_PRESETS, locomotion_table

PRESETS = tuple(DATA_PRESETS)


def get_config(preset: str = ""):
    return locomotion_table("halfcheetah", preset)
