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

from icrl_jax.config import apply_preset, base_config
from experiments.ngram.common import quick_preset
from icrl_jax.sweep import add_sweep_fields, table2_space, vmappable_space

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
    config = base_config()
    config.experiment = "ngram_ablation"
    config.env.name = "darkroom"
    config.data.source = "q_learning"
    config.data.source_kwargs.lr = 0.3
    config.data.source_kwargs.discount = 0.9
    config.data.source_kwargs.decay_fraction = 0.5
    config.data.num_train_tasks = 60
    config.data.num_test_tasks = 20
    config.data.histories_per_task = 17
    config.data.num_steps = 10_000
    config.model.d_model = 512
    config.model.num_layers = 4  # positions 1 and 2 are inner blocks, never first or last
    config.model.num_heads = 8
    config.model.max_len = 200
    config.model.ngram_match = "transition"
    config.train.num_steps = 10_000
    config.train.batch_size = 1024
    config.train.seq_len = 200
    config.train.warmup_steps = 500
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.num_steps = 2000
    config.eval.num_envs_per_task = 5
    add_sweep_fields(config, SPACE, num_assignments=50, max_replicas=8)
    return apply_preset(config, presets(), preset or "length1")
