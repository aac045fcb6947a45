"""Uni[MASK]'s config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections

from icrl_jax.core import validation as V


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
        # ALL's task: drawn per snippet, or per batch (the authors' trainer)
        all_per="snippet",
        # Inverse dynamics' index: "ours" (1..k-1) or the authors' (0..k-2; 0 wraps round)
        inverse_dynamics_index="ours",
        # Architecture: "learned" positions (ours) or the authors' fixed "sinusoidal" ones
        positions="learned",
        mask_flags=True,  # visibility flags in each token (ours); the authors' tokens have none
        # The return-to-go token: "scalar" (R / rtg_scale, t0 / max_timestep; ours) or the
        # authors' "onehot" over the integer returns rtg_low..rtg_high (DoorKey: -6..10), no t0
        rtg_encoding="scalar",
        # The input token's map to d_model: "linear" (ours) or the authors' "relu_scaled"
        # (relu(Dense(x)) * sqrt(d_model))
        input_embedding="linear",
        rtg_low=-6,
        rtg_high=10,
    ))


#: What the Uni[MASK] fields take (core/validation.py); `model.regime` is checked against the
#: registered masking schemes where it is looked up.
UNIMASK_CONSTRAINTS = V.declare("unimask", (
    V.choice("model.backbone", ("transformer", "mlp")), V.string("model.regime", "random"),
    V.non_negative("model.action_weight", 1.0), V.non_negative("model.state_weight", 1.0),
    V.positive("model.rtg_scale", 10.0), V.positive("model.max_timestep", 10.0),
    V.positive_int("model.mlp_layers", 3), V.positive_int("model.mlp_width", 128),
    V.choice("model.all_per", ("snippet", "batch")),
    V.choice("model.inverse_dynamics_index", ("ours", "authors")),
    V.choice("model.positions", ("learned", "sinusoidal")), V.boolean("model.mask_flags"),
    V.choice("model.rtg_encoding", ("scalar", "onehot")),
    V.choice("model.input_embedding", ("linear", "relu_scaled")),
))
