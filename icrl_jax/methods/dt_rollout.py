"""The Decision Transformer family's policy: return-conditioned acting from a sliding context.

Each episode starts from a target return; after every step the reward is subtracted from the
return-to-go fed to the model. The context holds the last K steps of the current episode, newest
last, left-padded with masked steps (the layout `data.trajectories.sample_trajectory_windows`
trains on), and is cleared when an episode ends. The policy is a `ParamSource` whose arrays are
`(params, target_return)`, so every target reuses one compiled rollout, on JAX envs (`vmap` x
`lax.scan`) and on host simulators through the bridge alike (there the N envs' caches are one
batched cache, `vmap`ped over the pool).

Where it is exactly what the model computes on its context (`DecisionTransformer.cache_slots`:
relative or no sequence positions, "state" prediction, and either a sliding attention window or
episodes no longer than the context), each step decodes only its new tokens (the previous
step's action tokens, R_t and s_t) from a key/value cache instead of recomputing the K-step
context: a ring of W + P - 1 slots with a window of W tokens (any episode length: the model
sees its window of the whole episode, as training with that window computes it), else one slot
per token of the episode. Otherwise the context is recomputed at every step.
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
    t int32 `()`, the step within the episode; cache: see below."""

    context: Trajectories
    last_context: Trajectories
    return_to_go: jax.Array
    t: jax.Array
    #: The key/value cache of the episode's tokens (batch 1) when decoding from one, else None.
    cache: Any = None


@dataclasses.dataclass(frozen=True)
class ReturnConditionedPolicy:
    """Builds a DT's policy `Source` from `(params, target_return)` (frozen: hashable, so one
    compiled rollout serves every parameter value and target)."""

    method: Any
    env: Any
    context_len: int
    greedy: bool
    #: Key/value slots of the cache each step decodes from (`DecisionTransformer.cache_slots`),
    #: or None: recompute the context at every step.
    cache_slots: int | None = None

    @property
    def cached(self) -> bool:
        return self.cache_slots is not None

    def __call__(self, arrays) -> Source:
        params, target = arrays
        method, env, length = self.method, self.env, self.context_len
        observation = jnp.zeros(env.observation_shape,
                                jnp.uint8 if env.pixels else
                                jnp.int32 if env.discrete_observations else jnp.float32)

        def init(key, env_params):
            del key, env_params
            context = empty_context(method, observation, length)
            cache = (method.decode_init(params, context, self.cache_slots) if self.cached
                     else None)
            return ReturnConditionedState(context, context, jnp.asarray(target, jnp.float32),
                                          jnp.zeros((), jnp.int32), cache)

        def act(key, state, obs, env_state, env_params):
            del env_state, env_params
            context = _push(state.context, observations=obs, returns_to_go=state.return_to_go,
                            timesteps=state.t, mask=True)
            cache = state.cache
            if self.cached:  # the episode's earlier tokens are in the cache (see the module)
                outputs, cache = method.decode_outputs(params, cache, context, state.t)
                components = method.draw_components(outputs, key, self.greedy)
            else:
                components = method.choose_action(params, context, key, self.greedy)
            context = context.replace(actions=context.actions.at[-1].set(components))
            action = env.join_action(components) if method.action_dims else components
            return action, state.replace(context=context, cache=cache)

        def update(key, state, transition, env_params):
            del key, env_params
            context = state.context.replace(
                rewards=state.context.rewards.at[-1].set(transition.reward))
            done = transition.done
            # A new episode starts from the target return with an empty context.
            fresh = empty_context(method, observation, length)
            # The cache needs no clearing: step 0 attends to no slot written before it.
            return ReturnConditionedState(
                jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, context), context,
                jnp.where(done, jnp.asarray(target, jnp.float32),
                          state.return_to_go - transition.reward),
                jnp.where(done, 0, state.t + 1), state.cache)

        return Source(init, act, update, name=f"{method.name}@return")


def return_conditioned_source(method, params, env, context_len: int, target_return: float,
                              greedy: bool, cache: bool = True) -> ParamSource:
    """The DT acting on `env` towards `target_return` (see `ReturnConditionedPolicy`), decoding
    from a key/value cache where that is exact for `env`'s episodes (`cache=False`: never)."""
    slots = method.cache_slots(getattr(env, "episode_length", None)) if cache else None
    policy = ReturnConditionedPolicy(method, env, int(context_len), bool(greedy), slots)
    return ParamSource(policy, (params, jnp.float32(target_return)), name=f"{method.name}@return")
