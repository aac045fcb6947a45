"""AD on Miniworld dark room (n-gram paper, sec. 4 / appendix B): 64x64 RGB first-person frames,
actions forward / turn left / turn right, an unmarked goal cell of a 9x9 room, reward 1 per step
in it, 50-step episodes from the centre.

Paper scale (default): 60 training goals / 20 held-out (Figure 5, baseline), hidden 512,
batch 1024, 10K updates, context 100 steps (2 episodes). `quick`: see `common.quick_preset`.
`ngram` / `quick_ngram`: AD + a 1-gram layer after block 1 matching VQ codes (sec. 2.3; `train`
pretrains the VQ-VAE first). Table 1's ablations (appendix E, Miniworld-Dark) at paper scale:
`ngram` (the 1-gram row of 1a and the [1] row of 1b: the same setting) and
`ngram_{length2,length3,position2,position12,shuffled}` (`common.ABLATIONS`); AD is the default.
At CPU scale they are the quick run with 3 blocks, so that position 2 is an inner block, never
the last: `:quick_ngram --config.model.num_layers=3` (1-gram after block 1), plus
`--config.model.ngram_max=2` or `=3` (1a), `--config.model.ngram_positions='(2,)'` or
`'(1, 2)'` (1b), `--config.model.ngram_shuffle=True` (1c); the AD of 1c is
`:quick --config.model.num_layers=3`.

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
