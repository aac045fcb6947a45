"""Return-conditioned rollouts of a Decision Transformer: `vmap` over environments, `lax.scan`
over steps, a fixed-shape sliding context (no recompilation per step).

Each episode starts from a target return; after every step the reward is subtracted from the
return-to-go fed to the model. The context holds the last K steps, newest last, left-padded with
masked steps (the layout `data.trajectories.sample_trajectory_windows` trains on), and is cleared
when an episode ends.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from icrl_jax.data.trajectories import Trajectories


def empty_context(method, observation: jax.Array, context_len: int) -> Trajectories:
    """A context of `context_len` masked steps shaped like `observation` and the method's action."""
    n = method.num_components
    actions = (jnp.zeros((context_len, n), jnp.int32) if method.action_dims
               else jnp.zeros((context_len, method.model.continuous_dim), jnp.float32))
    zeros = jnp.zeros((context_len,), jnp.float32)
    return Trajectories(
        observations=jnp.zeros((context_len,) + observation.shape, observation.dtype),
        actions=actions, rewards=zeros, returns_to_go=zeros,
        timesteps=jnp.zeros((context_len,), jnp.int32), mask=jnp.zeros((context_len,), bool))


def _push(context: Trajectories, **last) -> Trajectories:
    """Shift every field one step left and write `last` (missing fields: zeros) at the end."""
    def shift(name, x):
        value = last.get(name, jnp.zeros_like(x[0]))
        return jnp.concatenate([x[1:], jnp.asarray(value, x.dtype)[None]], axis=0)
    return Trajectories(**{name: shift(name, getattr(context, name))
                           for name in Trajectories.__dataclass_fields__})


def env_action(env, method, components: jax.Array) -> jax.Array:
    """The env's action for the method's output: a flat index for (multi-)discrete actions
    (via `env.join_action` when the env has one), the vector for continuous ones."""
    if not method.action_dims:
        return components
    if hasattr(env, "join_action"):
        return env.join_action(components)
    return components[0]


def make_rollout(method, env, context_len: int, num_steps: int,
                 greedy: bool = False) -> Callable[..., Any]:
    """Build `rollout(params, env_params, target_return, key)`, jitted.

    Args (of the returned function): env_params batched along E; target_return float32 `()` or
    `(E,)`; key. Returns dict with `rewards` float32 `(E, num_steps)`, `dones` bool
    `(E, num_steps)`, `actions` `(E, num_steps, n)` and `context`, the final `Trajectories`
    context of every env `(E, K, ...)` (for attention maps).
    """

    def one_env(params, env_params, target, key):
        key_reset, key_steps = jax.random.split(key)
        obs, state = env.reset(key_reset, env_params)
        carry = (state, obs, empty_context(method, obs, context_len), target, jnp.int32(0))

        def step(carry, key):
            state, obs, context, rtg, t = carry
            key_act, key_env = jax.random.split(key)
            context = _push(context, observations=obs, returns_to_go=rtg, timesteps=t, mask=True)
            action = method.choose_action(params, context, key_act, greedy)
            context = context.replace(actions=context.actions.at[-1].set(action))
            obs, state, reward, terminated, truncated, _ = env.step(
                key_env, state, env_action(env, method, action), env_params)
            done = terminated | truncated
            context = context.replace(rewards=context.rewards.at[-1].set(reward))
            # A new episode starts from the target return with an empty context.
            fresh = empty_context(method, obs, context_len)
            context = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, context)
            rtg = jnp.where(done, target, rtg - reward)
            t = jnp.where(done, 0, t + 1)
            return (state, obs, context, rtg, t), (reward, done, action)

        (_, _, context, _, _), (rewards, dones, actions) = jax.lax.scan(
            step, carry, jax.random.split(key_steps, num_steps))
        return dict(rewards=rewards, dones=dones, actions=actions, context=context)

    def rollout(params, env_params, target_return, key):
        num_envs = jax.tree.leaves(env_params)[0].shape[0]
        targets = jnp.broadcast_to(jnp.asarray(target_return, jnp.float32), (num_envs,))
        keys = jax.random.split(key, num_envs)
        return jax.vmap(one_env, in_axes=(None, 0, 0, 0))(params, env_params, targets, keys)

    return jax.jit(rollout)


def episode_returns(rewards: jax.Array, episode_length: int) -> jax.Array:
    """float `(E, S)` rewards of fixed-length episodes -> `(E, S // episode_length)` returns."""
    num_envs, steps = rewards.shape
    whole = steps // episode_length * episode_length
    return rewards[:, :whole].reshape(num_envs, -1, episode_length).sum(-1)
