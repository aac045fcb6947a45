"""What attention adds to or takes from its scores, computable for any block of (query, key) pairs.

Dense attention materialises these terms over the whole `(T, S)` grid; blockwise attention
(`blockwise_attention.py`) computes them one `(rows, cols)` block at a time. Each term is a
function of absolute (query row, key column) positions only, so that both give the same result
for any block size:

- `AttentionMask`: which keys each query may attend to, as structure (causal after a prefix, a
  sliding window, padded keys) plus, optionally, an explicit bool array from the caller.
- `AttentionDropout`: attention dropout's keep bits, hashed from the key and the element's
  (batch, head, row, column), never from a running counter over the blocks drawn so far.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.struct
import jax
import jax.numpy as jnp

from icrl_jax.models.dropout import LEVELS, threefry2x32


def sequence_rows(x: jax.Array | None, start, count: int) -> jax.Array | None:
    """Rows `[start, start + count)` of a per-sequence array `(B, ...)` (`start` may be
    traced); an array of one row (it serves every sequence) or None as it is."""
    if x is None or x.shape[0] == 1:
        return x
    return jax.lax.dynamic_slice_in_dim(x, start, count)


@flax.struct.dataclass
class AttentionMask:
    """Which keys query i may attend to: key j where all of these hold:

    - `explicit[b, 0, i, j]` (bool `(B or 1, 1, T, S)`; None: all);
    - `key_valid[b, j]` (bool `(B, S)`, False for padding; None: all);
    - with `causal_from = p` (None: no causal structure): j <= i, or both i and j in the first p
      tokens (a bidirectional prefix such as an action-set prompt; p = 0: causal);
    - with `window = W` (> 0; needs `causal_from`): i - j < W, or j in the first p tokens.

    The structure is computed from positions, so a causal model's mask never needs a `(T, S)`
    array; `explicit` is for callers whose masks have no such structure (and for decoding from a
    cache, where the caller's mask is the whole mask)."""

    explicit: jax.Array | None = None
    key_valid: jax.Array | None = None
    causal_from: int | None = flax.struct.field(pytree_node=False, default=None)
    window: int = flax.struct.field(pytree_node=False, default=0)

    def __post_init__(self):
        if self.window and self.causal_from is None:
            raise ValueError("a sliding attention window needs a causal mask (after a prefix: "
                             "causal_from)")

    @property
    def structured(self) -> bool:
        """No explicit array: the mask is causal structure and padding alone."""
        return self.explicit is None

    def block(self, row0, rows: int, col0, cols: int, num_keys: int | None = None) -> jax.Array:
        """bool `(B or 1, 1, rows, cols)` for queries `[row0, row0 + rows)` and keys
        `[col0, col0 + cols)` (row0 and col0 may be traced; `explicit` and `key_valid` must cover
        the block: pad them first). Keys at `num_keys` and beyond are masked (padding)."""
        row = row0 + jnp.arange(rows)[:, None]
        col = col0 + jnp.arange(cols)[None, :]
        allowed = jnp.ones((rows, cols), bool)
        if num_keys is not None:
            allowed = allowed & (col < num_keys)
        if self.causal_from is not None:
            prefix = col < self.causal_from
            allowed = allowed & ((col <= row) | (prefix & (row < self.causal_from)))
            if self.window:
                allowed = allowed & ((row - col < self.window) | prefix)
        allowed = allowed[None, None]
        if self.key_valid is not None:
            valid = jax.lax.dynamic_slice_in_dim(self.key_valid, col0, cols, axis=1)
            allowed = allowed & valid[:, None, None, :]
        if self.explicit is not None:
            explicit = jax.lax.dynamic_slice(
                self.explicit, (0, 0, row0, col0), self.explicit.shape[:2] + (rows, cols))
            allowed = allowed & explicit
        return allowed

    def dense(self, rows: int, cols: int) -> jax.Array:
        """The whole mask, bool `(B or 1, 1, rows, cols)`."""
        return self.block(0, rows, 0, cols)

    def batch_rows(self, start, count: int) -> "AttentionMask":
        """The mask of sequences `[start, start + count)` (`start` may be traced)."""
        return self.replace(explicit=sequence_rows(self.explicit, start, count),
                            key_valid=sequence_rows(self.key_valid, start, count))

    def padded(self, rows: int, cols: int) -> "AttentionMask":
        """The same mask with `explicit` and `key_valid` padded (with False) to `rows` queries and
        `cols` keys, so that blocks past the true lengths can be cut from them."""
        explicit, key_valid = self.explicit, self.key_valid
        if explicit is not None:
            explicit = jnp.pad(explicit, ((0, 0), (0, 0), (0, rows - explicit.shape[2]),
                                          (0, cols - explicit.shape[3])))
        if key_valid is not None:
            key_valid = jnp.pad(key_valid, ((0, 0), (0, cols - key_valid.shape[1])))
        return self.replace(explicit=explicit, key_valid=key_valid)


def as_attention_mask(mask, causal_from: int | None = None) -> AttentionMask:
    """`mask` as an `AttentionMask`: an `AttentionMask` as it is, or a bool `(B or 1, 1, T, S)`
    array (with `causal_from`, its caller's guarantee that it is causal after that prefix:
    adding that structure changes nothing, and lets attention skip the keys it excludes)."""
    if isinstance(mask, AttentionMask):
        return mask
    return AttentionMask(explicit=mask, causal_from=causal_from)


def rows_with_keys(mask: AttentionMask, rows: int, cols: int) -> jax.Array:
    """bool `(B or 1, 1, rows, 1)`: the queries that may attend to at least one key, in O(rows +
    cols) work for a structured mask (padding counted with a running sum of valid keys), for
    kernels that leave a row with no allowed key undefined rather than zero."""
    if not mask.structured:
        return mask.dense(rows, cols).any(-1, keepdims=True)
    valid = (jnp.ones((1, cols), jnp.int32) if mask.key_valid is None
             else mask.key_valid.astype(jnp.int32))
    # count[c] = valid keys among the first c.
    count = jnp.pad(jnp.cumsum(valid, axis=1), ((0, 0), (1, 0)))
    if mask.causal_from is None:
        return jnp.broadcast_to((count[:, -1] > 0)[:, None, None, None],
                                (count.shape[0], 1, rows, 1))
    # Row i's keys: the first max(p, i + 1) (the prefix, and causal), those within the window
    # of i or in the prefix with a window.
    row = jnp.arange(rows)
    last = jnp.minimum(jnp.maximum(mask.causal_from, row + 1), cols)
    if mask.window:
        first = jnp.clip(row - mask.window + 1, 0, last)
        in_prefix = count[:, jnp.minimum(mask.causal_from, last)]
        has = in_prefix + count[:, last] - count[:, first] > 0
    else:
        has = count[:, last] > 0
    return has[:, None, :, None]


class AttentionDropout(NamedTuple):
    """Attention dropout's draw: element (b, h, i, j) of the weights is kept when a 16-bit
    uniform is below `threshold`, and the kept weights are scaled by `scale`.

    The uniforms are hashed from absolute positions alone: the key words of head (b, h) are
    `threefry2x32(key_words, (b * H + h, 0))`, and element (i, j)'s uniform is the high half of
    the first word of `threefry2x32` under them at counter (i, j). Any block of the grid is thus
    the same slice of one mask, whatever the block size. One hash per element, written as one
    elementwise expression, fuses into a single pass on XLA's CPU backend; two or four elements
    per hash would need an interleaving of the hash's halves along the keys, which XLA's CPU
    backend does not fuse (many times slower)."""

    key_words: jax.Array  # uint32 (2,)
    threshold: jax.Array  # uint32 (): keep when the 16-bit uniform is below it
    scale: jax.Array  # float32 (): 1 / (threshold / 2^16), the kept weights' scale
    first_row: jax.Array | int = 0  # the batch index of `keep`'s first sequence

    @classmethod
    def from_key(cls, key: jax.Array, rate) -> "AttentionDropout":
        """Dropout at `rate` (may be traced), the keep probability rounded to a multiple of 2^-16
        as `dropout.keep_mask` rounds it; a rate of 1 keeps nothing (scale finite)."""
        keep = jnp.clip(1.0 - jnp.asarray(rate, jnp.float32), 0.0, 1.0)
        threshold = jnp.round(keep * LEVELS).astype(jnp.uint32)
        kept = threshold.astype(jnp.float32) / LEVELS
        return cls(jax.random.bits(key, (2,), jnp.uint32), threshold,
                   1.0 / jnp.maximum(kept, 1.0 / LEVELS))

    def batch_rows(self, start) -> "AttentionDropout":
        """The draw of sequences from `start` on (`start` may be traced): its `keep(b, ...)` is
        this one's `keep(start + b, ...)`."""
        return self._replace(first_row=self.first_row + start)

    def keep(self, batch: int, heads: int, row0, rows: int, col0, cols: int) -> jax.Array:
        """bool `(batch, heads, rows, cols)`: the keep bits of queries `[row0, row0 + rows)` and
        keys `[col0, col0 + cols)` (row0 and col0 may be traced) of sequences `first_row` to
        `first_row + batch`."""
        sequence = jnp.asarray(self.first_row, jnp.uint32) + jnp.arange(batch, dtype=jnp.uint32)
        index = (sequence[:, None] * jnp.uint32(heads)
                 + jnp.arange(heads, dtype=jnp.uint32)[None, :])
        head0, head1 = threefry2x32(self.key_words[0], self.key_words[1], index, jnp.uint32(0))
        row = (jnp.asarray(row0, jnp.uint32) + jnp.arange(rows, dtype=jnp.uint32))[:, None]
        col = (jnp.asarray(col0, jnp.uint32) + jnp.arange(cols, dtype=jnp.uint32))[None]
        word, _ = threefry2x32(head0[:, :, None, None], head1[:, :, None, None], row, col)
        return (word >> 16) < self.threshold

    def apply(self, weights: jax.Array, keep: jax.Array) -> jax.Array:
        """`weights` scaled where `keep`, else 0."""
        return jnp.where(keep, weights * self.scale.astype(weights.dtype),
                         jnp.zeros((), weights.dtype))
