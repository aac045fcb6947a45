"""Dropout for every model: masks from 16-bit uniforms, two drawn from each 32-bit random word.

`jax.random.bernoulli` spends one 32-bit threefry word and a float conversion per element.
Comparing each 16-bit half of a word with an integer threshold gives the same kind of mask from
half the words and no floats: 1.8x faster masks on a CPU, and attention with dropout 1.3-1.5x
faster forward and backward (`benchmarks/bench_attention_core.py`, RESULTS.md). The keep probability is rounded to a multiple of 2^-16 (0.9 ->
0.899994) and the kept values are scaled by that rounded probability's inverse, so the dropped
activations' expectation is exactly the input. The words keep the input's leading axes, so a
batch-sharded input gets batch-sharded bits under the partitionable threefry.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

#: Resolution of the keep probability: masks compare 16-bit uniforms with a threshold.
LEVELS = 1 << 16


def keep_mask(key: jax.Array, keep: float | jax.Array, shape: tuple[int, ...]
              ) -> tuple[jax.Array, jax.Array]:
    """A bool mask of `shape` (ndim >= 1), True with probability `keep` rounded to a multiple of
    1/`LEVELS`, and that rounded probability (float32 `()`): the scale of the kept values is its
    inverse. `keep` may be traced (a hyperparameter vmapped over replicas)."""
    if not shape:
        raise ValueError("keep_mask needs at least one axis")
    last = shape[-1]
    words = jax.random.bits(key, shape[:-1] + ((last + 1) // 2,), jnp.uint32)
    threshold = jnp.round(jnp.clip(jnp.asarray(keep, jnp.float32), 0.0, 1.0) * LEVELS
                          ).astype(jnp.uint32)
    mask = jnp.concatenate([(words & (LEVELS - 1)) < threshold, (words >> 16) < threshold],
                           axis=-1)[..., :last]
    return mask, threshold.astype(jnp.float32) / LEVELS


class Dropout(nn.Module):
    """Inverted dropout at `rate` (`nn.Dropout`'s interface and "dropout" rng collection), with
    `keep_mask`'s masks. `rate` may be traced (a hyperparameter vmapped over replicas): then a
    mask is always drawn, since `rate == 0` cannot be decided while tracing."""

    rate: float | jax.Array

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        static = isinstance(self.rate, (int, float))
        if deterministic or (static and self.rate == 0.0):
            return x
        if static and self.rate == 1.0:
            return jnp.zeros_like(x)
        mask, kept = keep_mask(self.make_rng("dropout"), 1.0 - self.rate, x.shape)
        # A rate of 1 (traced) keeps nothing: the select drops the 1/0 scale with the values.
        scale = (1.0 / jnp.maximum(kept, 1.0 / LEVELS)).astype(x.dtype)
        return jax.lax.select(mask, x * scale, jnp.zeros_like(x))
