"""AD on Dark Key-to-Door 9x9 (n-gram paper, appendix B and F).

Paper scale (default): 100 training tasks, 750 learning histories sampled with repetition from
them (here: 8 per task), 200 Q-learning episodes of 50 steps each, 100 held-out tasks, hidden 512,
batch 1024, 10K updates, context 200 steps.
"""

from experiments.ad.grid_common import grid_config, quick_oracle_preset
from icrl_jax.config import apply_preset

PRESETS = {
    # As ad/darkroom.py:quick; the oracle heads for the key first, then the door.
    "quick": quick_oracle_preset(**{
        "data.num_train_tasks": 400,
        "data.num_test_tasks": 40,
        "data.histories_per_task": 2,
        "eval.num_envs_per_task": 2,
    }),
}


def get_config(preset: str = ""):
    config = grid_config("ad_key_to_door", "key_to_door")
    config.data.num_train_tasks = 100
    config.data.num_test_tasks = 100
    config.data.histories_per_task = 8
    config.eval.num_envs_per_task = 2
    return apply_preset(config, PRESETS, preset)
