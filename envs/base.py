"""Conventions shared by every JAX-native in-context RL environment.

Every environment subclasses gymnax's `Environment` (gymnax >= 1.0: `step` returns
`obs, state, reward, terminated, truncated, info`) and follows these rules:

* **The task lives in `EnvParams`.** Arm means, goal cells, key/door cells and action sets are all
  params, so `jax.vmap` over a batch of params is a batch of tasks.
* **Auto-reset keeps the task.** gymnax's `step` resets the episode when it ends but keeps `params`,
  so one stream of steps under fixed params is a learning history across many episodes.
* **Actions are int32 indices** into a per-task action list padded to `num_actions`; the params'
  `action_mask` (bool, `(num_actions,)`) says which are available. `ICRLEnv.step` raises
  `InvalidActionError` for an unavailable concrete action; under `jit`/`vmap` (a traced action) it
  cannot raise, so an action out of range or masked out is a no-op: the state stays as it was,
  the observation is the current state's (`get_obs`), reward 0, not terminated or truncated, and
  `info["invalid_action"]` is True. `transition` (the data-generation hot path) has no such guard.
* **Observations** are either discrete ids (int32 scalars, `num_observations` of them) or float32
  vectors of shape `observation_shape`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import environment


class InvalidActionError(ValueError):
    """An action index outside the task's available action set."""


BANDIT, EPISODIC = "bandit", "episodic"
#: How shared code scores rollouts of an env (`EnvSpec.scoring`): by cumulative expected regret,
#: or by episode returns.
REGRET, RETURNS = "regret", "returns"


class EnvSpec:
    """What an environment is: the static metadata that models, data and evaluation read.

    Shared by JAX-native envs (`ICRLEnv`) and host simulators behind the bridge
    (`envs.host.specs.HostEnv`). Shared code reads these typed attributes; it never probes an env
    with `hasattr`.
    """

    #: Padded (maximum) number of actions; actions are indices in [0, num_actions).
    num_actions: int
    #: Number of discrete observation ids, or None for float-vector observations.
    num_observations: int | None = None
    #: Shape of one observation (() for discrete ids).
    observation_shape: tuple[int, ...] = ()
    #: BANDIT (every step is an episode; scored by expected regret, `expected_rewards` defined)
    #: or EPISODIC (scored by episode returns).
    kind: str = EPISODIC

    @property
    def scoring(self) -> str:
        """REGRET for BANDIT envs (every step is one decision with known expected rewards),
        RETURNS for EPISODIC ones."""
        return REGRET if self.kind == BANDIT else RETURNS
    #: Steps per episode when episodes have a fixed time limit (None for bandits).
    episode_length: int | None = None
    #: Size of a finite task set (task ids 0..num_tasks-1), or None for unlimited tasks.
    num_tasks: int | None = None
    #: Side of the square grid whose cells the observation ids number (None: not a grid).
    grid_size: int | None = None
    #: Whether `expert_action(state, params)` gives a privileged expert's action.
    has_oracle: bool = False
    #: Whether `optimal_return(params)` gives each task's best achievable episode return.
    has_optimal_return: bool = False
    #: Whether the env state carries a privileged `has_key` flag (Key-to-Door).
    key_flag: bool = False
    #: Whether each action index is a row of atomic moves, `params.action_set` (composite rooms).
    composite_actions: bool = False
    #: Whether observations are uint8 images.
    pixels: bool = False
    #: Whether the env runs in a host simulator behind the bridge (False: JAX-native).
    host: bool = False
    #: Whether actions are float32 vectors of size `action_dim` (else int32 indices).
    continuous_actions: bool = False
    action_dim: int = 0
    #: Whether termination means the goal was reached (the point maze), so evaluations report
    #: `goal_reached` and `episode_length`; locomotion terminates on a fall, Dark Room never.
    goal_terminates: bool = False
    #: The id of the gymnasium env whose dynamics, rewards and termination this env computes
    #: (datasets recorded on that env are this env's, e.g. Minari's D4RL ones), or None.
    gymnasium_id: str | None = None

    @property
    def discrete_observations(self) -> bool:
        return self.num_observations is not None

    @property
    def action_dims(self) -> tuple[int, ...]:
        """Values per component of a (multi-)discrete action: `(num_actions,)` unless the env
        factors its actions (then `num_actions == prod(action_dims)`)."""
        return (self.num_actions,)

    @property
    def observation_factors(self) -> tuple[int, ...]:
        """Values per categorical factor of a discrete observation id (`(num_observations,)`
        unless the env factors its observations, e.g. DoorKey's (agent cell, key cell))."""
        return (self.num_observations,) if self.discrete_observations else ()

    def split_observation(self, obs: jax.Array) -> jax.Array:
        """Observation ids int `(...)` -> factors int32 `(..., len(observation_factors))`."""
        return jnp.asarray(obs, jnp.int32)[..., None]

    def join_observation(self, factors: jax.Array) -> jax.Array:
        """Factors int `(..., len(observation_factors))` -> observation ids int32 `(...)`."""
        return jnp.asarray(factors, jnp.int32)[..., 0]

    def next_observation(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """Deterministic dynamics on observation ids (envs whose observation is their state):
        ids int `(...)`, actions int `(...)` -> the next ids."""
        raise TypeError(f"{type(self).__name__} has no deterministic observation dynamics")

    def goal_observation(self, obs: jax.Array) -> jax.Array:
        """The observation of having reached the goal the observation `obs` shows (envs whose
        observation carries their goal: goal-conditioned policies condition on it)."""
        raise TypeError(f"{type(self).__name__}'s observations do not show a goal")

    def split_action(self, action: jax.Array) -> jax.Array:
        """Flat action int `(...)` -> components int32 `(..., len(action_dims))`."""
        return jnp.asarray(action, jnp.int32)[..., None]

    def join_action(self, components: jax.Array) -> jax.Array:
        """Components int `(..., len(action_dims))` -> the flat action int32 `(...)`."""
        return jnp.asarray(components, jnp.int32)[..., 0]

    def expected_rewards(self, state: Any, params: Any) -> jax.Array:
        """Bandits: the expected reward of every arm, float32 `(num_actions,)`."""
        raise TypeError(f"{type(self).__name__} is {self.kind}, not a bandit: no expected rewards")

    def optimal_return(self, params: Any) -> jax.Array:
        """Best achievable (expected) episode return of a task, float32 `()` (envs with
        `has_optimal_return`)."""
        raise TypeError(f"{type(self).__name__} defines no optimal return "
                        "(has_optimal_return=False)")

    def expert_action(self, state: Any, params: Any) -> jax.Array:
        """The privileged expert's action (envs with `has_oracle`)."""
        raise TypeError(f"{type(self).__name__} has no privileged expert (has_oracle=False)")

    def subgoal_progress(self, state: Any, params: Any) -> jax.Array:
        """Per action, int32 `(num_actions,)` in {-1, 0, 1}: whether it brings the agent closer to
        its current sub-goal (the noisy-rational expert's costs; Uni[MASK]'s DoorKey)."""
        raise TypeError(f"{type(self).__name__} defines no sub-goal progress for a "
                        "noisy-rational expert")

    def action_mask(self, params: Any) -> jax.Array:
        """Available actions of a task, bool `(num_actions,)`."""
        return params.action_mask


class ICRLEnv(EnvSpec, environment.Environment):
    """Base class of the JAX-native environments (gymnax `Environment` + `EnvSpec`)."""

    def step(self, key, state, action, params=None):
        """gymnax `step` with defined behaviour for actions outside the task's action set.

        * Concrete action and mask (eager): an unavailable action raises `InvalidActionError`.
        * Traced (under `jit`/`vmap`), where nothing can raise: an action outside
          `[0, num_actions)` or masked out by `action_mask(params)` is a no-op. The state is
          returned unchanged (no time step, no auto-reset), the observation is the current state's
          (`get_obs(state, params)`), the reward 0, terminated and truncated False (and so are
          info's; its `final_observation` is the current observation and `discount` 1).

        `info["invalid_action"]` (bool) is always present and says which case happened; a valid
        action gives exactly `transition`'s results. The guard costs one extra observation and a
        select per step, so data generation calls `transition`, which has none. A non-integer
        action dtype raises `InvalidActionError` in both cases (the dtype is known while tracing).
        """
        if params is None:
            params = self.default_params
        mask = self.action_mask(params)
        if not isinstance(action, jax.core.Tracer) and not isinstance(mask, jax.core.Tracer):
            check_actions(np.asarray(action), np.asarray(mask))
            *out, info = self.transition(key, state, action, params)
            return (*out, {**info, "invalid_action": jnp.bool_(False)})
        action = jnp.asarray(action)
        if not jnp.issubdtype(action.dtype, jnp.integer):
            raise InvalidActionError(f"actions must be integer indices, got dtype {action.dtype}")
        # Step with an in-range action (any will do), then select the old state where invalid.
        safe = jnp.clip(action, 0, self.num_actions - 1)
        valid = (action >= 0) & (action < self.num_actions) & mask[safe]
        obs, new_state, reward, terminated, truncated, info = self.transition(
            key, state, safe, params)
        current = self.get_obs(state, params)

        def keep(new, old):
            return jax.tree.map(lambda n, o: jnp.where(valid, n, o), new, old)

        terminated, truncated = valid & terminated, valid & truncated
        info = {**info, "terminated": terminated, "truncated": truncated,
                "invalid_action": ~valid}
        if "final_observation" in info:
            info["final_observation"] = keep(info["final_observation"], current)
        if "discount" in info:  # gymnax's 1 - done: the episode goes on
            info["discount"] = jnp.where(valid, info["discount"], jnp.ones_like(info["discount"]))
        return (keep(obs, current), keep(new_state, state),
                jnp.where(valid, reward, jnp.zeros_like(reward)), terminated, truncated, info)

    def transition(self, key, state, action, params):
        """The jitted step behind `step`, without the eager action check.

        Defaults to gymnax's step (step_env, then an auto-reset selected by `done`). Environments
        whose every step ends an episode (bandits) override this to skip the reset-and-select work.
        """
        return environment.Environment.step(self, key, state, action, params)


def check_actions(actions: np.ndarray, action_mask: np.ndarray) -> None:
    """Raise `InvalidActionError` naming the offending action if any is not available.

    Args:
      actions: int array `(...)` of action indices.
      action_mask: bool array `(..., num_actions)` broadcastable against `actions`.
    """
    actions = np.asarray(actions)
    action_mask = np.asarray(action_mask)
    num_actions = action_mask.shape[-1]
    if not np.issubdtype(actions.dtype, np.integer):
        raise InvalidActionError(f"actions must be integer indices, got dtype {actions.dtype}")
    out_of_range = (actions < 0) | (actions >= num_actions)
    if out_of_range.any():
        bad = actions[out_of_range].ravel()[0]
        raise InvalidActionError(
            f"action {int(bad)} is outside the action set [0, {num_actions})")
    mask = np.broadcast_to(action_mask, actions.shape + (num_actions,))
    available = np.take_along_axis(mask, actions[..., None], axis=-1)[..., 0]
    if not available.all():
        idx = np.argwhere(~available)[0]
        valid = np.flatnonzero(mask[tuple(idx)])
        raise InvalidActionError(
            f"action {int(actions[tuple(idx)])} at index {tuple(int(i) for i in idx)} is not "
            f"available in this task; available actions: {valid.tolist()}")


def stack_params(params_list: list[Any]) -> Any:
    """Stack a list of per-task params into one batched pytree (leading axis = task)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *params_list)
