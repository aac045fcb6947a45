"""Sequence formats: how a method turns interaction data into transformer tokens."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class ObservationEmbedding(nn.Module):
    """Discrete ids through a lookup table, float vectors through a linear map.

    With `grid_size`, ids are cells `row * grid_size + col` of a grid world, and a linear map of
    their one-hot row and column is added to the table entry: cells that are close share
    features, so navigating to a goal cell never seen in training needs no new table entry.

    Args (call): observations int `(B, T)` or float `(B, T, *obs_shape)`. Returns `(B, T, D)`.
    """

    d_model: int
    num_observations: int | None
    grid_size: int | None = None

    @nn.compact
    def __call__(self, observations):
        if self.num_observations is not None:
            embedding = nn.Embed(self.num_observations, self.d_model, name="table")(observations)
            if self.grid_size is not None:
                rows = jax.nn.one_hot(observations // self.grid_size, self.grid_size)
                cols = jax.nn.one_hot(observations % self.grid_size, self.grid_size)
                embedding = embedding + nn.Dense(self.d_model, name="coordinates")(
                    jnp.concatenate([rows, cols], axis=-1))
            return embedding
        flat = observations.reshape(observations.shape[:2] + (-1,)).astype(jnp.float32)
        return nn.Dense(self.d_model, name="linear")(flat)


class ADStepTokens(nn.Module):
    """One token per step built from (previous action, previous reward, observation).

    The three embeddings are concatenated and mixed by one linear map, so a step costs one token
    (as in the n-gram paper) rather than three.

    `prev_actions` may be int ids `(B, T)` (embedded by a table with one extra "no previous
    action" row, id = `num_actions`) or precomputed float embeddings `(B, T, E)` (Headless-AD).
    """

    d_model: int
    num_actions: int
    num_observations: int | None
    grid_size: int | None = None

    @nn.compact
    def __call__(self, observations, prev_actions, prev_rewards):
        obs_embedding = ObservationEmbedding(self.d_model, self.num_observations, self.grid_size,
                                             name="observation")(observations)
        if jnp.issubdtype(prev_actions.dtype, jnp.integer):
            action_embedding = nn.Embed(self.num_actions + 1, self.d_model,
                                        name="action")(prev_actions)
        else:
            action_embedding = nn.Dense(self.d_model, name="action_linear")(prev_actions)
        reward_embedding = nn.Dense(self.d_model, name="reward")(
            prev_rewards[..., None].astype(jnp.float32))
        stacked = jnp.concatenate([obs_embedding, action_embedding, reward_embedding], axis=-1)
        return nn.Dense(self.d_model, name="mix")(stacked)


def shift_right(x: jax.Array, fill) -> jax.Array:
    """`(N, T, ...)` -> the same with x[:, t] moved to t + 1 and `fill` at t = 0."""
    pad = jnp.full_like(x[:, :1], fill)
    return jnp.concatenate([pad, x[:, :-1]], axis=1)
