"""Uniform random policy over the task's available actions."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icrl_jax.data import sources


def first_argmax(values: jax.Array) -> jax.Array:
    """jnp.argmax over the last axis (first maximal index, int32) as two plain reductions.

    XLA:CPU lowers argmax to a variadic (value, index) reduce that does not vectorise; max then
    min-of-matching-index vectorises (faster on Q-table rows: benchmarks/RESULTS.md).
    """
    iota = jnp.arange(values.shape[-1], dtype=jnp.int32)
    best = values.max(axis=-1, keepdims=True)
    return jnp.min(jnp.where(values == best, iota, values.shape[-1]), axis=-1).astype(jnp.int32)


def masked_uniform_action(key: jax.Array, action_mask: jax.Array) -> jax.Array:
    """An available action uniformly at random, int32 `()`; action_mask: bool `(A,)`."""
    return uniform_pick(jax.random.uniform(key), action_mask)


def uniform_pick(u: jax.Array, action_mask: jax.Array) -> jax.Array:
    """The floor(u * n)-th of the n available actions for u ~ U[0, 1): one uniform, not A
    (a Gumbel/categorical draw would cost A uniforms per step)."""
    counts = jnp.cumsum(action_mask.astype(jnp.int32))
    k = jnp.minimum((u * counts[-1]).astype(jnp.int32), counts[-1] - 1)
    # counts is non-decreasing: the index of the first count > k is the number of counts <= k.
    return jnp.sum(counts <= k).astype(jnp.int32)


def available_actions(action_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The available action indices in increasing order, padded at the end, and their count:
    `(A,)` int32 and `()` int32. Computed once per task, it turns `uniform_pick` into one gather
    (`pick_available`) instead of a cumulative sum over all A actions every step."""
    order = jnp.argsort(~action_mask, stable=True).astype(jnp.int32)
    return order, action_mask.sum().astype(jnp.int32)


def pick_available(u: jax.Array, available: jax.Array, count: jax.Array) -> jax.Array:
    """Same result as `uniform_pick(u, mask)` given `available_actions(mask)`."""
    return available[jnp.minimum((u * count).astype(jnp.int32), count - 1)]


def rotated_argmax(u: jax.Array, values: jax.Array, action_mask: jax.Array) -> jax.Array:
    """argmax over available actions; ties go to the first tied index after a random cyclic
    offset floor(u * A). One uniform instead of A; each tied index can win, though not with
    exactly equal probability."""
    num = values.shape[0]
    offset = jnp.minimum((u * num).astype(jnp.int32), num - 1)
    rolled = jnp.roll(jnp.where(action_mask, values, -jnp.inf), -offset)
    return ((first_argmax(rolled) + offset) % num).astype(jnp.int32)


def masked_argmax(key: jax.Array, values: jax.Array, action_mask: jax.Array) -> jax.Array:
    """argmax of `values` `(A,)` over available actions, ties broken uniformly at random."""
    values = jnp.where(action_mask, values, -jnp.inf)
    best = values == values.max()
    return first_argmax(jnp.where(best, jax.random.uniform(key, values.shape), -1.0))


def uniform_random_action(key: jax.Array, params, action_dim: int) -> jax.Array:
    """A uniformly random action: float32 `(action_dim,)` in [-1, 1] for a continuous env
    (`action_dim > 0`), else an available index, int32 `()`."""
    if action_dim:
        return jax.random.uniform(key, (action_dim,), jnp.float32, -1.0, 1.0)
    return masked_uniform_action(key, params.action_mask)


def uniform_random(action_dim: int = 0) -> "sources.Source":
    """Source that ignores everything and acts uniformly at random: available actions of a
    discrete env, or U[-1, 1]^action_dim for a continuous one (`action_dim > 0`). State: `()`."""

    def init(key, params):
        return ()

    def act(key, state, obs, env_state, params):
        return uniform_random_action(key, params, action_dim), state

    def update(key, state, transition, params):
        return state

    return sources.Source(init, act, update, name="uniform_random")
