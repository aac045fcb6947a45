"""JAX's own Pallas flash-attention kernels, where they compute what our attention computes.

- GPU: `jax.experimental.pallas.ops.gpu.attention.mha` (Triton): causal or full attention, no
  padding mask (its segment ids mask queries and keys alike), no dropout, no bias, 16-bit
  inputs (in float32 its backward pass asks an H200 for more shared memory than a block has).
- TPU: splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`): any structured
  mask without padded keys (causal after a bidirectional prefix, sliding windows), given to the
  kernel as a static mask so that it skips the blocks the mask removes; no dropout, no bias.

Lengths that are not a multiple of the kernel's block are padded: on a GPU the padding gets a
segment id of its own, on a TPU the static mask hides it. Both kernels run on the CPU in Pallas'
interpret mode (`interpret=True`), slowly: that is how the tests check them against dense
attention without an accelerator.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.models.attention_masks import AttentionMask

#: Smallest block of splash attention's kernels (a TPU vector register's lanes).
SPLASH_BLOCK = 128
#: Largest block of the GPU kernel (its default).
GPU_BLOCK = 128


def pallas_kernel() -> str:
    """The Pallas kernel for this backend: "tpu" on a TPU, else "gpu" (the CPU runs the GPU
    kernel in interpret mode)."""
    return "tpu" if jax.default_backend() == "tpu" else "gpu"


def pallas_applies(mask: AttentionMask, num_queries: int, num_keys: int, dropout, alibi,
                   kernel: str, dtype=None) -> str | None:
    """None where the `kernel` ("gpu" or "tpu") computes this attention, else why not. `dtype`:
    the inputs' on a GPU (None: interpret mode, which has no shared-memory limit)."""
    if dropout is not None:
        return "it has no attention dropout"
    if alibi is not None:
        return "it has no ALiBi bias"
    if not mask.structured or mask.key_valid is not None:
        return "it takes no padding or explicit masks"
    if kernel == "gpu":
        if mask.window or mask.causal_from not in (None, 0):
            return "the GPU kernel is causal or full, without a prefix or a window"
        if num_queries != num_keys:
            return "the GPU kernel needs as many keys as queries"
        if dtype is not None and jnp.dtype(dtype).itemsize > 2:
            return "the GPU kernel's backward pass needs 16-bit inputs (bfloat16 or float16)"
    elif kernel != "tpu":
        raise ValueError(f"Pallas kernels are 'gpu' or 'tpu', got {kernel!r}")
    return None


def pallas_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: AttentionMask,
                     kernel: str | None = None, interpret: bool | None = None) -> jax.Array:
    """Attention through a Pallas kernel (`pallas_applies` must hold): q `(B, T, H, Dh)`, k and
    v `(B, S, H, Dh)` -> `(B, T, H, Dh)`. `kernel`: "gpu" or "tpu" (None: `pallas_kernel()`);
    `interpret`: Pallas' interpret mode (None: on the CPU)."""
    kernel = kernel or pallas_kernel()
    interpret = jax.default_backend() == "cpu" if interpret is None else interpret
    reason = pallas_applies(mask, q.shape[1], k.shape[1], None, None, kernel,
                            None if interpret else q.dtype)
    if reason is not None:
        raise ValueError(f"the Pallas {kernel} kernel does not apply: {reason}")
    if kernel == "gpu":
        return _gpu_attention(q, k, v, mask.causal_from == 0, interpret)
    return _splash_attention(q, k, v, mask, interpret)


def _pad_tokens(x: jax.Array, length: int) -> jax.Array:
    return jnp.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0), (0, 0)))


def _gpu_attention(q, k, v, causal: bool, interpret: bool) -> jax.Array:
    from jax.experimental.pallas.ops.gpu import attention as gpu_attention

    length = q.shape[1]
    block = min(GPU_BLOCK, max(16, 1 << (length - 1).bit_length()))
    padded = -(-length // block) * block
    segment_ids = None
    if padded != length:  # the padding attends only to itself
        segment_ids = jnp.broadcast_to((jnp.arange(padded) < length).astype(jnp.int32),
                                       (q.shape[0], padded))
    blocks = gpu_attention.BlockSizes(block_q=block, block_k=block, block_q_dkv=block,
                                      block_kv_dkv=block, block_q_dq=block, block_kv_dq=block)
    out = gpu_attention.mha(*(_pad_tokens(x, padded) for x in (q, k, v)), segment_ids,
                            sm_scale=float(q.shape[-1]) ** -0.5, causal=causal,
                            block_sizes=blocks, interpret=interpret)
    return out[:, :length]


def splash_mask(mask: AttentionMask, num_queries: int, num_keys: int, rows: int,
                cols: int) -> np.ndarray:
    """bool `(rows, cols)`: `mask` over the true lengths, padded keys hidden, padded queries
    attending to the true keys (so that no row is empty: splash attention needs none)."""
    dense = np.asarray(mask.dense(num_queries, num_keys))[0, 0]
    out = np.zeros((rows, cols), bool)
    out[:num_queries, :num_keys] = dense
    out[num_queries:, :num_keys] = True
    return out


def _splash_attention(q, k, v, mask: AttentionMask, interpret: bool) -> jax.Array:
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as kernel
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    batch, length, heads, head_dim = q.shape
    keys = k.shape[1]
    rows = -(-length // SPLASH_BLOCK) * SPLASH_BLOCK
    cols = -(-keys // SPLASH_BLOCK) * SPLASH_BLOCK
    if (rows, cols) == (length, keys) and mask.causal_from == 0 and not mask.window:
        head_mask = masks.CausalMask((rows, cols))
    elif (rows, cols) == (length, keys) and mask.causal_from is None:
        head_mask = masks.FullMask((rows, cols))
    else:
        with jax.ensure_compile_time_eval():
            head_mask = masks.NumpyMask(splash_mask(mask, length, keys, rows, cols))
    block = SPLASH_BLOCK
    sizes = kernel.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                              block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                              block_q_dq=block, block_kv_dq=block)
    attend = kernel.make_splash_mha(masks.MultiHeadMask([head_mask] * heads), head_shards=1,
                                    q_seq_shards=1, block_sizes=sizes, interpret=interpret)
    scale = jnp.asarray(head_dim ** -0.5, q.dtype)

    def heads_first(x, size):
        return jnp.swapaxes(_pad_tokens(x, size), 1, 2)
    out = jax.vmap(attend)(heads_first(q * scale, rows), heads_first(k, cols),
                           heads_first(v, cols))
    return jnp.swapaxes(out, 1, 2)[:, :length]
