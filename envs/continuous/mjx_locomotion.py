"""Gymnasium's MuJoCo locomotion v5 tasks (Hopper, Walker2d, HalfCheetah) simulated by MuJoCo MJX.

These are the envs Minari's D4RL datasets (`mujoco/hopper/medium-v0`, ...) were recorded on, so
returns here are comparable with D4RL-normalised scores in the literature. The physics is
MuJoCo's own model (the MJCF assets that gymnasium ships, loaded by `mujoco` and moved to the
accelerator with `mujoco.mjx`); observation, reward, termination, frame skip and reset noise follow
gymnasium's `Hopper-v5` / `Walker2d-v5` / `HalfCheetah-v5` with their default arguments:

* **Observation**: `qpos[1:]` (no root x) then `qvel`, clipped to [-10, 10] for hopper and walker2d
  (11 / 17 / 17 values).
* **Reward**: `forward_weight * dx / dt + healthy_reward * healthy - ctrl_weight * |a|^2`, with
  dx the root's x displacement over the `frame_skip` physics steps (dt = timestep * frame_skip).
  HalfCheetah has no healthy term.
* **Termination** (hopper, walker2d) when unhealthy after the step: hopper needs z > 0.7,
  |angle| < 0.2 and every entry of `(qpos, qvel)[2:]` inside (-100, 100); walker2d needs
  0.8 < z < 2 and |angle| < 1. HalfCheetah never terminates. Episodes are truncated at 1000 steps.
* **Reset**: `qpos0 + U(-s, s)`, and `qvel` `U(-s, s)` (s = 5e-3), or for halfcheetah
  `0.1 * N(0, 1)` velocities and s = 0.1, then a forward pass (gymnasium's `set_state`).

Actions are torques in [-1, 1] (the MJCF's control range): traced actions are clipped before the
simulator sees them, so the control cost is that of the clipped action; concrete actions are
checked as for every continuous env (`LocomotionEnv.step`).

**Precision**: MJX computes in float32 by default and in float64 under `jax_enable_x64`;
`tests/test_mjx_locomotion.py` steps both beside gymnasium's MuJoCo (float64, C) from the same
states and bounds the difference of each.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
from functools import cached_property

import jax
import jax.numpy as jnp

from icrl_jax.core import validation
from icrl_jax.envs.continuous.locomotion import EPISODE_LENGTH, LocomotionEnv


@dataclasses.dataclass(frozen=True)
class GymMujocoTask:
    """The defaults of one gymnasium MuJoCo v5 task (see the module docstring)."""

    gym_id: str
    xml_file: str  # in gymnasium/envs/mujoco/assets
    frame_skip: int
    ctrl_cost_weight: float
    reset_noise_scale: float
    forward_reward_weight: float = 1.0
    healthy_reward: float = 0.0  # 0 with no healthy ranges: never terminates
    healthy_z_range: tuple[float, float] | None = None
    healthy_angle_range: tuple[float, float] | None = None
    healthy_state_range: tuple[float, float] | None = None  # on (qpos, qvel)[2:]
    velocity_clip: float | None = None
    normal_velocity_noise: bool = False  # qvel ~ s * N(0, 1) instead of U(-s, s)
    # D4RL's random and expert returns of the task (its `infos.py`), the 0 and 100 of the
    # normalised score every D4RL locomotion table reports.
    d4rl_reference_scores: tuple[float, float] | None = None

    @property
    def terminates(self) -> bool:
        return self.healthy_z_range is not None


#: Our env names -> gymnasium's task definitions (the v5 defaults).
TASKS = {
    "hopper_v5": GymMujocoTask(
        "Hopper-v5", "hopper.xml", frame_skip=4, ctrl_cost_weight=1e-3, reset_noise_scale=5e-3,
        healthy_reward=1.0, healthy_z_range=(0.7, float("inf")), healthy_angle_range=(-0.2, 0.2),
        healthy_state_range=(-100.0, 100.0), velocity_clip=10.0,
        d4rl_reference_scores=(-20.272305, 3234.3)),
    "walker2d_v5": GymMujocoTask(
        "Walker2d-v5", "walker2d_v5.xml", frame_skip=4, ctrl_cost_weight=1e-3,
        reset_noise_scale=5e-3, healthy_reward=1.0, healthy_z_range=(0.8, 2.0),
        healthy_angle_range=(-1.0, 1.0), velocity_clip=10.0,
        d4rl_reference_scores=(1.629008, 4592.3)),
    "halfcheetah_v5": GymMujocoTask(
        "HalfCheetah-v5", "half_cheetah.xml", frame_skip=5, ctrl_cost_weight=0.1,
        reset_noise_scale=0.1, normal_velocity_noise=True,
        d4rl_reference_scores=(-280.178953, 12135.0)),
}


#: gymnasium ids -> our env names (which env a dataset recorded on gymnasium is for).
ENV_OF_GYMNASIUM_ID = {task.gym_id: name for name, task in TASKS.items()}


def asset_path(xml_file: str) -> str:
    """Path of one of gymnasium's MuJoCo MJCF assets (without importing gymnasium's mujoco envs)."""
    return str(importlib.resources.files("gymnasium") / "envs" / "mujoco" / "assets" / xml_file)


def load_mujoco_model(xml_file: str):
    """The `mujoco.MjModel` of a gymnasium asset (the C model gymnasium's env simulates)."""
    import mujoco
    return mujoco.MjModel.from_xml_path(asset_path(xml_file))


class GymMujoco(LocomotionEnv):
    """One of gymnasium's MuJoCo v5 locomotion tasks on MJX (see the module docstring).

    Args:
      name: "hopper_v5", "walker2d_v5" or "halfcheetah_v5".
      episode_length: time limit (1000, gymnasium's and D4RL's).
    """

    def __init__(self, name: str = "hopper_v5", episode_length: int = EPISODE_LENGTH):
        if name not in TASKS:
            raise ValueError(f"unknown MJX locomotion env {name!r}; choose one of {tuple(TASKS)}")
        self.task = TASKS[name]
        self.mj_model = load_mujoco_model(self.task.xml_file)
        obs_dim = self.mj_model.nq - 1 + self.mj_model.nv
        super().__init__(name, self.mj_model.nu, obs_dim, episode_length)
        self.dt = float(self.mj_model.opt.timestep) * self.task.frame_skip
        self.gymnasium_id = self.task.gym_id
        self.d4rl_reference_scores = self.task.d4rl_reference_scores

    @cached_property
    def mjx_model(self):
        """The MJX model (float64 arrays when `jax_enable_x64` is on at first use)."""
        from mujoco import mjx
        with jax.ensure_compile_time_eval():  # first use may be inside a jitted function
            return mjx.put_model(self.mj_model)

    def physics_data(self, qpos: jax.Array, qvel: jax.Array):
        """`mjx.Data` at joint positions `(nq,)` and velocities `(nv,)`, after a forward pass
        (what gymnasium's `set_state` does)."""
        from mujoco import mjx
        m = self.mjx_model
        data = mjx.make_data(m).replace(qpos=jnp.asarray(qpos, m.qpos0.dtype),
                                        qvel=jnp.asarray(qvel, m.qpos0.dtype))
        return mjx.forward(m, data)

    def reset_state(self, key) -> tuple[jax.Array, jax.Array]:
        """A reset's joint positions `(nq,)` and velocities `(nv,)`: gymnasium's noise around
        the model's `qpos0` and rest."""
        m, task = self.mjx_model, self.task
        k_pos, k_vel = jax.random.split(key)
        s = task.reset_noise_scale
        dtype = m.qpos0.dtype
        qpos = m.qpos0 + jax.random.uniform(k_pos, (m.nq,), dtype, -s, s)
        if task.normal_velocity_noise:
            qvel = s * jax.random.normal(k_vel, (m.nv,), dtype)
        else:
            qvel = jax.random.uniform(k_vel, (m.nv,), dtype, -s, s)
        return qpos, qvel

    def physics_reset(self, key):
        return self.physics_data(*self.reset_state(key))

    def physics_obs(self, data):
        qvel = data.qvel
        if self.task.velocity_clip is not None:
            qvel = jnp.clip(qvel, -self.task.velocity_clip, self.task.velocity_clip)
        return jnp.concatenate([data.qpos[1:], qvel])

    def is_healthy(self, data) -> jax.Array:
        """bool `()`: gymnasium's `is_healthy` (True for tasks without healthy ranges)."""
        task = self.task
        if not task.terminates:
            return jnp.bool_(True)
        z, angle = data.qpos[1], data.qpos[2]
        healthy = ((task.healthy_z_range[0] < z) & (z < task.healthy_z_range[1])
                   & (task.healthy_angle_range[0] < angle) & (angle < task.healthy_angle_range[1]))
        if task.healthy_state_range is not None:
            state = jnp.concatenate([data.qpos, data.qvel])[2:]
            lo, hi = task.healthy_state_range
            healthy &= jnp.all((lo < state) & (state < hi))
        return healthy

    def physics_step(self, data, ctrl):
        from mujoco import mjx
        m, task = self.mjx_model, self.task
        x_before = data.qpos[0]
        data = data.replace(ctrl=jnp.asarray(ctrl, data.ctrl.dtype))
        data = jax.lax.fori_loop(0, task.frame_skip, lambda _, d: mjx.step(m, d), data)
        x_velocity = (data.qpos[0] - x_before) / self.dt
        healthy = self.is_healthy(data)
        ctrl_cost = task.ctrl_cost_weight * jnp.sum(jnp.square(ctrl))
        reward = (task.forward_reward_weight * x_velocity
                  + task.healthy_reward * healthy.astype(x_velocity.dtype) - ctrl_cost)
        terminated = ~healthy if task.terminates else jnp.bool_(False)
        return data, reward, terminated, {"x_velocity": x_velocity.astype(jnp.float32)}


#: What `env.kwargs` of the MJX tasks take (core/validation.py).
KWARGS = (validation.positive_int("episode_length", EPISODE_LENGTH),)


def HopperV5(**kwargs) -> GymMujoco:  # noqa: N802 - registry constructors
    return GymMujoco("hopper_v5", **kwargs)


def Walker2dV5(**kwargs) -> GymMujoco:  # noqa: N802
    return GymMujoco("walker2d_v5", **kwargs)


def HalfCheetahV5(**kwargs) -> GymMujoco:  # noqa: N802
    return GymMujoco("halfcheetah_v5", **kwargs)


HopperV5.KWARGS = Walker2dV5.KWARGS = HalfCheetahV5.KWARGS = KWARGS
