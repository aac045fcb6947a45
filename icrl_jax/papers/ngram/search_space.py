"""The n-gram paper's random-search space (its Table 2(a), grid environments)."""

from __future__ import annotations

from typing import Any


def table2_space(ngram: bool) -> dict[str, dict[str, Any]]:
    """The paper's Table 2(a) (grid environments); n-gram keys only for the n-gram model.

    `subsample` k keeps every k-th episode of each learning history (`data.subsample`, see
    `dataset.subsample_episodes`); with 200-episode histories k = 50 leaves 4 episodes, 200 steps,
    the longest context.
    """
    space = {
        "data.subsample": dict(choice=[4, 8, 10, 20, 50]),
        "model.embedding_dropout": dict(uniform=(0.0, 0.9)),
        "model.residual_dropout": dict(uniform=(0.0, 0.5)),
        "model.label_smoothing": dict(uniform=(0.0, 0.8)),
        "train.learning_rate": dict(log_uniform=(1e-4, 1e-2)),
        "train.weight_decay": dict(log_uniform=(1e-7, 2e-2)),
        "train.seq_len": dict(choice=[60, 100, 160, 200]),
        "model.pre_norm": dict(choice=[True, False]),
        "model.normalize_qk": dict(choice=[True, False]),
    }
    if ngram:
        space["model.ngram_positions"] = dict(choice=[(1,), (2,), (1, 2)])
        space["model.ngram_max"] = dict(choice=[1, 2])
    return space
