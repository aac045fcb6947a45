"""AD-family step tokens: one token per step of a learning history, from the previous action,
the previous reward and the observation (`ADStepTokens`), and the observation's embedding
(`ObservationEmbedding`: ids, grid cells or float vectors)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class _DenseParameters(nn.Module):
    """The kernel `(in, out)` and bias `(out,)` of an `nn.Dense(out)` applied to `in` features,
    created under the same names, initialisers and order as `nn.Dense`'s, so a module that folds
    a linear map into others keeps `nn.Dense`'s parameter tree and initial values."""

    in_features: int
    features: int

    @nn.compact
    def __call__(self):
        kernel = self.param("kernel", nn.linear.default_kernel_init,
                            (self.in_features, self.features))
        return kernel, self.param("bias", nn.initializers.zeros_init(), (self.features,))


def _grid_coordinates(ids: jax.Array, grid_size: int) -> jax.Array:
    """One-hot row and column of grid cells `row * grid_size + col`: `(...,)` -> `(..., 2 g)`."""
    return jnp.concatenate([jax.nn.one_hot(ids // grid_size, grid_size),
                            jax.nn.one_hot(ids % grid_size, grid_size)], axis=-1)


class ObservationEmbedding(nn.Module):
    """Discrete ids through a lookup table, float vectors through a linear map.

    With `grid_size`, ids are cells `row * grid_size + col` of a grid world, and a linear map of
    their one-hot row and column is added to the table entry: cells that are close share
    features, so navigating to a goal cell never seen in training needs no new table entry.

    Args (call): observations int `(B, T)` or float `(B, T, *obs_shape)`. Returns `(B, T, D)`.
    `linear_map`: the embedding followed by a linear map `(kernel (D, D'), bias)`, folded into
    the table (when it has no more rows than there are tokens) or into the linear map of float
    vectors, `(B, T, D')`.
    """

    d_model: int
    num_observations: int | None
    grid_size: int | None = None

    @nn.compact
    def __call__(self, observations, linear_map=None):
        if self.num_observations is not None:
            table = nn.Embed(self.num_observations, self.d_model, name="table").embedding
            if self.grid_size is not None:
                kernel, bias = _DenseParameters(2 * self.grid_size, self.d_model,
                                                name="coordinates")()
                cells = _grid_coordinates(jnp.arange(self.num_observations), self.grid_size)
                table = table + cells @ kernel + bias  # every id's embedding, (n, D)
        else:
            table = None
            features = int(np.prod(observations.shape[2:]))
            kernel, bias = _DenseParameters(features, self.d_model, name="linear")()
        map_kernel, map_bias = linear_map if linear_map is not None else (None, None)
        if table is not None:
            if map_kernel is None:
                return jnp.take(table, observations, axis=0)
            if table.shape[0] > observations.size:  # more ids than tokens: map the tokens
                return jnp.take(table, observations, axis=0) @ map_kernel + map_bias
            return jnp.take(table @ map_kernel + map_bias, observations, axis=0)
        if map_kernel is not None:  # (x W1 + b1) W2 + b2 = x (W1 W2) + (b1 W2 + b2)
            kernel, bias = kernel @ map_kernel, bias @ map_kernel + map_bias
        flat = observations.reshape(observations.shape[:2] + (-1,)).astype(jnp.float32)
        return flat @ kernel.astype(flat.dtype) + bias


class ADStepTokens(nn.Module):
    """One token per step built from (previous action, previous reward, observation).

    The three embeddings are concatenated and mixed by one linear map, so a step costs one token
    (as in the n-gram paper) rather than three.

    `prev_actions` may be int ids `(B, T)` (embedded by a table with one extra "no previous
    action" row, id = `num_actions`) or precomputed float embeddings `(B, T, E)` (Headless-AD).
    `episode_starts` (bool `(B, T)`, optional): a learned `(D,)` vector is added to the tokens
    of episodes' first steps. `episode_returns` (float `(B, T)`, optional): each step's
    episode return so far times another learned `(D,)` vector.

    Computed with the mixing map folded into each part, which is the same function of the same
    parameters: ids read rows of a table already multiplied by their block of the mixing
    kernel, float inputs go through the product of their linear map and that block, and the
    reward through a `(D,)` vector. No `(B, T, 3D) x (3D, D)` product runs per token, only
    `(n, D) x (D, D)` products per step (the small AD quick model: 9% fewer FLOPs a token,
    756k against 831k by `benchmarks/bench_train.py`'s count).
    """

    d_model: int
    num_actions: int
    num_observations: int | None
    grid_size: int | None = None

    @nn.compact
    def __call__(self, observations, prev_actions, prev_rewards, episode_starts=None,
                 episode_returns=None):
        d = self.d_model
        mix_kernel, mix_bias = _DenseParameters(3 * d, d, name="mix")()
        obs_tokens = ObservationEmbedding(d, self.num_observations, self.grid_size,
                                          name="observation")(
            observations, (mix_kernel[:d], mix_bias))
        action_kernel = mix_kernel[d:2 * d]
        if jnp.issubdtype(prev_actions.dtype, jnp.integer):
            table = nn.Embed(self.num_actions + 1, d, name="action").embedding
            action_tokens = jnp.take(table @ action_kernel, prev_actions, axis=0)
        else:
            kernel, bias = _DenseParameters(prev_actions.shape[-1], d, name="action_linear")()
            action_tokens = prev_actions @ (kernel @ action_kernel) + bias @ action_kernel
        reward_kernel, reward_bias = _DenseParameters(1, d, name="reward")()
        reward_kernel = reward_kernel @ mix_kernel[2 * d:]  # (1, D)
        reward_tokens = (prev_rewards[..., None].astype(reward_kernel.dtype) * reward_kernel
                         + reward_bias @ mix_kernel[2 * d:])
        tokens = obs_tokens + action_tokens + reward_tokens
        for name, values in (("episode_start", episode_starts), ("episode_return", episode_returns)):
            if values is not None:
                vector = self.param(name, nn.initializers.normal(0.02), (d,))
                tokens = tokens + values[..., None].astype(vector.dtype) * vector
        return tokens

