"""AD with n-gram induction heads on Dark Key-to-Door with 100 training goals (n-gram paper,
Fig. 2 and appendix F): random HP search over Table 2(a), EMP on 100 held-out goals.

Paper scale (default): 100 training tasks, 750 learning histories drawn from them (here 8 per
task = 800), 200 Q-learning episodes of 50 steps each (~7.5M transitions, 27x less than AD's
2048 x 2000 episodes), hidden 512, batch 1024, 10K updates.
Presets: `ad` (baseline, same budget and space), `quick` / `quick_ad` (a 2-core CPU in minutes:
tiny model, 400 updates, shape-preserving hyperparameters only, one vmapped program per method).
`quick_explorer` / `quick_explorer_ad`: Fig. 2's setting at CPU scale, searched: the recipe of
`ad/key_to_door.py:quick_explorer` (100 training goals x 8 grid-explorer histories, 100 held-out
goals, the 1-gram layer reading the latest match; `_ad` without it), 8 assignments of Table 2's
shape-preserving hyperparameters as one vmapped program per method (assignment i is the same
draw for both).
`quick_explorer_centre_lapse_narrow[_ad]`: the centre-start, lapsing explorer's recipe searched
in `NARROW_SPACE`, 8 assignments in one program.
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.ad.key_to_door import PRESETS as AD_KEY_TO_DOOR_PRESETS
from icrl_jax.experiments.ngram.common import NARROW_SPACE, grid_sweep_config, quick_preset
from icrl_jax.tools.search_space import add_sweep_fields, nested_space, vmappable_space
from icrl_jax.papers.ngram.search_space import table2_space


QUICK = quick_preset(**{
    "data.num_test_tasks": 20,
    "data.histories_per_task": 1,
})

#: `ad/key_to_door.py:quick_explorer` (Fig. 2's 100 goals, grid-explorer histories) searched.
QUICK_EXPLORER = dict(AD_KEY_TO_DOOR_PRESETS["quick_explorer"], **{
    "data.subsample": 1,  # 600-step histories: keep them whole
    "sweep.num_assignments": 8,
    "sweep.max_replicas": 8,
    "sweep.space": vmappable_space(table2_space(ngram=True)),
})

#: The same search in `NARROW_SPACE` on the centre-start, lapsing grid explorer's histories
#: (`ad/key_to_door.py:quick_explorer_centre_lapse`, where a single run of either model learns
#: in context on held-out goals).
QUICK_CENTRE_LAPSE_NARROW = dict(AD_KEY_TO_DOOR_PRESETS["quick_explorer_centre_lapse"], **{
    "data.subsample": 1,
    "sweep.num_assignments": 8,
    "sweep.max_replicas": 8,
    "sweep.space": NARROW_SPACE,
})

PRESETS = {
    "ad": {"model.ngram_positions": (), "sweep.space": nested_space(table2_space(ngram=False))},
    "quick": dict(QUICK, **{"sweep.space": vmappable_space(table2_space(True))}),
    "quick_ad": dict(QUICK, **{"model.ngram_positions": (),
                             "sweep.space": vmappable_space(table2_space(False))}),
    "quick_explorer": dict(QUICK_EXPLORER),
    "quick_explorer_ad": dict(QUICK_EXPLORER, **{"model.ngram_positions": (),
                                                 "model.ngram_latest": False}),
    "quick_explorer_centre_lapse_narrow": dict(QUICK_CENTRE_LAPSE_NARROW),
    "quick_explorer_centre_lapse_narrow_ad": dict(QUICK_CENTRE_LAPSE_NARROW,
                                                  **{"model.ngram_positions": (),
                                                     "model.ngram_latest": False}),
}


def get_config(preset: str = ""):
    config = grid_sweep_config("ngram_key_to_door", "key_to_door", num_train_tasks=100,
                               num_test_tasks=100, histories_per_task=8, envs_per_task=1)
    config.model.ngram_positions = (1,)
    config.model.ngram_max = 1
    add_sweep_fields(config, table2_space(ngram=True), num_assignments=100, max_replicas=8)
    return apply_preset(config, PRESETS, preset)
