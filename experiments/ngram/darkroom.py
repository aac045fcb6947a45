"""AD with n-gram induction heads on Dark Room 9x9: random HP search, EMP (n-gram paper, Fig. 6).

`icrl-jax sweep --config experiments/ngram/darkroom.py[:preset]` samples `sweep.num_assignments`
assignments from Table 2(a), trains each (10K updates, batch 1024, hidden 512 at paper scale),
evaluates it in context on every held-out goal, and writes `results.jsonl` + EMP to the workdir.

Paper scale (the default): the n-gram model, 60 training goals, ~1K histories; `ad` is the AD
baseline (no n-gram layers), same budget and search space. Fig. 6's other points are overrides of
either: G training goals (10, 20, 40, 60), 1K histories, evaluated on the other 80 - G (bottom
row): `--config.data.num_train_tasks=G --config.data.num_test_tasks=80-G
--config.data.histories_per_task=ceil(1000/G)`; H learning histories (100, 200, 500, 1000) over
60 goals (top row): `--config.data.histories_per_task=ceil(H/60)`.

CPU-scale searches (every one with its AD twin `_ad`; results: experiments/RESULTS.md):
  `quick`                20 training goals, 80 Q-learning histories of 40 episodes, a tiny model,
                         2000 updates, 10 assignments of the shape-preserving hyperparameters
                         (Table 2 ranges) and subsample 4 or 8 (every 4th/8th episode: 10 or 5 per
                         history; one vmapped program each).
  `quick_narrow`         the same data, subsample 4, 3000 updates, 8 assignments from the better part
                         of the ranges (learning rate 1e-3..1e-2, dropouts <= 0.3/0.2, smoothing <= 0.2).
  `quick_oracle`         the earlier main job (`ad/darkroom.py:quick_oracle`: noisy-oracle histories,
                         (row, column) cell features, one 1-gram layer reading the latest match,
                         sampling at temperature 0.7) as a search: 60 training goals, 2000 updates,
                         8 assignments of Table 2's shape-preserving hyperparameters, one vmapped
                         program of 8 replicas per method; `--config.sweep.num_assignments=16` adds
                         8 more on a rerun.
  `quick_explorer`       the same search on grid-explorer histories (`ad/darkroom.py:quick_ngram`:
                         the source searches the grid from its own observations, then walks to
                         the goal it found), two per training goal (120 histories, the low end of
                         Fig. 6's 100-1000), 16 assignments in two vmapped programs of 8.
  `quick_explorer_narrow` the same in `NARROW_SPACE`, 8 assignments in programs of 4.
  `quick_explorer_goals40[_narrow]` the explorer search with 40 training goals x 12 histories,
                         evaluated on the other 40 (Fig. 6's bottom row at CPU scale), 8
                         assignments in one program, in Table 2's space or `NARROW_SPACE`.
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.ad.darkroom import PRESETS as AD_DARKROOM_PRESETS
from icrl_jax.experiments.ngram.common import NARROW_SPACE, grid_sweep_config, quick_preset
from icrl_jax.tools.search_space import add_sweep_fields, nested_space, vmappable_space
from icrl_jax.papers.ngram.search_space import table2_space

AD_BASELINE = {"model.ngram_positions": (), "sweep.space": nested_space(table2_space(ngram=False))}

QUICK = quick_preset(**{
    "data.num_train_tasks": 20,
    "data.num_test_tasks": 60,
    "data.histories_per_task": 4,
    "train.num_steps": 2000,
    "eval.num_steps": 500,  # 10 in-context episodes
    "sweep.num_assignments": 10,
    "sweep.max_replicas": 10,  # each subsample group trains as one vmapped program
})

#: Table 2's subsample values that leave at least 5 of a quick history's 40 episodes.
QUICK_SUBSAMPLE = [4, 8]


def quick_space(ngram: bool) -> dict:
    """Table 2(a) restricted to the hyperparameters that keep shapes (vmapped together), plus
    `subsample` over `QUICK_SUBSAMPLE` (one program per value)."""
    space = vmappable_space(table2_space(ngram))
    space["data"] = {"subsample": {"choice": list(QUICK_SUBSAMPLE)}}
    return space


#: `quick_narrow`: the quick search confined to the better part of Table 2's ranges (the
#: upper decade of learning rates, light regularisation), subsample 4, 3000 updates, 8 assignments.
QUICK_NARROW = dict(QUICK, **{"data.subsample": 4, "train.num_steps": 3000,
                              "sweep.num_assignments": 8, "sweep.space": NARROW_SPACE})


#: The earlier main job (`ad/darkroom.py:quick_oracle`) searched: its data, model and evaluation.
QUICK_ORACLE = dict(AD_DARKROOM_PRESETS["quick_oracle"], **{
    "data.subsample": 1,  # 12-episode histories: keep them whole
    "sweep.num_assignments": 8,
    "sweep.max_replicas": 8,
    "sweep.space": vmappable_space(table2_space(ngram=True)),
})

#: The main job on grid-explorer histories with the 1-gram layer (`ad/darkroom.py:quick_ngram`)
#: searched (`quick_explorer_ad`: without it, the main job's own model), with two
#: histories per training goal (120: the low end of Fig. 6's 100-1000).
QUICK_EXPLORER = dict(AD_DARKROOM_PRESETS["quick_ngram"], **{
    "data.histories_per_task": 2,
    "data.subsample": 1,
    "sweep.num_assignments": 16,
    "sweep.max_replicas": 8,
    "sweep.space": vmappable_space(table2_space(ngram=True)),
})

#: `quick_explorer` searched in `NARROW_SPACE` (the better part of Table 2's ranges, around the
#: main job's own hyperparameters), 8 assignments in programs of 4.
QUICK_EXPLORER_NARROW = dict(QUICK_EXPLORER, **{"sweep.space": NARROW_SPACE,
                                                "sweep.num_assignments": 8,
                                                "sweep.max_replicas": 4})

#: `quick_explorer` with fewer, better-covered goals (Fig. 6's bottom row at CPU scale): 40
#: training goals x 12 histories (480), evaluated on the other 40 goals x 2 rollouts, 8
#: assignments in one program (`_narrow`: in `NARROW_SPACE`).
QUICK_EXPLORER_GOALS40 = dict(QUICK_EXPLORER, **{"data.num_train_tasks": 40,
                                                 "data.num_test_tasks": 40,
                                                 "data.histories_per_task": 12,
                                                 "eval.num_envs_per_task": 2,
                                                 "sweep.num_assignments": 8})


PRESETS = {
    "ad": dict(AD_BASELINE),
    "quick": dict(QUICK, **{"sweep.space": quick_space(True)}),
    "quick_ad": dict(QUICK, **{"model.ngram_positions": (), "sweep.space": quick_space(False)}),
    "quick_narrow": dict(QUICK_NARROW),
    "quick_oracle": dict(QUICK_ORACLE),
    "quick_explorer": dict(QUICK_EXPLORER),
    "quick_explorer_narrow": dict(QUICK_EXPLORER_NARROW),
    "quick_explorer_goals40": dict(QUICK_EXPLORER_GOALS40),
    "quick_explorer_goals40_narrow": dict(QUICK_EXPLORER_GOALS40, **{"sweep.space": NARROW_SPACE}),
}
for _name in ("quick_narrow", "quick_oracle", "quick_explorer", "quick_explorer_narrow",
              "quick_explorer_goals40", "quick_explorer_goals40_narrow"):
    PRESETS[_name + "_ad"] = dict(PRESETS[_name], **{"model.ngram_positions": (),
                                                     "model.ngram_latest": False})


def get_config(preset: str = ""):
    config = grid_sweep_config("ngram_darkroom", "darkroom", num_train_tasks=60,
                               num_test_tasks=20, histories_per_task=17,  # ~1K histories
                               envs_per_task=5)
    config.model.ngram_positions = (1,)  # after the first block (paper's default)
    config.model.ngram_max = 1
    add_sweep_fields(config, table2_space(ngram=True), num_assignments=100, max_replicas=8)
    return apply_preset(config, PRESETS, preset)
