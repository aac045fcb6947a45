"""Uni[MASK] masking schemes: exactly which tokens are visible and predicted (k = 5 snippets)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.core.errors import UserError
from icrl_jax.papers.unimask import masks as mask_schemes

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
    check(mask_schemes.TASKS[name].mask(jnp.int32(index), K), *expected)


def test_authors_inverse_dynamics_wraps_round_at_index_zero():
    authors = mask_schemes.task_set("authors")["inverse_dynamics"]
    #                                         state_in action_in rtg  state_pred action_pred
    check(authors.mask(jnp.int32(0), K), "10000", "00001", False, "00001", "00000")
    check(authors.mask(jnp.int32(1), K), "01000", "10000", False, "10000", "00000")
    np.testing.assert_array_equal(authors.indices(K), np.arange(K - 1))  # 0..k-2
    wrapped = mask_schemes.evaluation_masks("inverse_dynamics", K, mask_schemes.task_set("authors"))
    assert wrapped.state_in.shape[0] == K - 1
    assert {n: t for n, t in mask_schemes.task_set("authors").items() if n != "inverse_dynamics"} == {
        n: t for n, t in mask_schemes.TASKS.items() if n != "inverse_dynamics"}
    assert mask_schemes.task_set("ours") is mask_schemes.TASKS
    with pytest.raises(UserError, match="model.inverse_dynamics_index must be one of"):
        mask_schemes.task_set("theirs")


def test_waypoints_are_the_authors():
    assert mask_schemes.waypoints(10) == (0, 3, 6, 9) and mask_schemes.waypoints(5) == (0, 1, 3, 4)


def test_evaluation_masks_enumerate_each_index_range():
    sizes = {name: mask_schemes.evaluation_masks(name, K).state_in.shape[0] for name in mask_schemes.TASKS}
    assert sizes == dict(behaviour_cloning=5, reward_conditioned=5, goal_conditioned=4,
                         waypoint_conditioned=5, past_inference=5, future_inference=5,
                         forward_dynamics=4, inverse_dynamics=4)


def test_sampled_task_masks_are_the_enumerated_ones_uniformly():
    keys = jax.random.split(jax.random.key(0), 4000)

    def codes(m):  # one integer per mask: its visible states and actions
        return (np.asarray(m.state_in) @ (2 ** np.arange(K))
                + np.asarray(m.action_in) @ (2 ** np.arange(K, 2 * K)))

    for name, tasks in (("goal_conditioned", mask_schemes.TASKS), ("past_inference", mask_schemes.TASKS),
                        ("inverse_dynamics", mask_schemes.task_set("authors"))):
        for sampled in (jax.vmap(lambda k: mask_schemes.sample_mask(name, k, K, tasks))(keys),
                        mask_schemes.sample_batch_masks(name, keys[0], K, len(keys), "batch", tasks)):
            table = mask_schemes.evaluation_masks(name, K, tasks)
            sample_codes, table_codes = codes(sampled), codes(table)
            assert set(sample_codes) == set(table_codes)
            counts = np.array([(sample_codes == c).sum() for c in table_codes]) / len(keys)
            np.testing.assert_allclose(counts, 1 / len(table_codes), atol=0.03)
    # ALL draws the authors' wrap-round too: one task in 8, then one index in k - 1.
    wrap = codes(mask_schemes.task_set("authors")["inverse_dynamics"].mask(0, K))
    drawn = codes(jax.vmap(lambda k: mask_schemes.all_tasks_mask(k, K, mask_schemes.task_set("authors")))(keys))
    assert abs(np.mean(drawn == wrap) - 1 / (8 * (K - 1))) < 0.012
    assert not (codes(jax.vmap(lambda k: mask_schemes.all_tasks_mask(k, K))(keys)) == wrap).any()


def test_random_masking_hides_a_uniform_number_of_tokens():
    k = 10
    masks = jax.vmap(lambda key: mask_schemes.random_mask(key, k))(jax.random.split(jax.random.key(1), 40000))
    hidden = np.asarray((~masks.state_in).sum(-1))
    freq = np.bincount(hidden, minlength=k + 1) / len(hidden)
    # Uniform on [0, k] (1/11 each); a fixed p = 1/2 would give binomial(10, 1/2): 0.1% at 0.
    np.testing.assert_allclose(freq, 1 / (k + 1), atol=0.01)
    np.testing.assert_array_equal(masks.state_pred, ~masks.state_in)
    np.testing.assert_array_equal(masks.action_pred, ~masks.action_in)
    assert abs(float(np.mean(masks.rtg_in)) - 0.5) < 0.01


def test_all_mixes_every_task():
    keys = jax.random.split(jax.random.key(2), 3000)
    masks = jax.vmap(lambda k: mask_schemes.sample_mask("all", k, K))(keys)
    rtg = np.asarray(masks.rtg_in).mean()
    assert abs(rtg - 1 / 8) < 0.03  # only reward-conditioned shows the return-to-go
    state_only = np.asarray(masks.state_pred.any(-1) & ~masks.action_pred.any(-1)).mean()
    assert abs(state_only - 2 / 8) < 0.04  # forward and inverse dynamics


def test_traced_regime_under_vmap_matches_the_named_one():
    key = jax.random.key(3)
    regimes = jnp.arange(len(mask_schemes.REGIMES))
    batched = jax.vmap(lambda r: mask_schemes.sample_mask(r, key, K))(regimes)
    for r, name in enumerate(mask_schemes.REGIMES):
        named = mask_schemes.sample_mask(name, key, K)
        for got, want in zip(batched, named):
            np.testing.assert_array_equal(got[r], want)


def test_unknown_scheme_and_too_short_snippet_are_clear_errors():
    with pytest.raises(UserError, match="masking scheme"):
        mask_schemes.sample_mask("bc", jax.random.key(0), K)
    with pytest.raises(UserError, match="at least 2 steps"):
        mask_schemes.evaluation_masks("forward_dynamics", 1)
    assert mask_schemes.min_snippet_len() == 2
    mask_schemes.check_snippet_len(2)
    with pytest.raises(UserError, match="seq_len=1: .*at least 2 steps.*forward_dynamics"):
        mask_schemes.check_snippet_len(1)


# -- the authors' masks (tests/fixtures/make_unimask_masks_fixture.py runs their batches.py) --

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "unimask_masks", "masks.json")
KF = 10  # the fixture's snippet length (the authors' DoorKey K)


@pytest.fixture(scope="module")
def authors():
    """{task/masks: int8 (n, 5, k) (state_in, action_in, rtg_in, state_pred, action_pred),
    task/index: (n,)}, unpacked from the fixture's integers (bit row * k + t)."""
    with open(FIXTURE) as f:
        raw = json.load(f)
    assert raw.pop("k") == KF
    bits = np.arange(5 * KF, dtype=np.int64).reshape(5, KF)
    return {key: ((np.asarray(v, np.int64)[:, None, None] >> bits) & 1).astype(np.int8)
            if key.endswith("/masks") else np.asarray(v) for key, v in raw.items()}


@pytest.mark.parametrize("task", list(mask_schemes.TASKS))
def test_task_masks_are_the_authors(authors, task):
    theirs, index = authors[f"{task}/masks"].astype(bool), authors[f"{task}/index"]
    if task == "inverse_dynamics":
        # Their BackwardsDynamics makes its masks from the drawn index r in 0..k-2 before
        # shifting it to 1..k-1: r >= 1 is ours at i = r, and r = 0 wraps around (s_0 and
        # a_{k-1} shown, s_{k-1} predicted); ours draws i = 1..k-1 instead.
        wrap = index == 0
        assert wrap.any() and (~wrap).any()
        w = theirs[wrap]
        assert w[:, 0, 0].all() and w[:, 1, -1].all() and w[:, 3, -1].all()
        assert w[:, 0].sum() == w[:, 1].sum() == w[:, 3].sum() == wrap.sum()
        theirs, index = theirs[~wrap], index[~wrap]
        np.testing.assert_array_equal(np.unique(index), np.arange(1, KF - 1))
        # The authors' task set has their wrap-round: every drawn index, exactly.
        full = authors[f"{task}/masks"].astype(bool)
        wrapped = jax.vmap(lambda i: mask_schemes.task_set("authors")[task].mask(i, KF))(
            jnp.asarray(authors[f"{task}/index"]))
        for row, field in ((0, "state_in"), (1, "action_in"), (3, "state_pred"),
                           (4, "action_pred")):
            np.testing.assert_array_equal(getattr(wrapped, field), full[:, row], field)
    ours = jax.vmap(lambda i: mask_schemes.TASKS[task].mask(i, KF))(jnp.asarray(index))
    # Their return-to-go mask is per timestep; only the first token's can be visible.
    assert not theirs[:, 2, 1:].any()
    np.testing.assert_array_equal(ours.rtg_in, theirs[:, 2, 0])
    for row, field in ((0, "state_in"), (1, "action_in"), (3, "state_pred"), (4, "action_pred")):
        np.testing.assert_array_equal(getattr(ours, field), theirs[:, row], f"{task} {field}")
    if task != "inverse_dynamics":  # every index of the task, and no other
        np.testing.assert_array_equal(np.unique(index), np.asarray(mask_schemes.TASKS[task].indices(KF)))


def test_random_masks_match_the_authors_in_distribution(authors):
    theirs = authors["random/masks"].astype(bool)  # (4000, 5, k)
    n = len(theirs)
    ours = jax.vmap(lambda kk: mask_schemes.random_mask(kk, KF))(jax.random.split(jax.random.key(0), n))
    ours = np.stack([ours.state_in, ours.action_in,
                     np.pad(np.asarray(ours.rtg_in)[:, None], ((0, 0), (0, KF - 1))),
                     ours.state_pred, ours.action_pred], 1)
    for m in (theirs, ours):  # prediction = exactly the hidden states and actions
        np.testing.assert_array_equal(m[:, 3], ~m[:, 0])
        np.testing.assert_array_equal(m[:, 4], ~m[:, 1])
        assert not m[:, 2, 1:].any()
    for row in (0, 1):  # hidden counts: both uniform on 0..k (a shared U[0, 1] rate per snippet)
        hist = [np.bincount((~m[:, row]).sum(1), minlength=KF + 1) / n for m in (theirs, ours)]
        np.testing.assert_allclose(hist[0], hist[1], atol=0.03)
        np.testing.assert_allclose(hist[1], 1 / (KF + 1), atol=0.03)
    for m in (theirs, ours):
        # The rate is shared by states and actions: their hidden counts correlate (theory:
        # Var(p) k^2 / Var(count) = (k^2/12) / (k/6 + k^2/12) = 0.83 at k = 10).
        corr = np.corrcoef((~m[:, 0]).sum(1), (~m[:, 1]).sum(1))[0, 1]
        assert 0.78 < corr < 0.88, corr
        assert abs(m[:, 2, 0].mean() - 0.5) < 0.03  # the return-to-go shown half the time
        # Every position equally likely to be hidden.
        np.testing.assert_allclose((~m[:, 0]).mean(0), 0.5, atol=0.04)


def test_all_per_batch_draws_one_task_per_batch():
    tasks = list(mask_schemes.TASKS)

    def flat(m):  # (..., 4k + 1) bools
        return np.concatenate([np.asarray(m.state_in), np.asarray(m.action_in),
                               np.asarray(m.rtg_in)[..., None], np.asarray(m.state_pred),
                               np.asarray(m.action_pred)], -1)

    enumerated = {t: flat(mask_schemes.evaluation_masks(t, K)) for t in tasks}
    sample = jax.jit(jax.vmap(lambda r, kk: mask_schemes.sample_batch_masks(r, kk, K, 6, "batch"),
                              in_axes=(None, 0)))
    keys = jax.random.split(jax.random.key(0), 40)  # 40 batches of 6
    masks = flat(sample(mask_schemes.regime_index("all"), keys))
    # fits[t]: (40, 6), whether each snippet's mask is one of task t's
    fits = {t: (masks[:, :, None, :] == e[None, None]).all(-1).any(-1) for t, e in enumerated.items()}
    # One task fits every snippet of each batch (some masks fit two tasks, e.g. at index 0).
    whole = np.stack([fits[t].all(1) for t in tasks], 1)  # (40, 8)
    assert whole.any(1).all()
    assert whole.any(0).all()  # every task drawn for some batch
    # A single-task regime is unchanged: every snippet is one of its masks.
    bc = flat(sample(mask_schemes.regime_index("behaviour_cloning"), keys))
    assert (bc[:, :, None, :] == enumerated["behaviour_cloning"][None, None]).all(-1).any(-1).all()
    with pytest.raises(UserError, match="model.all_per"):
        mask_schemes.sample_batch_masks("all", jax.random.key(0), K, 2, "epoch")
