"""N-gram ablations (n-gram paper, appendix E, Table 1), on Dark Room (the paper used
Miniworld-Dark, whose pixel observations need the VQ codes of another issue; `model.ngram_match`
takes them once registered).

Each preset is one random search over Table 2(a)'s shape-preserving and norm hyperparameters
with the n-gram setting fixed; compare their EMP with `icrl-jax sweep --runs ... --out ...`:
  `length{1,2,3}`   "up to n" n-grams (1..n layers) after the first block (Table 1a).
  `position{1,2,12}` 1-gram layers after block 1, block 2, or both (Table 1b).
  `shuffled`        matches moved to random causal keys (same count per query) vs `baseline`,
                    AD without n-gram layers (Table 1c).
Add `_quick` to any preset (e.g. `length2_quick`) for a 2-core CPU run in minutes.
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.ngram.common import grid_sweep_config, quick_preset
from icrl_jax.tools.search_space import add_sweep_fields, vmappable_space
from icrl_jax.papers.ngram.search_space import table2_space

SETTINGS = {
    "length1": {"model.ngram_positions": (1,), "model.ngram_max": 1},
    "length2": {"model.ngram_positions": (1,), "model.ngram_max": 2},
    "length3": {"model.ngram_positions": (1,), "model.ngram_max": 3},
    "position1": {"model.ngram_positions": (1,), "model.ngram_max": 1},
    "position2": {"model.ngram_positions": (2,), "model.ngram_max": 1},
    "position12": {"model.ngram_positions": (1, 2), "model.ngram_max": 1},
    "shuffled": {"model.ngram_positions": (1,), "model.ngram_max": 1, "model.ngram_shuffle": True},
    "baseline": {"model.ngram_positions": ()},
}

SPACE = {k: v for k, v in table2_space(ngram=False).items() if k != "train.seq_len"}

QUICK = quick_preset(**{
    "data.num_train_tasks": 20,
    "data.num_test_tasks": 60,
    "data.histories_per_task": 4,
    "model.num_layers": 3,
    "sweep.space": vmappable_space(SPACE),
})


def presets() -> dict:
    out = {}
    for name, setting in SETTINGS.items():
        out[name] = dict(setting)
        out[f"{name}_quick"] = dict(QUICK, **setting)
    return out


def get_config(preset: str = "length1"):
    # 4 blocks: n-gram positions 1 and 2 are inner blocks, never first or last.
    config = grid_sweep_config("ngram_ablation", "darkroom", num_train_tasks=60,
                               num_test_tasks=20, histories_per_task=17, envs_per_task=5)
    add_sweep_fields(config, SPACE, num_assignments=50, max_replicas=8)
    return apply_preset(config, presets(), preset or "length1")
