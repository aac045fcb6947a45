"""ALiBi: the paper's slopes, the biases on the scores, and cached decoding that gives the full
pass's hidden states (step by step, in blocks, and from a ring of slots with a window)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.models.alibi import AlibiBias, alibi_slopes
from icrl_jax.models.attention import dot_product_attention
from icrl_jax.models.attention_masks import AttentionMask
from icrl_jax.models.transformer import Transformer, ring_cache_mask


def test_slopes_hand_worked():
    """8 heads: 2^-1 ... 2^-8. 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then every
    other 8-head slope, 2^-1 and 2^-3."""
    np.testing.assert_allclose(alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_allclose(alibi_slopes(6), [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1,
                                                 2 ** -3])
    np.testing.assert_allclose(alibi_slopes(1), [2 ** -8])
    with pytest.raises(ValueError, match="at least one head"):
        alibi_slopes(0)


@pytest.mark.parametrize("implementation", ["dense", "blockwise"])
def test_attention_with_alibi_is_the_written_out_biased_softmax(implementation):
    """softmax(q k^T / sqrt(Dh) - m_h (i - j)) v over the causal keys; positions that repeat
    (a set of tokens sharing one id) have distance 0."""
    length, heads = 19, 4
    q, k, v = jax.random.normal(jax.random.PRNGKey(0), (3, 2, length, heads, 8))
    positions = jnp.concatenate([jnp.zeros(3, jnp.int32), jnp.arange(1, length - 2)])
    slopes = alibi_slopes(heads)
    distance = np.abs(np.asarray(positions)[:, None] - np.asarray(positions)[None, :])
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(8) - slopes[:, None, None] * distance
    causal = np.tril(np.ones((length, length), bool))
    weights = jax.nn.softmax(np.where(causal, logits, -np.inf), -1)
    expected = np.einsum("bhqk,bkhd->bqhd", weights, v)
    got = dot_product_attention(q, k, v, AttentionMask(causal_from=0),
                                alibi=AlibiBias.create(heads, positions),
                                implementation=implementation, block_size=8)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def _model(**kwargs):
    return Transformer(num_layers=2, num_heads=4, position="alibi", **kwargs)


def test_alibi_model_changes_with_distance_and_not_with_offset():
    """A model without position embeddings: shifting every position by the same offset changes
    nothing; spreading them apart does."""
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 10, 16))
    model = _model()
    params = model.init(jax.random.PRNGKey(2), x)
    assert "position_embedding" not in params["params"]
    base = model.apply(params, x)
    np.testing.assert_allclose(model.apply(params, x, positions=jnp.arange(10) + 37), base,
                               atol=1e-5)
    assert not np.allclose(model.apply(params, x, positions=3 * jnp.arange(10)), base, atol=1e-3)


def test_cached_decoding_equals_the_full_pass():
    """One token, then blocks of tokens, decoded from a cache: the full pass's hidden states."""
    length = 14
    x = jax.random.normal(jax.random.PRNGKey(3), (2, length, 16))
    model = _model()
    params = model.init(jax.random.PRNGKey(4), x)
    full = model.apply(params, x)
    cache = model.init_cache(2, length, 16)
    pieces = []
    for start, stop in [(0, 1), (1, 5), (5, length)]:
        positions = jnp.arange(start, stop)
        first, mask = ring_cache_mask(positions, length)
        hidden, cache = model.apply(params, x[:, start:stop], attention_mask=mask[None, None],
                                    positions=positions, cache=cache, cache_index=first)
        pieces.append(hidden)
    np.testing.assert_allclose(np.concatenate(pieces, 1), full, atol=1e-5)
    np.testing.assert_array_equal(cache.positions, np.broadcast_to(np.arange(length), (2, length)))


def test_ring_cache_with_a_window_decodes_beyond_its_slots():
    """A sliding window of 5 and a ring of 5 slots, one token a step over 17 tokens: each step's
    hidden state is the full windowed pass's (the slots keep their tokens' positions, so the
    distances are right after the ring wraps)."""
    length, window = 17, 5
    x = jax.random.normal(jax.random.PRNGKey(5), (1, length, 16))
    model = _model(attention_window=window)
    params = model.init(jax.random.PRNGKey(6), x)
    full = model.apply(params, x)
    cache = model.init_cache(1, window, 16)
    steps = []
    for t in range(length):
        first, mask = ring_cache_mask(jnp.array([t]), window, window)
        hidden, cache = model.apply(params, x[:, t:t + 1], attention_mask=mask[None, None],
                                    positions=jnp.array([t]), cache=cache, cache_index=first)
        steps.append(hidden)
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_a_cache_without_positions_is_refused():
    model = _model()
    x = jnp.zeros((1, 2, 16))
    params = model.init(jax.random.PRNGKey(0), x)
    cache = Transformer(num_layers=2, num_heads=4, position="rotary").init_cache(1, 4, 16)
    with pytest.raises(ValueError, match="keeps its slots' positions"):
        model.apply(params, x, attention_mask=jnp.ones((1, 1, 2, 4), bool),
                    positions=jnp.arange(2), cache=cache, cache_index=jnp.int32(0))


def test_checkpoint_signature_names_alibi():
    assert Transformer.changed_settings({"position": "alibi"}) == {"position": "alibi"}
    assert Transformer.changed_settings({"attention_impl": "blockwise",
                                         "attention_block_size": 64}) == {}
