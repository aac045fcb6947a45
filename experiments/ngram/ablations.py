"""N-gram ablations (n-gram paper, appendix E, Table 1), on Dark Room (the paper used
Miniworld-Dark, whose pixel observations need VQ codes: `miniworld/ad_darkroom.py`).

Each setting is one random search over Table 2(a)'s shape-preserving and norm hyperparameters
with the n-gram setting fixed; compare their EMP with `icrl-jax sweep --runs ... --out ...`.
The default is a 1-gram layer after the first block: both Table 1a's 1-gram row (the length
search fixes the position at [1]) and Table 1b's [1] row (the position search fixes the length
at 1), one setting that the paper searched twice.
  `length{2,3}`      "up to n" n-grams (1..n layers) after the first block (Table 1a).
  `position{2,12}`   1-gram layers after block 2, or after blocks 1 and 2 (Table 1b).
  `shuffled`         matches moved to random causal keys (same count per query) vs `baseline`,
                     AD without n-gram layers (Table 1c).
`quick` is the default's search on a 2-core CPU in minutes; the other settings at that scale
are its overrides: `--config.model.ngram_max=2` (or 3), `--config.model.ngram_positions='(2,)'`
(or `'(1, 2)'`), `--config.model.ngram_shuffle=True`, `--config.model.ngram_positions='()'`.
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.ngram.common import grid_sweep_config, quick_preset
from icrl_jax.papers.ngram.search_space import table2_space
from icrl_jax.tools.search_space import add_sweep_fields, vmappable_space

#: Table 1's settings besides the default's (a 1-gram layer after block 1).
SETTINGS = {
    "length2": {"model.ngram_max": 2},
    "length3": {"model.ngram_max": 3},
    "position2": {"model.ngram_positions": (2,)},
    "position12": {"model.ngram_positions": (1, 2)},
    "shuffled": {"model.ngram_shuffle": True},
    "baseline": {"model.ngram_positions": ()},
}

SPACE = {k: v for k, v in table2_space(ngram=False).items() if k != "train.seq_len"}

PRESETS = dict(SETTINGS, quick=quick_preset(**{
    "data.num_train_tasks": 20,
    "data.num_test_tasks": 60,
    "data.histories_per_task": 4,
    "model.num_layers": 3,
    "sweep.space": vmappable_space(SPACE),
}))


def get_config(preset: str = ""):
    # 4 blocks: n-gram positions 1 and 2 are inner blocks, never first or last.
    config = grid_sweep_config("ngram_ablation", "darkroom", num_train_tasks=60,
                               num_test_tasks=20, histories_per_task=17, envs_per_task=5)
    config.model.ngram_positions = (1,)
    config.model.ngram_max = 1
    add_sweep_fields(config, SPACE, num_assignments=50, max_replicas=8)
    return apply_preset(config, PRESETS, preset)
