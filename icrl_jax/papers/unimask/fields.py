"""Uni[MASK]'s config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections


def unimask_model_config() -> ml_collections.ConfigDict:
    """The Uni[MASK] fields of `config.model` (`papers/unimask/method.py`)."""
    return ml_collections.ConfigDict(dict(
        backbone="transformer",  # transformer (bidirectional) | mlp (the paper's baseline)
        regime="random",  # the masking scheme trained on (papers/unimask/masks.py REGIMES)
        action_weight=1.0,  # Table 2's "Action:State loss"
        state_weight=1.0,
        rtg_scale=10.0,  # the return-to-go enters divided by this
        max_timestep=10.0,  # ... and the snippet's first timestep divided by this
        mlp_layers=3,  # MLP baseline: hidden layers and their width
        mlp_width=128,
    ))
