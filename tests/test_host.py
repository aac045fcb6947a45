"""Host simulators behind the batched callback bridge (Miniworld, ViZDoom), pixel Dark Room.

Simulators start in spawned worker processes, so the pools are module-scoped fixtures.
"""

import functools
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from icrl_jax.envs.host import miniworld as mw
from icrl_jax.envs.host.bridge import HostEnvError, HostStep, RandomPolicy, env_seeds, host_rollout

STEPS = 120  # crosses the 50-step dark-room and the 100-step key-to-door episode ends


def direct_rollout(env_fns, seed, actions):
    """Step the same envs in this process, SAME_STEP autoreset, -> obs (N, T, ...), rewards, dones."""
    envs = [fn() for fn in env_fns]
    obs = [env.reset(seed=s)[0] for env, s in zip(envs, env_seeds(seed, len(envs)))]
    all_obs, rewards, dones = [], [], []
    for t in range(actions.shape[1]):
        all_obs.append(np.stack(obs))
        row_r, row_d = [], []
        for i, env in enumerate(envs):
            o, r, term, trunc, _ = env.step(actions[i, t])
            if term or trunc:
                o, _ = env.reset()
            obs[i] = o
            row_r.append(r)
            row_d.append(term or trunc)
        rewards.append(row_r)
        dones.append(row_d)
    for env in envs:
        env.close()
    swap = lambda x: np.swapaxes(np.asarray(x), 0, 1)
    return swap(all_obs), swap(rewards).astype(np.float32), swap(dones)


MINIWORLD_FNS = [functools.partial(mw.make_darkroom, 3, 50),
                 functools.partial(mw.make_key_to_door, 20, 60, 100)]


@pytest.fixture(scope="module")
def miniworld_pool():
    from icrl_jax.envs.host.bridge import HostVectorEnv
    pool = HostVectorEnv(MINIWORLD_FNS, timeout_s=60)
    yield pool
    pool.close()


def test_miniworld_bridge_matches_direct_stepping(miniworld_pool):
    policy = mw.NoisyOracle(STEPS, eps_start=1.0, eps_end=0.0)
    out = host_rollout(miniworld_pool, policy, STEPS, jax.random.PRNGKey(1), seed=7)
    assert out["observations"].shape == (2, STEPS, 64, 64, 3)
    assert out["observations"].dtype == jnp.uint8
    actions = np.asarray(out["actions"])
    obs, rewards, dones = direct_rollout(MINIWORLD_FNS, 7, actions)
    np.testing.assert_array_equal(np.asarray(out["observations"]), obs)
    np.testing.assert_array_equal(np.asarray(out["rewards"]), rewards)
    np.testing.assert_array_equal(np.asarray(out["dones"]), dones)
    # the 50-step dark room truncates at steps 50 and 100
    assert np.asarray(out["truncated"])[0].nonzero()[0].tolist() == [49, 99]
    # the oracle finds the dark-room goal once epsilon has decayed
    assert rewards[0, 50:].sum() > 0
    # the same seed and key reproduce the rollout
    again = host_rollout(miniworld_pool, policy, STEPS, jax.random.PRNGKey(1), seed=7)
    np.testing.assert_array_equal(np.asarray(again["observations"]), obs)


class KillAt:
    """A policy that kills (or freezes) worker 1 from inside the scan at step `t_kill`."""

    def __init__(self, pool, t_kill, sig):
        self.pool, self.t_kill, self.sig, self.inner = pool, t_kill, sig, RandomPolicy(
            pool.single_action_space)

    def init(self, key, n):
        return ()

    def act(self, key, state, step: HostStep):
        def maybe_kill(t):
            if int(t) == self.t_kill:
                os.kill(self.pool.processes[1].pid, self.sig)
            return np.int32(0)

        io_callback(maybe_kill, jax.ShapeDtypeStruct((), np.int32), step.t, ordered=True)
        return self.inner.act(key, state, step)


@pytest.mark.parametrize("sig,reason", [(signal.SIGKILL, "died"), (signal.SIGSTOP, "timeout")])
def test_failed_worker_names_env_worker_step_and_keeps_record(miniworld_pool, sig, reason):
    miniworld_pool.timeout_s = 5.0  # a frozen worker is declared hung after this
    try:
        with pytest.raises(HostEnvError) as info:
            host_rollout(miniworld_pool, KillAt(miniworld_pool, 7, sig), 20,
                         jax.random.PRNGKey(0), seed=3)
        err = info.value
        assert (err.worker, err.step, err.reason) == (1, 7, reason)
        assert err.env_name == "miniworld_key_to_door[1]"
        assert "miniworld_key_to_door[1]" in str(err) and "step 7" in str(err)
        assert err.recorded["observations"].shape == (7, 2, 64, 64, 3)
        assert err.recorded["actions"].shape == (7, 2)
        # a broken pool refuses to step until restarted
        with pytest.raises(HostEnvError, match="restart"):
            miniworld_pool.reset(seed=0)
    finally:
        miniworld_pool.timeout_s = 60.0
        miniworld_pool.restart()
    # the restarted pool reproduces a rollout exactly
    policy = RandomPolicy(miniworld_pool.single_action_space)
    out = host_rollout(miniworld_pool, policy, 10, jax.random.PRNGKey(2), seed=5)
    obs, rewards, _ = direct_rollout(MINIWORLD_FNS, 5, np.asarray(out["actions"]))
    np.testing.assert_array_equal(np.asarray(out["observations"]), obs)


def test_rebuilt_workers_roll_out_as_a_fresh_pool_does():
    """`set_envs` gives a running pool other tasks (same size, then fewer workers): each rollout
    equals stepping those envs directly, and a policy's compiled rollout is reused while the
    pool keeps its size. Envs with other spaces are refused with the worker named."""
    import gymnasium as gym
    from icrl_jax.envs.host.bridge import HostVectorEnv
    pool = HostVectorEnv(MINIWORLD_FNS, timeout_s=60)
    try:
        policy = RandomPolicy(pool.single_action_space)
        host_rollout(pool, policy, 60, jax.random.PRNGKey(0), seed=1)
        workers = list(pool.processes)
        for fns in ([functools.partial(mw.make_darkroom, 70, 50),
                     functools.partial(mw.make_key_to_door, 5, 9, 100)],
                    [functools.partial(mw.make_darkroom, 12, 50)]):
            pool.set_envs(fns)
            assert pool.processes == workers[:len(fns)]  # no new processes
            assert pool.observation_space.shape == (len(fns), 64, 64, 3)
            out = host_rollout(pool, policy, 60, jax.random.PRNGKey(3), seed=4)
            obs, rewards, dones = direct_rollout(fns, 4, np.asarray(out["actions"]))
            np.testing.assert_array_equal(np.asarray(out["observations"]), obs)
            np.testing.assert_array_equal(np.asarray(out["rewards"]), rewards)
            np.testing.assert_array_equal(np.asarray(out["dones"]), dones)
        # one compiled rollout per pool size: 2 workers (twice), then 1
        assert len(pool._rollout_cache) == 2
        assert not workers[1].is_alive()  # the dropped worker ended
        with pytest.raises(HostEnvError, match=r"worker 0.*differ from the pool"):
            pool.set_envs([functools.partial(gym.make, "CartPole-v1")])
        with pytest.raises(ValueError, match="1 to"):
            HostVectorEnv.set_envs(pool, [])
    finally:
        pool.close()


def test_miniworld_task_split_is_disjoint():
    from icrl_jax import envs
    train, test = envs.make("miniworld_darkroom").task_split(50, 20, seed=0)
    assert len(set(train.tolist()) & set(test.tolist())) == 0 and len(train) == 50
    pairs = mw.key_door_pairs()
    tr, te = envs.make("miniworld_key_to_door").task_split(2000, 100, seed=1)
    assert not {tuple(p) for p in tr} & {tuple(p) for p in te}
    assert (pairs[:, 0] != pairs[:, 1]).all()


def test_oracle_turns_toward_target():
    # heading 0 looks along +x; target straight ahead -> forward, behind-left -> turn left
    priv = jnp.array([[1.5, 1.5, 0.0, 5.5, 1.5, 0.0],
                      [1.5, 1.5, 0.0, 1.5, 0.5, 0.0],  # -z is to the left (dir_vec=(cos, -sin))
                      [1.5, 1.5, 0.0, 1.5, 3.5, 0.0],
                      [1.5, 1.5, 0.0, 1.2, 1.9, 0.0]])  # same cell: turn in place
    assert mw.oracle_action(priv).tolist() == [mw.FORWARD, mw.TURN_LEFT, mw.TURN_RIGHT,
                                               mw.TURN_LEFT]


def test_pixel_darkroom_shows_agent_where_state_says():
    from icrl_jax.envs.darkroom import DarkRoom
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources.uniform import uniform_random

    env = DarkRoom(pixels=True, cell_px=2)
    assert env.observation_shape == (18, 18, 3) and not env.discrete_observations
    params = env.task_params(5)
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key, params)
    for action in [0, 0, 2, 3, 3, 3, 1, 4]:
        key, k = jax.random.split(key)
        obs, state, *_ = env.step(k, state, jnp.int32(action), params)
        img = np.asarray(obs)
        assert img.dtype == np.uint8
        red = np.argwhere((img == [255, 0, 0]).all(-1))
        r, c = np.asarray(state.pos) * 2
        assert sorted(map(tuple, red)) == [(r, c), (r, c + 1), (r + 1, c), (r + 1, c + 1)]
        assert (img.sum(-1) > 0).sum() == 4  # nothing else is drawn (the goal is invisible)
    # the cell-id env is unchanged, and pixel histories come out of the on-device generator
    plain = DarkRoom()
    assert plain.reset(key, params)[0].dtype == jnp.int32
    hist = generate_histories(env, uniform_random(), env.task_params(jnp.arange(3)), 60, key)
    assert hist.observations.shape == (3, 60, 18, 18, 3)
    ref = generate_histories(plain, uniform_random(), plain.task_params(jnp.arange(3)), 60, key)
    np.testing.assert_array_equal(hist.actions, ref.actions)
    cells = np.asarray(ref.observations)
    rows, cols = cells // 9, cells % 9
    lit = np.asarray(hist.observations)[..., 0][np.arange(3)[:, None], np.arange(60)[None],
                                                  rows * 2, cols * 2]
    assert (lit == 255).all()


def test_multidiscrete_actions_press_the_right_vizdoom_buttons():
    from icrl_jax.envs.host import vizdoom as vd
    dc = dict(zip(vd.BUTTONS["deadly_corridor"], vd.multidiscrete_to_buttons(
        "deadly_corridor", [1, 2, 2, 1])))
    assert {b for b, v in dc.items() if v} == {"TURN_LEFT", "MOVE_BACKWARD", "MOVE_RIGHT", "ATTACK"}
    dc = dict(zip(vd.BUTTONS["deadly_corridor"], vd.multidiscrete_to_buttons(
        "deadly_corridor", [2, 1, 1, 0])))
    assert {b for b, v in dc.items() if v} == {"TURN_RIGHT", "MOVE_FORWARD", "MOVE_LEFT"}
    assert vd.multidiscrete_to_buttons("deadly_corridor", [0, 0, 0, 0]) == [0] * 7
    mwh = dict(zip(vd.BUTTONS["my_way_home"], vd.multidiscrete_to_buttons("my_way_home", [2, 1])))
    assert {b for b, v in mwh.items() if v} == {"TURN_RIGHT", "MOVE_FORWARD"}
    with pytest.raises(ValueError, match="MultiDiscrete"):
        vd.multidiscrete_to_buttons("my_way_home", [0, 3])
    # and the game really has those buttons, in that order
    env = vd.DoomEnv("deadly_corridor")
    assert [b.name for b in env.game.get_available_buttons()] == list(vd.BUTTONS["deadly_corridor"])
    assert env.action_space.nvec.tolist() == [3, 3, 3, 2]
    obs, _ = env.reset(seed=0)
    assert obs.shape == (72, 128, 3) and obs.dtype == np.uint8
    x0 = env.privileged()[0]
    for _ in range(5):
        env.step([0, 1, 0, 0])  # forward runs down the corridor (+x)
    assert env.privileged()[0] > x0 + 20
    env.close()


@pytest.mark.parametrize("scenario", ["deadly_corridor", "my_way_home"])
def test_vizdoom_bridge_matches_direct_stepping(scenario):
    from icrl_jax.envs.host import vizdoom as vd
    fns = [functools.partial(vd.make_doom, scenario)] * 2
    pool = vd.doom_bridge(scenario, 2, timeout_s=60)
    try:
        out = host_rollout(pool, vd.DoomExpert(scenario, noise=0.3), 40, jax.random.PRNGKey(3),
                           seed=11)
    finally:
        pool.close()
    actions = np.asarray(out["actions"])
    assert actions.shape == (2, 40, len(vd.COMPONENTS[scenario]))
    obs, rewards, dones = direct_rollout(fns, 11, actions)
    np.testing.assert_array_equal(np.asarray(out["observations"]), obs)
    np.testing.assert_allclose(np.asarray(out["rewards"]), rewards, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(out["dones"]), dones)
    # different seeds give different spawns in My Way Home
    if scenario == "my_way_home":
        assert not np.array_equal(obs[0, 0], obs[1, 0])


def test_doom_episode_format_roundtrip(tmp_path):
    from icrl_jax.envs.host import vizdoom as vd
    t = 5
    ep = {"observations": np.zeros((t, 72, 128, 3), np.uint8),
          "actions": np.ones((t, 2), np.int32), "rewards": np.zeros(t, np.float32),
          "terminated": np.zeros(t, bool), "truncated": np.zeros(t, bool)}
    vd.save_episodes(str(tmp_path), "my_way_home", [ep, ep])
    meta, eps = vd.load_episodes(str(tmp_path))
    assert meta["num_episodes"] == 2 and eps[1]["actions"].shape == (t, 2)
    with pytest.raises(ValueError, match="observations"):
        vd.save_episodes(str(tmp_path / "bad"), "my_way_home",
                         [{**ep, "observations": np.zeros((t, 3, 72, 128), np.uint8)}])
