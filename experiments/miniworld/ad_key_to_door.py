"""AD on Miniworld key-to-door (n-gram paper, sec. 4 / appendix B): reach the (unmarked) key
cell (+1), then the door cell (+1, episode ends); random start; 100-step episodes.

Paper scale (default): 2,000 training (key, door) pairs / 50 held-out (sec. 3.1), hidden 512,
batch 1024, 10K updates, context 200 steps (2 episodes), 1 history of 10 episodes (1,000 steps) per pair: 2M frames,
~25 GB (40-episode histories would be ~98 GB, more than a 64 GB disk).
`quick`: see `common.quick_preset` (histories of 8 episodes of up to 100 steps).
`ngram` / `quick_ngram`: AD + a 1-gram layer after block 1 matching VQ codes (sec. 2.3; `train`
pretrains the VQ-VAE first). The paper ran its ablations on Miniworld-Dark only
(`ad_darkroom.py`).

    icrl-jax train --config experiments/miniworld/ad_key_to_door.py:quick
    icrl-jax train --config experiments/miniworld/ad_key_to_door.py:quick_ngram
"""

from icrl_jax.experiments.miniworld.common import miniworld_config, ngram_presets, quick_preset
from icrl_jax.core.config import apply_preset

PRESETS = ngram_presets(quick_preset(100, **{"train.batch_size": 8}))


def get_config(preset: str = ""):
    config = miniworld_config("ad_miniworld_key_to_door", "miniworld_key_to_door", 100)
    config.data.num_train_tasks = 2000
    config.data.num_test_tasks = 50
    config.data.histories_per_task = 1
    config.data.num_steps = 10 * 100
    return apply_preset(config, PRESETS, preset)
