"""MuJoCo-style locomotion (hopper, walker2d, halfcheetah) through brax, as gymnax environments.

The dynamics, observations, rewards and termination are brax's own (`brax.envs`, v0.14): this
wrapper only adds gymnax's interface (keys in, auto-reset, time limit), our action checks and the
`EnvSpec` metadata. One step is one call of the brax env's `step` (brax's `n_frames` physics
substeps, dt 0.008 for hopper / walker2d, 0.05 for halfcheetah as in gym's MuJoCo envs).

**Backend.** brax offers `spring`, `positional`, `generalized` and `mjx`; the default is `spring`,
the fastest on a CPU by far (benchmarks/RESULTS.md); any other can be chosen with `backend=`.

**Episodes** last at most 1000 steps (D4RL's time limit: `truncated` at step 1000). Hopper and
walker2d terminate when unhealthy (brax's healthy z / angle / state ranges, as gym's v3 envs);
halfcheetah never terminates. Auto-reset draws brax's reset noise from the step key.

**Observation**: float32 `(obs_dim,)`, brax's (hopper 11, walker2d 17, halfcheetah 17: joint
positions without the root x, then velocities clipped to [-10, 10]).
**Action**: float32 `(action_dim,)` torques in [-1, 1] (hopper 3, walker2d 6, halfcheetah 6).
`step` checks actions as the point maze does: a wrong shape or dtype raises `InvalidActionError`
(also under `jit`: shapes are static); an eager action that is non-finite or outside [-1, 1]
raises; traced values are clipped to [-1, 1] (NaN -> 0) before brax sees them, so brax's reward
(its control cost) is that of the clipped action. `transition` (no checks) is the hot path.

There is one task: `task_params(ids)` gives the same params for every id (`num_tasks=None`, so
any number of training "tasks" is just that many independent streams).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from icrl_jax.core import validation
from icrl_jax.envs.base import EPISODIC, ICRLEnv
from icrl_jax.envs.continuous.point_maze import check_continuous_action
from icrl_jax.envs.tasks import as_task_ids

#: Our env names -> brax's.
BRAX_NAMES = {"hopper": "hopper", "walker2d": "walker2d", "halfcheetah": "halfcheetah"}
BACKENDS = ("spring", "positional", "generalized", "mjx")
DEFAULT_BACKEND = "spring"  # fastest on CPU by measurement (module docstring)
EPISODE_LENGTH = 1000  # D4RL / gym MuJoCo time limit


@struct.dataclass(kw_only=True)
class LocomotionState(environment.EnvState):
    """physics: the simulator's state (brax: its `State` with pipeline state, obs, reward, done,
    metrics; MJX: `mjx.Data`); time: int32 `()` steps taken this episode."""

    physics: object
    time: jax.Array


@struct.dataclass(kw_only=True)
class LocomotionParams(environment.EnvParams):
    """max_steps_in_episode: int32 `()`, the time limit."""

    max_steps_in_episode: jax.Array


def make_brax_env(name: str, backend: str = DEFAULT_BACKEND):
    """brax's own environment `name` on `backend` (what `Locomotion` wraps)."""
    if name not in BRAX_NAMES:
        raise ValueError(f"unknown locomotion env {name!r}; choose one of {tuple(BRAX_NAMES)}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown brax backend {backend!r}; choose one of {BACKENDS}")
    from brax import envs as brax_envs
    with warnings.catch_warnings():  # brax warns on every model load that it is unmaintained
        warnings.simplefilter("ignore", UserWarning)
        return brax_envs.get_environment(BRAX_NAMES[name], backend=backend)


class LocomotionEnv(ICRLEnv):
    """The gymnax interface of a locomotion simulator with torques in [-1, 1].

    Subclasses give the physics: `physics_reset(key) -> (obs, physics)`,
    `physics_obs(physics) -> obs` and `physics_step(physics, ctrl) -> (physics, reward,
    terminated, info)`; this class adds keys, auto-reset, the time limit, action checks (see the
    module docstring) and the `EnvSpec` metadata.
    """

    continuous_actions = True
    num_actions = 0  # no discrete actions; see `action_dim`
    num_observations = None
    kind = EPISODIC
    num_tasks = None
    grid_size = None

    def __init__(self, name: str, action_dim: int, observation_dim: int,
                 episode_length: int = EPISODE_LENGTH):
        super().__init__()
        if int(episode_length) < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        self.env_name = name
        self.action_dim = int(action_dim)
        self.observation_shape = (int(observation_dim),)
        self.episode_length = int(episode_length)

    @property
    def name(self) -> str:
        return self.env_name

    @property
    def default_params(self) -> LocomotionParams:
        return LocomotionParams(max_steps_in_episode=jnp.int32(self.episode_length))

    def task_params(self, task_ids) -> LocomotionParams:
        """The (one) task's params for ids int `()` or `(n,)` (batched along n)."""
        ids = as_task_ids(task_ids, self.num_tasks)
        return LocomotionParams(max_steps_in_episode=jnp.full(
            ids.shape, self.episode_length, jnp.int32))

    def action_space(self, params=None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.action_dim,), jnp.float32)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, self.observation_shape, jnp.float32)

    def action_mask(self, params):
        raise TypeError(f"{type(self).__name__} has continuous actions "
                        f"(action_dim={self.action_dim}): there is no action mask")

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        return self.physics_obs(state.physics).astype(jnp.float32)

    def reset_env(self, key, params):
        state = LocomotionState(physics=self.physics_reset(key), time=jnp.int32(0))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        ctrl = jnp.clip(jnp.nan_to_num(jnp.asarray(action, jnp.float32), nan=0.0), -1.0, 1.0)
        physics, reward, terminated, info = self.physics_step(state.physics, ctrl)
        new_state = LocomotionState(physics=physics, time=state.time + 1)
        return self.get_obs(new_state), new_state, reward.astype(jnp.float32), terminated, info

    def step(self, key, state, action, params=None):
        """gymnax `step` with continuous-action checks (see the module docstring);
        `info["invalid_action"]` is always False (no action is a no-op)."""
        if params is None:
            params = self.default_params
        check_continuous_action(action, self.action_dim)
        action = jnp.asarray(action, jnp.float32)
        *out, info = self.transition(key, state, action, params)
        return (*out, {**info, "invalid_action": jnp.bool_(False)})


class Locomotion(LocomotionEnv):
    """A brax locomotion env with continuous actions (see the module docstring).

    Args:
      name: "hopper", "walker2d" or "halfcheetah".
      backend: brax physics backend (default "spring", the fastest measured on CPU).
      episode_length: time limit (1000, D4RL's).
    """

    def __init__(self, name: str = "hopper", backend: str = DEFAULT_BACKEND,
                 episode_length: int = EPISODE_LENGTH):
        self.backend = backend
        self.brax_env = make_brax_env(name, backend)
        super().__init__(name, self.brax_env.action_size, self.brax_env.observation_size,
                         episode_length)

    def physics_reset(self, key):
        return self.brax_env.reset(key)

    def physics_obs(self, physics):
        return physics.obs

    def physics_step(self, physics, ctrl):
        nxt = self.brax_env.step(physics, ctrl)  # deterministic: brax steps take no key
        return nxt, nxt.reward, nxt.done > 0.5, {"x_velocity": nxt.metrics["x_velocity"]}


def Hopper(**kwargs) -> Locomotion:  # noqa: N802 - registry constructors
    return Locomotion("hopper", **kwargs)


def Walker2d(**kwargs) -> Locomotion:  # noqa: N802
    return Locomotion("walker2d", **kwargs)


def HalfCheetah(**kwargs) -> Locomotion:  # noqa: N802
    return Locomotion("halfcheetah", **kwargs)


#: What `env.kwargs` of the brax tasks take (core/validation.py).
Hopper.KWARGS = Walker2d.KWARGS = HalfCheetah.KWARGS = (
    validation.choice("backend", BACKENDS), validation.positive_int("episode_length", EPISODE_LENGTH))
