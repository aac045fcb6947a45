"""The n-gram paper's config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections

from icrl_jax.core import validation


def default_vq_config() -> ml_collections.ConfigDict:
    """The `vq` section (`papers/ngram/vq_pretrain.py`): the VQ-VAE whose 4x4 codes per frame the
    n-gram layers match on pixel observations (n-gram paper, sec. 2.3), pretrained to
    reconstruct the frames of the run's pixel store, and its training."""
    return ml_collections.ConfigDict(dict(
        num_codes=64,  # codebook size K
        code_dim=32,  # D, the size of a code vector
        channels=64,  # conv width of the encoder and decoder
        grid=4,  # codes per side: 4 x 4 per frame (the paper)
        pool=1,  # average-pool frames by this factor before the VQ-VAE (CPU presets)
        beta=0.25,  # commitment loss weight (van den Oord et al.)
        num_steps=5000,
        batch_size=128,  # frames per update
        learning_rate=1e-3,
        warmup_steps=200,
        steps_per_call=10,  # updates per jitted call (unrolled: pixel convs, see train.py)
        log_every=100,
        checkpoint_every=1000,
        eval_frames=4096,  # frames of the store whose codes vq.json describes
    ))


#: What the `vq` section takes (core/validation.py).
VQ_CONSTRAINTS = validation.declare("vq", (
    validation.positive_int("vq.num_codes", 64), validation.positive_int("vq.code_dim", 32),
    validation.positive_int("vq.channels", 64), validation.positive_int("vq.grid", 4),
    validation.positive_int("vq.pool", 1),
    validation.non_negative("vq.beta", 0.25), validation.positive_int("vq.num_steps", 5000),
    validation.positive_int("vq.batch_size", 128), validation.positive("vq.learning_rate", 1e-3),
    validation.non_negative_int("vq.warmup_steps", 200), validation.positive_int("vq.steps_per_call", 10),
    validation.positive_int("vq.log_every", 100), validation.positive_int("vq.checkpoint_every", 1000),
    validation.positive_int("vq.eval_frames", 4096),
    validation.relation(("vq.steps_per_call", "vq.num_steps"),
               "vq.steps_per_call must be at most vq.num_steps",
               lambda per_call, steps: per_call <= steps,
               lambda per_call, steps: f"vq.steps_per_call={steps}"),
))
