"""Dropout masks from 16-bit halves of random words: rate, scale, edge rates, traced rates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.models.dropout import LEVELS, Dropout, keep_mask


def test_mask_is_each_half_word_against_the_rounded_threshold():
    """Hand-worked: the words' low halves fill the first half of the last axis, the high halves
    the rest (cut to the odd length), each compared with round(keep * 2^16)."""
    key = jax.random.key(3)
    mask, kept = keep_mask(key, 0.9, (4, 5))
    words = np.asarray(jax.random.bits(key, (4, 3), jnp.uint32)).astype(np.int64)
    halves = np.concatenate([words & 0xFFFF, words >> 16], axis=1)[:, :5]
    threshold = round(0.9 * LEVELS)
    np.testing.assert_array_equal(mask, halves < threshold)
    assert float(kept) == threshold / LEVELS


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.85])
def test_keep_fraction_and_mean_are_unbiased(rate):
    x = jnp.ones((64, 100, 64))
    y = Dropout(rate).apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)})
    kept = np.asarray(y) != 0
    n = kept.size
    sigma = np.sqrt(rate * (1 - rate) / n)
    assert abs(kept.mean() - (1 - rate)) < 5 * sigma
    scale = LEVELS / round((1 - rate) * LEVELS)
    np.testing.assert_allclose(np.unique(np.asarray(y)[kept]), [scale], rtol=1e-6)
    assert abs(float(y.mean()) - 1.0) < 5 * sigma * scale


def test_lanes_are_independent():
    """The two halves of one word decide different elements independently: neighbouring and
    half-apart positions agree no more often than chance."""
    mask, _ = keep_mask(jax.random.key(1), 0.5, (20_000, 8))
    mask = np.asarray(mask)
    for a, b in [(0, 4), (1, 5), (0, 1)]:  # (0, 4): the two halves of the same words
        agree = (mask[:, a] == mask[:, b]).mean()
        assert abs(agree - 0.5) < 5 * np.sqrt(0.25 / len(mask)), (a, b, agree)


def test_deterministic_zero_and_full_rates():
    x = jax.random.normal(jax.random.key(2), (3, 7))
    rngs = {"dropout": jax.random.key(0)}
    np.testing.assert_array_equal(Dropout(0.5).apply({}, x, deterministic=True), x)
    np.testing.assert_array_equal(Dropout(0.0).apply({}, x, deterministic=False, rngs=rngs), x)
    np.testing.assert_array_equal(Dropout(1.0).apply({}, x, deterministic=False, rngs=rngs), 0)


def test_traced_rates_under_vmap_match_static_ones_and_rate_one_is_finite():
    """A rate vmapped over replicas draws the same mask as the same static rate; a traced rate
    of 1 gives zeros (no inf or NaN from the 1/0 scale), and so does its gradient."""
    x = jax.random.normal(jax.random.key(4), (5, 9))
    rngs = {"dropout": jax.random.key(7)}

    def apply(rate, x):
        return Dropout(rate).apply({}, x, deterministic=False, rngs=rngs)
    rates = jnp.array([0.0, 0.3, 1.0])
    traced = jax.vmap(apply, in_axes=(0, None))(rates, x)
    np.testing.assert_array_equal(traced[1], apply(0.3, x))
    np.testing.assert_array_equal(traced[0], x)
    np.testing.assert_array_equal(traced[2], 0.0)
    grad = jax.grad(lambda x: jax.vmap(apply, in_axes=(0, None))(rates, x).sum())(x)
    assert np.isfinite(np.asarray(grad)).all()


def test_gradient_is_the_mask_times_the_scale():
    x = jnp.ones((6, 10))
    rngs = {"dropout": jax.random.key(5)}
    y = Dropout(0.25).apply({}, x, deterministic=False, rngs=rngs)
    grad = jax.grad(lambda x: Dropout(0.25).apply({}, x, deterministic=False,
                                                   rngs=rngs).sum())(x)
    np.testing.assert_array_equal(grad, y)


def test_no_axes_is_refused():
    with pytest.raises(ValueError, match="at least one axis"):
        keep_mask(jax.random.key(0), 0.5, ())
