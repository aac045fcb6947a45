"""Headless-AD on the composite-action Dark Room (Headless-AD 4.3, Figure 7, Table 1).

125 actions = 3-step sequences of 5 atomic moves, split 50 train / 75 test by a seeded
permutation (`env.kwargs.action_split_seed`); goals split into train/test. Q-learning histories
use only the 50 train actions. Evaluated on the five action sets (train, permuted_train,
sliced_test, test, all) x (train, test) goals; Headless-AD is trained once, on the train set.

Ablations: presets as in `bernoulli_bandit.py` (`no_prompt`, `mse`, `normal`, `quick_*`).
`quick_replay`: the quick preset on episode-replay histories (see `common.DARKROOM_REPLAY`).
`distance` / `quick_replay_distance`: the action split by move distance (appendix F, Figure 12).
`:quick` fits a 2-core CPU.
"""

from icrl_jax.experiments.headless_ad.common import (DARKROOM_REPLAY, ablation_presets, darkroom_config,
                                            darkroom_quick_preset)
from icrl_jax.core.config import apply_preset
from icrl_jax.papers.headless_ad.fields import add_headless_fields

QUICK = darkroom_quick_preset(**{
    "model.action_embed_dim": 128,  # >= 125 actions for orthonormal embeddings
    "model.tau": 1.0,
})
# Tables 5-7, darkroom column.
NO_PROMPT = {"model.prompt": False, "model.tau": 8.5, "train.learning_rate": 3.5e-4,
             "train.weight_decay": 4.7e-3, "train.b1": 0.99, "model.attention_dropout": 0.4,
             "model.residual_dropout": 0.16}
MSE = {"model.loss": "mse", "eval.greedy": True, "train.learning_rate": 1.3e-5,
       "train.weight_decay": 2.5, "train.b1": 0.75, "model.attention_dropout": 8.0e-2,
       "model.residual_dropout": 0.75}
NORMAL = {"model.embeddings": "normal", "train.learning_rate": 6.6e-4,
          "train.weight_decay": 9.1e-4, "train.b1": 0.6, "model.attention_dropout": 0.53,
          "model.residual_dropout": 3.0e-2}
PRESETS = ablation_presets(QUICK, {"no_prompt": NO_PROMPT, "mse": MSE, "normal": NORMAL})
PRESETS["quick_replay"] = dict(QUICK, **DARKROOM_REPLAY)
# Appendix F (Figure 12): actions split by move distance, trained on the 89 that move 0, 1 or 3
# cells, tested on the 36 that move 2 (no test action shares a displacement with a train one).
DISTANCE_SPLIT = {"env.kwargs.action_split": "distance", "env.kwargs.max_actions": 89}
PRESETS["distance"] = DISTANCE_SPLIT
PRESETS["quick_replay_distance"] = dict(PRESETS["quick_replay"], **DISTANCE_SPLIT)


def get_config(preset: str = ""):
    # Histories see the 50 train actions only; evaluation widens the env to all 125.
    config = darkroom_config("headless_ad_darkroom", "headless_ad", max_eval_actions=125,
                             label="")
    # Table 3, darkroom column.
    config.model.update(dict(num_layers=4, num_heads=64, attention_dropout=0.7,
                             residual_dropout=0.19))
    add_headless_fields(config, action_embed_dim=512, tau=7.8)
    config.train.update(dict(learning_rate=1.7e-4, weight_decay=1.7e-2, b1=0.72))
    config.eval.greedy = False
    return apply_preset(config, PRESETS, preset)
