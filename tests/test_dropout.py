"""Dropout masks from 16-bit halves of Threefry words: the hash against JAX's and the reference
vectors, the mask's layout, sharding, rate, scale, edge rates, traced rates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

from icrl_jax.models.dropout import LEVELS, Dropout, keep_mask, threefry2x32


@pytest.mark.parametrize("key, count, expected", [
    # Known-answer vectors of Threefry-2x32-20 (Random123's kat_vectors; JAX's tests use them).
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry_reference_vectors(key, count, expected):
    words = threefry2x32(*(jnp.uint32(x) for x in key + count))
    assert tuple(int(w) for w in words) == expected


def test_threefry_matches_jax_on_arrays():
    """The unrolled hash gives JAX's `threefry_2x32` bits (which hashes the two halves of its
    counter array as the pairs), elementwise over a whole array of counters."""
    counts = jax.random.bits(jax.random.key(9), (2, 500), jnp.uint32)
    keys = jnp.array([0x0BADF00D, 0xDEADBEEF], jnp.uint32)
    ours = threefry2x32(keys[0], keys[1], counts[0], counts[1])
    np.testing.assert_array_equal(np.concatenate(ours), threefry_2x32(keys, counts.reshape(-1)))


def test_mask_is_each_half_word_against_the_rounded_threshold():
    """Hand-worked: row-major counters over `(4, ceil(5 / 2))`, hashed under the key's two
    words; the first words' low halves fill the first half of the last axis, their high halves
    the rest (cut to the odd length), each compared with round(keep * 2^16)."""
    key = jax.random.key(3)
    mask, kept = keep_mask(key, 0.9, (4, 5))
    key_words = jax.random.bits(key, (2,), jnp.uint32)
    counters = np.arange(12, dtype=np.uint32)  # JAX hashes the halves of its count as pairs
    words = np.asarray(threefry_2x32(key_words, np.concatenate([counters, 0 * counters])))
    words = words[:12].reshape(4, 3).astype(np.int64)
    halves = np.concatenate([words & 0xFFFF, words >> 16], axis=1)[:, :5]
    threshold = round(0.9 * LEVELS)
    np.testing.assert_array_equal(mask, halves < threshold)
    assert float(kept) == threshold / LEVELS


def test_mask_rows_are_the_flattened_trailing_axes():
    """Hand-worked for three axes: the mask is drawn as (2, 3 * 3) rows over counters
    (2, ceil(9 / 2)), each row's low halves then high halves, cut to 9 and reshaped; one axis
    is one row."""
    key = jax.random.key(5)
    mask, _ = keep_mask(key, 0.5, (2, 3, 3))
    key_words = jax.random.bits(key, (2,), jnp.uint32)
    counters = np.arange(10, dtype=np.uint32)
    words = np.asarray(threefry_2x32(key_words, np.concatenate([counters, 0 * counters])))
    words = words[:10].reshape(2, 5).astype(np.int64)
    halves = np.concatenate([words & 0xFFFF, words >> 16], axis=1)[:, :9]
    np.testing.assert_array_equal(mask, (halves < LEVELS // 2).reshape(2, 3, 3))
    flat, _ = keep_mask(key, 0.5, (9,))
    words = np.asarray(threefry_2x32(key_words, np.concatenate([counters[:5], 0 * counters[:5]])))
    words = words[:5].astype(np.int64)
    np.testing.assert_array_equal(flat, np.concatenate([words & 0xFFFF, words >> 16])[:9]
                                  < LEVELS // 2)


def test_mask_is_the_same_sharded_and_jitted():
    """Counters come from iotas in the mask's shape: jit and a batch sharding over the CPU
    devices (one here unless the process has more) draw the same mask as eager code."""
    key = jax.random.key(11)
    eager, _ = keep_mask(key, 0.7, (8, 3, 37))
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    jitted = jax.jit(lambda k: keep_mask(k, 0.7, (8, 3, 37))[0], out_shardings=sharding)(key)
    np.testing.assert_array_equal(jitted, eager)


def test_too_many_counters_is_refused():
    with pytest.raises(ValueError, match="2\\^32 counters"):
        keep_mask(jax.random.key(0), 0.5, (2 ** 19, 2 ** 15))


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


def test_mask_method_gives_the_mask_and_scale_that_call_applies():
    """`Dropout.mask` (what attention keeps for its backward pass) draws the mask `__call__`
    would draw from the same rng, with the scale of the kept values."""
    x = jax.random.normal(jax.random.key(1), (4, 7, 33))
    rngs = {"dropout": jax.random.key(2)}
    y = Dropout(0.3).apply({}, x, deterministic=False, rngs=rngs)
    mask, scale = Dropout(0.3).apply({}, x.shape, method="mask", rngs=rngs)
    assert mask.dtype == jnp.bool_ and mask.shape == x.shape
    np.testing.assert_allclose(float(scale), LEVELS / round(0.7 * LEVELS), rtol=1e-6)
    np.testing.assert_array_equal(y, jnp.where(mask, x * scale, 0.0))


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
