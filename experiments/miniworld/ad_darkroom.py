"""AD on Miniworld dark room (n-gram paper, sec. 4 / appendix B): 64x64 RGB first-person frames,
actions forward / turn left / turn right, an unmarked goal cell of a 9x9 room, reward 1 per step
in it, 50-step episodes from the centre.

Paper scale (default): 60 training goals / 20 held-out (Figure 5, baseline), hidden 512,
batch 1024, 10K updates, context 100 steps (2 episodes). `quick`: see `common.quick_preset`.

    icrl-jax train --config experiments/miniworld/ad_darkroom.py:quick
"""

from experiments.miniworld.common import miniworld_config, quick_preset
from icrl_jax.config import apply_preset

PRESETS = {"quick": quick_preset(50)}


def get_config(preset: str = ""):
    config = miniworld_config("ad_miniworld_darkroom", "miniworld_darkroom", 50)
    config.data.num_train_tasks = 60
    config.data.num_test_tasks = 20
    return apply_preset(config, PRESETS, preset)
