"""Environment tests: hand-worked trajectories, the papers' task distributions, task ids, masks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import environment

from icrl_jax import envs
from icrl_jax.envs import (BernoulliBandit, CompositeDarkRoom, ContextualBandit, DarkRoom,
                  InvalidActionError, KeyToDoor, split_tasks)
from icrl_jax.envs.darkroom import composite_actions

UP, DOWN, LEFT, RIGHT, NOOP = range(5)
KEY = jax.random.PRNGKey(0)


def run(env, params, actions, state=None):
    """Step eagerly through `actions`; returns the initial obs and a list of (obs, r, term, trunc)."""
    obs, reset_state = env.reset(KEY, params)
    state = reset_state if state is None else state
    out = []
    for i, a in enumerate(actions):
        obs, state, r, term, trunc, info = env.step(jax.random.PRNGKey(i + 1), state, a, params)
        out.append((int(obs), float(r), bool(term), bool(trunc)))
    return out, state


def cid(row, col):
    return row * 9 + col


# ---------------------------------------------------------------- Dark Room

def test_darkroom_up_to_the_wall_rewards_every_step_on_goal():
    env = DarkRoom()
    params = env.params_for_goal(cid(0, 4))
    obs0, _ = env.reset(KEY, params)
    assert int(obs0) == cid(4, 4) == 40
    steps, state = run(env, params, [UP] * 5 + [LEFT, RIGHT])
    assert steps == [
        (cid(3, 4), 0.0, False, False),
        (cid(2, 4), 0.0, False, False),
        (cid(1, 4), 0.0, False, False),
        (cid(0, 4), 1.0, False, False),  # on the goal: rewarded, the episode goes on
        (cid(0, 4), 1.0, False, False),  # bumped the wall: still on the goal
        (cid(0, 3), 0.0, False, False),
        (cid(0, 4), 1.0, False, False),
    ]
    assert int(state.time) == 7


def test_darkroom_truncates_at_50_and_auto_reset_keeps_goal():
    env = DarkRoom()
    params = env.params_for_goal(cid(4, 5))
    steps, state = run(env, params, [RIGHT] + [NOOP] * 49 + [RIGHT])
    rewards = [s[1] for s in steps]
    assert rewards[:50] == [1.0] * 50  # reached on step 1, then stays 49 steps
    assert steps[49] == (cid(4, 4), 1.0, False, True)  # step 50: truncated, obs is the reset centre
    assert steps[50] == (cid(4, 5), 1.0, False, False)  # same goal in the next episode
    assert float(env.optimal_return(params)) == 50.0


def test_darkroom_tasks_are_the_80_non_centre_goals():
    env = DarkRoom()
    goals = np.asarray(env.task_params(jnp.arange(env.num_tasks)).goal)
    assert env.num_tasks == 80 and len(set(goals.tolist())) == 80
    assert 40 not in goals and goals.min() == 0 and goals.max() == 80
    with pytest.raises(ValueError, match="task ids"):
        env.task_params(80)


# ---------------------------------------------------------------- composite Dark Room

def composite_id(*moves):
    return int(np.flatnonzero((composite_actions(3) == np.array(moves)).all(1))[0])


def test_composite_canonical_order():
    acts = composite_actions(3)
    assert acts.shape == (125, 3)
    assert composite_id(UP, UP, UP) == 0 and composite_id(NOOP, NOOP, NOOP) == 124
    assert composite_id(UP, DOWN, LEFT) == 0 * 25 + 1 * 5 + 2


def test_composite_stops_on_goal_passed_by_second_substep():
    env = CompositeDarkRoom()
    params = env.params_from_actions(cid(2, 4), None)
    _, state = env.reset(KEY, params)
    obs, state, r, term, trunc, info = env.step(KEY, state, composite_id(UP, UP, UP), params)
    # (4,4) -> (3,4) -> (2,4) = goal on the 2nd sub-step: stop, reward, terminate, auto-reset.
    assert (float(r), bool(term), bool(trunc)) == (1.0, True, False)
    assert int(info["final_observation"]) == cid(2, 4)
    assert int(obs) == cid(4, 4) and int(state.time) == 0
    # The goal is kept: the same action succeeds again from the start.
    _, _, r, term, _, _ = env.step(KEY, state, composite_id(UP, UP, UP), params)
    assert (float(r), bool(term)) == (1.0, True)


def test_composite_walls_subsets_and_truncation():
    env = CompositeDarkRoom()
    ids = [composite_id(UP, UP, UP), composite_id(LEFT, NOOP, DOWN), composite_id(RIGHT, RIGHT, RIGHT)]
    params = env.params_from_actions(cid(8, 8), ids)  # index 0 = up3, 1 = left+down, 2 = right3
    assert np.asarray(params.action_mask).sum() == 3 and params.action_set.shape == (125, 3)
    steps, _ = run(env, params, [0, 0, 1, 2, 2, 2] + [1] * 14)
    assert steps[:6] == [
        (cid(1, 4), 0.0, False, False),
        (cid(0, 4), 0.0, False, False),  # 3 ups from row 1: wall clamps at row 0
        (cid(1, 3), 0.0, False, False),
        (cid(1, 6), 0.0, False, False),
        (cid(1, 8), 0.0, False, False),  # clamped at the right wall
        (cid(1, 8), 0.0, False, False),
    ]
    assert steps[19] == (cid(4, 4), 0.0, False, True)  # 20-step episode truncates, back at start
    with pytest.raises(InvalidActionError, match="action 3 "):
        env.step(KEY, env.reset(KEY, params)[1], 3, params)


def test_composite_headless_ad_action_sets():
    env = CompositeDarkRoom()
    sets = env.action_sets()
    assert {k: len(v) for k, v in sets.items()} == {
        "train": 50, "permuted_train": 50, "sliced_test": 50, "test": 75, "all": 125}
    assert not set(sets["train"]) & set(sets["test"])
    assert sorted(sets["all"]) == list(range(125))
    assert sorted(sets["permuted_train"]) == sorted(sets["train"])
    assert (sets["permuted_train"] != sets["train"]).any()
    assert (sets["sliced_test"] == sets["test"][:50]).all()
    again = envs.headless_ad_action_sets(0)
    assert all((again[k] == sets[k]).all() for k in sets)
    params = env.task_params(jnp.arange(80), actions="test")
    assert params.action_set.shape == (80, 125, 3)
    assert (np.asarray(params.action_mask).sum(1) == 75).all()
    np.testing.assert_array_equal(params.action_ids[0, :75], sets["test"])
    np.testing.assert_array_equal(params.action_set[0, :75], composite_actions(3)[sets["test"]])
    # Optimal return: every goal is reachable within 20 steps with all 125 actions.
    full = env.task_params(jnp.arange(80))
    assert float(jax.vmap(env.optimal_return)(full).min()) == 1.0
    assert int(env.min_steps_to_goal(env.params_from_actions(cid(0, 0)))) == 3
    assert int(env.min_steps_to_goal(env.params_from_actions(cid(0, 0), [124]))) == 21


# ---------------------------------------------------------------- Key-to-Door

def test_key_to_door_door_before_key_pays_nothing_then_key_then_door():
    env = KeyToDoor()
    params = env.params_for(cid(0, 0), cid(0, 2))
    _, state = env.reset(KEY, params)
    state = state.replace(pos=jnp.array([0, 1], jnp.int32))  # start between key and door
    steps, final = run(env, params, [RIGHT, LEFT, LEFT, NOOP, RIGHT, RIGHT], state=state)
    assert steps == [
        (cid(0, 2), 0.0, False, False),  # door before the key: nothing
        (cid(0, 1), 0.0, False, False),
        (cid(0, 0), 1.0, False, False),  # key
        (cid(0, 0), 0.0, False, False),  # key pays once
        (cid(0, 1), 0.0, False, False),
        (steps[5][0], 1.0, True, False),  # door: +1 and terminated (obs = new random start)
    ]
    assert not bool(final.has_key) and int(final.time) == 0
    assert float(env.optimal_return(params)) == 2.0


def test_key_to_door_random_starts_and_tasks():
    env = KeyToDoor()
    params = env.default_params
    obs, states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(KEY, 2000), params)
    assert len(np.unique(np.asarray(obs))) == 81 and not np.asarray(states.has_key).any()
    tasks = env.task_params(jnp.arange(env.num_tasks))
    pairs = set(zip(np.asarray(tasks.key).tolist(), np.asarray(tasks.door).tolist()))
    assert env.num_tasks == 6480 and len(pairs) == 6480
    assert all(k != d and 0 <= k < 81 and 0 <= d < 81 for k, d in pairs)


def test_key_to_door_centre_start_walked_by_hand():
    """`start="centre"`: every episode, after a reset or the door, starts on cell (4, 4); the
    optimal return is then the one start's (both rewards reachable: 2.0), and a horizon too short
    for the door leaves 1.0."""
    env = KeyToDoor(start="centre")
    params = env.params_for(cid(4, 6), cid(2, 6))
    obs, state = env.reset(KEY, params)
    assert int(obs) == cid(4, 4) and env.centre_cell == cid(4, 4)
    steps, final = run(env, params, [RIGHT, RIGHT, UP, UP], state=state)
    assert steps == [
        (cid(4, 5), 0.0, False, False),
        (cid(4, 6), 1.0, False, False),  # key
        (cid(3, 6), 0.0, False, False),
        (cid(4, 4), 1.0, True, False),  # door: +1, terminated, and back on the centre
    ]
    assert not bool(final.has_key) and int(final.time) == 0
    assert float(env.optimal_return(params)) == 2.0
    short = KeyToDoor(start="centre", episode_length=3)
    assert float(short.optimal_return(short.params_for(cid(4, 6), cid(2, 6)))) == 1.0
    with pytest.raises(ValueError, match="start must be one of"):
        KeyToDoor(start="corner")


# ---------------------------------------------------------------- bandits

def test_composite_distance_split_separates_move_lengths():
    """Appendix F: test actions end 2 cells (Manhattan) from their start, train actions 0, 1 or
    3; worked by hand on named actions, and the env steps a test action 2 cells away."""
    env = CompositeDarkRoom(action_split="distance")
    sets = env.action_sets()
    assert {k: len(v) for k, v in sets.items()} == {
        "train": 89, "permuted_train": 89, "sliced_test": 36, "test": 36, "all": 125}
    train, test = set(sets["train"].tolist()), set(sets["test"].tolist())
    assert not train & test and len(train | test) == 125
    assert {composite_id(UP, DOWN, NOOP), composite_id(LEFT, NOOP, NOOP),
            composite_id(UP, UP, RIGHT), composite_id(RIGHT, RIGHT, RIGHT)} <= train
    assert {composite_id(UP, UP, NOOP), composite_id(UP, LEFT, NOOP),
            composite_id(DOWN, DOWN, NOOP), composite_id(RIGHT, NOOP, DOWN)} <= test
    assert composite_id(UP, LEFT, DOWN) in train  # net one cell left
    params = env.task_params(0, actions="test")
    first = composite_actions(3)[sets["test"][0]]
    _, state = env.reset(KEY, params)
    _, moved, *_ = env.step(KEY, state, 0, params)
    assert np.abs(np.asarray(moved.pos) - env.centre).sum() == 2, first
    assert (envs.headless_ad_action_sets(0)["train"] == CompositeDarkRoom().action_sets()["train"]).all()
    with pytest.raises(ValueError, match="unknown action_split 'by_length'"):
        CompositeDarkRoom(action_split="by_length")


def test_bernoulli_with_a_context_observes_one_fixed_vector_per_task():
    """Appendix D: the same arm means as without a context, one fixed float context per task."""
    plain = BernoulliBandit(arms=(4, 20), distribution="uniform")
    env = BernoulliBandit(arms=(4, 20), distribution="uniform", context_dim=2)
    assert env.observation_shape == (2,) and env.num_observations is None
    assert plain.observation_shape == () and plain.num_observations == 1
    params = env.task_params(jnp.arange(4))
    np.testing.assert_array_equal(params.means, plain.task_params(jnp.arange(4)).means)
    assert params.context.shape == (4, 2) and len({tuple(c) for c in np.asarray(params.context)}) == 4
    one = jax.tree.map(lambda x: x[1], params)
    obs, state = env.reset(KEY, one)
    seen = [obs]
    for t in range(3):
        obs, state, reward, done, _, _ = env.step(jax.random.PRNGKey(t), state, t, one)
        seen.append(obs)
        assert bool(done) and float(reward) in (0.0, 1.0)
    for o in seen:
        np.testing.assert_array_equal(o, one.context)
    explicit = env.params_from_means([0.0, 1.0], context=[0.5, -0.5])
    _, state = env.reset(KEY, explicit)
    obs, _, reward, *_ = env.step(KEY, state, 1, explicit)
    np.testing.assert_array_equal(obs, [0.5, -0.5])
    assert float(reward) == 1.0
    with pytest.raises(ValueError, match="observes a context of shape \\(2,\\)"):
        env.params_from_means([0.5, 0.5])


def test_bernoulli_deterministic_arms_masks_and_regret():
    env = BernoulliBandit(arms=(4, 20))
    params = env.params_from_means([0.0, 1.0, 0.0, 1.0, 0.25])
    steps, _ = run(env, params, [0, 1, 2, 3])
    assert steps == [(0, 0.0, True, False), (0, 1.0, True, False),
                     (0, 0.0, True, False), (0, 1.0, True, False)]
    exp = np.asarray(env.expected_rewards(None, params))
    assert exp.shape == (20,) and np.isinf(exp[5:]).all() and (exp[5:] < 0).all()
    np.testing.assert_allclose(exp[:5], [0, 1, 0, 1, 0.25])
    assert float(env.optimal_expected_reward(None, params)) == 1.0
    assert DarkRoom.has_optimal_return and not env.has_optimal_return  # declared, not probed
    with pytest.raises(TypeError, match="no optimal return"):
        env.optimal_return(params)
    with pytest.raises(InvalidActionError, match="action 5 .*available actions: \\[0, 1, 2, 3, 4\\]"):
        env.step(KEY, env.reset(KEY, params)[1], 5, params)
    with pytest.raises(InvalidActionError, match="action 20 is outside"):
        env.step(KEY, env.reset(KEY, params)[1], 20, params)


def test_bandit_fast_path_matches_gymnax_step_semantics():
    env = BernoulliBandit(arms=3)
    params = env.params_from_means([0.0, 1.0, 1.0])
    _, state = env.reset(KEY, params)
    fast = env.transition(KEY, state, 1, params)
    generic = environment.Environment.step(env, KEY, state, 1, params)
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(generic)):
        np.testing.assert_array_equal(a, b)


def test_bernoulli_reward_rate_follows_means():
    env = BernoulliBandit(arms=2)
    params = env.params_from_means([0.3, 0.8])
    _, state = env.reset(KEY, params)
    keys = jax.random.split(KEY, 20000)
    r0 = jax.vmap(lambda k: env.transition(k, state, 0, params)[2])(keys).mean()
    r1 = jax.vmap(lambda k: env.transition(k, state, 1, params)[2])(keys).mean()
    assert abs(float(r0) - 0.3) < 0.02 and abs(float(r1) - 0.8) < 0.02


def _means(distribution, n=4000, **kw):
    env = BernoulliBandit(distribution=distribution, **kw)
    p = env.task_params(jnp.arange(n))
    return np.asarray(p.means), np.asarray(p.action_mask), np.asarray(p.num_arms)


def test_bernoulli_train_distribution_odd_arms_high_in_95_percent():
    means, mask, num_arms = _means("train")
    even_idx, odd_idx = mask.copy(), mask.copy()
    even_idx[:, 1::2] = False
    odd_idx[:, 0::2] = False
    # 1-based odd arms = indices 0, 2, 4, ...: all high, or (inverted tasks) all low.
    normal = np.where(even_idx, means >= 0.5, True).all(1) & np.where(odd_idx, means < 0.5, True).all(1)
    inverted = np.where(even_idx, means < 0.5, True).all(1) & np.where(odd_idx, means >= 0.5, True).all(1)
    assert (normal ^ inverted).all()
    assert 0.04 < inverted.mean() < 0.065
    assert num_arms.min() == 4 and num_arms.max() == 20 and len(np.unique(num_arms)) == 17
    assert (mask.sum(1) == num_arms).all() and (means[~mask] == 0).all()


def test_bernoulli_inverse_and_uniform_distributions():
    means, mask, _ = _means("inverse", n=1000)
    assert (means[:, 1::2][mask[:, 1::2]] >= 0.5).all() and (means[:, 0::2][mask[:, 0::2]] < 0.5).all()
    means, mask, _ = _means("uniform", n=1000)
    for parity in (0, 1):
        m = means[:, parity::2][mask[:, parity::2]]
        assert 0.45 < m.mean() < 0.55 and (m < 0.25).mean() > 0.2 and (m > 0.75).mean() > 0.2


@pytest.mark.parametrize("arms", [20, 25, 30, 40, 50])
def test_bernoulli_fixed_arm_counts(arms):
    env = BernoulliBandit(arms=arms, distribution="uniform", max_arms=50)
    p = env.task_params(jnp.arange(8))
    assert env.num_actions == 50 and (np.asarray(p.num_arms) == arms).all()
    assert (np.asarray(p.action_mask).sum(1) == arms).all()


def test_contextual_bandit_rewards_contexts_and_regret():
    env = ContextualBandit(arms=3, noise_std=0.0)
    feats = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], np.float32)
    params = env.params_from_features(feats)
    obs, state = env.reset(KEY, params)
    assert obs.shape == (2,) and obs.dtype == jnp.float32
    exp = np.asarray(env.expected_rewards(state, params))
    np.testing.assert_allclose(exp, feats @ np.asarray(obs), rtol=1e-6)
    obs2, state2, r, term, trunc, _ = env.step(KEY, state, 2, params)
    np.testing.assert_allclose(float(r), exp[2], rtol=1e-6)  # noise 0: reward = <x, w_a>
    assert bool(term) and not bool(trunc)
    np.testing.assert_array_equal(obs2, state2.context)  # the next context is what is observed
    assert not np.allclose(obs2, obs)
    with pytest.raises(InvalidActionError, match="action 3 "):
        env.step(KEY, state, 3, params)


def test_contextual_bandit_feature_and_noise_statistics():
    env = ContextualBandit(arms=(4, 20))
    p = env.task_params(jnp.arange(2000))
    feats = np.asarray(p.arm_features)[np.asarray(p.action_mask)]
    assert abs(feats.std() - 1 / np.sqrt(2)) < 0.02
    assert (np.asarray(p.arm_features)[~np.asarray(p.action_mask)] == 0).all()
    one = env.task_params(7)
    _, state = env.reset(KEY, one)
    rewards = jax.vmap(lambda k: env.transition(k, state, 0, one)[2])(jax.random.split(KEY, 20000))
    expected = float(env.expected_rewards(state, one)[0])
    assert abs(float(rewards.mean()) - expected) < 0.03 and abs(float(rewards.std()) - 1.0) < 0.03


# ---------------------------------------------------------------- task ids, splits, registry

ALL_ENVS = [("bernoulli_bandit", {}), ("contextual_bandit", {}), ("darkroom", {}),
            ("darkroom_composite", {}), ("key_to_door", {})]


@pytest.mark.parametrize("name,kw", ALL_ENVS)
def test_task_params_deterministic_and_vmappable(name, kw):
    env, twin = envs.make(name, **kw), envs.make(name, **kw)
    ids = jnp.arange(6)
    batched = env.task_params(ids)
    for a, b, c in zip(jax.tree.leaves(batched), jax.tree.leaves(twin.task_params(ids)),
                       jax.tree.leaves(jax.jit(jax.vmap(env.task_params))(ids))):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-6)  # jit may fuse float ops: ulp-level only
        assert a.shape[0] == 6 and a.dtype != jnp.float64
    single = env.task_params(3)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(batched)):
        np.testing.assert_array_equal(a, b[3])


@pytest.mark.parametrize("name,kw", ALL_ENVS)
def test_jitted_vmapped_rollout_and_dtypes(name, kw):
    env = envs.make(name, **kw)
    params = env.task_params(jnp.arange(4))
    mask = np.asarray(params.action_mask)
    actions = jnp.asarray(np.argmax(mask, axis=1), jnp.int32)  # an available action per task

    def rollout(key, p, action):
        obs, state = env.reset(key, p)

        def body(state, k):
            obs, state, r, term, trunc, _ = env.step(k, state, action, p)
            return state, (obs, r, term | trunc)

        return jax.lax.scan(body, state, jax.random.split(key, 60))[1]

    obs, rewards, dones = jax.jit(jax.vmap(rollout))(jax.random.split(KEY, 4), params, actions)
    assert rewards.shape == (4, 60) and rewards.dtype == jnp.float32
    assert obs.dtype in (jnp.int32, jnp.float32) and obs.shape[:2] == (4, 60)
    assert obs.shape[2:] == env.observation_shape
    assert bool(dones.any())


@pytest.mark.parametrize("name,kw", ALL_ENVS)
def test_invalid_action_named(name, kw):
    env = envs.make(name, **kw)
    params = env.default_params
    _, state = env.reset(KEY, params)
    with pytest.raises(InvalidActionError, match=f"action {env.num_actions} is outside"):
        env.step(KEY, state, env.num_actions, params)
    with pytest.raises(InvalidActionError, match="action -1 "):
        env.step(KEY, state, -1, params)


def test_split_tasks_disjoint_and_reproducible():
    train, test = split_tasks(80, 60, seed=3)
    assert len(train) == 60 and len(test) == 20 and not set(train) & set(test)
    assert sorted(np.concatenate([train, test])) == list(range(80))
    again = split_tasks(80, 60, seed=3)
    assert (again[0] == train).all() and (again[1] == test).all()
    assert (split_tasks(80, 60, seed=4)[0] != train).any()
    with pytest.raises(ValueError):
        split_tasks(10, 11)
    with pytest.raises(ValueError, match="num_test=5"):
        split_tasks(10, 6, num_test=5)


def test_split_tasks_held_out_sample_is_random_not_the_lowest_ids():
    # Key-to-Door's ids enumerate (key, door) in order; the 100 lowest held-out ids would put
    # every held-out key in cell 0 or 1.
    env = envs.make("key_to_door")
    train, test = split_tasks(env.num_tasks, 100, seed=0, num_test=100)
    assert (train == split_tasks(env.num_tasks, 100, seed=0)[0]).all()  # train as without num_test
    assert len(test) == 100 and not set(train) & set(test)
    assert (test < 160).mean() < 0.2  # the ids of keys in cells 0 and 1
    assert len(set(np.asarray(env.task_params(test).key).tolist())) > 30


def test_make_unknown_lists_valid_names():
    with pytest.raises(ValueError, match="did you mean 'darkroom'.*available: .*bernoulli_bandit.*key_to_door"):
        envs.make("dark_room")
    assert isinstance(envs.make("darkroom", size=5), DarkRoom) and envs.make("darkroom", size=5).num_observations == 25
