"""gymnasium's MuJoCo v5 locomotion tasks on MJX (envs/continuous/mjx_locomotion.py), stepped beside
gymnasium's own env (MuJoCo's C simulator, float64).

Each check records one gymnasium trajectory (random torques, resets on termination) and steps our
env once from every recorded state, all states in one vmapped call, so each env and precision
compiles once. In float64 (a subprocess with JAX_ENABLE_X64) MJX computes what MuJoCo computes to
rounding; float32 is bounded looser.
"""

import json
import os
import subprocess
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.envs.continuous.mjx_locomotion import TASKS, GymMujoco
from icrl_jax.envs.base import InvalidActionError
from helpers import check_env_contract
from xla_flags import xla_flags

pytest.importorskip("mujoco.mjx", reason="the MJX envs need mujoco (pip install 'icrl-jax[continuous]')")


def gym_transitions(name: str, steps: int, seed: int = 0) -> dict:
    """`steps` transitions of gymnasium's env under uniform random torques, from the state
    before each step: qpos/qvel before and after, actions, rewards, terminations, observations."""
    env = gym.make(TASKS[name].gym_id).unwrapped
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    rows = {k: [] for k in ("qpos", "qvel", "action", "next_qpos", "next_qvel", "reward",
                            "terminated", "obs")}
    for _ in range(steps):
        rows["qpos"].append(env.data.qpos.copy())
        rows["qvel"].append(env.data.qvel.copy())
        action = rng.uniform(-1.0, 1.0, env.action_space.shape)
        obs, reward, terminated, _, _ = env.step(action)
        for key, value in (("action", action), ("next_qpos", env.data.qpos.copy()),
                           ("next_qvel", env.data.qvel.copy()), ("reward", reward),
                           ("terminated", terminated), ("obs", obs)):
            rows[key].append(value)
        if terminated:
            env.reset(seed=int(rng.integers(1 << 30)))
    return {k: np.asarray(v) for k, v in rows.items()}


def one_step_from_each(env: GymMujoco, ref: dict) -> dict:
    """Our physics stepped once from each recorded state (vmapped), as numpy."""
    def one(qpos, qvel, action):
        data, reward, terminated, _ = env.physics_step(env.physics_data(qpos, qvel), action)
        return dict(next_qpos=data.qpos, next_qvel=data.qvel, reward=reward,
                    terminated=terminated, obs=env.physics_obs(data))

    out = jax.jit(jax.vmap(one))(ref["qpos"], ref["qvel"], ref["action"])
    return jax.device_get(out)


def max_errors(ours: dict, ref: dict) -> dict:
    return {k: float(np.max(np.abs(np.asarray(ours[k], np.float64) - ref[k])))
            for k in ("next_qpos", "next_qvel", "reward", "obs")}


def float64_errors(name: str, steps: int) -> dict:
    """Max errors of float64 MJX against gymnasium; run in a process started with
    JAX_ENABLE_X64=1 (jitted functions cached in float32 by earlier tests would be reused)."""
    assert jax.config.jax_enable_x64
    ref = gym_transitions(name, steps)
    ours = one_step_from_each(GymMujoco(name), ref)
    assert ours["next_qpos"].dtype == np.float64
    return dict(max_errors(ours, ref), falls=int(ref["terminated"].sum()),
                terminations_equal=bool(np.array_equal(ours["terminated"], ref["terminated"])))


#: (env, steps) of the float64 checks, all in one process (one start, one import of MJX).
FLOAT64_CHECKS = (("hopper_v5", 300), ("walker2d_v5", 300), ("halfcheetah_v5", 200))


@pytest.fixture(scope="module")
def float64_results() -> dict:
    env = {**os.environ, "JAX_ENABLE_X64": "1", "XLA_FLAGS": xla_flags(os.environ)}
    args = [f"{name}:{steps}" for name, steps in FLOAT64_CHECKS]
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         env=env, cwd=os.path.dirname(__file__))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [name for name, _ in FLOAT64_CHECKS])
def test_float64_steps_equal_gymnasium_mujoco(name, float64_results):
    errors = float64_results[name]
    if TASKS[name].terminates:
        assert errors["falls"] > 0, "the trajectory should include falls (terminations)"
    # Velocities after a contact-rich step carry the solver's rounding, scaled by 1 / dt.
    assert errors["next_qpos"] < 1e-9 and errors["next_qvel"] < 1e-6, errors
    assert errors["reward"] < 1e-6 and errors["obs"] < 1e-6, errors
    assert errors["terminations_equal"], errors


def test_float32_steps_stay_close_to_gymnasium_mujoco():
    ref = gym_transitions("hopper_v5", 200, seed=1)
    env = GymMujoco("hopper_v5")
    ours = one_step_from_each(env, ref)
    assert ours["next_qpos"].dtype == np.float32
    errors = max_errors(ours, ref)
    # float32 rounding: positions ~1e-7, velocities (differences over 2 ms substeps) ~1e-5.
    assert errors["next_qpos"] < 1e-5 and errors["next_qvel"] < 1e-3, errors
    assert errors["reward"] < 1e-3, errors
    # Termination can only differ where a health margin is within the float32 error.
    z, angle = ref["next_qpos"][:, 1], ref["next_qpos"][:, 2]
    margin = np.minimum(np.abs(z - 0.7), np.abs(np.abs(angle) - 0.2))
    differs = ours["terminated"] != ref["terminated"]
    assert np.all(margin[differs] < 1e-3)


def test_registered_specs_and_gymnax_interface():
    for name, obs_dim, act_dim in (("hopper_v5", 11, 3), ("walker2d_v5", 17, 6),
                                   ("halfcheetah_v5", 17, 6)):
        spec = envs.make(name)
        assert spec.continuous_actions and spec.action_dim == act_dim
        assert spec.observation_shape == (obs_dim,) and spec.episode_length == 1000
        gym_env = gym.make(TASKS[name].gym_id)
        assert gym_env.observation_space.shape == (obs_dim,)
        assert gym_env.unwrapped.dt == pytest.approx(spec.dt)
    with pytest.raises(ValueError, match="unknown MJX locomotion env"):
        GymMujoco("ant_v5")

    env = envs.make("hopper_v5", episode_length=3)
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key)
    assert obs.shape == (11,) and obs.dtype == jnp.float32
    with pytest.raises(InvalidActionError, match="outside"):
        env.step(key, state, np.array([0.0, 2.0, 0.0], np.float32))

    # The registered-env contract (as test_registries.py checks every JAX env), three tasks of
    # zero torques from a near-upright reset: no fall, so the 3-step limit ends each episode, and
    # the auto-reset starts the next.
    _, (_, rewards, terminated, truncated, info) = check_env_contract(env, steps=4)
    assert not np.any(terminated)
    np.testing.assert_array_equal(truncated, np.tile([False, False, True, False], (3, 1)))
    np.testing.assert_allclose(rewards, 1.0 + info["x_velocity"], atol=1e-5)  # healthy, no cost


def test_resets_follow_gymnasiums_noise():
    n = 2048
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    for name in ("hopper_v5", "halfcheetah_v5"):
        env = GymMujoco(name)
        qpos, qvel = jax.device_get(jax.jit(jax.vmap(env.reset_state))(keys))
        dqpos = qpos - np.asarray(env.mj_model.qpos0)
        s = TASKS[name].reset_noise_scale
        assert np.all(np.abs(dqpos) <= s + 1e-6)
        assert np.abs(dqpos.std() - s / np.sqrt(3)) < 0.05 * s  # U(-s, s)
        expected_std = s if TASKS[name].normal_velocity_noise else s / np.sqrt(3)
        assert np.abs(qvel.std() - expected_std) < 0.05 * expected_std
        assert np.abs(qvel.mean()) < 0.05 * s


if __name__ == "__main__":  # python tests/test_mjx_locomotion.py ENV:STEPS ... (with JAX_ENABLE_X64=1)
    print(json.dumps({name: float64_errors(name, int(steps))
                      for name, steps in (arg.split(":") for arg in sys.argv[1:])}))


def test_locomotion_datasets_on_d4rl_tasks_store_d4rl_references():
    """PPO-made datasets on D4RL's tasks are normalised by D4RL's own random and expert returns
    (hopper's -20.27 and 3234.3: a return of 1422 scores 44.3); on any other env, by our own
    random and expert policies."""
    from icrl_jax.data.locomotion_data import reference_returns
    from icrl_jax.data.minari_io import normalized_score
    ref_min, ref_max, kind = reference_returns(GymMujoco("hopper_v5"), 5.0, 900.0)
    assert (ref_min, ref_max, kind) == (-20.272305, 3234.3, "d4rl")
    assert float(normalized_score(1422.06, ref_min, ref_max)) == pytest.approx(44.32, abs=0.01)
    assert reference_returns(GymMujoco("walker2d_v5"), 0.0, 1.0)[:2] == (1.629008, 4592.3)
    assert reference_returns(GymMujoco("halfcheetah_v5"), 0.0, 1.0)[:2] == (-280.178953, 12135.0)
    assert reference_returns(envs.make("point_maze"), 5.0, 900.0) == (5.0, 900.0, "ours")
