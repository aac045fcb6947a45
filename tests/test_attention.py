"""Attention: the block-causal path and the heads-first softmax give the plain softmax's result."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.models.attention import (CAUSAL_QUERY_BLOCK, attend, attention_weights,
                                       dot_product_attention)
from icrl_jax.models.attention_masks import AttentionDropout
from icrl_jax.models.transformer import Transformer, ring_cache_mask, ring_cache_slots


def _reference(q, k, v, mask):
    """softmax(q k^T / sqrt(Dh)) v written out, `(B, T, H, Dh)` layout throughout."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(q.shape[-1])
    weights = jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), -1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


@pytest.mark.parametrize("length", [CAUSAL_QUERY_BLOCK + 1, 2 * CAUSAL_QUERY_BLOCK + 2])
def test_causal_blocks_equal_full_attention_values_and_gradients(length):
    """Uneven blocks (65 -> 33 + 32; 130 -> 3 x 44, the last one short), a padding mask on top
    of the causal one; forward and gradients with respect to q, k and v."""
    q, k, v = jax.random.normal(jax.random.PRNGKey(0), (3, 2, length, 2, 8))
    padding = jnp.arange(length)[None, :] < jnp.array([[length], [length - 7]])  # (B, S)
    mask = jnp.tril(jnp.ones((length, length), bool))[None, None] & padding[:, None, None, :]
    expected = _reference(q, k, v, mask)
    np.testing.assert_allclose(dot_product_attention(q, k, v, mask, causal_from=0), expected,
                               atol=1e-5)
    np.testing.assert_allclose(dot_product_attention(q, k, v, mask), expected, atol=1e-5)

    def loss(attention, q, k, v):
        return (attention(q, k, v) ** 2 * jnp.arange(8)).sum()
    blocked = jax.grad(lambda *a: loss(lambda *b: dot_product_attention(*b, mask, causal_from=0),
                                       *a), argnums=(0, 1, 2))(q, k, v)
    full = jax.grad(lambda *a: loss(lambda *b: _reference(*b, mask), *a), argnums=(0, 1, 2))(
        q, k, v)
    for got, want in zip(blocked, full):
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_causal_attention_refuses_a_different_number_of_keys():
    q = jnp.zeros((1, CAUSAL_QUERY_BLOCK + 4, 1, 4))
    k = jnp.zeros((1, CAUSAL_QUERY_BLOCK + 8, 1, 4))
    with pytest.raises(ValueError, match="as many keys as queries"):
        dot_product_attention(q, k, k, jnp.ones((1, 1, q.shape[1], k.shape[1]), bool),
                              causal_from=0)


def test_a_query_with_no_allowed_key_gets_zero_weights():
    q, k = jax.random.normal(jax.random.PRNGKey(1), (2, 1, 4, 2, 8))
    mask = jnp.ones((1, 1, 4, 4), bool).at[:, :, 2].set(False)
    weights = attention_weights(q, k, mask)  # (B, H, T, S)
    assert weights.shape == (1, 2, 4, 4)
    np.testing.assert_array_equal(weights[:, :, 2], 0.0)
    np.testing.assert_allclose(weights.sum(-1)[:, :, [0, 1, 3]], 1.0, rtol=1e-6)


def test_transformer_causal_path_equals_an_explicit_causal_mask():
    """The backbone's own causal mask takes the block path; the same mask given as
    `attention_mask` takes the full one: same hidden states, with padding."""
    length = CAUSAL_QUERY_BLOCK + 36
    model = Transformer(num_layers=2, num_heads=2, max_len=length)
    x = jax.random.normal(jax.random.PRNGKey(2), (2, length, 16))
    params = model.init(jax.random.PRNGKey(3), x)
    padding = jnp.arange(length)[None, :] < jnp.array([[length], [length - 5]])
    own = model.apply(params, x, padding_mask=padding)
    explicit = model.apply(params, x, padding_mask=padding,
                           attention_mask=jnp.tril(jnp.ones((1, 1, length, length), bool)))
    np.testing.assert_allclose(own, explicit, atol=1e-5)


@pytest.mark.parametrize("prefix", [5, CAUSAL_QUERY_BLOCK + 3])
def test_prefix_causal_blocks_equal_full_attention(prefix):
    """Headless-AD's mask: an action-set prompt (a set, some actions padded) that attends only to
    itself, then causal steps that also see the prompt. The first block holds the whole prompt,
    also when the prompt is longer than a block."""
    from icrl_jax.papers.headless_ad.method import prompt_attention_mask
    steps = 2 * CAUSAL_QUERY_BLOCK
    action_mask = jnp.arange(prefix)[None, :] < jnp.array([[prefix], [prefix - 2]])
    mask = prompt_attention_mask(action_mask, steps)
    length = prefix + steps
    assert mask.shape == (2, 1, length, length)
    q, k, v = jax.random.normal(jax.random.PRNGKey(4), (3, 2, length, 2, 8))
    expected = _reference(q, k, v, mask)
    got = dot_product_attention(q, k, v, mask, causal_from=prefix)
    valid = np.asarray(mask.any(-1))[:, 0]  # padded prompt queries attend to nothing
    np.testing.assert_allclose(np.asarray(got)[valid], np.asarray(expected)[valid], atol=1e-5)


def test_block_path_draws_the_dropout_bits_of_the_whole_matrix():
    """The causal block path's dropout keeps what one draw over the whole `(T, T)` matrix keeps
    (`AttentionDropout.keep` reads absolute rows and columns), scaled by the kept fraction."""
    length = 2 * CAUSAL_QUERY_BLOCK + 3
    q, k, v = jax.random.normal(jax.random.PRNGKey(5), (3, 1, length, 2, 8))
    mask = jnp.tril(jnp.ones((1, 1, length, length), bool))
    dropout = AttentionDropout.from_key(jax.random.PRNGKey(6), 0.25)
    keep = dropout.keep(1, 2, 0, length, 0, length)
    blocked = dot_product_attention(q, k, v, mask, causal_from=0, dropout=dropout,
                                    implementation="dense")
    expected = attend(attention_weights(q, k, mask) * keep * dropout.scale, v)
    np.testing.assert_allclose(blocked, expected, atol=1e-5)


def test_attention_dropout_trains_and_is_off_when_deterministic():
    from icrl_jax.models.attention import MultiHeadAttention
    layer = MultiHeadAttention(num_heads=2, dropout_rate=0.5)
    x = jax.random.normal(jax.random.PRNGKey(6), (2, CAUSAL_QUERY_BLOCK + 6, 8))
    mask = jnp.tril(jnp.ones((1, 1, x.shape[1], x.shape[1]), bool))
    params = layer.init(jax.random.PRNGKey(7), x, mask, None, True)
    apply = lambda det, key: layer.apply(params, x, mask, None, det, causal_from=0,  # noqa: E731
                                         rngs={"dropout": jax.random.PRNGKey(key)})
    np.testing.assert_array_equal(apply(True, 0), apply(True, 1))
    assert not np.allclose(apply(False, 0), apply(False, 1))
    assert not np.allclose(apply(False, 0), apply(True, 0))


@pytest.mark.parametrize("causal_from", [None, 0])
def test_own_backward_pass_equals_autodiff_with_dropout_and_an_empty_row(causal_from):
    """`dot_product_attention`'s hand-written backward pass (flash attention's row term) gives
    autodiff's gradients of the plain formula, with a dropout mask (rate 0.5) and,
    without the causal path, a query that may attend to nothing (its output and gradients 0)."""
    length = CAUSAL_QUERY_BLOCK + 10
    q, k, v = jax.random.normal(jax.random.PRNGKey(8), (3, 2, length, 3, 8))
    mask = jnp.tril(jnp.ones((1, 1, length, length), bool))
    if causal_from is None:
        mask = mask.at[:, :, 5].set(False)
    dropout = AttentionDropout.from_key(jax.random.PRNGKey(9), 0.5)
    keep = dropout.keep(2, 3, 0, length, 0, length)

    def plain(q, k, v):
        return attend(attention_weights(q, k, mask) * (dropout.scale * keep), v)

    def ours(q, k, v):
        return dot_product_attention(q, k, v, mask, causal_from=causal_from, dropout=dropout,
                                     implementation="dense")

    def loss(f, q, k, v):
        return (f(q, k, v) * jnp.cos(jnp.arange(8.0))).sum()
    np.testing.assert_allclose(ours(q, k, v), plain(q, k, v), atol=1e-5)
    got = jax.grad(lambda *a: loss(ours, *a), argnums=(0, 1, 2))(q, k, v)
    want = jax.grad(lambda *a: loss(plain, *a), argnums=(0, 1, 2))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)
    if causal_from is None:
        np.testing.assert_array_equal(ours(q, k, v)[:, 5], 0.0)
        np.testing.assert_array_equal(got[0][:, 5], 0.0)


@pytest.mark.parametrize("position", ["rotary", "none"])
def test_attention_window_masks_keys_further_back_than_the_window(position):
    """`attention_window=W` over 150 tokens (three causal query blocks): equal to full attention
    under the explicit mask "at most W - 1 tokens back" and to nothing else; a prefix named by
    `causal_from` stays visible to every query; a non-causal model refuses a window."""
    length, window, prefix = 150, 40, 5
    x = jax.random.normal(jax.random.PRNGKey(0), (2, length, 16))
    windowed = Transformer(num_layers=2, num_heads=2, position=position, attention_window=window)
    params = windowed.init(jax.random.PRNGKey(1), x)
    index = jnp.arange(length)
    back = index[:, None] - index[None, :]
    explicit = ((back >= 0) & (back < window))[None, None]
    full = Transformer(num_layers=2, num_heads=2, position=position)
    np.testing.assert_allclose(windowed.apply(params, x),
                               full.apply(params, x, attention_mask=explicit), atol=1e-5)
    assert not np.allclose(windowed.apply(params, x), full.apply(params, x), atol=1e-3)
    causal = jnp.tril(jnp.ones((length, length), bool))[None, None]
    with_prefix = causal & ((back < window) | (index[None, :] < prefix))[None, None]
    np.testing.assert_allclose(
        windowed.apply(params, x, attention_mask=causal, causal_from=prefix),
        full.apply(params, x, attention_mask=with_prefix), atol=1e-5)
    with pytest.raises(ValueError, match="attention_window needs a causal mask"):
        Transformer(num_layers=1, num_heads=2, causal=False, attention_window=4).init(
            jax.random.PRNGKey(1), x)


def test_ring_cache_slots_hand_worked():
    """Per-token slots of a ring of 5 and what each query sees: placeholders at negative
    positions see nothing and are seen by nobody; a write wrapping past the ring's end lands
    at the right slots; the window keeps the last W tokens."""
    slots, mask = ring_cache_slots(jnp.array([-2, -1, 0]), 5)
    np.testing.assert_array_equal(slots, [3, 4, 0])
    np.testing.assert_array_equal(mask, [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]])
    slots, mask = ring_cache_slots(jnp.array([4, 5, 6]), 5, window=3)
    np.testing.assert_array_equal(slots, [4, 0, 1])
    # position 4: itself (slot 4) and 3, 2 (slots 3, 2); 6: itself, 5, 4 (slots 1, 0, 4).
    np.testing.assert_array_equal(mask, [[0, 0, 1, 1, 1], [1, 0, 0, 1, 1], [1, 1, 0, 0, 1]])
    first, same = ring_cache_mask(jnp.array([4, 5, 6]), 5, window=3)
    assert int(first) == 4
    np.testing.assert_array_equal(same, mask)


def test_per_token_cache_slots_equal_a_contiguous_write():
    """Writing three tokens at slots (2, 3, 4) one by one equals one contiguous write from slot
    2 (keys, values and outputs), and a write wrapping the ring's end stores each at its slot."""
    model = Transformer(num_layers=1, num_heads=2, position="rotary")
    x = jax.random.normal(jax.random.PRNGKey(0), (1, 3, 8))
    params = model.init(jax.random.PRNGKey(1), x)
    positions = jnp.arange(2, 5)
    _, mask = ring_cache_slots(positions, 6)
    cache = model.init_cache(1, 6, 8)
    contiguous, c1 = model.apply(params, x, attention_mask=mask[None, None], positions=positions,
                                 cache=cache, cache_index=jnp.int32(2))
    per_token, c2 = model.apply(params, x, attention_mask=mask[None, None], positions=positions,
                                cache=cache, cache_index=jnp.arange(2, 5, dtype=jnp.int32))
    np.testing.assert_array_equal(contiguous, per_token)
    np.testing.assert_array_equal(c1.blocks[0][0], c2.blocks[0][0])
    _, wrapped = model.apply(params, x, attention_mask=mask[None, None], positions=positions,
                             cache=cache, cache_index=jnp.array([5, 0, 1], jnp.int32))
    np.testing.assert_array_equal(wrapped.blocks[0][1][:, [5, 0, 1]], c1.blocks[0][1][:, 2:5])
