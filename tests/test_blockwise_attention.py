"""Blockwise attention equals dense attention, values and gradients, for every mask kind, with and
without dropout, at lengths that are and are not multiples of the block; the dropout bits do not
depend on the blocks; the implementation is picked by length and by `model.attention_impl`; the
Pallas kernels run in interpret mode and equal dense attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

from icrl_jax.models.alibi import AlibiBias
from icrl_jax.models.attention import choose_implementation, dot_product_attention
from icrl_jax.models.attention_masks import AttentionDropout, AttentionMask, rows_with_keys
from icrl_jax.models.blockwise_attention import auto_batch_chunk, blockwise_attention, round_block
from icrl_jax.models.dropout import LEVELS

BATCH, HEADS, HEAD_DIM, BLOCK = 2, 2, 8, 16


def _padding(length):
    """Key padding: the second sequence's last 5 keys (and a hole at key 1) are padding."""
    valid = jnp.ones((BATCH, length), bool)
    return valid.at[1, -5:].set(False).at[1, 1].set(False)


#: name -> (length -> AttentionMask): every kind of mask the models build.
MASKS = {
    "causal": lambda n: AttentionMask(causal_from=0),
    "bidirectional": lambda n: AttentionMask(),
    "prompt_prefix": lambda n: AttentionMask(causal_from=11),
    "sliding_window": lambda n: AttentionMask(causal_from=0, window=7),
    "prefix_and_window": lambda n: AttentionMask(causal_from=5, window=9),
    "causal_padded": lambda n: AttentionMask(causal_from=0, key_valid=_padding(n)),
    "bidirectional_padded": lambda n: AttentionMask(key_valid=_padding(n)),
    "explicit": lambda n: AttentionMask(explicit=jax.random.bernoulli(
        jax.random.PRNGKey(3), 0.6, (BATCH, 1, n, n)).at[1, :, 4].set(False)),  # an empty row
}


def _inputs(length, seed=0):
    return jax.random.normal(jax.random.PRNGKey(seed), (3, BATCH, length, HEADS, HEAD_DIM))


def _values_and_gradients(implementation, mask, dropout, alibi=None, block_size=BLOCK):
    """jitted (q, k, v) -> (attention, gradients of a weighted sum w.r.t. q, k, v)."""
    def attention(q, k, v):
        return dot_product_attention(q, k, v, mask, dropout=dropout, alibi=alibi,
                                     implementation=implementation, block_size=block_size)

    def loss(q, k, v):
        return (attention(q, k, v) * jnp.cos(jnp.arange(HEAD_DIM))).sum()
    return jax.jit(lambda q, k, v: (attention(q, k, v),
                                    jax.grad(loss, argnums=(0, 1, 2))(q, k, v)))


@pytest.mark.parametrize("kind", sorted(MASKS))
@pytest.mark.parametrize("length", [2 * BLOCK, 2 * BLOCK + 5])
def test_blockwise_equals_dense_with_and_without_dropout(kind, length):
    """Values and gradients to 1e-5 in float32, without dropout and with rate 0.3."""
    q, k, v = _inputs(length)
    mask = MASKS[kind](length)
    for dropout in (None, AttentionDropout.from_key(jax.random.PRNGKey(7), 0.3)):
        dense, dense_grads = _values_and_gradients("dense", mask, dropout)(q, k, v)
        blocked, blocked_grads = _values_and_gradients("blockwise", mask, dropout)(q, k, v)
        np.testing.assert_allclose(blocked, dense, atol=1e-5, rtol=1e-5)
        for got, want in zip(blocked_grads, dense_grads):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_blockwise_equals_dense_with_alibi_and_any_block_size():
    """ALiBi's biases with a bidirectional prefix and dropout, blocks of 8, 24 (the keys 3 blocks
    and a bit) and one block longer than the sequence."""
    length = 29
    q, k, v = _inputs(length, seed=1)
    mask = AttentionMask(causal_from=6)
    alibi = AlibiBias.create(HEADS, jnp.arange(length))
    dropout = AttentionDropout.from_key(jax.random.PRNGKey(8), 0.2)
    dense, dense_grads = _values_and_gradients("dense", mask, dropout, alibi)(q, k, v)
    for block in (8, 24, 64):
        blocked, grads = _values_and_gradients("blockwise", mask, dropout, alibi, block)(q, k, v)
        np.testing.assert_allclose(blocked, dense, atol=1e-5, rtol=1e-5)
        for got, want in zip(grads, dense_grads):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", sorted(MASKS))
def test_sequences_in_chunks_equal_all_at_once(kind):
    """The batch one sequence at a time (`batch_chunk=1`) equals dense attention, values and
    gradients, with dropout (its bits follow each sequence's absolute index) and ALiBi with
    per-sequence positions."""
    length = 2 * BLOCK + 5
    q, k, v = _inputs(length, seed=3)
    mask = MASKS[kind](length)
    dropout = AttentionDropout.from_key(jax.random.PRNGKey(9), 0.3)
    positions = jnp.stack([jnp.arange(length), jnp.arange(length) * 2 + 1])  # (B, T)
    alibi = AlibiBias.create(HEADS, positions)
    dense, dense_grads = _values_and_gradients("dense", mask, dropout, alibi)(q, k, v)

    def loss(q, k, v):
        return (blockwise_attention(q, k, v, mask, dropout, alibi, BLOCK, batch_chunk=1)
                * jnp.cos(jnp.arange(HEAD_DIM))).sum()
    chunked = jax.jit(lambda q, k, v: blockwise_attention(q, k, v, mask, dropout, alibi, BLOCK,
                                                          batch_chunk=1))(q, k, v)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    np.testing.assert_allclose(chunked, dense, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, dense_grads):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="does not divide"):
        blockwise_attention(q, k, v, mask, batch_chunk=3)


def test_the_batch_is_chunked_only_where_blocks_would_be_the_smallest():
    """Split where `batch` x `heads` score matrices push the block to 32 on a long sequence:
    the authors' Headless-AD layout at batch 32 (64 heads, 622 tokens) in chunks of 2 with
    blocks of 128; not at batch 4, nor on sequences too short for such blocks, nor at
    XLand-100B's AD size, nor with the batch sharded over several devices."""
    assert auto_batch_chunk(32, 64, 622) == (2, 128)
    assert auto_batch_chunk(4, 64, 622) == (4, 64)
    assert auto_batch_chunk(64, 8, 200) == (64, 32)
    assert auto_batch_chunk(8, 8, 4096) == (8, 128)
    assert auto_batch_chunk(9, 64, 622) == (1, 128)  # a divisor of the batch
    assert auto_batch_chunk(32, 64, 622, devices=2) == (32, 32)  # a sharded batch stays whole


def test_blockwise_matches_a_written_out_softmax():
    """Against softmax(q k^T / sqrt(Dh)) v written out with -inf masking (not our dense path),
    causal with padding: keys 0 and 1 of the second sequence are padding, so its queries 0 and
    1 may attend to nothing, and get zeros."""
    length = 21
    q, k, v = _inputs(length, seed=2)
    valid = _padding(length).at[1, 0].set(False)
    mask = AttentionMask(causal_from=0, key_valid=valid)
    allowed = np.asarray(mask.dense(length, length))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HEAD_DIM)
    weights = jax.nn.softmax(jnp.where(allowed, logits, -jnp.inf), -1)
    expected = jnp.einsum("bhqk,bkhd->bqhd", jnp.nan_to_num(weights), v)
    got = dot_product_attention(q, k, v, mask, implementation="blockwise", block_size=8)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert not allowed[1, 0, 1].any()  # padded keys 0 and 1: query 1 sees nothing
    np.testing.assert_array_equal(got[1, :2], 0.0)


def test_dropout_bits_are_slices_of_one_mask_whatever_the_block():
    """A block's keep bits are the same slice of the whole matrix's, for any start and size;
    they are the hash of (row, column) under the head's key words (hand-checked at one
    element); the keep fraction and the scale are the rounded keep probability's."""
    dropout = AttentionDropout.from_key(jax.random.PRNGKey(0), 0.3)
    keep = jax.jit(lambda d, row0, col0, rows, cols: d.keep(2, 3, row0, rows, col0, cols),
                   static_argnums=(3, 4))
    whole = np.asarray(keep(dropout, 0, 0, 40, 52))
    for row0, rows, col0, cols in [(0, 40, 0, 52), (5, 7, 9, 13), (33, 7, 48, 4), (1, 1, 3, 1)]:
        np.testing.assert_array_equal(keep(dropout, row0, col0, rows, cols),
                                      whole[:, :, row0:row0 + rows, col0:col0 + cols])
    threshold = round(0.7 * LEVELS)
    assert int(dropout.threshold) == threshold
    head = threefry_2x32(dropout.key_words, jnp.array([1 * 3 + 2, 0], jnp.uint32))  # b=1, h=2
    word = threefry_2x32(head, jnp.array([17, 30], jnp.uint32))[0]  # row 17, column 30
    assert whole[1, 2, 17, 30] == (int(word) >> 16 < threshold)
    np.testing.assert_allclose(float(dropout.scale), LEVELS / threshold, rtol=1e-6)
    big = np.asarray(jax.jit(lambda d: d.keep(8, 4, 0, 256, 0, 256))(dropout))
    assert abs(big.mean() - threshold / LEVELS) < 5 * np.sqrt(0.21 / big.size)
    # Neighbouring columns and rows are independent.
    for a, b in [(big[..., 0::2], big[..., 1::2]), (big[..., 0::2, :], big[..., 1::2, :])]:
        agree = (a == b).mean()
        assert abs(agree - (0.7 ** 2 + 0.3 ** 2)) < 5 * np.sqrt(0.25 / a.size)
    # Heads and batch rows draw different bits.
    assert (big[0, 0] != big[0, 1]).any() and (big[0, 0] != big[1, 0]).any()


def test_rows_with_keys_counts_structure_and_padding():
    """The O(T) count of rows with an allowed key equals the dense mask's, for every structured
    kind (padding that empties some rows included)."""
    length = 23
    valid = jnp.ones((2, length), bool).at[1, :9].set(False)
    for causal_from, window in [(None, 0), (0, 0), (4, 0), (0, 3), (2, 3), (12, 5)]:
        mask = AttentionMask(key_valid=valid, causal_from=causal_from, window=window)
        np.testing.assert_array_equal(rows_with_keys(mask, length, length),
                                      mask.dense(length, length).any(-1, keepdims=True))


def test_round_block():
    assert round_block(128, 1000) == 128
    assert round_block(100, 1000) == 104  # a multiple of 8
    assert round_block(128, 37) == 40  # no longer than the padded sequence
    assert round_block(1, 5) == 8


def test_the_implementation_is_picked_by_length_and_by_the_override():
    """Where no fused kernel applies (attention dropout: none has it), "auto" is dense below
    the threshold and blockwise from it on; the overrides are taken as they are, or refused
    in one line where they do not apply."""
    q = jnp.zeros((1, 64, 2, 8))
    mask = AttentionMask(causal_from=0)
    dropout = AttentionDropout.from_key(jax.random.PRNGKey(0), 0.1)
    assert choose_implementation(q, q, mask, dropout, None, "auto", blockwise_from=65) == "dense"
    assert choose_implementation(q, q, mask, dropout, None, "auto", blockwise_from=64) == \
        "blockwise"
    if jax.default_backend() == "cpu":
        assert choose_implementation(q, q, mask, None, None, "auto", blockwise_from=64) == \
            "blockwise"
    assert choose_implementation(q, q, mask, None, None, "blockwise") == "blockwise"
    assert choose_implementation(q, q, mask, None, None, "dense", blockwise_from=1) == "dense"
    with pytest.raises(ValueError, match="attention_impl='pallas'.*no attention dropout"):
        choose_implementation(q, q, mask, dropout, None, "pallas")
    if jax.default_backend() == "cpu":
        with pytest.raises(ValueError, match="attention_impl='cudnn' does not apply"):
            choose_implementation(q, q, mask, None, None, "cudnn")
    with pytest.raises(ValueError, match="attention_impl must be one of"):
        choose_implementation(q, q, mask, None, None, "flash")


@pytest.mark.parametrize("kind", ["causal", "bidirectional"])
def test_pallas_gpu_kernel_runs_in_interpret_mode_and_equals_dense(kind):
    """JAX's Triton flash-attention kernel in Pallas' interpret mode (on the CPU): 40 tokens
    (padded to its block of 64 with a segment of their own), values and gradients."""
    from icrl_jax.models.pallas_attention import pallas_attention
    length = 40
    q, k, v = _inputs(length, seed=4)
    mask = MASKS[kind](length)
    dense, dense_grads = _values_and_gradients("dense", mask, None)(q, k, v)
    attention = lambda q, k, v: pallas_attention(q, k, v, mask, "gpu", interpret=True)  # noqa: E731
    np.testing.assert_allclose(attention(q, k, v), dense, atol=1e-5)
    grads = jax.grad(lambda *a: (attention(*a) * jnp.cos(jnp.arange(HEAD_DIM))).sum(),
                     argnums=(0, 1, 2))(q, k, v)
    for got, want in zip(grads, dense_grads):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("kind", ["causal", "prefix_and_window"])
def test_pallas_splash_kernel_runs_in_interpret_mode_and_equals_dense(kind):
    """TPU splash attention in interpret mode: 130 tokens (padded to two blocks of 128; the
    padding hidden by the static mask), a plain causal mask and a prefix with a window."""
    from icrl_jax.models.pallas_attention import pallas_attention
    length = 130
    q, k, v = _inputs(length, seed=5)
    mask = MASKS[kind](length)
    dense, _ = _values_and_gradients("dense", mask, None)(q, k, v)
    np.testing.assert_allclose(pallas_attention(q, k, v, mask, "tpu", interpret=True), dense,
                               atol=1e-5)


def test_pallas_refuses_what_it_cannot_compute():
    from icrl_jax.models.pallas_attention import pallas_attention
    q = jnp.zeros((1, 16, 2, 8))
    with pytest.raises(ValueError, match="causal or full"):
        pallas_attention(q, q, q, AttentionMask(causal_from=0, window=4), "gpu", interpret=True)
    with pytest.raises(ValueError, match="no padding or explicit masks"):
        pallas_attention(q, q, q, AttentionMask(key_valid=jnp.ones((1, 16), bool)), "tpu",
                         interpret=True)
    # Compiled for a GPU (not interpreted), float32 is refused: its backward pass does not fit.
    with pytest.raises(ValueError, match="16-bit inputs"):
        pallas_attention(q, q, q, AttentionMask(causal_from=0), "gpu", interpret=False)


def test_transformer_takes_blockwise_attention_from_the_threshold_on():
    """The shared transformer with `attention_blockwise_from` below the length (blockwise) and
    above it (dense), and `attention_impl="blockwise"`: the same hidden states and gradients,
    with padding and a window."""
    from icrl_jax.models.transformer import Transformer
    length = 45
    x = jax.random.normal(jax.random.PRNGKey(0), (2, length, 16))
    padding = jnp.arange(length)[None] < jnp.array([[length], [length - 6]])

    def run(**kwargs):
        model = Transformer(num_layers=1, num_heads=2, position="rotary", attention_window=20,
                            attention_block_size=16, **kwargs)
        params = model.init(jax.random.PRNGKey(1), x)
        def hidden(p):
            return model.apply(p, x, padding_mask=padding)
        return hidden(params), jax.grad(lambda p: (hidden(p) * jnp.cos(jnp.arange(16))).sum())(
            params)
    dense_value, dense_grads = run(attention_blockwise_from=length + 1)
    for kwargs in (dict(attention_blockwise_from=length), dict(attention_impl="blockwise")):
        value, grads = run(**kwargs)
        np.testing.assert_allclose(value, dense_value, atol=1e-5)
        for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(dense_grads)):
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
