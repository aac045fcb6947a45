"""Pixel observation encoders: a plain CNN, and a VQ-VAE whose codes are n-gram match ids.

Images are uint8 `(..., H, W, C)`; they are scaled to [0, 1] float32 inside the modules.

* `CNNEncoder`: conv stack -> dense, `(..., H, W, C)` -> float32 `(..., out_dim)` (DT/M-SAT state
  tokens, AD observation embeddings).
* `VQVAE` (n-gram paper 2.3, van den Oord et al. 2017): conv encoder with stride-2 downsampling
  to a `grid x grid` latent map, nearest-codebook quantisation (straight-through gradients), and
  a transposed-conv decoder trained to reconstruct. `codes(x)` gives int32 `(..., grid, grid)`
  codebook indices: two images match for n-gram purposes iff all their codes are equal.
  `vq_loss` = reconstruction MSE + codebook + beta * commitment.
* A pretrained VQ-VAE on disk (`save_vq` / `load_vq`): a directory with `config.json` (the
  `VQVAE` fields) and `model.safetensors` (its parameters, flattened `a/b/c` keys), which
  `vq_ids_from_config` turns into the n-gram id function of `model.ngram_match="vq"`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from icrl_jax.core.errors import UserError


def _to_float(images: jax.Array) -> jax.Array:
    return images.astype(jnp.float32) / 255.0


def _flat_batch(x: jax.Array, event_ndim: int = 3):
    """(..., H, W, C) -> (B, H, W, C) and the leading shape."""
    lead = x.shape[:-event_ndim]
    return x.reshape((-1,) + x.shape[-event_ndim:]), lead


def _avg_pool(x: jax.Array, pool: int, owner: str) -> jax.Array:
    """float `(B, H, W, C)` -> `(B, H / pool, W / pool, C)` by averaging `pool x pool` blocks.

    A reshape-mean, not reduce_window: XLA:CPU's reduce_window is a slow naive loop."""
    if pool == 1:
        return x
    b, h, w, c = x.shape
    if h % pool or w % pool:
        raise ValueError(f"{owner}.pool={pool} does not divide the image size {(h, w)}")
    return x.reshape(b, h // pool, pool, w // pool, pool, c).mean(axis=(2, 4))


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
        x = _avg_pool(x, self.pool, "CNNEncoder")
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
    """VQ-VAE for square images of side H; `H / pool` must be `grid * 2**k` with k >= 1.

    Attributes:
      image_size: H (= W) of the input. pool: average-pool the input by this factor first (a
        CPU preset's cheaper codes; the reconstruction target is the pooled image).
      grid: latent side (4 -> 16 codes per image). num_codes: codebook size K. code_dim: D.
      channels: conv width.
    `__call__(images uint8 (..., H, H, C))` -> dict: recon float32 `(..., H/pool, H/pool, C)`
    in [0, 1] (sigmoid), target (the pooled input in [0, 1], what recon approximates), codes
    int32 `(..., grid, grid)`, z_e / z_q float32 `(..., grid, grid, D)`.
    """

    image_size: int = 64
    grid: int = 4
    num_codes: int = 64
    code_dim: int = 32
    channels: int = 64
    image_channels: int = 3
    pool: int = 1

    @property
    def num_downsamples(self) -> int:
        side = self.image_size // max(self.pool, 1)
        n_down = int(round(math.log2(max(side, 1) / self.grid)))
        if self.image_size % self.pool or n_down < 1 or self.grid * 2 ** n_down != side:
            raise ValueError(f"VQVAE: image_size {self.image_size} / pool {self.pool} must be "
                             f"grid {self.grid} * 2**k with k >= 1")
        return n_down

    def setup(self):
        n_down = self.num_downsamples
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

    def target(self, images: jax.Array) -> jax.Array:
        """uint8 `(B, H, H, C)` -> the (pooled) float32 image in [0, 1] the model encodes."""
        return _avg_pool(_to_float(images), self.pool, "VQVAE")

    def encode(self, images: jax.Array) -> jax.Array:
        """uint8 `(B, H, H, C)` -> continuous latents z_e float32 `(B, grid, grid, D)`."""
        x = self.target(images)
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
        """float32 `(B, g, g, D)` -> reconstruction float32 `(B, H/pool, H/pool, C)` in [0, 1]."""
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
        out = {"recon": recon, "target": self.target(x), "codes": codes, "z_e": z_e, "z_q": z_q}
        return {k: v.reshape(lead + v.shape[1:]) for k, v in out.items()}

    def codes(self, images: jax.Array) -> jax.Array:
        """The discrete id of each image: int32 `(..., grid, grid)` codebook indices."""
        x, lead = _flat_batch(images)
        codes, _ = self.quantize(self.encode(x))
        return codes.reshape(lead + codes.shape[1:])


def vq_loss(out: dict[str, jax.Array], beta: float = 0.25):
    """VQ-VAE loss of a `VQVAE` output -> (total, {"recon", "codebook", "commit"}) float32
    scalars: reconstruction MSE against the (pooled) input + codebook + beta * commitment."""
    recon = jnp.mean((out["recon"] - out["target"]) ** 2)
    sg = jax.lax.stop_gradient
    codebook = jnp.mean((out["z_q"] - sg(out["z_e"])) ** 2)
    commit = jnp.mean((out["z_e"] - sg(out["z_q"])) ** 2)
    total = recon + codebook + beta * commit
    return total, {"recon": recon, "codebook": codebook, "commit": commit}


def codebook_from_data(model: VQVAE, params, images: jax.Array, key: jax.Array):
    """`params` with the codebook set to K encoder outputs z_e of `images` uint8 `(N, H, W, C)`
    (drawn without replacement when the N * grid**2 outputs are at least K). A codebook that
    starts where the data is keeps codes in use: on Miniworld quick frames, 23 of 64 codes were
    in use after 1,000 updates, against 2 with the random initialisation."""
    z_e = model.apply({"params": params}, images, method=VQVAE.encode)
    z_e = z_e.reshape(-1, z_e.shape[-1])
    rows = jax.random.choice(key, z_e.shape[0], (model.num_codes,),
                             replace=z_e.shape[0] < model.num_codes)
    return {**params, "codebook": z_e[rows]}


def code_usage(codes: jax.Array, num_codes: int) -> dict[str, jax.Array]:
    """How a batch of codes int `(...)` uses the codebook: `perplexity` (exp of the entropy of
    the code frequencies; K when all K codes are equally used, 1 when one code is) and
    `codes_used` (distinct codes), float32 scalars."""
    counts = jnp.bincount(codes.reshape(-1), length=num_codes).astype(jnp.float32)
    p = counts / jnp.maximum(counts.sum(), 1.0)
    entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0))
    return {"perplexity": jnp.exp(entropy), "codes_used": (counts > 0).sum().astype(jnp.float32)}


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
    parameters are constants of the id function (pretrained, not trained with AD). The ids of a
    step depend on its frame alone, so `fn.per_frame(frames (..., H, W, C)) -> (..., grid * grid)`
    lets an in-context rollout code each frame once and keep the codes in its context.
    """
    image_shape = (model.image_size, model.image_size, model.image_channels)

    def per_frame(frames: jax.Array) -> jax.Array:
        if frames.dtype != jnp.uint8 or tuple(frames.shape[-3:]) != image_shape:
            raise ValueError(f"the VQ-VAE takes {image_shape} images, the window holds "
                             f"{frames.dtype} {tuple(frames.shape[-3:])} (uint8 needed)")
        codes = jax.lax.stop_gradient(model.apply({"params": params}, frames, method=VQVAE.codes))
        return codes.reshape(codes.shape[:-2] + (-1,))

    def ids(window) -> jax.Array:
        obs = window.observations
        if obs.ndim != 5:  # per_frame checks the dtype and the image shape
            raise ValueError(f"VQ n-gram ids need uint8 pixel windows (B, L, H, W, C), got "
                             f"{obs.dtype}{obs.shape}")
        return per_frame(obs)

    ids.per_frame = per_frame
    return ids


# ---------------------------------------------------------------------------------------------
# A pretrained VQ-VAE on disk: <dir>/config.json (VQVAE fields) + <dir>/model.safetensors.

VQ_CONFIG, VQ_WEIGHTS = "config.json", "model.safetensors"


class VQCheckpointError(UserError):
    """A pretrained VQ-VAE directory that is missing or does not fit its own config."""


def vq_fields(model: VQVAE) -> dict[str, int]:
    """The `VQVAE` fields that fix its architecture (what `config.json` stores)."""
    return {f.name: getattr(model, f.name) for f in dataclasses.fields(VQVAE)
            if f.name not in ("parent", "name")}


def vq_parameter_shapes(model: VQVAE) -> dict[str, tuple[int, ...]]:
    """Flattened `a/b/c` parameter name -> shape of `model` (no parameters computed)."""
    size = model.image_size
    example = jax.ShapeDtypeStruct((1, size, size, model.image_channels), jnp.uint8)
    shapes = jax.eval_shape(lambda x: model.init(jax.random.key(0), x)["params"], example)
    return {k: tuple(v.shape) for k, v in traverse_util.flatten_dict(shapes, sep="/").items()}


def save_vq(path: str, model: VQVAE, params) -> None:
    """Write `params` of `model` as a pretrained VQ-VAE directory (config.json written last, so
    a directory with both files is complete)."""
    from safetensors.numpy import save_file

    os.makedirs(path, exist_ok=True)
    flat = traverse_util.flatten_dict(jax.device_get(params), sep="/")
    save_file({k: np.ascontiguousarray(np.asarray(v, np.float32)) for k, v in flat.items()},
              os.path.join(path, VQ_WEIGHTS))
    tmp = os.path.join(path, VQ_CONFIG + ".tmp")
    with open(tmp, "w") as f:
        json.dump(vq_fields(model), f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(path, VQ_CONFIG))


def read_vq_fields(path: str) -> dict[str, int] | None:
    """The `VQVAE` fields in `path/config.json`, None when the directory holds no VQ-VAE."""
    config_path = os.path.join(path, VQ_CONFIG)
    if not (os.path.isfile(config_path) and os.path.isfile(os.path.join(path, VQ_WEIGHTS))):
        return None
    with open(config_path) as f:
        return json.load(f)


def load_vq(path: str) -> tuple[VQVAE, dict[str, Any]]:
    """A pretrained VQ-VAE directory -> (model, params float32). Raises `VQCheckpointError`
    naming the file, or each parameter whose shape differs from what config.json's model has."""
    from safetensors.numpy import load_file

    fields = read_vq_fields(path)
    if fields is None:
        raise VQCheckpointError(f"no pretrained VQ-VAE at {path!r} ({VQ_CONFIG} and {VQ_WEIGHTS} "
                                "missing)")
    unknown = sorted(set(fields) - set(vq_fields(VQVAE())))
    if unknown:
        raise VQCheckpointError(f"{path}/{VQ_CONFIG} has fields VQVAE does not: {unknown}")
    model = VQVAE(**fields)
    try:
        want = vq_parameter_shapes(model)
    except ValueError as e:
        raise VQCheckpointError(f"{path}/{VQ_CONFIG}: {e}") from None
    tensors = load_file(os.path.join(path, VQ_WEIGHTS))
    bad = [f"{k}: {tuple(tensors[k].shape) if k in tensors else 'absent'} in the file, "
           f"{want.get(k, 'absent')} in the model" for k in sorted(set(want) | set(tensors))
           if k not in tensors or tuple(tensors[k].shape) != want.get(k)]
    if bad:
        raise VQCheckpointError(f"{path}/{VQ_WEIGHTS} does not fit the VQ-VAE of its "
                                f"{VQ_CONFIG} ({fields}): " + "; ".join(bad[:5]))
    params = traverse_util.unflatten_dict({k: jnp.asarray(v, jnp.float32)
                                           for k, v in tensors.items()}, sep="/")
    return model, params


def vq_fingerprint(params) -> str:
    """A short hash of VQ parameters: a checkpoint trained with other codes is another model."""
    digest = hashlib.sha256()
    for key, value in sorted(traverse_util.flatten_dict(jax.device_get(params), sep="/").items()):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(np.asarray(value, np.float32)).tobytes())
    return digest.hexdigest()[:16]


def vq_ids_from_config(model_config) -> Callable[..., jax.Array]:
    """The n-gram id function of `model.ngram_match="vq"`: the VQ codes of each step's frame,
    from the pretrained VQ-VAE directory `model.vq_checkpoint` (its parameters become constants
    of the function, the same in training and in in-context rollouts). The function carries
    `fingerprint` (`vq_fingerprint`) for checkpoint signatures."""
    path = model_config.vq_checkpoint
    if not path:
        raise VQCheckpointError("model.ngram_match='vq' needs model.vq_checkpoint, the directory "
                                "of a pretrained VQ-VAE (`icrl-jax pretrain-vq` writes one; "
                                "`train` does first when the config has a `vq` section)")
    if read_vq_fields(path) is None:
        raise VQCheckpointError(f"model.ngram_match='vq': no pretrained VQ-VAE at "
                                f"model.vq_checkpoint={path!r}; run `icrl-jax pretrain-vq` (or "
                                "`train`) with this config first")
    model, params = load_vq(path)
    ids = vq_ngram_ids(model, params)
    ids.fingerprint = vq_fingerprint(params)
    return ids
