"""Conventions shared by every JAX-native in-context RL environment.

Every environment subclasses gymnax's `Environment` (gymnax >= 1.0: `step` returns
`obs, state, reward, terminated, truncated, info`) and follows these rules:

* **The task lives in `EnvParams`.** Arm means, goal cells, key/door cells and action sets are all
  params, so `jax.vmap` over a batch of params is a batch of tasks.
* **Auto-reset keeps the task.** gymnax's `step` resets the episode when it ends but keeps `params`,
  so one stream of steps under fixed params is a learning history across many episodes.
* **Actions are int32 indices** into a per-task action list padded to `num_actions`; the params'
  `action_mask` (bool, `(num_actions,)`) says which are available.
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


class ICRLEnv(environment.Environment):
    """Base class: adds the static metadata that models and data pipelines need."""

    #: Padded (maximum) number of actions; actions are indices in [0, num_actions).
    num_actions: int
    #: Number of discrete observation ids, or None for float-vector observations.
    num_observations: int | None = None
    #: Shape of one observation (() for discrete ids).
    observation_shape: tuple[int, ...] = ()

    @property
    def discrete_observations(self) -> bool:
        return self.num_observations is not None

    def action_mask(self, params: Any) -> jax.Array:
        """Available actions of a task, bool `(num_actions,)`."""
        return params.action_mask

    def step(self, key, state, action, params=None):
        """gymnax `step`, plus an eager check that a concrete action is in the action set.

        Under `jit` the action is a tracer and cannot raise; callers that feed model actions
        validate them at their own boundary (see `check_actions`).
        """
        if params is None:
            params = self.default_params
        if not isinstance(action, jax.core.Tracer) and not isinstance(params.action_mask, jax.core.Tracer):
            check_actions(np.asarray(action), np.asarray(self.action_mask(params)))
        return self.transition(key, state, action, params)

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
