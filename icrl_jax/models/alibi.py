"""ALiBi (Press et al., "Train short, test long", ICLR 2022): no position embeddings; head h adds
`-slope_h * distance` to its attention scores, a linear penalty on how far back a key is.

The slopes are a geometric sequence: for H a power of two, slope_h = 2^(-8 (h + 1) / H); for
other H, the slopes of the power of two just below H, then every other slope of twice that power
(the paper's own construction for such H). The distance is |query position - key position|, the
causal case's i - j, which also gives a bidirectional prefix a symmetric bias.

Positions are explicit (`AlibiBias` takes the queries' and the keys' positions), so that a
decoder whose cache holds keys written at earlier positions computes each score exactly as the
full pass does.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.models.attention_masks import sequence_rows


def alibi_slopes(num_heads: int) -> np.ndarray:
    """float32 `(num_heads,)`: each head's slope (largest first)."""
    if num_heads < 1:
        raise ValueError(f"ALiBi needs at least one head, got {num_heads}")

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    power = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(power)
    if power < num_heads:
        slopes += geometric(2 * power)[0::2][:num_heads - power]
    return np.asarray(slopes, np.float32)


class AlibiBias(NamedTuple):
    """The scores' ALiBi term, computable for any block of (query, key) pairs.

    slopes: float32 `(H,)`. query_positions: int `(B or 1, T)`. key_positions: int
    `(B or 1, S)`."""

    slopes: jax.Array
    query_positions: jax.Array
    key_positions: jax.Array

    @classmethod
    def create(cls, num_heads: int, query_positions: jax.Array,
               key_positions: jax.Array | None = None) -> "AlibiBias":
        """Positions `(T,)` or `(B, T)` (keys: the queries' own when None)."""
        key_positions = query_positions if key_positions is None else key_positions
        as_rows = lambda p: jnp.asarray(p, jnp.int32).reshape((-1, jnp.shape(p)[-1]))  # noqa: E731
        return cls(jnp.asarray(alibi_slopes(num_heads)), as_rows(query_positions),
                   as_rows(key_positions))

    def block(self, row0, rows: int, col0, cols: int) -> jax.Array:
        """float32 `(B or 1, H, rows, cols)` for queries `[row0, row0 + rows)` and keys
        `[col0, col0 + cols)` (pad the positions to cover the block first: `padded`)."""
        query = jax.lax.dynamic_slice_in_dim(self.query_positions, row0, rows, axis=1)
        key = jax.lax.dynamic_slice_in_dim(self.key_positions, col0, cols, axis=1)
        distance = jnp.abs(query[:, :, None] - key[:, None, :]).astype(jnp.float32)
        return -self.slopes[None, :, None, None] * distance[:, None]

    def dense(self, rows: int, cols: int) -> jax.Array:
        """The whole term, float32 `(B or 1, H, rows, cols)`."""
        return self.block(0, rows, 0, cols)

    def batch_rows(self, start, count: int) -> "AlibiBias":
        """The term of sequences `[start, start + count)` (positions with one row serve all)."""
        return self._replace(query_positions=sequence_rows(self.query_positions, start, count),
                             key_positions=sequence_rows(self.key_positions, start, count))

    def padded(self, rows: int, cols: int) -> "AlibiBias":
        """Positions padded (with zeros) to `rows` queries and `cols` keys."""
        return self._replace(
            query_positions=jnp.pad(self.query_positions,
                                    ((0, 0), (0, rows - self.query_positions.shape[1]))),
            key_positions=jnp.pad(self.key_positions,
                                  ((0, 0), (0, cols - self.key_positions.shape[1]))))
