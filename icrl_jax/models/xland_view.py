"""An encoder for XLand-MiniGrid's egocentric view: a grid of (tile, colour) ids.

`XLandViewEncoder`: uint8 `(..., H, W, 2)` -> float32 `(..., out_dim)`. Each cell's tile and
colour are one-hot coded (13 tiles, 12 colours, xminigrid's counts), the cells' codes are
flattened and an MLP (`hidden`, ReLU) maps them to `out_dim` features. Its first layer is an
embedding of every (cell, tile) and (cell, colour) pair, summed: XLand-100B's AD baseline embeds
tiles and colours and convolves them instead; 2x2 convolutions inside a scanned training step
run some hundred times slower on XLA's CPU backend than this product (a 2-core CPU preset
could not afford them), and the view is only 5 x 5. Ids are categories, not intensities, so
nothing is scaled.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

#: xminigrid's tile and colour counts (`xminigrid.core.constants.NUM_TILES`, `NUM_COLORS`).
NUM_TILES, NUM_COLORS = 13, 12


class XLandViewEncoder(nn.Module):
    """uint8 `(..., H, W, 2)` (tile, colour) ids -> float32 `(..., out_dim)`."""

    out_dim: int = 64
    hidden: tuple[int, ...] = (256,)

    @nn.compact
    def __call__(self, views: jax.Array) -> jax.Array:
        lead = views.shape[:-3]
        ids = views.astype(jnp.int32)
        x = jnp.concatenate([jax.nn.one_hot(ids[..., 0], NUM_TILES),
                             jax.nn.one_hot(ids[..., 1], NUM_COLORS)], axis=-1)
        x = x.reshape(lead + (-1,))
        for width in self.hidden:
            x = nn.relu(nn.Dense(width)(x))
        return nn.Dense(self.out_dim)(x)
