"""DPT on Dark Room with held-out goals (Lee et al., 2023, section 5.2; the authors'
`run_darkroom.sh`).

Paper scale (default): a 10 x 10 room, 100-step episodes, 79 training goals and 20 held-out
ones (our room starts at the centre, which is never a goal: 99 goals; theirs starts in a corner
with 100); 1,250 histories per training goal of the grid explorer (`data/sources/grid_explorer.py`,
10% random actions, half its episodes played at random; two episodes each: a search, then the
walk to what it found), in-context datasets of 100 transitions, learning rate 1e-3, 200 epochs
of their 1,250 batches.
Evaluation online on the held-out goals for 40 episodes, the context being the last episode.
The authors' datasets are instead 100 transitions from uniformly random states and actions.

`quick`: 50 histories per goal, 2 layers, 3,000 updates, 20 in-context episodes (a few minutes
on 2 CPU cores).
"""

from icrl_jax.core.config import apply_preset
from icrl_jax.experiments.dpt.common import authors_config, quick_preset

QUICK = quick_preset(**{"data.histories_per_task": 50, "eval.num_steps": 2000,
                        "eval.num_envs_per_task": 2})
#: `quick_no_lapse`: every episode of the explorer's searches (one seed's 10th episode: return
#: 27 against 56 with lapses; experiments/dpt/RESULTS.md).
PRESETS = {"quick": QUICK,
           "quick_no_lapse": dict(QUICK, **{"data.source_kwargs": {"eps": 0.1, "lapse": 0.0}})}


def get_config(preset: str = ""):
    config = authors_config("dpt_darkroom", "darkroom")
    config.env.kwargs.update(dict(size=10, episode_length=100))
    # Half the explorer's episodes are played at random: contexts without the goal, and what
    # to do after them (the authors' random transitions leave the goal out of a third of theirs).
    config.data.update(dict(source="grid_explorer", num_train_tasks=79, num_test_tasks=20,
                            histories_per_task=1250, num_steps=200))
    config.data.source_kwargs.update(dict(eps=0.1, lapse=0.5))
    config.train.update(dict(num_steps=250_000, seq_len=100, learning_rate=1e-3))
    config.eval.num_steps = 4000
    config.report.kind = "dpt_claims"
    config.dpt.compare_ad = True
    return apply_preset(config, PRESETS, preset)
