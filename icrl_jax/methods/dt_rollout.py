"""The Decision Transformer family's policy: return-conditioned acting from a sliding context.

Each episode starts from a target return; after every step the reward is subtracted from the
return-to-go fed to the model. The context holds the last K steps of the current episode, newest
last, left-padded with masked steps (the layout `data.trajectories.sample_trajectory_windows`
trains on), and is cleared when an episode ends. The policy is a `ParamSource` whose arrays are
`(params, target_return)`, so every target reuses one compiled rollout, on JAX envs (`vmap` x
`lax.scan`) and on host simulators through the bridge alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from icrl_jax.data.sources import ParamSource, Source
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


@flax.struct.dataclass
class ReturnConditionedState:
    """context: the current episode's last K steps; last_context: the context as of the most
    recent step (kept across an episode's end, for attention maps); return_to_go float32 `()`;
    t int32 `()`, the step within the episode."""

    context: Trajectories
    last_context: Trajectories
    return_to_go: jax.Array
    t: jax.Array


@dataclasses.dataclass(frozen=True)
class ReturnConditionedPolicy:
    """Builds a DT's policy `Source` from `(params, target_return)` (frozen: hashable, so one
    compiled rollout serves every parameter value and target)."""

    method: Any
    env: Any
    context_len: int
    greedy: bool

    def __call__(self, arrays) -> Source:
        params, target = arrays
        method, env, length = self.method, self.env, self.context_len
        observation = jnp.zeros(env.observation_shape,
                                jnp.uint8 if env.pixels else
                                jnp.int32 if env.discrete_observations else jnp.float32)

        def init(key, env_params):
            del key, env_params
            context = empty_context(method, observation, length)
            return ReturnConditionedState(context, context, jnp.asarray(target, jnp.float32),
                                          jnp.zeros((), jnp.int32))

        def act(key, state, obs, env_state, env_params):
            del env_state, env_params
            context = _push(state.context, observations=obs, returns_to_go=state.return_to_go,
                            timesteps=state.t, mask=True)
            components = method.choose_action(params, context, key, self.greedy)
            context = context.replace(actions=context.actions.at[-1].set(components))
            action = env.join_action(components) if method.action_dims else components
            return action, state.replace(context=context)

        def update(key, state, transition, env_params):
            del key, env_params
            context = state.context.replace(
                rewards=state.context.rewards.at[-1].set(transition.reward))
            done = transition.done
            # A new episode starts from the target return with an empty context.
            fresh = empty_context(method, observation, length)
            return ReturnConditionedState(
                jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, context), context,
                jnp.where(done, jnp.asarray(target, jnp.float32),
                          state.return_to_go - transition.reward),
                jnp.where(done, 0, state.t + 1))

        return Source(init, act, update, name=f"{method.name}@return")


def return_conditioned_source(method, params, env, context_len: int, target_return: float,
                              greedy: bool) -> ParamSource:
    """The DT acting on `env` towards `target_return` (see `ReturnConditionedPolicy`)."""
    policy = ReturnConditionedPolicy(method, env, int(context_len), bool(greedy))
    return ParamSource(policy, (params, jnp.float32(target_return)), name=f"{method.name}@return")
