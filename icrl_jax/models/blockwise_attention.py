"""Blockwise (flash-style) attention in JAX: memory O(T * block) per head, forward and backward.

Queries go in blocks of `block_size` (`lax.map`), and each query block runs over the key blocks
it may see with an online softmax (a running maximum, sum and weighted sum of values: Milakov &
Gimelshein 2018; Dao et al., FlashAttention, 2022), so no `(T, S)` score matrix is ever held. The
backward pass (`jax.custom_vjp`) keeps only the output and each row's log-sum-exp, and recomputes
each block's scores: for each key block, a loop over the query blocks that may see it adds to dK
and dV and to the rows of dQ.

Blocks that no query of a block may see are skipped: with a causal mask, the keys after a query
block's last row; with a sliding window, also the keys before its first row's window (the prefix
stays). The masks, attention dropout's keep bits and ALiBi's biases are all computed per block
from absolute (row, column) positions (`attention_masks.py`, `alibi.py`), so the result equals
dense attention's for any block size, dropout included. Lengths that are not a multiple of the
block are padded, and the padding is masked.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from icrl_jax.models.alibi import AlibiBias
from icrl_jax.models.attention_masks import AttentionDropout, AttentionMask, sequence_rows
from icrl_jax.models.matmul import contract_tokens

#: Block sizes are rounded up to a multiple of this (whole vector registers of float32).
BLOCK_MULTIPLE = 8


#: Score elements of one block over all heads that `auto_block` aims at (4 MiB of float32).
BLOCK_ELEMENTS = 1 << 20


def auto_block(batch: int, heads: int, length: int) -> int:
    """A block for `batch` x `heads` score matrices over `length` queries: the largest power of
    two (32 to 256) whose `(batch, heads, block, block)` scores hold at most `BLOCK_ELEMENTS`,
    and at most a quarter of the sequence. On a CPU the loop's elementwise passes then stay in
    cache, and the diagonal blocks' masked half stays a small share of the work: the fastest
    of 32 to 256 at 8 x 8 heads of 64 over 512-2,048 tokens (128), 4 x 64 heads of 8 over 622
    (64) and 64 x 8 heads of 32 over 200 (32)."""
    fits = (BLOCK_ELEMENTS // max(batch * heads, 1)) ** 0.5
    block = 32
    while block * 2 <= min(fits, length / 4, 256):
        block *= 2
    return block


#: The block of a batch split into chunks (`auto_batch_chunk`), and the score elements of one
#: chunk's block over its sequences and heads (8 MiB of float32).
CHUNKED_BLOCK = 128
CHUNK_ELEMENTS = 2 * BLOCK_ELEMENTS


def auto_batch_chunk(batch: int, heads: int, length: int, devices: int = 1) -> tuple[int, int]:
    """(sequences per pass of the block loops, block). All sequences and `auto_block`, unless
    so many score matrices (`batch` x `heads`) push `auto_block` down to 32 on a sequence long
    enough for `CHUNKED_BLOCK`: then blocks of `CHUNKED_BLOCK` over chunks of the batch (the
    largest divisor of `batch` within `CHUNK_ELEMENTS`), one chunk after another. Fewer loop
    steps over larger products: the attention's forward and backward 1.35x at the authors'
    Headless-AD layout, 32 x 64 heads of 8 over 622 tokens (chunks of 2; 1.26x in chunks of 4
    with blocks of 64, 0.92x one sequence at a time with blocks of 256). Never on several
    `devices`: the batch is sharded over them, and slicing it in a loop would gather it."""
    block = auto_block(batch, heads, length)
    if block > 32 or length / 4 < CHUNKED_BLOCK or devices > 1:
        return batch, block
    fits = max(CHUNK_ELEMENTS // (heads * CHUNKED_BLOCK ** 2), 1)
    return max(c for c in range(1, min(fits, batch) + 1) if batch % c == 0), CHUNKED_BLOCK


def round_block(block_size: int, length: int) -> int:
    """The block used for `length` tokens: `block_size` rounded up to a multiple of
    `BLOCK_MULTIPLE`, no longer than `length` rounded up the same way."""
    def up(n):
        return -(-n // BLOCK_MULTIPLE) * BLOCK_MULTIPLE
    return min(up(max(block_size, 1)), up(max(length, 1)))


def blockwise_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: AttentionMask,
                        dropout: AttentionDropout | None = None, alibi: AlibiBias | None = None,
                        block_size: int = 0, batch_chunk: int = 0) -> jax.Array:
    """softmax(q k^T / sqrt(Dh) + alibi) over the keys `mask` allows, dropped by `dropout`,
    times v, in blocks: q `(B, T, H, Dh)`, k and v `(B, S, H, Dh)` -> `(B, T, H, Dh)`.

    `block_size`: the query and key block (rounded up to a multiple of `BLOCK_MULTIPLE`); 0:
    `auto_block`. `batch_chunk`: sequences per pass (a divisor of B); 0: `auto_batch_chunk`.
    A query with no allowed key gets zeros (as dense attention's). Equal to dense attention
    (`attention.dot_product_attention` with `implementation="dense"`) for any `block_size` and
    `batch_chunk`, in values and gradients, up to float rounding."""
    batch, length, heads, head_dim = q.shape
    if not batch_chunk:
        batch_chunk, auto = auto_batch_chunk(batch, heads, length, jax.device_count())
        block_size = block_size or auto
    if batch % batch_chunk:
        raise ValueError(f"batch_chunk={batch_chunk} does not divide the batch, {batch}")
    if batch_chunk < batch:
        def chunk(index):
            start = index * batch_chunk
            def rows(x):
                return sequence_rows(x, start, batch_chunk)
            return blockwise_attention(
                rows(q), rows(k), rows(v), mask.batch_rows(start, batch_chunk),
                None if dropout is None else dropout.batch_rows(start),
                None if alibi is None else alibi.batch_rows(start, batch_chunk),
                block_size, batch_chunk)
        out = jax.lax.map(chunk, jnp.arange(batch // batch_chunk))
        return out.reshape(q.shape)
    keys = k.shape[1]
    block_size = block_size or auto_block(batch, heads, length)
    block_q, block_k = round_block(block_size, length), round_block(block_size, keys)
    rows, cols = -(-length // block_q) * block_q, -(-keys // block_k) * block_k
    scale = jnp.asarray(1.0 / jnp.sqrt(head_dim), q.dtype)

    def heads_first(x, size):
        x = jnp.swapaxes(x, 1, 2)
        return jnp.pad(x, ((0, 0), (0, 0), (0, size - x.shape[2]), (0, 0)))
    out = _flash(heads_first(q * scale, rows), heads_first(k, cols), heads_first(v, cols),
                 mask.padded(rows, cols), dropout,
                 None if alibi is None else alibi.padded(rows, cols), (block_q, block_k, keys))
    return jnp.swapaxes(out[:, :, :length], 1, 2)


def _key_blocks(mask: AttentionMask, row0, block_q: int, block_k: int, num_blocks: int):
    """The key blocks query rows `[row0, row0 + block_q)` may see, as (prefix blocks n, first
    block after them, count): loop step t < n is key block t, later ones `first + t - n`."""
    prefix = mask.causal_from
    if prefix is None:
        return 0, 0, num_blocks
    end = jnp.minimum(num_blocks, (jnp.maximum(row0 + block_q, prefix) + block_k - 1) // block_k)
    prefix_blocks = jnp.minimum(-(-prefix // block_k), end)
    first = prefix_blocks
    if mask.window:
        first = jnp.maximum(first, jnp.maximum(row0 - mask.window + 1, 0) // block_k)
    return prefix_blocks, first, prefix_blocks + jnp.maximum(end - first, 0)


def _query_blocks(mask: AttentionMask, col0, block_q: int, block_k: int, num_blocks: int):
    """The query blocks that may see keys `[col0, col0 + block_k)`: `[first, end)`."""
    prefix = mask.causal_from
    if prefix is None:
        return 0, num_blocks
    in_prefix = col0 < prefix  # every query sees the prefix
    first = jnp.where(in_prefix, 0, col0 // block_q)
    end = num_blocks
    if mask.window:
        last_row = col0 + block_k - 1 + mask.window - 1  # the last row whose window reaches in
        end = jnp.where(in_prefix, num_blocks, jnp.minimum(num_blocks, last_row // block_q + 1))
    return first, end


def _scores(q_block, k_block, mask, alibi, row0, col0, num_keys):
    """Scores float32 `(B, H, bq, bk)` and bool `(B or 1, 1, bq, bk)` allowed keys."""
    block_q, block_k = q_block.shape[2], k_block.shape[2]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q_block, k_block, preferred_element_type=jnp.float32)
    if alibi is not None:
        scores = scores + alibi.block(row0, block_q, col0, block_k)
    return scores, mask.block(row0, block_q, col0, block_k, num_keys)


def _slice(x, start, size):
    return jax.lax.dynamic_slice_in_dim(x, start, size, axis=2)


@partial(jax.custom_vjp, nondiff_argnums=(6,))
def _flash(q, k, v, mask, dropout, alibi, sizes):
    """Heads-first q `(B, H, Tq, Dh)` (scaled), k, v `(B, H, Sk, Dh)`, Tq and Sk multiples of
    the blocks; `sizes` = (block_q, block_k, keys before padding) -> `(B, H, Tq, Dh)`."""
    return _flash_fwd(q, k, v, mask, dropout, alibi, sizes)[0]


def _flash_fwd(q, k, v, mask, dropout, alibi, sizes):
    block_q, block_k, num_keys = sizes
    batch, heads, rows, head_dim = q.shape
    num_key_blocks = k.shape[2] // block_k

    def query_block(index):
        row0 = index * block_q
        q_block = _slice(q, row0, block_q)
        prefix_blocks, first, count = _key_blocks(mask, row0, block_q, block_k, num_key_blocks)

        def step(t, carry):
            peak, total, acc = carry
            col0 = jnp.where(t < prefix_blocks, t, first + t - prefix_blocks) * block_k
            scores, allowed = _scores(q_block, _slice(k, col0, block_k), mask, alibi, row0, col0,
                                      num_keys)
            scores = jnp.where(allowed, scores, -jnp.inf)
            new_peak = jnp.maximum(peak, scores.max(-1, keepdims=True))
            shift = jnp.where(new_peak == -jnp.inf, 0.0, new_peak)  # a row with no key yet
            weights = jnp.exp(scores - shift)
            rescale = jnp.exp(peak - shift)
            total = rescale * total + weights.sum(-1, keepdims=True)
            if dropout is not None:
                weights = dropout.apply(weights, dropout.keep(batch, heads, row0, block_q, col0,
                                                              block_k))
            acc = rescale * acc + jnp.einsum("bhqk,bhkd->bhqd", weights.astype(v.dtype),
                                             _slice(v, col0, block_k),
                                             preferred_element_type=jnp.float32)
            return new_peak, total, acc

        init = (jnp.full((batch, heads, block_q, 1), -jnp.inf, jnp.float32),
                jnp.zeros((batch, heads, block_q, 1), jnp.float32),
                jnp.zeros((batch, heads, block_q, head_dim), jnp.float32))
        peak, total, acc = jax.lax.fori_loop(0, count, step, init)
        out = acc / jnp.where(total > 0, total, 1.0)
        # +inf for a row with no allowed key: its recomputed weights are exp(-inf) = 0.
        log_sum = jnp.where(total > 0, peak + jnp.log(jnp.where(total > 0, total, 1.0)), jnp.inf)
        return out.astype(q.dtype), log_sum[..., 0]

    out, log_sum = jax.lax.map(query_block, jnp.arange(rows // block_q))
    out = jnp.moveaxis(out, 0, 2).reshape(batch, heads, rows, head_dim)
    log_sum = jnp.moveaxis(log_sum, 0, 2).reshape(batch, heads, rows)
    return out, (q, k, v, mask, dropout, alibi, out, log_sum)


def _flash_bwd(sizes, residuals, d_out):
    block_q, block_k, num_keys = sizes
    q, k, v, mask, dropout, alibi, out, log_sum = residuals
    batch, heads, rows, head_dim = q.shape
    num_query_blocks = rows // block_q
    # sum_s dW * W per row, from the output instead of a pass over the weights.
    row_term = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), -1)

    def key_block(d_q, index):
        col0 = index * block_k
        k_block, v_block = _slice(k, col0, block_k), _slice(v, col0, block_k)
        first, end = _query_blocks(mask, col0, block_q, block_k, num_query_blocks)

        def step(query_index, carry):
            d_q, d_k, d_v = carry
            row0 = query_index * block_q
            q_block, d_out_block = _slice(q, row0, block_q), _slice(d_out, row0, block_q)
            scores, allowed = _scores(q_block, k_block, mask, alibi, row0, col0, num_keys)
            weights = jnp.where(allowed, jnp.exp(scores - _slice(log_sum, row0, block_q)[..., None]),
                                0.0)
            d_weights = jnp.einsum("bhqd,bhkd->bhqk", d_out_block, v_block,
                                   preferred_element_type=jnp.float32)
            dropped = weights
            if dropout is not None:
                keep = dropout.keep(batch, heads, row0, block_q, col0, block_k)
                dropped, d_weights = dropout.apply(weights, keep), dropout.apply(d_weights, keep)
            d_v = d_v + contract_tokens(dropped.astype(d_out.dtype), d_out_block)
            d_scores = weights * (d_weights - _slice(row_term, row0, block_q)[..., None])
            d_scores = d_scores.astype(q.dtype)
            d_q = jax.lax.dynamic_update_slice_in_dim(
                d_q, _slice(d_q, row0, block_q) + jnp.einsum(
                    "bhqk,bhkd->bhqd", d_scores, k_block, preferred_element_type=jnp.float32),
                row0, axis=2)
            d_k = d_k + contract_tokens(d_scores, q_block)
            return d_q, d_k, d_v

        zeros = jnp.zeros((batch, heads, block_k, head_dim), jnp.float32)
        d_q, d_k, d_v = jax.lax.fori_loop(first, end, step, (d_q, zeros, zeros))
        return d_q, (d_k, d_v)

    d_q, (d_k, d_v) = jax.lax.scan(key_block, jnp.zeros(q.shape, jnp.float32),
                                   jnp.arange(k.shape[2] // block_k))

    def keys_first(x):
        return jnp.moveaxis(x, 0, 2).reshape(k.shape)
    return (d_q.astype(q.dtype), keys_first(d_k).astype(k.dtype),
            keys_first(d_v).astype(v.dtype), None, None, None)


_flash.defvjp(_flash_fwd, _flash_bwd)
