"""Metrics of learning histories: per-episode returns, regret, normalised scores."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def episode_returns(rewards: jax.Array, dones: jax.Array, max_episodes: int) -> jax.Array:
    """Return of each complete episode of each history.

    Args:
      rewards: `(N, T)`; dones: bool `(N, T)` True on an episode's last step.
      max_episodes: static number of episode slots to return.
    Returns:
      float32 `(N, max_episodes)`; NaN where the history has fewer complete episodes.
    """
    dones = jnp.asarray(dones, bool)
    episode_index = jnp.cumsum(dones, axis=1) - dones  # the ending step belongs to its episode
    sums = jax.vmap(lambda r, e: jax.ops.segment_sum(r, e, num_segments=max_episodes))(
        jnp.asarray(rewards, jnp.float32), episode_index)
    complete = jnp.arange(max_episodes)[None, :] < dones.sum(axis=1, keepdims=True)
    return jnp.where(complete, sums, jnp.nan)


def cumulative_regret(optimal_rewards: jax.Array, chosen_rewards: jax.Array) -> jax.Array:
    """Expected (pseudo-)regret accumulated over steps: `(N, T)` -> `(N, T)`."""
    return jnp.cumsum(optimal_rewards - chosen_rewards, axis=1)


def normalised_score(value, random_value, source_value):
    """0 for the random policy, 1 for the source algorithm (works for returns and for regrets)."""
    return (np.asarray(value) - random_value) / (np.asarray(source_value) - random_value)


def mean_and_stderr(x: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware mean and standard error along `axis`."""
    x = np.asarray(x, np.float64)
    count = np.sum(~np.isnan(x), axis=axis)
    mean = np.nanmean(x, axis=axis)
    std = np.nanstd(x, axis=axis)
    return mean, std / np.sqrt(np.maximum(count, 1))
