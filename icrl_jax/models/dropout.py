"""Dropout for every model: masks from 16-bit uniforms, two drawn from each Threefry word.

Masks compare each 16-bit half of a 32-bit random word with an integer threshold: half the
words of `jax.random.bernoulli` and no floats. The words come from the Threefry-2x32 hash that
`jax.random`'s default keys use (`threefry2x32`, bit-identical to JAX's), written out as one
elementwise expression. JAX's own CPU lowering of that hash loops over five groups of rounds,
each a pass over the whole array, and `jax.random.bits` spends two hash words per 32-bit word it
returns; written out, XLA fuses all 20 rounds into the loop that compares the halves, so masks,
the attention core with dropout and the training step are faster on a CPU (benchmarks/RESULTS.md).

Each mask is laid out as `(shape[0], rest)`, its leading axis by the flattened others: the
counters run row-major over `(shape[0], ceil(rest / 2))`, and each row's low halves fill the first
half of the row, its high halves the rest. A batch-sharded input thus gets batch-sharded bits,
and XLA's CPU loop runs over long rows: faster than a mask laid out along its own last axis,
most of all for short last axes such as Uni[MASK]'s `(B, H, 10, 10)` attention masks
(benchmarks/RESULTS.md).

The keep probability is rounded to a multiple of 2^-16 (0.9 -> 0.899994) and the kept values are
scaled by that rounded probability's inverse, so the dropped activations' expectation is exactly
the input. A batched key (under `vmap`) draws a mask per replica.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

#: Resolution of the keep probability: masks compare 16-bit uniforms with a threshold.
LEVELS = 1 << 16
#: Threefry-2x32's rotation distances, for even and odd groups of four rounds (Salmon et al.,
#: "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
#: The constant the key schedule XORs into its third key word.
_PARITY = 0x1BD11BDA


def _rotate_left(x: jax.Array, distance: int) -> jax.Array:
    return (x << jnp.uint32(distance)) | (x >> jnp.uint32(32 - distance))


def threefry2x32(key0: jax.Array, key1: jax.Array, count0: jax.Array, count1: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32 hash with 20 rounds (what `jax.random`'s default keys use): uint32 key
    words and counter words (broadcastable) -> two uint32 words of the counters' shape.

    Written as one expression, not a loop, so that XLA fuses the 20 rounds into one pass over
    the counters (JAX's own CPU lowering loops over five groups of rounds, one array pass each).
    """
    keys = (key0, key1, key0 ^ key1 ^ jnp.uint32(_PARITY))
    x0, x1 = count0 + keys[0], count1 + keys[1]
    for group in range(5):
        for distance in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, distance) ^ x0
        x0 = x0 + keys[(group + 1) % 3]
        x1 = x1 + keys[(group + 2) % 3] + jnp.uint32(group + 1)
    return x0, x1


def _flat_index(shape: tuple[int, ...]) -> jax.Array:
    """uint32 `shape`: each element's row-major position, from one iota per axis (so that a
    sharded consumer computes only its own part)."""
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride)
        stride *= shape[axis]
    return index


def keep_mask(key: jax.Array, keep: float | jax.Array, shape: tuple[int, ...]
              ) -> tuple[jax.Array, jax.Array]:
    """A bool mask of `shape` (ndim >= 1), True with probability `keep` rounded to a multiple of
    1/`LEVELS`, and that rounded probability (float32 `()`): the scale of the kept values is its
    inverse. `keep` may be traced (a hyperparameter vmapped over replicas).

    The mask is drawn as `(rows, rest)` = `(shape[0], prod(shape[1:]))` (`(1, shape[0])` for
    one axis) and reshaped to `shape`. The words: `threefry2x32` under the two words of
    `jax.random.bits(key, (2,))` at counters `(c, 0)`, c running row-major over
    `(rows, ceil(rest / 2))`, first output word. Each row's low halves fill the first half of
    the row, its high halves the rest (cut to an odd length)."""
    if not shape:
        raise ValueError("keep_mask needs at least one axis")
    rows, rest = (shape[0], math.prod(shape[1:])) if len(shape) > 1 else (1, shape[0])
    grid = (rows, (rest + 1) // 2)
    if math.prod(grid) > 2 ** 32:
        raise ValueError(f"a mask of shape {shape} needs more than 2^32 counters")
    key0, key1 = jax.random.bits(key, (2,), jnp.uint32)
    words, _ = threefry2x32(key0, key1, _flat_index(grid), jnp.uint32(0))
    threshold = jnp.round(jnp.clip(jnp.asarray(keep, jnp.float32), 0.0, 1.0) * LEVELS
                          ).astype(jnp.uint32)
    mask = jnp.concatenate([(words & (LEVELS - 1)) < threshold, (words >> 16) < threshold],
                           axis=1)[:, :rest]
    return mask.reshape(shape), threshold.astype(jnp.float32) / LEVELS


def apply_keep_mask(x: jax.Array, mask: jax.Array, scale: jax.Array) -> jax.Array:
    """`x` scaled by `scale` where the bool `mask` keeps it, else 0 (`Dropout.mask`'s pair)."""
    return jnp.where(mask, x * scale.astype(x.dtype), jnp.zeros((), x.dtype))


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
        return apply_keep_mask(x, *self.mask(x.shape))

    def mask(self, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
        """The next mask `__call__` would draw for an input of `shape`: bool `shape`, True where
        kept, and the kept values' scale (float32 `()`). For a caller that keeps the mask (1
        byte an element) instead of the scaled one (attention's backward pass)."""
        mask, kept = keep_mask(self.make_rng("dropout"), 1.0 - self.rate, shape)
        # A rate of 1 (traced) keeps nothing: the select drops the 1/0 scale with the values.
        return mask, 1.0 / jnp.maximum(kept, 1.0 / LEVELS)
