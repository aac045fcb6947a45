"""Training windows sampled on device from learning histories."""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.data.history import History, HistoryFormatError
from icrl_jax.models.tokens import shift_right


@flax.struct.dataclass
class StepWindows:
    """B windows of L consecutive steps, in the AD step format.

    Attributes:
      observations: int `(B, L)` or float `(B, L, *obs_shape)`: o_t.
      prev_actions: int32 `(B, L)`: a_{t-1} (`num_actions` = none at a history's first step).
      prev_rewards: float32 `(B, L)`: r_{t-1} (0 at a history's first step).
      actions: int32 `(B, L)`: a_t, the prediction targets.
      action_mask: bool `(B, A)`: the available actions of each window's task.
    """

    observations: jax.Array
    prev_actions: jax.Array
    prev_rewards: jax.Array
    actions: jax.Array
    action_mask: jax.Array


def to_step_windows(history: History) -> StepWindows:
    """Whole histories as N windows of length T (what `sample_windows` slices from)."""
    actions = jnp.asarray(history.actions, jnp.int32)
    return StepWindows(
        observations=jnp.asarray(history.observations),
        prev_actions=shift_right(actions, history.num_actions),
        prev_rewards=shift_right(jnp.asarray(history.rewards, jnp.float32), 0.0),
        actions=actions,
        action_mask=jnp.asarray(history.action_mask, bool),
    )


def check_dataset(history: History, *, num_actions: int, num_observations: int | None,
                  observation_shape: tuple[int, ...], window: int) -> None:
    """Raise `HistoryFormatError` when a dataset does not fit the model it is meant to train."""
    history.validate()
    if history.num_actions != num_actions:
        raise HistoryFormatError(
            f"dataset has {history.num_actions} actions per task but the model expects {num_actions}")
    obs = np.asarray(history.observations)
    if num_observations is not None:
        if obs.ndim != 2:
            raise HistoryFormatError(
                f"observations must be discrete ids of shape (N, T), got {obs.shape}")
        if obs.min() < 0 or obs.max() >= num_observations:
            raise HistoryFormatError(
                f"observation ids span [{obs.min()}, {obs.max()}] but the model embeds "
                f"{num_observations} ids")
    elif tuple(obs.shape[2:]) != tuple(observation_shape):
        raise HistoryFormatError(
            f"observations have per-step shape {obs.shape[2:]}, expected {tuple(observation_shape)}")
    if history.length < window:
        raise HistoryFormatError(
            f"histories have {history.length} steps, shorter than the training window {window}")
    actions = np.asarray(history.actions)
    if actions.min() < 0 or actions.max() >= num_actions:
        raise HistoryFormatError(f"actions span [{actions.min()}, {actions.max()}], outside "
                                 f"[0, {num_actions})")


def sample_windows(data: StepWindows, key: jax.Array, batch_size: int, window: int) -> StepWindows:
    """Uniformly sample `batch_size` windows of `window` steps (history, then offset), on device."""
    num_histories, length = data.actions.shape
    key_history, key_start = jax.random.split(key)
    rows = jax.random.randint(key_history, (batch_size,), 0, num_histories)
    starts = jax.random.randint(key_start, (batch_size,), 0, length - window + 1)

    def take(x, row, start):
        return jax.lax.dynamic_slice_in_dim(x[row], start, window, axis=0)

    def window_of(row, start):
        return StepWindows(
            observations=take(data.observations, row, start),
            prev_actions=take(data.prev_actions, row, start),
            prev_rewards=take(data.prev_rewards, row, start),
            actions=take(data.actions, row, start),
            action_mask=data.action_mask[row],
        )

    return jax.vmap(window_of)(rows, starts)
