"""Multi-head dot-product attention used by every model in the project."""

from __future__ import annotations


import flax.linen as nn
import jax
import jax.numpy as jnp

from icrl_jax.models.alibi import AlibiBias
from icrl_jax.models.attention_masks import AttentionDropout, AttentionMask, as_attention_mask
from icrl_jax.models.blockwise_attention import blockwise_attention
from icrl_jax.models.dropout import apply_keep_mask
from icrl_jax.models.matmul import contract_tokens, dense_dot_general
from icrl_jax.models.pallas_attention import pallas_applies, pallas_attention, pallas_kernel


def attention_implementation(query: jax.Array) -> str:
    """"cudnn" (fused flash attention) on a GPU for the bf16/fp16 head sizes cuDNN supports,
    else "xla"."""
    head_dim = query.shape[-1]
    if (jax.default_backend() == "gpu" and query.dtype in (jnp.bfloat16, jnp.float16)
            and head_dim % 8 == 0 and head_dim <= 128):
        return "cudnn"
    return "xla"


def heads_first(x: jax.Array) -> jax.Array:
    """`(B, T, H, Dh)` <-> `(B, H, T, Dh)`."""
    return jnp.swapaxes(x, 1, 2)


def attend(weights: jax.Array, v: jax.Array) -> jax.Array:
    """Attention weights `(B, H, T, S)` times values `(B, S, H, Dh)` -> `(B, T, H, Dh)`."""
    return heads_first(jnp.einsum("bhts,bhsd->bhtd", weights, heads_first(v)))


def attention_weights(q: jax.Array, k: jax.Array, mask, bias: jax.Array | None = None
                      ) -> jax.Array:
    """softmax(q k^T / sqrt(Dh) + bias) over the keys `mask` allows: q `(B, T, H, Dh)`,
    k `(B, S, H, Dh)`, mask a bool `(B or 1, 1, T, S)` array or an `AttentionMask`, optional
    float bias `(B or 1, H, T, S)` (ALiBi) -> float `(B, H, T, S)`; a row with no allowed key is
    zero.

    Heads go first before the score matmul: XLA's CPU kernels run `(B, H)`-batched matmuls
    and a softmax over the minor axis without the layout copies that `jax.nn.dot_product_attention`'s
    `(B, T, H, Dh)` formulation needs (`benchmarks/bench_train.py`: 1.3x on the quick model's
    attention, forward and backward). An additive mask, not a select, keeps the backward one
    pass shorter; exp underflows to exactly 0 on masked keys either way.
    """
    if isinstance(mask, AttentionMask):
        mask = mask.dense(q.shape[1], k.shape[1])
    head_dim = q.shape[-1]
    scale = jnp.asarray(1.0 / jnp.sqrt(head_dim), q.dtype)
    logits = jnp.einsum("bhtd,bhsd->bhts", heads_first(q) * scale, heads_first(k))
    if bias is not None:
        logits = logits + bias.astype(logits.dtype)
    masked = jnp.where(mask, 0.0, jnp.finfo(logits.dtype).min).astype(logits.dtype)
    weights = jax.nn.softmax(logits + masked, axis=-1)
    # Rows with no allowed key (padding queries; never the case for causal masks) stay zero.
    return jnp.where(mask.any(-1, keepdims=True), weights, 0.0)


def cudnn_applies(q: jax.Array, dropout, alibi) -> str | None:
    """None where cuDNN's fused attention computes this attention
    (`attention_implementation`), else why not."""
    if attention_implementation(q) != "cudnn":
        return "it needs a GPU, bfloat16 or float16, and a head size of at most 128 (multiple of 8)"
    if dropout is not None:
        return "it has no attention dropout"
    if alibi is not None:
        return "it takes no ALiBi bias here"
    return None


def _cudnn_attention(q, k, v, mask: AttentionMask) -> jax.Array | None:
    """cuDNN's fused attention; None where cuDNN rejects the shape, mask or layout at trace
    time. A causal mask without padding goes as `is_causal`, any other as a bool array."""
    causal = mask.structured and mask.key_valid is None and mask.causal_from == 0 \
        and not mask.window and q.shape[1] == k.shape[1]
    dense = None if causal else jnp.broadcast_to(
        mask.dense(q.shape[1], k.shape[1]), (q.shape[0], 1, q.shape[1], k.shape[1]))
    try:
        return jax.nn.dot_product_attention(q, k, v, mask=dense, is_causal=causal,
                                            implementation="cudnn")
    except (NotImplementedError, ValueError, TypeError):
        return None


def _dropped(x: jax.Array, keep: tuple[jax.Array, jax.Array] | None) -> jax.Array:
    """`x` times a dropout mask `keep` = (bool mask of x's shape, scale of the kept values), or
    `x` where `keep` is None."""
    return x if keep is None else apply_keep_mask(x, *keep)


@jax.custom_vjp
def _softmax_attend(q, k, v, bias, keep, rows):
    """`dropped(softmax(q k^T + bias) * rows) v` on heads-first arrays: q `(B, H, T, Dh)`
    (scaled), k and v `(B, H, S, Dh)`, additive bias `(B or 1, 1 or H, T, S)`, keep: None or
    dropout's (bool `(B, H, T, S)` mask, float `()` scale of the kept weights) (`_dropped`), rows
    `(B or 1, 1, T, 1)` (0 for a query with no allowed key) -> `(B, H, T, Dh)`. Its own backward
    pass is flash attention's: the softmax's row term is `sum(dO * O)` over Dh instead of a pass
    over the `(B, H, T, S)` weights, and the dropout mask and the row mask are applied inside
    the same elementwise pass (`_fused_attention`). The backward pass keeps the bool mask, not
    the scaled float one: a quarter of the bytes, written once and read twice per layer."""
    return _softmax_attend_fwd(q, k, v, bias, keep, rows)[0]


def _softmax_attend_fwd(q, k, v, bias, keep, rows):
    logits = jnp.einsum("bhtd,bhsd->bhts", q, k) + bias
    exp = jnp.exp(logits - jnp.max(logits, -1, keepdims=True))
    weights = exp * (rows / jnp.sum(exp, -1, keepdims=True))
    out = jnp.einsum("bhts,bhsd->bhtd", _dropped(weights, keep), v)
    return out, (q, k, v, weights, keep, out)


#: dK and dV sum over the queries, the major axis of both operands (`matmul.contract_tokens`).
_contract_queries = contract_tokens


def _softmax_attend_bwd(residuals, d_out):
    q, k, v, weights, keep, out = residuals
    d_dropped = jnp.einsum("bhtd,bhsd->bhts", d_out, v)
    d_v = _contract_queries(_dropped(weights, keep), d_out)
    row_term = jnp.sum(d_out * out, -1, keepdims=True)  # = sum_s dW * W, without (T, S) work
    d_logits = weights * (_dropped(d_dropped, keep) - row_term)
    d_q = jnp.einsum("bhts,bhsd->bhtd", d_logits, k)
    d_k = _contract_queries(d_logits, q)
    return d_q, d_k, d_v, None, None, None


_softmax_attend.defvjp(_softmax_attend_fwd, _softmax_attend_bwd)


def _fused_attention(q, k, v, mask, dropout: AttentionDropout | None, bias=None,
                     row0: int = 0) -> jax.Array:
    """`attend(dropout(attention_weights(q, k, mask, bias)), v)` through `_softmax_attend`: q
    `(B, T, H, Dh)` (queries `row0`, `row0 + 1`, ... of the sequence), k, v `(B, S, H, Dh)`,
    bool mask `(B or 1, 1, T, S)`, optional float bias `(B or 1, H, T, S)` -> `(B, T, H, Dh)`.
    `dropout` keeps `dropout.keep(B, H, row0, T, 0, S)`. A query with no allowed key gets zero
    weights, as in `attention_weights`."""
    scale = jnp.asarray(1.0 / jnp.sqrt(q.shape[-1]), q.dtype)
    q, k, v = heads_first(q * scale), heads_first(k), heads_first(v)
    additive = jnp.where(mask, 0.0, jnp.finfo(q.dtype).min).astype(q.dtype)
    if bias is not None:
        additive = additive + bias.astype(q.dtype)
    keep = None
    if dropout is not None:
        keep = (dropout.keep(q.shape[0], q.shape[1], row0, q.shape[2], 0, k.shape[2]),
                dropout.scale)
    rows = mask.any(-1, keepdims=True).astype(q.dtype)
    return heads_first(_softmax_attend(q, k, v, additive, keep, rows))


#: Query block of dense causal attention (`dense_attention`).
CAUSAL_QUERY_BLOCK = 64

#: `dot_product_attention`'s implementations (`model.attention_impl`): "auto" picks per call.
IMPLEMENTATIONS = ("auto", "dense", "blockwise", "cudnn", "pallas")
#: Default query and key block of blockwise attention (`model.attention_block_size`); 0: by
#: the shapes (`blockwise_attention.auto_batch_chunk`).
BLOCK_SIZE = 0
#: Sequence length from which "auto" takes blockwise attention over dense attention where no
#: fused kernel applies (`model.attention_blockwise_from`): on a CPU blockwise attention is as
#: fast as dense attention from a few hundred tokens on, and faster beyond, forward and
#: backward (benchmarks/RESULTS.md).
BLOCKWISE_FROM = 512


def dense_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: AttentionMask,
                    dropout: AttentionDropout | None = None,
                    alibi: AlibiBias | None = None) -> jax.Array:
    """Attention over the whole `(T, S)` score matrix (XLA, with a flash-attention backward
    pass): q `(B, T, H, Dh)`, k and v `(B, S, H, Dh)` -> `(B, T, H, Dh)`.

    With a causal mask (`mask.causal_from = p`: S == T; no query attends to a later key, except
    that the first p queries may attend to any of the first p keys; p = 0: causal) the queries
    go in blocks of about `CAUSAL_QUERY_BLOCK` (the first block holds the prefix) and each block
    skips the keys after its last query: the same result (those keys' weights are exp(-inf) =
    0), with 25% (T = 100) to 40% (T = 200) less attention work and smaller score tensors (the
    quick model's step 1.2x on a CPU: benchmarks/RESULTS.md). Dropout's keep bits are those of
    each block's own rows and keys (`AttentionDropout.keep`), so the skipped keys draw none.
    """
    length, keys = q.shape[1], k.shape[1]
    causal_from = mask.causal_from
    if causal_from is None or length <= CAUSAL_QUERY_BLOCK:
        return _fused_attention(q, k, v, mask.dense(length, keys), dropout,
                                None if alibi is None else alibi.dense(length, keys))
    if keys != length:
        raise ValueError(f"causal attention needs as many keys as queries, got {keys} "
                         f"keys for {length} queries")
    size = -(-length // -(-length // CAUSAL_QUERY_BLOCK))  # equal blocks: T = 100 -> 2 x 50
    ends = [end for end in range(size, length, size) if end > causal_from] + [length]
    starts = [0] + ends[:-1]
    return jnp.concatenate([
        _fused_attention(q[:, lo:hi], k[:, :hi], v[:, :hi], mask.block(lo, hi - lo, 0, hi),
                         dropout, None if alibi is None else alibi.block(lo, hi - lo, 0, hi),
                         row0=lo)
        for lo, hi in zip(starts, ends)], axis=1)


def choose_implementation(q: jax.Array, k: jax.Array, mask: AttentionMask,
                          dropout: AttentionDropout | None, alibi: AlibiBias | None,
                          implementation: str = "auto",
                          blockwise_from: int = BLOCKWISE_FROM) -> str:
    """The implementation `dot_product_attention` runs: `implementation` itself where it is
    "dense" or "blockwise", or "cudnn" / "pallas" where they apply (ValueError naming
    `model.attention_impl` where they do not). "auto": cuDNN where it applies, then a GPU's or
    TPU's Pallas kernel where it applies, else blockwise attention from `blockwise_from` tokens
    on and dense attention below."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"model.attention_impl must be one of {IMPLEMENTATIONS}, "
                         f"got {implementation!r}")
    kernel = pallas_kernel()
    interpret = jax.default_backend() == "cpu"
    pallas_reason = pallas_applies(mask, q.shape[1], k.shape[1], dropout, alibi, kernel,
                                   None if interpret else q.dtype)
    if implementation == "cudnn":
        reason = cudnn_applies(q, dropout, alibi)
        if reason:
            raise ValueError(f"model.attention_impl='cudnn' does not apply here: {reason}")
    elif implementation == "pallas":
        if pallas_reason:
            raise ValueError(f"model.attention_impl='pallas' does not apply here: the {kernel} "
                             f"kernel: {pallas_reason}")
    elif implementation == "auto":
        if cudnn_applies(q, dropout, alibi) is None:
            return "cudnn"
        if jax.default_backend() in ("gpu", "tpu") and pallas_reason is None:
            return "pallas"
        return "blockwise" if q.shape[1] >= blockwise_from else "dense"
    return implementation


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask,
                          causal_from: int | None = None,
                          dropout: AttentionDropout | None = None,
                          alibi: AlibiBias | None = None, implementation: str = "auto",
                          block_size: int = BLOCK_SIZE,
                          blockwise_from: int = BLOCKWISE_FROM) -> jax.Array:
    """softmax(q k^T / sqrt(Dh) + alibi) v over the keys `mask` allows, with attention dropout:
    q `(B, T, H, Dh)`, k and v `(B, S, H, Dh)` -> `(B, T, H, Dh)`.

    mask: an `AttentionMask`, or a bool `(B or 1, 1, T, S)` array; then `causal_from=p` is the
      caller's guarantee that it is causal after a prefix of p tokens (`AttentionMask`), which
      lets attention skip the keys it excludes.
    dropout: attention dropout's draw (`AttentionDropout`): the same keep bits whatever the
      implementation and block size.
    alibi: ALiBi's biases (`alibi.AlibiBias`).
    implementation: `choose_implementation`'s: "auto", "dense" (`dense_attention`),
      "blockwise" (`blockwise_attention.py`, blocks of `block_size`), "cudnn" (a GPU's fused
      kernel; a configuration cuDNN rejects at trace time falls back to "auto"'s choice without
      it) or "pallas" (`pallas_attention.py`). All give the same result up to float rounding.
    """
    mask = as_attention_mask(mask, causal_from)
    chosen = choose_implementation(q, k, mask, dropout, alibi, implementation, blockwise_from)
    if chosen == "cudnn":
        fused = _cudnn_attention(q, k, v, mask)
        if fused is not None:
            return fused
        chosen = "blockwise" if q.shape[1] >= blockwise_from else "dense"
    if chosen == "pallas":
        return pallas_attention(q, k, v, mask)
    if chosen == "blockwise":
        return blockwise_attention(q, k, v, mask, dropout, alibi, block_size)
    return dense_attention(q, k, v, mask, dropout, alibi)


def rotary_embedding(x: jax.Array, positions: jax.Array, base: float = 10000.0,
                     table_dtype: str = "float32") -> jax.Array:
    """Rotate pairs of features of `x` by position-dependent angles (RoPE).

    Feature i of the first half pairs with feature i of the second half (GPT-NeoX / LLaMA's
    "rotate half"), at angle position * base^(-2i / Dh).

    Args:
      x: `(B, T, H, Dh)` queries or keys, Dh even.
      positions: int `(T,)` or `(B, T)` positions.
      base: the angles' base.
      table_dtype: "float32", or a narrower dtype ("bfloat16", "float16") the cos and sin
        tables are rounded to before use, as a model that keeps its RoPE cache in that dtype
        does (TinyLlama's, under the Headless-AD authors' model: bfloat16); the rotation itself
        is still computed in x's dtype.
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
    if table_dtype != "float32":
        cos = cos.astype(table_dtype).astype(jnp.float32)
        sin = sin.astype(table_dtype).astype(jnp.float32)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention, optionally a Mixture of Attention heads (MoA).

    Uses `dot_product_attention` (`implementation`: cuDNN or Pallas kernels where they apply,
    else dense attention below `blockwise_from` tokens and blockwise attention from there on).
    When the attention weights are requested, it computes the whole `(B, H, T, S)` softmax.
    `alibi`: ALiBi's per-head distance biases (`alibi.py`) on the scores.

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
    use_bias: bool = True  # biases of the qkv and output projections
    rotary_base: float = 10000.0
    rotary_table_dtype: str = "float32"  # see `rotary_embedding`
    #: Grouped-query attention (Llama 2/3, SmolLM2): this many key/value heads, each shared by
    #: num_heads / num_kv_heads query heads; 0 = one per query head (a fused qkv projection).
    num_kv_heads: int = 0
    alibi: bool = False
    implementation: str = "auto"  # IMPLEMENTATIONS (`dot_product_attention`)
    block_size: int = BLOCK_SIZE  # blockwise attention's query and key blocks
    blockwise_from: int = BLOCKWISE_FROM  # "auto": blockwise from this many tokens on

    @nn.compact
    def __call__(self, x, mask, positions, deterministic: bool, return_weights: bool = False,
                 kv_cache: tuple[jax.Array, jax.Array] | None = None,
                 cache_index: jax.Array | None = None, head_scale: jax.Array | None = None,
                 causal_from: int | None = None, key_positions: jax.Array | None = None):
        """Args:
          x: `(B, T, D)`.
          mask: an `AttentionMask`, or bool `(B or 1, 1, T, T)`, True where a query may attend to
            a key; with a cache, `(B or 1, 1, T, S)` over the S cache slots.
          causal_from: a bool mask is causal after this many tokens (`dot_product_attention`);
            ignored with a cache.
          positions: int `(T,)` or `(B, T)` positions for rotary embeddings and ALiBi.
          key_positions: ALiBi's key positions, int `(S,)` or `(B, S)` (with a cache: those of
            its slots); None: `positions`.
          kv_cache: optional (keys, values), each `(B, S, H, Dh)` (incremental decoding): the
            keys and values of `x` are written at slots `[cache_index, cache_index + T)` and the
            queries attend to all S slots (the mask says which are valid).
          cache_index: int32 `()` first slot written, or int32 `(T,)` the slot of each token
            (distinct slots; they may wrap around the end of a ring).
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
        groups = self.num_kv_heads or self.num_heads
        if self.num_heads % groups:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")
        if groups == self.num_heads:
            qkv = nn.DenseGeneral((3, self.num_heads, head_dim), use_bias=self.use_bias,
                                  dot_general=dense_dot_general, name="qkv")(x)
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, T, H, Dh)
        else:
            q = nn.DenseGeneral((self.num_heads, head_dim), use_bias=self.use_bias,
                                dot_general=dense_dot_general, name="q")(x)
            kv = nn.DenseGeneral((2, groups, head_dim), use_bias=self.use_bias,
                                 dot_general=dense_dot_general, name="kv")(x)
            # Query head h reads key/value head h // (H / groups), as Llama's repeat_kv.
            k, v = (jnp.repeat(kv[:, :, i], self.num_heads // groups, axis=2) for i in (0, 1))
        if self.normalize_qk:
            q = nn.LayerNorm(name="q_norm")(q)
            k = nn.LayerNorm(name="k_norm")(k)
        if self.rotary:
            q, k = (rotary_embedding(y, positions, self.rotary_base, self.rotary_table_dtype)
                    for y in (q, k))
        if kv_cache is not None:
            k_cache, v_cache = kv_cache
            if jnp.ndim(cache_index):  # one slot per token: a write may wrap around a ring
                k = k_cache.at[:, cache_index].set(k.astype(k_cache.dtype))
                v = v_cache.at[:, cache_index].set(v.astype(v_cache.dtype))
            else:
                start = (0, cache_index, 0, 0)
                k = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), start)
                v = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), start)

        mask = as_attention_mask(mask, None if kv_cache is not None else causal_from)
        dropout = None
        if self.dropout_rate > 0.0 and not deterministic:
            dropout = AttentionDropout.from_key(self.make_rng("dropout"), self.dropout_rate)
        alibi = None
        if self.alibi:
            alibi = AlibiBias.create(
                self.num_heads, jnp.arange(x.shape[1]) if positions is None else positions,
                key_positions)
        if return_weights:
            length, keys = q.shape[1], k.shape[1]
            weights = attention_weights(q, k, mask,
                                        None if alibi is None else alibi.dense(length, keys))
            dropped = weights if dropout is None else dropout.apply(
                weights, dropout.keep(q.shape[0], self.num_heads, 0, length, 0, keys))
            out = attend(dropped, v)
        else:
            weights = None
            out = dot_product_attention(q, k, v, mask, dropout=dropout, alibi=alibi,
                                        implementation=self.implementation,
                                        block_size=self.block_size,
                                        blockwise_from=self.blockwise_from)
        if self.mixture:
            gates = jax.nn.softmax(nn.Dense(self.num_heads, kernel_init=nn.initializers.zeros,
                                            name="gate")(x).astype(jnp.float32), axis=-1)
            self.sow("intermediates", "gates", gates)
            out = out * (self.num_heads * gates).astype(out.dtype)[..., None]
        if head_scale is not None:
            out = out * head_scale.astype(out.dtype)[:, None]
        out = nn.DenseGeneral(d_model, axis=(-2, -1), use_bias=self.use_bias,
                              dot_general=dense_dot_general, name="out")(out)
        outputs = (out, weights) if return_weights else (out,)
        if kv_cache is not None:
            outputs = outputs + ((k, v),)
        return outputs if len(outputs) > 1 else out
