"""N-gram induction pattern against a brute-force reference; n-gram layers inside AD."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.data.windows import StepWindows, episode_returns_before
from icrl_jax.data.windows import shift_right
from icrl_jax.methods.ad import AD
from icrl_jax.models.ngram import (NGramHead, latest_match, ngram_attention, ngram_pattern,
                                   ngram_pattern_rows, ngram_weights, observation_ids,
                                   observation_return_ids, read_matches, shuffle_pattern,
                                   transition_ids)
from icrl_jax.methods.fields import ad_model_config


def brute_force_pattern(ids: np.ndarray, n: int) -> np.ndarray:
    """P[b, i, j] = 1 iff m = j - 1 < i, m >= n - 1, i >= n - 1 and ids[i-k] == ids[m-k], k < n."""
    batch, length = ids.shape[:2]
    out = np.zeros((batch, length, length), bool)
    for b in range(batch):
        for i in range(n - 1, length):
            for m in range(n - 1, i):
                if all(np.array_equal(ids[b, i - k], ids[b, m - k]) for k in range(n)):
                    out[b, i, m + 1] = True
    return out


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("components", [0, 2])
def test_pattern_matches_brute_force(n, components):
    rng = np.random.default_rng(n)
    shape = (3, 24) if components == 0 else (3, 24, components)
    ids = rng.integers(0, 3 if components == 0 else 2, shape).astype(np.int32)  # many matches
    got = np.asarray(jax.jit(ngram_pattern, static_argnums=1)(jnp.asarray(ids), n))
    np.testing.assert_array_equal(got, brute_force_pattern(ids, n))
    assert got.any() and not got.all()
    assert not np.triu(got, k=1).any()  # causal: keys j <= i only


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("components", [0, 2])
def test_pattern_rows_of_a_decoder_match_brute_force(n, components):
    """The rows a decoder computes (some queries over every slot, later slots holding garbage
    ids it must not read) equal the brute-force pattern's rows."""
    rng = np.random.default_rng(10 + n)
    shape = (2, 30) if components == 0 else (2, 30, components)
    ids = rng.integers(0, 3 if components == 0 else 2, shape).astype(np.int32)
    queries = np.array([0, 1, 9, 16, 17, 18, 19])  # written so far: slots [0, 20)
    garbage = ids.copy()
    garbage[:, 20:] = ids[:, :10]  # unwritten slots that would match if read
    rows = jax.jit(ngram_pattern_rows, static_argnums=2)(jnp.asarray(garbage),
                                                         jnp.asarray(queries), n)
    expected = brute_force_pattern(ids, n)[:, queries]
    np.testing.assert_array_equal(np.asarray(rows), expected)
    assert expected.any()
    full = ngram_pattern_rows(jnp.asarray(ids), jnp.arange(30), n)
    np.testing.assert_array_equal(np.asarray(full), np.asarray(ngram_pattern(ids, n)))


def test_rows_without_a_match_contribute_nothing():
    ids = jnp.asarray([[0, 1, 2, 0, 1, 3, 4, 0]], jnp.int32)
    weights = ngram_attention(ngram_pattern(ids, 2))
    # Bigram (0, 1) ending at 4 repeats the one ending at 1: position 4 reads position 2 only.
    np.testing.assert_allclose(np.asarray(weights[0, 4]), np.eye(8)[2])
    unmatched = ~np.asarray(ngram_pattern(ids, 2)[0]).any(-1)
    assert unmatched.sum() == 7
    h = jax.random.normal(jax.random.key(0), (1, 8, 6))
    head = NGramHead()
    params = head.init(jax.random.key(1), h, weights)
    out = head.apply(params, h, weights)
    # W2 reads nothing on unmatched rows: the head is W1 h (+ W2's bias) there.
    w1 = params["params"]["w1"]
    bias2 = params["params"]["w2"]["bias"]
    expected = h[0] @ w1["kernel"] + w1["bias"] + bias2
    np.testing.assert_allclose(np.asarray(out[0])[unmatched], np.asarray(expected)[unmatched],
                               rtol=1e-5, atol=1e-5)
    # Uniform over matches.
    ids = jnp.asarray([[5, 5, 5, 5]], jnp.int32)
    np.testing.assert_allclose(np.asarray(ngram_attention(ngram_pattern(ids, 1))[0, 3]),
                               [0, 1 / 3, 1 / 3, 1 / 3], rtol=1e-6)


def test_shuffled_pattern_keeps_counts_and_causality():
    ids = jax.random.randint(jax.random.key(2), (2, 30), 0, 3)
    pattern = ngram_pattern(ids, 1)
    shuffled = shuffle_pattern(pattern, jax.random.key(3))
    np.testing.assert_array_equal(np.asarray(shuffled.sum(-1)), np.asarray(pattern.sum(-1)))
    assert not np.triu(np.asarray(shuffled), k=1).any()
    assert (np.asarray(shuffled) != np.asarray(pattern)).any()


def test_transition_and_observation_ids():
    window = StepWindows(observations=jnp.asarray([[3, 3, 3]]), prev_actions=jnp.asarray([[1, 2, 1]]),
                         prev_rewards=jnp.asarray([[0.0, -0.0, 0.0]]),
                         actions=jnp.zeros((1, 3), jnp.int32), action_mask=jnp.ones((1, 4), bool))
    obs = observation_ids(window)
    trans = transition_ids(window)
    assert obs.shape == (1, 3, 1) and trans.shape == (1, 3, 3) and trans.dtype == jnp.int32
    assert np.asarray(ngram_pattern(obs, 1))[0, 2, 1:].all()
    # Step 2 repeats step 0's transition (a=1, r=0, o=3), not step 1's (a=2): reads key 1 only.
    np.testing.assert_array_equal(np.asarray(ngram_pattern(trans, 1))[0, 2], [False, True, False])


def test_observation_return_ids_read_the_latest_step_taken_with_the_key():
    """A Key-to-Door walk: cell 4, the key (cell 6; reward 1 for arriving), cell 4 with the key,
    then a reset and the same again. Matching cells alone, the last step (cell 4, with the key)
    reads the step after this episode's visit on the way to the key (key 7, the key cell);
    matching the cell and the episode's reward so far, it reads the step after the last
    episode's visit with the key (key 4, where the walk went on from there)."""
    observations = jnp.asarray([[1, 4, 6, 4, 9, 5, 4, 6, 4]])  # reset at step 5
    starts = jnp.asarray([[True, False, False, False, False, True, False, False, False]])
    so_far = jnp.asarray([[0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]])
    window = StepWindows(observations=observations, prev_actions=jnp.zeros((1, 9), jnp.int32),
                         prev_rewards=jnp.zeros((1, 9)), actions=jnp.zeros((1, 9), jnp.int32),
                         action_mask=jnp.ones((1, 4), bool), episode_starts=starts,
                         episode_returns=so_far)
    ids = observation_return_ids(window)
    assert ids.shape == (1, 9, 2) and ids.dtype == jnp.int32
    assert int(ngram_weights(observation_ids(window), 1, latest=True)[0].key[0, 8]) == 7
    assert int(ngram_weights(ids, 1, latest=True)[0].key[0, 8]) == 4
    rewards = jnp.asarray([[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]])  # r_t of each step
    np.testing.assert_array_equal(episode_returns_before(shift_right(rewards, 0.0), starts),
                                  so_far)
    with pytest.raises(ValueError, match="record each step's return so far"):
        observation_return_ids(window.replace(episode_returns=None))


def ad_with_ngrams(**overrides):
    config = ad_model_config()
    config.update(dict(d_model=32, num_layers=2, num_heads=2, max_len=32, label_smoothing=0.0))
    config.ngram_match = "transition"
    config.update(overrides)
    return AD(config, 4, 16)


def random_window(key, batch=2, length=16):
    k1, k2, k3 = jax.random.split(key, 3)
    return StepWindows(observations=jax.random.randint(k1, (batch, length), 0, 16),
                       prev_actions=jax.random.randint(k2, (batch, length), 0, 4),
                       prev_rewards=jax.random.bernoulli(k3, 0.3, (batch, length)).astype(
                           jnp.float32),
                       actions=jax.random.randint(k2, (batch, length), 0, 4),
                       action_mask=jnp.ones((batch, 4), bool))


def test_ad_with_ngram_layers_is_causal_and_has_layers():
    method = ad_with_ngrams(ngram_positions=(1, 2), ngram_max=2)
    window = random_window(jax.random.key(0))
    params = method.init(jax.random.key(1), window)
    assert {"ngram_1_1", "ngram_1_2", "ngram_2_1", "ngram_2_2"} <= set(params["backbone"])
    logits = method.context_logits(params, window, jax.random.key(2))
    # Changing the last step never changes earlier logits (ids and attention stay causal).
    changed = window.replace(observations=window.observations.at[:, -1].set(15 - window.observations[:, -1]),
                             prev_actions=window.prev_actions.at[:, -1].set(3))
    logits2 = method.context_logits(params, changed, jax.random.key(2))
    np.testing.assert_allclose(np.asarray(logits[:, :-1]), np.asarray(logits2[:, :-1]),
                               rtol=1e-5, atol=1e-5)
    loss, metrics = method.loss(params, window, jax.random.key(3))
    assert np.isfinite(float(loss))


def test_ngram_layers_off_by_default_and_need_ids():
    plain = ad_with_ngrams()
    params = plain.init(jax.random.key(1), random_window(jax.random.key(0)))
    assert not any(k.startswith("ngram") for k in params["backbone"])
    with pytest.raises(ValueError, match="outside"):
        ad_with_ngrams(ngram_positions=(5,)).init(jax.random.key(1),
                                                  random_window(jax.random.key(0)))
    with pytest.raises(ValueError, match="unknown model.ngram_match"):
        ad_with_ngrams(ngram_positions=(1,), ngram_match="pixels")


def test_latest_match_keeps_only_the_most_recent_occurrence():
    """ids 5 7 5 7 5: with n = 1, query 4 (id 5) matches the steps after ids at 0 and 2, i.e.
    keys 1 and 3; `latest` keeps key 3 only, so the layer reads that token alone."""
    ids = jnp.array([[5, 7, 5, 7, 5]])
    pattern = np.asarray(ngram_pattern(ids, 1))
    assert pattern[0, 4].tolist() == [False, True, False, True, False]
    latest = np.asarray(latest_match(jnp.asarray(pattern)).pattern())
    assert latest[0, 4].tolist() == [False, False, False, True, False]
    assert (latest.sum(-1) <= 1).all() and not (latest & ~pattern).any()
    match = ngram_weights(ids, 1, latest=True)[0]
    assert match.key[0, 4] == 3 and match.found[0, 4]
    assert not match.found[0, 0]  # no earlier occurrence: reads nothing
    # The gather reads exactly what the dense one-hot pattern reads.
    h = jax.random.normal(jax.random.key(0), (1, 5, 3))
    dense = ngram_attention(jnp.asarray(latest))
    np.testing.assert_array_equal(np.asarray(read_matches(match, h)),
                                  np.asarray(read_matches(dense, h)))
    np.testing.assert_array_equal(np.asarray(read_matches(match, h))[0, 0], 0)
