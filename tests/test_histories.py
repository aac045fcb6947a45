"""generate_histories shapes, determinism, episode boundaries, and the on-disk format."""

import jax
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.history import HistoryFormatError, load_history, save_history
from icrl_jax.data.sources import q_learning, thompson_sampling, uniform_random


def test_shapes_dtypes_task_ids_and_info():
    env = envs.make("bernoulli_bandit", arms=(4, 20))
    ids = np.array([5, 9, 100], np.int32)
    h, info = generate_histories(env, thompson_sampling(), env.task_params(ids), 30,
                                 jax.random.PRNGKey(0), task_ids=ids, with_info=True)
    assert h.observations.shape == (3, 30) and h.observations.dtype == np.int32
    assert h.actions.shape == (3, 30) and h.actions.dtype == np.int32
    assert h.rewards.dtype == np.float32 and h.dones.dtype == bool
    assert h.action_mask.shape == (3, 20) and h.action_mask.dtype == bool
    np.testing.assert_array_equal(h.task_ids, ids)
    assert set(info) == {"expected_reward", "optimal_expected_reward"}
    assert info["expected_reward"].shape == (3, 30)
    h.validate()

    ctx = envs.make("contextual_bandit", arms=5)
    hc = generate_histories(ctx, uniform_random(), ctx.task_params(np.arange(4)), 7,
                            jax.random.PRNGKey(0))
    assert hc.observations.shape == (4, 7, 2) and hc.observations.dtype == np.float32


def test_deterministic_and_chunking_invariant():
    env = envs.make("darkroom")
    params = env.task_params(np.arange(7))
    src = q_learning(env, 4, lr=0.3, discount=0.9)
    run = lambda key, **kw: generate_histories(env, src, params, 200, key, **kw)
    a, b = run(jax.random.PRNGKey(1)), run(jax.random.PRNGKey(1))
    c = run(jax.random.PRNGKey(1), chunk_size=3)
    d = run(jax.random.PRNGKey(2))
    for x, y in ((a, b), (a, c)):
        for f in ("observations", "actions", "rewards", "dones"):
            np.testing.assert_array_equal(getattr(x, f), getattr(y, f))
    assert not np.array_equal(a.actions, d.actions)
    # Any rows made alone from their own keys (a process's share) are those rows of the whole.
    rows = np.array([1, 4, 6])
    keys = jax.random.split(jax.random.PRNGKey(1), 7)[rows]
    part = generate_histories(env, src, env.task_params(rows), 200, keys)
    for f in ("observations", "actions", "rewards", "dones"):
        np.testing.assert_array_equal(getattr(part, f), getattr(a, f)[rows])
    with pytest.raises(ValueError, match="3 keys for 7 histories"):
        generate_histories(env, src, params, 200, keys)


def test_dones_mark_episode_boundaries():
    room = envs.make("darkroom")  # truncation only: every 50 steps
    h = generate_histories(room, uniform_random(), room.task_params(np.arange(3)), 160,
                           jax.random.PRNGKey(0))
    expected = (np.arange(160) % 50) == 49
    np.testing.assert_array_equal(np.asarray(h.dones), np.broadcast_to(expected, (3, 160)))
    # after a done the next observation is the reset (centre) cell
    assert (np.asarray(h.observations)[:, 50] == room.centre_cell).all()

    comp = envs.make("darkroom_composite")  # termination at the goal, else 20 steps
    env_params = comp.task_params(np.arange(4))
    h = generate_histories(comp, uniform_random(), env_params, 300, jax.random.PRNGKey(0))
    rewards, dones = np.asarray(h.rewards), np.asarray(h.dones)
    assert (dones[rewards > 0]).all()  # reaching the goal ends the episode
    for d in dones:
        lengths = np.diff(np.concatenate([[-1], d.nonzero()[0]]))
        assert lengths.max() <= 20
    obs = np.asarray(h.observations)
    assert (obs[:, 1:][dones[:, :-1]] == comp.centre_cell).all()

    bandit = envs.make("bernoulli_bandit", arms=4)  # every pull is an episode
    hb = generate_histories(bandit, uniform_random(), bandit.task_params(np.arange(2)), 5,
                            jax.random.PRNGKey(0))
    assert np.asarray(hb.dones).all()


def test_save_load_round_trip(tmp_path):
    env = envs.make("key_to_door")
    h = generate_histories(env, uniform_random(), env.task_params(np.arange(3)), 60,
                           jax.random.PRNGKey(0), task_ids=np.array([0, 1, 2]))
    path = str(tmp_path / "h.npz")
    save_history(path, h, {"env": "key_to_door", "source": "uniform_random"})
    loaded, meta = load_history(path)
    assert meta["env"] == "key_to_door"
    for f in ("observations", "actions", "rewards", "dones", "task_ids", "action_mask"):
        np.testing.assert_array_equal(getattr(loaded, f), np.asarray(getattr(h, f)))
        assert getattr(loaded, f).dtype == np.asarray(getattr(h, f)).dtype


def test_load_of_wrongly_shaped_file_names_the_array(tmp_path):
    path = str(tmp_path / "bad.npz")
    np.savez(path, observations=np.zeros((2, 5), np.int32), actions=np.zeros((2, 5), np.int32),
             rewards=np.zeros((2, 4), np.float32), dones=np.zeros((2, 5), bool),
             task_ids=np.zeros(2, np.int32), action_mask=np.ones((2, 3), bool))
    with pytest.raises(HistoryFormatError, match="rewards"):
        load_history(path)
