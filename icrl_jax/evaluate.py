"""In-context evaluation: a trained model acts on held-out tasks with its own history as context.

The model's policy is a source algorithm like any other (`init/act/update`), so its rollouts run
through the same `vmap(scan(...))` history generator as the sources it was distilled from, and the
same metrics apply to all of them. The context is a fixed-shape sliding window: while it is not
full, step t writes position t; afterwards the window shifts left by one each step. No shape
changes per step, hence one compilation for the whole rollout.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from icrl_jax.data.dataset import StepWindows
from icrl_jax.data.sources import ParamSource, Source
from icrl_jax.models.heads import checked_temperature, select_actions


@flax.struct.dataclass
class ContextState:
    """The sliding context of one environment.

    Attributes:
      window: `StepWindows` with leading dim 1 and length L (its `actions` field is unused).
      filled: int32 number of steps written so far (saturates meaning at L).
      last_action: int32 action of the previous step (`num_actions` before the first).
      last_reward: float32 reward of the previous step.
    """

    window: StepWindows
    filled: jax.Array
    last_action: jax.Array
    last_reward: jax.Array


def empty_context(length: int, observation_example: jax.Array, action_mask: jax.Array) -> ContextState:
    num_actions = action_mask.shape[-1]
    obs = jnp.zeros((1, length) + observation_example.shape, observation_example.dtype)
    window = StepWindows(
        observations=obs,
        prev_actions=jnp.full((1, length), num_actions, jnp.int32),
        prev_rewards=jnp.zeros((1, length), jnp.float32),
        actions=jnp.zeros((1, length), jnp.int32),
        action_mask=action_mask[None].astype(bool),
    )
    return ContextState(window, jnp.zeros((), jnp.int32), jnp.asarray(num_actions, jnp.int32),
                        jnp.zeros((), jnp.float32))


def push_observation(context: ContextState, observation: jax.Array) -> tuple[ContextState, jax.Array]:
    """Write the token (last action, last reward, observation); return it and its position."""
    length = context.window.prev_actions.shape[1]
    full = context.filled >= length
    index = jnp.minimum(context.filled, length - 1)

    def write(x, value):
        shifted = jnp.where(full, jnp.roll(x, -1, axis=1), x)
        return jax.lax.dynamic_update_index_in_dim(shifted, value.astype(x.dtype)[None], index,
                                                   axis=1)

    window = context.window.replace(
        observations=write(context.window.observations, observation),
        prev_actions=write(context.window.prev_actions, context.last_action),
        prev_rewards=write(context.window.prev_rewards, context.last_reward),
    )
    return context.replace(window=window), index


def record_outcome(context: ContextState, action: jax.Array, reward: jax.Array) -> ContextState:
    return context.replace(filled=context.filled + 1, last_action=action.astype(jnp.int32),
                           last_reward=reward.astype(jnp.float32))


def context_policy_action(method, params, context: ContextState, observation: jax.Array,
                          key: jax.Array, greedy: bool, temperature: float = 1.0
                          ) -> tuple[ContextState, jax.Array]:
    """Push the observation, run the model on the window and pick an action (one environment).

    `method.context_logits(params, window (1, L), key) -> (1, L, A)` is all a method provides.
    """
    context, index = push_observation(context, observation)
    logits_key, action_key = jax.random.split(key)
    logits = method.context_logits(params, context.window, logits_key)  # (1, L, A)
    logits_now = jax.lax.dynamic_index_in_dim(logits[0], index, axis=0, keepdims=False)
    action = select_actions(action_key, logits_now, context.window.action_mask[0], greedy,
                            temperature)
    return context, action


@flax.struct.dataclass
class CachedContext:
    """The key/value cache of one environment's whole rollout (incremental decoding).

    Attributes:
      cache: the method's cache (per-layer keys and values, batch 1).
      step: int32 steps written so far.
      last_action, last_reward: the previous step's action and reward (as in `ContextState`).
    """

    cache: Any
    step: jax.Array
    last_action: jax.Array
    last_reward: jax.Array


def _step_window(observation, last_action, last_reward, action_mask) -> StepWindows:
    """One step as a `(1, 1)` window for `decode_logits`."""
    return StepWindows(observations=observation[None, None],
                       prev_actions=last_action.reshape(1, 1).astype(jnp.int32),
                       prev_rewards=last_reward.reshape(1, 1).astype(jnp.float32),
                       actions=jnp.zeros((1, 1), jnp.int32),
                       action_mask=action_mask[None].astype(bool))


@dataclasses.dataclass(frozen=True)
class InContextPolicy:
    """Builds the trained model's in-context `Source` from its parameters.

    Frozen (hashable by its fields), so every rollout with the same method, env, context length
    and action rule reuses one compiled program whatever the parameter values.
    """

    method: Any
    env: Any
    context_len: int
    greedy: bool
    max_steps: int | None = None
    temperature: float = 1.0  # sampling temperature (see `select_actions`)

    @property
    def cached(self) -> bool:
        """Decode from a key/value cache: when the whole rollout fits in the context (so no
        token is ever evicted and the result equals recomputing the window) and the method
        can. Each step then costs one token instead of the whole window."""
        return (hasattr(self.method, "decode_logits")
                and getattr(self.method, "decodes_incrementally", True)
                and self.max_steps is not None
                and self.max_steps <= self.context_len)

    def __call__(self, params) -> Source:
        if self.cached:
            return self._cached_source(params)
        method, env, greedy = self.method, self.env, self.greedy

        def init(key, env_params):
            del key
            observation = jnp.zeros(env.observation_shape,
                                    jnp.int32 if env.discrete_observations else jnp.float32)
            return empty_context(self.context_len, observation, env.action_mask(env_params))

        def act(key, context, obs, env_state, env_params):
            del env_state, env_params
            return context_policy_action(method, params, context, obs, key, greedy,
                                         self.temperature)[1]

        def update(key, context, transition, env_params):
            del key, env_params
            context, _ = push_observation(context, transition.obs)
            return record_outcome(context, transition.action, transition.reward)

        return Source(init, act, update, name=f"{method.name}_in_context")

    def _cached_source(self, params) -> Source:
        method, env, greedy = self.method, self.env, self.greedy

        def init(key, env_params):
            del key
            action_mask = env.action_mask(env_params)
            cache = method.decode_init(params, action_mask[None], self.max_steps)
            return CachedContext(cache, jnp.zeros((), jnp.int32),
                                 jnp.asarray(action_mask.shape[-1], jnp.int32),
                                 jnp.zeros((), jnp.float32))

        def decode(context, obs, env_params):
            mask = env.action_mask(env_params)
            step = _step_window(obs, context.last_action, context.last_reward, mask)
            logits, cache = method.decode_logits(params, context.cache, step, context.step)
            return logits[0, 0], cache, mask

        def act(key, context, obs, env_state, env_params):
            del env_state
            logits, _, mask = decode(context, obs, env_params)
            _, action_key = jax.random.split(key)  # the keys `context_policy_action` uses
            return select_actions(action_key, logits, mask, greedy, self.temperature)

        def update(key, context, transition, env_params):
            del key
            # `act` could not keep its cache write (a source's act returns only the action),
            # so the step is decoded again here: two one-token passes per step.
            _, cache, _ = decode(context, transition.obs, env_params)
            return CachedContext(cache, context.step + 1,
                                 transition.action.astype(jnp.int32),
                                 transition.reward.astype(jnp.float32))

        return Source(init, act, update, name=f"{method.name}_in_context")


def in_context_source(method, params, env, context_len: int, greedy: bool,
                      max_steps: int | None = None, temperature: float = 1.0) -> ParamSource:
    """The trained model as a source: its state is the sliding context of its own history.

    `act` scores the context with the new observation appended; `update` commits that observation
    with the action taken and the reward received, so the next token carries them. `params` is
    opaque here and handed to `method.context_logits`. With `max_steps` (the rollout length)
    no longer than `context_len`, methods that can decode incrementally do (see
    `InContextPolicy.cached`). `temperature` (> 0) divides the logits before sampling.
    """
    policy = InContextPolicy(method, env, context_len, bool(greedy), max_steps,
                             checked_temperature(temperature))
    return ParamSource(policy, params,
                       name=f"{method.name}_in_context")
