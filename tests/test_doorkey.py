"""Uni[MASK]'s DoorKey: hand-worked trajectories and the noisy-rational expert's distribution."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.envs.doorkey import DoorKey, LAYOUTS, cell_of, split_state
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.sources import build_source
from icrl_jax.data.sources.noisy_rational import noisy_rational_probs

RIGHT, DOWN, LEFT, UP = 0, 1, 2, 3


def walk(env, params, actions):
    """(agent (x, y), key held, reward, terminated) after each action, via step_env."""
    _, state = env.reset_env(jax.random.key(0), params)
    out = []
    for a in actions:
        obs, state, reward, done, _ = env.step_env(jax.random.key(0), state, jnp.int32(a), params)
        agent, key_pos = (int(v) for v in split_state(obs))
        out.append(((agent // 4 + 1, agent % 4 + 1), agent == key_pos, float(reward), bool(done)))
    return out


def test_hand_worked_trajectory_door_key_goal():
    env = envs.make("unimask_doorkey")
    params = env.layout_params(cell_of(2, 1), cell_of(1, 2))
    steps = walk(env, params, [RIGHT, DOWN, RIGHT, LEFT, UP, RIGHT, RIGHT, RIGHT, DOWN, DOWN, DOWN])
    assert steps == [
        ((2, 1), False, 0.0, False),   # the locked door blocks without the key
        ((2, 2), False, -1.0, False),  # away from the goal's path
        ((2, 2), False, 0.0, False),   # the wall at (3, 2) blocks
        ((1, 2), True, -1.0, False),   # stepping on the key picks it up
        ((1, 1), True, 1.0, False),
        ((2, 1), True, 1.0, False),
        ((3, 1), True, 1.0, False),    # through the door with the key
        ((4, 1), True, 1.0, False),
        ((4, 2), True, 1.0, False),
        ((4, 3), True, 1.0, False),
        ((4, 4), True, 1.0, True),     # the goal ends the episode
    ]


def test_outer_walls_block_and_goal_can_continue():
    env = DoorKey(terminate_at_goal=False)
    params = env.layout_params(cell_of(1, 1), cell_of(2, 4))
    assert walk(env, params, [LEFT, UP]) == [((1, 1), False, 0.0, False)] * 2
    _, state = env.reset_env(jax.random.key(0), params)
    state = state.replace(agent=jnp.int32(cell_of(4, 3)), key_pos=jnp.int32(cell_of(4, 3)))
    _, state, _, done, _ = env.step_env(jax.random.key(0), state, jnp.int32(DOWN), params)
    assert int(state.agent) == cell_of(4, 4) and not bool(done)


def test_gymnax_step_terminates_and_resets_at_goal():
    env = DoorKey()
    params = env.layout_params(cell_of(1, 1), cell_of(2, 4))
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(agent=jnp.int32(cell_of(4, 3)), key_pos=jnp.int32(cell_of(4, 3)),
                          door_open=jnp.bool_(True))
    _, state, reward, terminated, truncated, _ = env.step(jax.random.key(1), state,
                                                          jnp.int32(DOWN), params)
    assert bool(terminated) and not bool(truncated) and float(reward) == 1.0
    assert int(state.agent) == cell_of(1, 1) and int(state.key_pos) == cell_of(2, 4)


def test_layouts_match_the_authors_randomisation():
    assert len(LAYOUTS) == 56
    xs = LAYOUTS // 4 + 1
    assert set(xs.ravel()) == {1, 2} and (LAYOUTS[:, 0] != LAYOUTS[:, 1]).all()
    params = DoorKey().task_params(jnp.arange(5000))
    pairs = np.asarray(params.start) * 16 + np.asarray(params.key)
    counts = np.bincount(pairs, minlength=256)[LAYOUTS[:, 0] * 16 + LAYOUTS[:, 1]]
    assert counts.sum() == 5000 and counts.min() > 50  # every layout, roughly uniformly


def test_subgoal_progress_key_then_door_then_goal():
    env = DoorKey()
    params = env.layout_params(cell_of(2, 1), cell_of(1, 2))
    _, state = env.reset_env(jax.random.key(0), params)
    # Towards the key at (1, 2): down and left get closer; right (locked door) and up are blocked.
    np.testing.assert_array_equal(env.subgoal_progress(state, params), [0, 1, 1, 0])
    held = state.replace(agent=jnp.int32(cell_of(1, 2)), key_pos=jnp.int32(cell_of(1, 2)))
    # Key held, door shut: the door at (3, 1) is the sub-goal.
    np.testing.assert_array_equal(env.subgoal_progress(held, params), [1, -1, 0, 1])
    beyond = held.replace(agent=jnp.int32(cell_of(4, 1)), key_pos=jnp.int32(cell_of(4, 1)),
                          door_open=jnp.bool_(True))
    np.testing.assert_array_equal(env.subgoal_progress(beyond, params), [0, 1, -1, 0])


def test_noisy_rational_source_matches_formula():
    env = DoorKey(terminate_at_goal=False)
    source = build_source("noisy_rational", env, 1, {"beta": 1.0})
    params = env.layout_params(cell_of(2, 1), cell_of(1, 2))
    _, state = env.reset_env(jax.random.key(0), params)
    keys = jax.random.split(jax.random.key(3), 40000)
    actions = jax.vmap(lambda k: source.act(k, None, None, state, params)[0])(keys)
    freq = np.bincount(np.asarray(actions), minlength=4) / len(keys)
    expected = np.exp([0, 1, 1, 0]) / np.exp([0, 1, 1, 0]).sum()
    np.testing.assert_allclose(noisy_rational_probs(jnp.array([0, 1, 1, 0])), expected, rtol=1e-6)
    np.testing.assert_allclose(freq, expected, atol=0.01)  # 40k draws: std < 0.0025


def test_dataset_of_fixed_length_trajectories():
    env = DoorKey(episode_length=10, terminate_at_goal=False)
    source = build_source("noisy_rational", env, 10, {})
    history = generate_histories(env, source, env.task_params(jnp.arange(64)), 10,
                                 jax.random.key(0))
    dones = np.asarray(history.dones)
    assert dones.shape == (64, 10) and dones[:, -1].all() and not dones[:, :-1].any()
    agent, key_pos = split_state(history.observations)
    params = env.task_params(jnp.arange(64))
    np.testing.assert_array_equal(agent[:, 0], params.start)
    np.testing.assert_array_equal(key_pos[:, 0], params.key)
    # Consecutive states follow the dynamics.
    from icrl_jax.envs.doorkey import move
    nxt = jax.vmap(jax.vmap(move))(agent[:, :-1], key_pos[:, :-1], history.actions[:, :-1])
    np.testing.assert_array_equal(nxt[0], agent[:, 1:])
    np.testing.assert_array_equal(nxt[1], key_pos[:, 1:])


def test_bad_action_is_a_clear_error():
    env = DoorKey()
    params = env.default_params
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(envs.InvalidActionError, match="outside the action set"):
        env.step(jax.random.key(0), state, np.int32(4), params)
