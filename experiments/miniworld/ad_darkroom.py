"""AD on Miniworld dark room (n-gram paper, sec. 4 / appendix B): 64x64 RGB first-person frames,
actions forward / turn left / turn right, an unmarked goal cell of a 9x9 room, reward 1 per step
in it, 50-step episodes from the centre.

Paper scale (default): 60 training goals / 20 held-out (Figure 5, baseline), hidden 512,
batch 1024, 10K updates, context 100 steps (2 episodes). `quick`: see `common.quick_preset`.
`ngram` / `quick_ngram`: AD + a 1-gram layer after block 1 matching VQ codes (sec. 2.3; `train`
pretrains the VQ-VAE first). Table 1's ablations (appendix E, Miniworld-Dark):
`[quick_]ngram_{length1,length2,length3,position1,position2,position12,shuffled}` and
`quick_ablation_baseline` (see `common.ngram_presets`).

    icrl-jax train --config experiments/miniworld/ad_darkroom.py:quick
    icrl-jax train --config experiments/miniworld/ad_darkroom.py:quick_ngram
"""

from icrl_jax.experiments.miniworld.common import miniworld_config, ngram_presets, quick_preset
from icrl_jax.core.config import apply_preset

PRESETS = ngram_presets(quick_preset(50), ablations=True)


def get_config(preset: str = ""):
    config = miniworld_config("ad_miniworld_darkroom", "miniworld_darkroom", 50)
    config.data.num_train_tasks = 60
    config.data.num_test_tasks = 20
    return apply_preset(config, PRESETS, preset)
