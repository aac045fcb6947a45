"""Pixel observation encoders: a plain CNN, and a VQ-VAE whose codes are n-gram match ids.

Images are uint8 `(..., H, W, C)`; they are scaled to [0, 1] float32 inside the modules.

* `CNNEncoder`: conv stack -> dense, `(..., H, W, C)` -> float32 `(..., out_dim)` (DT/M-SAT state
  tokens, AD observation embeddings).
* `VQVAE` (n-gram paper 2.3, van den Oord et al. 2017): conv encoder with stride-2 downsampling
  to a `grid x grid` latent map, nearest-codebook quantisation (straight-through gradients), and
  a transposed-conv decoder trained to reconstruct. `codes(x)` gives int32 `(..., grid, grid)`
  codebook indices: two images match for n-gram purposes iff all their codes are equal.
  `vq_loss` = reconstruction MSE + codebook + beta * commitment.
"""

from __future__ import annotations

import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp


def _to_float(images: jax.Array) -> jax.Array:
    return images.astype(jnp.float32) / 255.0


def _flat_batch(x: jax.Array, event_ndim: int = 3):
    """(..., H, W, C) -> (B, H, W, C) and the leading shape."""
    lead = x.shape[:-event_ndim]
    return x.reshape((-1,) + x.shape[-event_ndim:]), lead


class CNNEncoder(nn.Module):
    """uint8 `(..., H, W, C)` -> float32 `(..., out_dim)`: strided convs, ReLU, dense.

    `pool` > 1 average-pools the image by that factor first (H and W must be divisible): a CPU
    preset can afford AD's L frames per window only at low resolution.
    """

    out_dim: int = 128
    channels: tuple[int, ...] = (32, 64, 64)
    kernel: int = 4
    pool: int = 1

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        x, lead = _flat_batch(_to_float(images))
        if self.pool > 1:
            if x.shape[1] % self.pool or x.shape[2] % self.pool:
                raise ValueError(f"CNNEncoder.pool={self.pool} does not divide the image size "
                                 f"{x.shape[1:3]}")
            # reshape-mean, not reduce_window: XLA:CPU's reduce_window is a slow naive loop.
            b, h, w, c = x.shape
            p = self.pool
            x = x.reshape(b, h // p, p, w // p, p, c).mean(axis=(2, 4))
        for c in self.channels:
            x = nn.relu(nn.Conv(c, (self.kernel, self.kernel), strides=2)(x))
        x = nn.Dense(self.out_dim)(x.reshape(x.shape[0], -1))
        return x.reshape(lead + (self.out_dim,))


class _ResBlock(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x):
        h = nn.Conv(self.channels, (3, 3))(nn.relu(x))
        h = nn.Conv(self.channels, (1, 1))(nn.relu(h))
        return x + h


class VQVAE(nn.Module):
    """VQ-VAE for square images of side H (a power-of-two multiple of `grid`).

    Attributes:
      image_size: H (= W). grid: latent side (4 -> 16 codes per image).
      num_codes: codebook size K. code_dim: D. channels: conv width.
    `__call__(images uint8 (..., H, H, C))` -> dict: recon float32 `(..., H, H, C)` in [0, 1]
    (sigmoid), codes int32 `(..., grid, grid)`, z_e / z_q float32 `(..., grid, grid, D)`.
    """

    image_size: int = 64
    grid: int = 4
    num_codes: int = 64
    code_dim: int = 32
    channels: int = 64
    image_channels: int = 3

    def setup(self):
        n_down = int(round(math.log2(self.image_size / self.grid)))
        if self.grid * 2 ** n_down != self.image_size:
            raise ValueError(f"image_size {self.image_size} must be grid {self.grid} * 2**k")
        self.down = [nn.Conv(self.channels, (4, 4), strides=2) for _ in range(n_down)]
        self.enc_res = _ResBlock(self.channels)
        self.to_code = nn.Conv(self.code_dim, (1, 1))
        self.codebook = self.param(
            "codebook", nn.initializers.variance_scaling(1.0, "fan_in", "uniform"),
            (self.num_codes, self.code_dim))
        self.from_code = nn.Conv(self.channels, (3, 3))
        self.dec_res = _ResBlock(self.channels)
        self.up = [nn.ConvTranspose(self.channels, (4, 4), strides=(2, 2)) for _ in range(n_down - 1)]
        self.out = nn.ConvTranspose(self.image_channels, (4, 4), strides=(2, 2))

    def encode(self, images: jax.Array) -> jax.Array:
        """uint8 `(B, H, H, C)` -> continuous latents z_e float32 `(B, grid, grid, D)`."""
        x = _to_float(images)
        for conv in self.down:
            x = nn.relu(conv(x))
        return self.to_code(nn.relu(self.enc_res(x)))

    def quantize(self, z_e: jax.Array):
        """Nearest codebook vectors: -> (codes int32 `(B, g, g)`, z_q float32 `(B, g, g, D)`)."""
        d = (jnp.sum(z_e ** 2, -1, keepdims=True) - 2 * z_e @ self.codebook.T
             + jnp.sum(self.codebook ** 2, -1))
        codes = jnp.argmin(d, -1).astype(jnp.int32)
        return codes, self.codebook[codes]

    def decode(self, z_q: jax.Array) -> jax.Array:
        """float32 `(B, g, g, D)` -> reconstruction float32 `(B, H, H, C)` in [0, 1]."""
        x = self.dec_res(self.from_code(z_q))
        for conv in self.up:
            x = nn.relu(conv(nn.relu(x)))
        return nn.sigmoid(self.out(x))

    def __call__(self, images: jax.Array) -> dict[str, jax.Array]:
        x, lead = _flat_batch(images)
        z_e = self.encode(x)
        codes, z_q = self.quantize(z_e)
        z_st = z_e + jax.lax.stop_gradient(z_q - z_e)  # straight-through estimator
        recon = self.decode(z_st)
        out = {"recon": recon, "codes": codes, "z_e": z_e, "z_q": z_q}
        return {k: v.reshape(lead + v.shape[1:]) for k, v in out.items()}

    def codes(self, images: jax.Array) -> jax.Array:
        """The discrete id of each image: int32 `(..., grid, grid)` codebook indices."""
        x, lead = _flat_batch(images)
        codes, _ = self.quantize(self.encode(x))
        return codes.reshape(lead + codes.shape[1:])


def vq_loss(out: dict[str, jax.Array], images: jax.Array, beta: float = 0.25):
    """VQ-VAE loss -> (total, {"recon", "codebook", "commit"}) float32 scalars."""
    recon = jnp.mean((out["recon"] - _to_float(images)) ** 2)
    sg = jax.lax.stop_gradient
    codebook = jnp.mean((out["z_q"] - sg(out["z_e"])) ** 2)
    commit = jnp.mean((out["z_e"] - sg(out["z_q"])) ** 2)
    total = recon + codebook + beta * commit
    return total, {"recon": recon, "codebook": codebook, "commit": commit}


def codes_to_ids(codes: jax.Array, num_codes: int) -> jax.Array:
    """Collapse `(..., g, g)` codes to one int32 id per image by hashing (for n-gram matching
    with integer-id code paths). Equal codes always give equal ids; distinct code grids collide
    with probability ~2**-31 per pair."""
    flat = codes.reshape(codes.shape[:-2] + (-1,)).astype(jnp.uint32)
    h = jnp.uint32(2166136261)
    for i in range(flat.shape[-1]):  # FNV-1a over the grid
        h = (h ^ flat[..., i]) * jnp.uint32(16777619)
    return (h >> 1).astype(jnp.int32)


def vq_ngram_ids(model: VQVAE, params) -> Callable[..., jax.Array]:
    """An n-gram id function (`icrl_jax.models.ngram.register_ngram_ids`) from a trained VQ-VAE.

    The returned `fn(window)` maps a window's uint8 pixel observations `(B, L, H, W, C)` to int32
    ids `(B, L, grid * grid)`: each step's 4x4 code grid, flattened. `token_equality` compares all
    components, so two steps match iff every code is equal (n-gram paper, sec. 2.3). The VQ
    parameters are constants of the id function (pretrained, not trained with AD).
    """

    def ids(window) -> jax.Array:
        obs = window.observations
        if obs.ndim != 5 or obs.dtype != jnp.uint8:
            raise ValueError(f"VQ n-gram ids need uint8 pixel windows (B, L, H, W, C), got "
                             f"{obs.dtype}{obs.shape}")
        codes = jax.lax.stop_gradient(model.apply({"params": params}, obs, method=VQVAE.codes))
        return codes.reshape(codes.shape[:2] + (-1,))

    return ids
