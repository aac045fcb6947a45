"""AD on Dark Room 9x9 (n-gram paper, appendix B): 80 goals, 50-step episodes.

Paper scale (default): 60 training goals / 20 held-out, ~1K Q-learning histories (17 per goal),
hidden 512, batch 1024, 10K updates, context 200 steps (4 episodes).
"""

from icrl_jax.experiments.ad.grid_common import grid_config, quick_oracle_preset
from icrl_jax.core.config import apply_preset

#: `quick_oracle`: the earlier main job. It distils a noisy oracle whose noise decays over the
#: history (`grid_common.quick_oracle_preset`), with a 1-gram induction layer after the first
#: block that reads the step which followed the most recent earlier visit to the same transition
#: (a, r, o) (n-gram paper, section 2.2; `ngram_latest`), and actions sampled at temperature 0.7
#: (a sharper policy than the noisy source it imitates; greedy loops and never finds the goal).
QUICK_ORACLE = quick_oracle_preset(**{
    "data.histories_per_task": 8,
    "model.embedding_dropout": 0.1,
    "model.residual_dropout": 0.1,
    "eval.num_envs_per_task": 4,
    "model.ngram_positions": (1,),
    "model.ngram_latest": True,
    "eval.temperature": 0.7,
})
#: `quick` (the README's first command): plain AD on grid-explorer histories
#: (`data/sources/grid_explorer.py`: the source searches the grid from its own observations, then
#: walks straight to the goal it found), so each history improves through its context alone, not
#: through a noise schedule that reads the goal. `quick_ngram` adds the 1-gram layer.
#:
#: Its attention is a sliding window of 50 steps with rotary positions
#: (`model.attention_window`): trained on 100-step windows, each of the two layers looks 49
#: steps back, so the last positions of a training window see the model's whole reach (99
#: steps) and evaluation decodes the 600-step rollouts one token a step from a ring of 50
#: key/value slots, exactly the trained computation (methods/in_context.py). The paper-scale
#: default (the file without a preset) keeps learned positions, full attention over its
#: context and the window recomputed at every step. `quick_ngram` keeps learned positions and
#: full attention too (its n-gram layer reads the whole context).
QUICK = dict(QUICK_ORACLE, **{
    "data.source": "grid_explorer",
    "data.source_kwargs": {"eps": 0.1},
    "model.ngram_positions": (),
    "model.ngram_latest": False,
    "model.position": "rotary",
    "model.attention_window": 50,
})
PRESETS = {
    "quick": QUICK,
    "quick_ngram": dict(QUICK, **{"model.ngram_positions": (1,), "model.ngram_latest": True,
                                  "model.position": "learned", "model.attention_window": 0}),
    "quick_oracle": QUICK_ORACLE,
}


def get_config(preset: str = ""):
    config = grid_config("ad_darkroom", "darkroom")
    config.data.num_train_tasks = 60
    config.data.num_test_tasks = 20
    config.data.histories_per_task = 17
    config.eval.num_envs_per_task = 5
    return apply_preset(config, PRESETS, preset)
