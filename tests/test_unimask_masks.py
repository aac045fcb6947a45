"""Uni[MASK] masking schemes: exactly which tokens are visible and predicted (k = 5 snippets)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.core.errors import UserError
from icrl_jax.papers.unimask import masks as M

K = 5


def bits(s: str) -> list[bool]:
    return [c == "1" for c in s]


def check(mask, state_in, action_in, rtg_in, state_pred, action_pred):
    np.testing.assert_array_equal(mask.state_in, bits(state_in), "state_in")
    np.testing.assert_array_equal(mask.action_in, bits(action_in), "action_in")
    assert bool(mask.rtg_in) == rtg_in
    np.testing.assert_array_equal(mask.state_pred, bits(state_pred), "state_pred")
    np.testing.assert_array_equal(mask.action_pred, bits(action_pred), "action_pred")


@pytest.mark.parametrize("name, index, expected", [
    #                                   state_in action_in rtg  state_pred action_pred
    ("behaviour_cloning", 2,           ("11100", "11000", False, "00000", "00100")),
    ("behaviour_cloning", 0,           ("10000", "00000", False, "00000", "10000")),
    ("reward_conditioned", 3,          ("11110", "11100", True, "00000", "00010")),
    ("goal_conditioned", 1,            ("11001", "10000", False, "00000", "01000")),
    ("waypoint_conditioned", 2,        ("11111", "11000", False, "00000", "00100")),
    ("waypoint_conditioned", 0,        ("11011", "00000", False, "00000", "10000")),
    ("future_inference", 2,            ("11100", "11000", False, "00011", "00111")),
    ("past_inference", 2,              ("00111", "00111", False, "11000", "11000")),
    ("past_inference", 5,              ("00000", "00000", False, "11111", "11111")),
    ("forward_dynamics", 3,            ("00010", "00010", False, "00001", "00000")),
    ("inverse_dynamics", 1,            ("01000", "10000", False, "10000", "00000")),
])
def test_task_masks_by_hand(name, index, expected):
    check(M.TASKS[name].mask(jnp.int32(index), K), *expected)


def test_waypoints_are_the_authors():
    assert M.waypoints(10) == (0, 3, 6, 9) and M.waypoints(5) == (0, 1, 3, 4)


def test_evaluation_masks_enumerate_each_index_range():
    sizes = {name: M.evaluation_masks(name, K).state_in.shape[0] for name in M.TASKS}
    assert sizes == dict(behaviour_cloning=5, reward_conditioned=5, goal_conditioned=4,
                         waypoint_conditioned=5, past_inference=5, future_inference=5,
                         forward_dynamics=4, inverse_dynamics=4)


def test_sampled_task_masks_are_the_enumerated_ones_uniformly():
    keys = jax.random.split(jax.random.key(0), 4000)
    for name in ("goal_conditioned", "past_inference"):
        sampled = jax.vmap(lambda k: M.sample_mask(name, k, K))(keys)
        table = M.evaluation_masks(name, K)
        codes = lambda m: np.asarray(m.state_in) @ (2 ** np.arange(K))
        sample_codes, table_codes = codes(sampled), codes(table)
        assert set(sample_codes) == set(table_codes)
        counts = np.array([(sample_codes == c).sum() for c in table_codes]) / len(keys)
        np.testing.assert_allclose(counts, 1 / len(table_codes), atol=0.03)


def test_random_masking_hides_a_uniform_number_of_tokens():
    k = 10
    masks = jax.vmap(lambda key: M.random_mask(key, k))(jax.random.split(jax.random.key(1), 40000))
    hidden = np.asarray((~masks.state_in).sum(-1))
    freq = np.bincount(hidden, minlength=k + 1) / len(hidden)
    # Uniform on [0, k] (1/11 each); a fixed p = 1/2 would give binomial(10, 1/2): 0.1% at 0.
    np.testing.assert_allclose(freq, 1 / (k + 1), atol=0.01)
    np.testing.assert_array_equal(masks.state_pred, ~masks.state_in)
    np.testing.assert_array_equal(masks.action_pred, ~masks.action_in)
    assert abs(float(np.mean(masks.rtg_in)) - 0.5) < 0.01


def test_all_mixes_every_task():
    keys = jax.random.split(jax.random.key(2), 3000)
    masks = jax.vmap(lambda k: M.sample_mask("all", k, K))(keys)
    rtg = np.asarray(masks.rtg_in).mean()
    assert abs(rtg - 1 / 8) < 0.03  # only reward-conditioned shows the return-to-go
    state_only = np.asarray(masks.state_pred.any(-1) & ~masks.action_pred.any(-1)).mean()
    assert abs(state_only - 2 / 8) < 0.04  # forward and inverse dynamics


def test_traced_regime_under_vmap_matches_the_named_one():
    key = jax.random.key(3)
    regimes = jnp.arange(len(M.REGIMES))
    batched = jax.vmap(lambda r: M.sample_mask(r, key, K))(regimes)
    for r, name in enumerate(M.REGIMES):
        named = M.sample_mask(name, key, K)
        for got, want in zip(batched, named):
            np.testing.assert_array_equal(got[r], want)


def test_unknown_scheme_and_too_short_snippet_are_clear_errors():
    with pytest.raises(UserError, match="masking scheme"):
        M.sample_mask("bc", jax.random.key(0), K)
    with pytest.raises(UserError, match="at least 2 steps"):
        M.evaluation_masks("forward_dynamics", 1)
    assert M.min_snippet_len() == 2
    M.check_snippet_len(2)
    with pytest.raises(UserError, match="seq_len=1: .*at least 2 steps.*forward_dynamics"):
        M.check_snippet_len(1)
