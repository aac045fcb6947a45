"""GPT-DTMA Table 3's analogue on walker2d (`icrl-jax report --config
experiments/gpt_dtma/walker2d.py[:quick|:smollm2|:quick_mjx|:smollm2_mjx]`): the columns, presets
and recipe of `hopper.py` on walker2d's data (`experiments/continuous/walker2d.py`; medium by default,
`--config.data.dataset_id=walker2d/medium-replay-v0` or `walker2d/medium-expert-v0` for the other
rows; `walker2d_v5/...` for the MJX data of paper scale and the `_mjx` presets).
"""

from icrl_jax.experiments.gpt_dtma.hopper import DATA_PRESETS, locomotion_table

PRESETS = tuple(DATA_PRESETS)


def get_config(preset: str = ""):
    return locomotion_table("walker2d", preset)
