"""Multi-head dot-product attention used by every model in the project."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def attention_implementation(query: jax.Array) -> str:
    """"cudnn" (fused flash attention) on a GPU for the bf16/fp16 head sizes cuDNN supports,
    else "xla"."""
    head_dim = query.shape[-1]
    if (jax.default_backend() == "gpu" and query.dtype in (jnp.bfloat16, jnp.float16)
            and head_dim % 8 == 0 and head_dim <= 128):
        return "cudnn"
    return "xla"


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """softmax(q k^T / sqrt(Dh)) v over the keys `mask` allows: q `(B, T, H, Dh)`, k and v
    `(B, S, H, Dh)`, bool mask `(B, 1, T, S)` -> `(B, T, H, Dh)`, through cuDNN where
    `attention_implementation` picks it; a configuration cuDNN rejects falls back to XLA."""
    if attention_implementation(q) == "cudnn":
        try:
            return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="cudnn")
        except (NotImplementedError, ValueError, TypeError):
            # cuDNN rejects this shape, mask or layout at trace time: use XLA's kernel instead.
            return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla")
    return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla")


def rotary_embedding(x: jax.Array, positions: jax.Array, base: float = 10000.0) -> jax.Array:
    """Rotate pairs of features of `x` by position-dependent angles (RoPE).

    Args:
      x: `(B, T, H, Dh)` queries or keys, Dh even.
      positions: int `(T,)` or `(B, T)` positions.
    Returns:
      `(B, T, H, Dh)`.
    """
    head_dim = x.shape[-1]
    half = head_dim // 2
    freqs = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions[..., None].astype(jnp.float32) * freqs  # (..., T, half)
    if angles.ndim == 2:
        angles = angles[None]
    cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention, optionally a Mixture of Attention heads (MoA).

    Uses `dot_product_attention` (cuDNN flash attention on GPUs where available, XLA
    elsewhere). When attention dropout is active or the attention weights are requested, it
    computes the softmax explicitly, since the fused kernel exposes neither.

    MoA (`mixture`, Zhang et al. 2022; GPT-DTMA Eq. 4 and Fig. 5): a linear gate on each token
    gives a softmax over the heads, and head i's output is scaled by its gate before the output
    projection. The gates are multiplied by the head count and the gate starts at zero, so a
    fresh gate is uniform and the layer starts as plain multi-head attention: a GPT-2-initialised
    GPT-DTMA begins exactly where GPT-DT begins. The gates `(B, T, H)` are sown into the
    `intermediates` collection as `gates` (the per-head importance scores).
    """

    num_heads: int
    dropout_rate: float = 0.0
    rotary: bool = False
    normalize_qk: bool = False
    mixture: bool = False

    @nn.compact
    def __call__(self, x, mask, positions, deterministic: bool, return_weights: bool = False,
                 kv_cache: tuple[jax.Array, jax.Array] | None = None,
                 cache_index: jax.Array | None = None, head_scale: jax.Array | None = None):
        """Args:
          x: `(B, T, D)`.
          mask: bool `(B or 1, 1, T, T)`, True where a query may attend to a key; with a cache,
            `(B or 1, 1, T, S)` over the S cache slots.
          positions: int `(T,)` positions for rotary embeddings.
          kv_cache: optional (keys, values), each `(B, S, H, Dh)` (incremental decoding): the
            keys and values of `x` are written at slots `[cache_index, cache_index + T)` and the
            queries attend to all S slots (the mask says which are valid).
          cache_index: int32 `()` first slot written.
          head_scale: optional float `(H,)` multiplying each head's output before the output
            projection (0 removes a head: GPT-DTMA's head-importance ablation).
        Returns:
          `(B, T, D)`, and `(B, H, T, T or S)` attention weights when `return_weights`; with a
          cache, also the updated cache (last).
        """
        d_model = x.shape[-1]
        if d_model % self.num_heads:
            raise ValueError(f"model width {d_model} is not divisible by num_heads={self.num_heads}")
        head_dim = d_model // self.num_heads
        qkv = nn.DenseGeneral((3, self.num_heads, head_dim), name="qkv")(x)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, T, H, Dh)
        if self.normalize_qk:
            q = nn.LayerNorm(name="q_norm")(q)
            k = nn.LayerNorm(name="k_norm")(k)
        if self.rotary:
            q, k = rotary_embedding(q, positions), rotary_embedding(k, positions)
        if kv_cache is not None:
            k_cache, v_cache = kv_cache
            start = (0, cache_index, 0, 0)
            k = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), start)
            v = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), start)

        explicit = return_weights or (self.dropout_rate > 0.0 and not deterministic)
        weights = None
        if explicit:
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(head_dim).astype(q.dtype)
            logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
            weights = jax.nn.softmax(logits, axis=-1)
            # Rows with no allowed key (never the case for causal masks) must stay zero.
            weights = jnp.where(mask.any(-1, keepdims=True), weights, 0.0)
            dropped = nn.Dropout(self.dropout_rate)(weights, deterministic=deterministic)
            out = jnp.einsum("bhqk,bkhd->bqhd", dropped, v)
        else:
            out = dot_product_attention(q, k, v, jnp.broadcast_to(
                mask, (x.shape[0],) + mask.shape[1:]))
        if self.mixture:
            gates = jax.nn.softmax(nn.Dense(self.num_heads, kernel_init=nn.initializers.zeros,
                                            name="gate")(x).astype(jnp.float32), axis=-1)
            self.sow("intermediates", "gates", gates)
            out = out * (self.num_heads * gates).astype(out.dtype)[..., None]
        if head_scale is not None:
            out = out * head_scale.astype(out.dtype)[:, None]
        out = nn.DenseGeneral(d_model, axis=(-2, -1), name="out")(out)
        outputs = (out, weights) if return_weights else (out,)
        if kv_cache is not None:
            outputs = outputs + ((k, v),)
        return outputs if len(outputs) > 1 else out
