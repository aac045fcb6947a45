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


class DTHostPolicy:
    """A Decision Transformer as a `envs.host.bridge.HostPolicy`: return-conditioned rollouts
    of host simulators (ViZDoom) through `host_rollout`'s single jitted scan, one batched
    callback per step.

    The rule is `make_rollout`'s: each env's context holds the last K steps of its current
    episode (left-padded, masked); the return-to-go starts at `target_return` and loses every
    reward; the context is cleared when an episode ends. The bridge reports the previous step's
    reward and done with each observation, so they are applied here before acting. The
    per-env work is `vmap`ped; `params` are constants of the jitted rollout.

    State: (contexts `(N, K, ...)`, rtg float32 `(N,)`, t int32 `(N,)`).
    """

    def __init__(self, method, params, context_len: int, target_return: float,
                 obs_shape: tuple[int, ...], obs_dtype=jnp.uint8, greedy: bool = False):
        if not method.action_dims:
            raise ValueError("DTHostPolicy drives (multi-)discrete host envs; "
                             "this method has continuous actions")
        self.method, self.params = method, params
        self.context_len, self.target = int(context_len), float(target_return)
        self.obs = jnp.zeros(tuple(obs_shape), obs_dtype)  # shape/dtype of one observation
        self.greedy = bool(greedy)

    def init(self, key, num_envs):
        del key
        context = empty_context(self.method, self.obs, self.context_len)
        contexts = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs,) + x.shape), context)
        return (contexts, jnp.full((num_envs,), self.target, jnp.float32),
                jnp.zeros((num_envs,), jnp.int32))

    def act(self, key, state, step):
        contexts, rtg, t = state
        num_envs = step.obs.shape[0]

        def one_env(context, rtg, t, obs, reward, done, key):
            # Finish the previous step, then start a fresh episode if it ended.
            context = context.replace(rewards=context.rewards.at[-1].set(reward))
            fresh = empty_context(self.method, obs, self.context_len)
            context = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, context)
            rtg = jnp.where(done, self.target, rtg - reward)
            t = jnp.where(done, 0, t)
            context = _push(context, observations=obs, returns_to_go=rtg, timesteps=t, mask=True)
            action = self.method.choose_action(self.params, context, key, self.greedy)
            context = context.replace(actions=context.actions.at[-1].set(action))
            return context, rtg, t + 1, action

        # At t=0 the bridge reports reward 0 and done False: the first push needs no special case.
        contexts, rtg, t, actions = jax.vmap(one_env)(
            contexts, rtg, t, step.obs, step.reward, step.done, jax.random.split(key, num_envs))
        return actions, (contexts, rtg, t)
