"""The AD family's in-context policy and training data (AD, Headless-AD, AD with a pixel encoder).

The trained model acts with its own history as context: `act` writes the token (last action,
last reward, observation) and picks an action from the model's logits at that position; `update`
records the action taken and the reward received, so the next token carries them. The context is
a fixed-shape sliding window: while it is not full, step t writes position t; afterwards the
window shifts left by one each step. No shape changes per step, hence one compilation for the
whole rollout. When the whole rollout fits in the context, methods that can decode from a
key/value cache do: one token per step, and each step is decoded exactly once. A model trained
with a sliding attention window of W steps and relative positions (`model.attention_window`,
`model.position` "rotary" or "alibi"; `InContextMethod.decode_window`) decodes rollouts of any length the
same way, from a ring of W slots: one token a step, and each step sees its last W steps, exactly
its training computation. Longer rollouts of other models either recompute the sliding window
at every step (exact, L tokens a step) or, with `context_caches = m >= 1`, decode from m
staggered caches (`staggered_slots`): m tokens a step, and the model acts on its last
L - L/m + 1 to L steps instead of always its last L.

Methods with a pixel encoder (`caches_encoded_context`) keep encoder features (and per-frame
n-gram ids such as VQ codes) in the context, so each frame goes through the CNN (and the VQ-VAE)
once instead of at each of the L steps it spends in the window.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from icrl_jax.data.windows import (StepWindows, check_dataset, sample_windows,
                                   subsample_episodes, to_step_windows)
from icrl_jax.data.history import History
from icrl_jax.data.pixel_store import PixelStore, StepWindowsLoader, example_step_windows
from icrl_jax.data.sources import ParamSource, Source
from icrl_jax.data.train_data import TrainData, on_device
from icrl_jax.core.errors import UserError
from icrl_jax.methods.base import Method
from icrl_jax.models.heads import checked_temperature, select_actions
from icrl_jax.models.transformer import RELATIVE_POSITIONS


@flax.struct.dataclass
class PreviousStep:
    """What a step's token says about the step before it, for one environment.

    Attributes:
      action: int32 a_{t-1} (`num_actions` before the first step).
      reward: float32 r_{t-1}.
      done: bool, step t-1 ended an episode (True before the first): o_t starts one.
      episode_return: float32, the reward collected in o_t's episode before o_t
        (`StepWindows.episode_returns`).
    """

    action: jax.Array
    reward: jax.Array
    done: jax.Array
    episode_return: jax.Array

    @classmethod
    def first(cls, num_actions) -> "PreviousStep":
        """Before a rollout's first step."""
        return cls(jnp.asarray(num_actions, jnp.int32), jnp.zeros((), jnp.float32),
                   jnp.ones((), bool), jnp.zeros((), jnp.float32))

    def after(self, action: jax.Array, reward: jax.Array,
              done: jax.Array | bool = False) -> "PreviousStep":
        """The next step's view, once this step took `action` and got `reward` and `done`."""
        reward = jnp.asarray(reward, jnp.float32)
        done = jnp.asarray(done, bool)
        return PreviousStep(jnp.asarray(action, jnp.int32), reward, done,
                            jnp.where(done, 0.0, self.episode_return + reward))


@flax.struct.dataclass
class ContextState:
    """The sliding context of one environment.

    Attributes:
      window: `StepWindows` with leading dim 1 and length L (its `actions` field is unused).
      filled: int32 number of steps written so far (saturates meaning at L).
      previous: the `PreviousStep` fields of the next token.
    """

    window: StepWindows
    filled: jax.Array
    previous: PreviousStep


def empty_context(length: int, observation_example, action_mask: jax.Array) -> ContextState:
    """`observation_example`: what one step stores (an array, or a pytree of arrays)."""
    num_actions = action_mask.shape[-1]
    obs = jax.tree.map(lambda x: jnp.zeros((1, length) + x.shape, x.dtype), observation_example)
    window = StepWindows(
        observations=obs,
        prev_actions=jnp.full((1, length), num_actions, jnp.int32),
        prev_rewards=jnp.zeros((1, length), jnp.float32),
        actions=jnp.zeros((1, length), jnp.int32),
        action_mask=action_mask[None].astype(bool),
        episode_starts=jnp.zeros((1, length), bool),
        episode_returns=jnp.zeros((1, length), jnp.float32),
    )
    return ContextState(window, jnp.zeros((), jnp.int32), PreviousStep.first(num_actions))


def push_observation(context: ContextState, observation) -> tuple[ContextState, jax.Array]:
    """Write the token (the previous step's fields and the observation: an array or a pytree of
    them); return the new context and the token's position."""
    length = context.window.prev_actions.shape[1]
    full = context.filled >= length
    index = jnp.minimum(context.filled, length - 1)

    def write(x, value):
        shifted = jnp.where(full, jnp.roll(x, -1, axis=1), x)
        return jax.lax.dynamic_update_index_in_dim(shifted, value.astype(x.dtype)[None], index,
                                                   axis=1)

    previous, window = context.previous, context.window
    window = window.replace(
        observations=jax.tree.map(write, window.observations, observation),
        prev_actions=write(window.prev_actions, previous.action),
        prev_rewards=write(window.prev_rewards, previous.reward),
        episode_starts=write(window.episode_starts, previous.done),
        episode_returns=write(window.episode_returns, previous.episode_return),
    )
    return context.replace(window=window), index


def record_outcome(context: ContextState, action: jax.Array, reward: jax.Array,
                   done: jax.Array | bool = False) -> ContextState:
    return context.replace(filled=context.filled + 1,
                           previous=context.previous.after(action, reward, done))


@flax.struct.dataclass
class CachedContext:
    """The key/value cache of one environment's whole rollout (incremental decoding).

    Attributes:
      cache: the method's cache (per-layer keys and values, batch 1); staggered caches
        (`InContextPolicy.staggered`) stack m of them on a leading axis.
      step: int32 steps written so far.
      previous: the `PreviousStep` fields of the next token (as in `ContextState`).
    """

    cache: Any
    step: jax.Array
    previous: PreviousStep


def staggered_slots(step: jax.Array, length: int, num_caches: int
                    ) -> tuple[jax.Array, jax.Array]:
    """Where step `step` goes in each of `num_caches` caches of `length` slots, and which acts.

    Cache j starts at step `j * length // num_caches` and restarts every `length` steps, so
    step t is written at slot `(t - start_j) mod length` with that position (the model sees a
    window that begins at the cache's last restart). The acting cache is the one holding the
    most steps; from step `length` on it holds between `length - length // num_caches + 1` and
    `length` of them (the newest included). Before its start a cache writes slots that are
    rewritten before any query reads them (keys after a query are masked).

    Returns int32 `(num_caches,)` slots and the int32 `()` index of the acting cache.
    """
    starts = jnp.arange(num_caches, dtype=jnp.int32) * length // num_caches
    slots = jnp.mod(step - starts, length).astype(jnp.int32)
    return slots, jnp.argmax(jnp.where(step >= starts, slots, -1)).astype(jnp.int32)


def _step_window(observation, previous: PreviousStep, action_mask) -> StepWindows:
    """One step as a `(1, 1)` window for `decode_logits`."""
    one = lambda x, dtype: jnp.reshape(x, (1, 1)).astype(dtype)  # noqa: E731
    return StepWindows(observations=observation[None, None],
                       prev_actions=one(previous.action, jnp.int32),
                       prev_rewards=one(previous.reward, jnp.float32),
                       actions=jnp.zeros((1, 1), jnp.int32),
                       action_mask=action_mask[None].astype(bool),
                       episode_starts=one(previous.done, bool),
                       episode_returns=one(previous.episode_return, jnp.float32))


def _observation_dtype(env):
    return jnp.uint8 if env.pixels else jnp.int32 if env.discrete_observations else jnp.float32


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
    #: Rollouts longer than the context, of models without a sliding attention window
    #: (`windowed`): 0 recomputes the sliding window at every step; m >= 1 decodes from m
    #: staggered caches (`staggered_slots`), m tokens a step.
    context_caches: int = 0

    @property
    def cached(self) -> bool:
        """Decode from a key/value cache, when the method can and the result is what its full
        pass computes: a model with a sliding attention window and relative positions
        (`windowed`) at any rollout length, from a ring of W slots; any other one when the whole
        rollout fits in the context (so no token is ever evicted and the result equals
        recomputing the window). Each step then costs one token instead of the whole window."""
        return self.method.decodes_incrementally and (self.windowed or (
            self.max_steps is not None and self.max_steps <= self.context_len))

    @property
    def windowed(self) -> bool:
        """The model attends over a sliding window with relative positions
        (`InContextMethod.decode_window`): decode any rollout from a ring of W slots."""
        return self.method.decodes_incrementally and self.method.decode_window > 0

    @property
    def cache_slots(self) -> int:
        """Slots of the one cache (`cached`): W (fewer for a shorter rollout) when `windowed`,
        else the rollout's steps."""
        if not self.windowed:
            return int(self.max_steps)
        window = self.method.decode_window
        return window if self.max_steps is None else min(window, int(self.max_steps))

    @property
    def staggered(self) -> bool:
        """Decode a rollout longer than the context from `context_caches` staggered caches."""
        return self.context_caches > 0 and not self.cached

    @property
    def encoded(self) -> bool:
        return self.method.caches_encoded_context

    def _token(self, params, observation):
        """What the context stores for one observation: itself, or its encoding (features, and
        the n-gram ids of methods that compute them per frame)."""
        if not self.encoded:
            return observation
        encoded = self.method.encode_observations(params, observation[None])
        return jax.tree.map(lambda x: x[0], encoded)

    def __call__(self, params) -> Source:
        if self.cached or self.staggered:
            return self._cached_source(params)
        method, env = self.method, self.env
        score = method.encoded_context_logits if self.encoded else method.context_logits

        def init(key, env_params):
            del key
            observation = jnp.zeros(env.observation_shape, _observation_dtype(env))
            token = jax.eval_shape(self._token, params, observation)
            return empty_context(self.context_len, token, env.action_mask(env_params))

        def act(key, context, obs, env_state, env_params):
            del env_state, env_params
            context, index = push_observation(context, self._token(params, obs))
            logits_key, action_key = jax.random.split(key)
            logits = score(params, context.window, logits_key)  # (1, L, A)
            logits_now = jax.lax.dynamic_index_in_dim(logits[0], index, axis=0, keepdims=False)
            action = select_actions(action_key, logits_now, context.window.action_mask[0],
                                    self.greedy, self.temperature)
            return action, context

        def update(key, context, transition, env_params):
            del key, env_params
            return record_outcome(context, transition.action, transition.reward,
                                  transition.done)

        return Source(init, act, update, name=f"{method.name}_in_context")

    def _cached_source(self, params) -> Source:
        """One cache of the whole rollout (`cached`), or `context_caches` staggered caches of
        the context's length (`staggered`), decoded side by side with `vmap`."""
        method, env = self.method, self.env
        num_caches = self.context_caches
        slots = self.context_len if self.staggered else self.cache_slots

        def init(key, env_params):
            del key
            action_mask = env.action_mask(env_params)
            observation = jnp.zeros(env.observation_shape, _observation_dtype(env))
            first = PreviousStep.first(action_mask.shape[-1])
            example = _step_window(observation, first, action_mask)
            cache = method.decode_init(params, example, slots)
            if self.staggered:
                cache = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_caches,) + x.shape),
                                     cache)
            return CachedContext(cache, jnp.zeros((), jnp.int32), first)

        def act(key, context, obs, env_state, env_params):
            del env_state
            mask = env.action_mask(env_params)
            step = _step_window(obs, context.previous, mask)
            logits, context = self.decode_step(params, context, step)
            _, action_key = jax.random.split(key)  # the keys of the sliding-window policy
            action = select_actions(action_key, logits[0, 0], mask, self.greedy,
                                    self.temperature)
            return action, context

        def update(key, context, transition, env_params):
            del key, env_params
            return self.record_step(context, transition.action, transition.reward,
                                    transition.done)

        return Source(init, act, update, name=f"{method.name}_in_context")

    def decode_step(self, params, context: CachedContext, step: StepWindows
                    ) -> tuple[jax.Array, CachedContext]:
        """Logits `(1, 1, A)` of the `(1, 1)` window `step` (the step `context.step`) from the
        cache (`cached`) or the acting one of the staggered caches (`staggered`), which all
        get the step written."""
        if not self.staggered:
            logits, cache = self.method.decode_logits(params, context.cache, step, context.step)
            return logits, context.replace(cache=cache)
        slots, acting = staggered_slots(context.step, self.context_len, self.context_caches)
        logits, cache = jax.vmap(
            lambda cache, slot: self.method.decode_logits(params, cache, step, slot))(
                context.cache, slots)  # logits (m, 1, 1, A)
        return logits[acting], context.replace(cache=cache)

    @staticmethod
    def record_step(context: CachedContext, action: jax.Array, reward: jax.Array,
                    done: jax.Array) -> CachedContext:
        return context.replace(step=context.step + 1,
                               previous=context.previous.after(action, reward, done))


def in_context_source(method, params, env, context_len: int, greedy: bool,
                      max_steps: int | None = None, temperature: float = 1.0,
                      context_caches: int = 0) -> ParamSource:
    """The trained model as a policy whose state is the context of its own history.

    `params` is opaque here and handed to the method's logits functions. With `max_steps` (the
    rollout length) no longer than `context_len`, methods that can decode incrementally do (see
    `InContextPolicy.cached`); longer rollouts decode from `context_caches` staggered caches
    when it is >= 1 (`staggered_slots`), else recompute the window. `temperature` (> 0)
    divides the logits before sampling.
    """
    context_caches = int(context_caches)
    if context_caches < 0 or context_caches > context_len:
        raise UserError(f"eval.context_caches must be in [0, context length {context_len}], "
                        f"got {context_caches}")
    if context_caches and not method.decodes_incrementally:
        raise UserError(f"eval.context_caches={context_caches} needs a model that decodes from "
                        f"a cache; {method.name} with this config does not (shuffled n-gram "
                        "patterns, or no decoder): set eval.context_caches=0")
    policy = InContextPolicy(method, env, context_len, bool(greedy), max_steps,
                             checked_temperature(temperature), context_caches)
    return ParamSource(policy, params, name=f"{method.name}_in_context")


class InContextMethod(Method):
    """Shared by the AD family: trains on step windows of learning histories (in memory, or
    streamed from a pixel store) and acts in context (`in_context_source`).

    Subclasses provide `context_logits(params, window (1, L), key) -> (1, L, A)`; optionally
    `decode_init` / `decode_logits` with `has_cache_decoder` (key/value cache), and
    `encode_observations` / `encoded_context_logits` with `caches_encoded_context`.
    """

    has_cache_decoder = False
    caches_encoded_context = False

    @property
    def decode_window(self) -> int:
        """W > 0 when the model attends over a sliding window of W tokens
        (`model.attention_window`) with relative positions (`model.position` "rotary", "alibi"
        or "none": a query's scores depend on its distance to each key, not on where the pair
        sits) and no n-gram layers (their matches reach the whole past): a ring of W
        key/value slots then decodes a rollout of any length exactly as the full pass computes
        it (`models/transformer.py`: `ring_cache_mask`); else 0."""
        window = int(self.config.attention_window)
        relative = self.config.position in RELATIVE_POSITIONS
        return window if window > 0 and relative and not self.config.ngram_positions else 0

    @property
    def decodes_incrementally(self) -> bool:
        """Decode from a cache: the method has a decoder, and no shuffled n-gram patterns (the
        ablation draws each row from the whole window; real matches decode row by row)."""
        shuffled = getattr(self, "ngram_ids", None) is not None and bool(self.config.ngram_shuffle)
        return self.has_cache_decoder and not shuffled

    def ngram_id_parts(self, example: StepWindows) -> int | None:
        """K, the number of components of a step's n-gram id for windows like `example` (what
        a decoding cache stores per slot); None without n-gram layers."""
        if getattr(self, "ngram_ids", None) is None:
            return None
        shape = jax.eval_shape(self.ngram_ids, example).shape  # (B, L) or (B, L, K)
        return shape[2] if len(shape) == 3 else 1

    def training_data(self, dataset, config, env) -> TrainData:
        train = config.train
        if isinstance(dataset, PixelStore):
            if tuple(dataset.meta["obs_shape"]) != tuple(env.observation_shape):
                raise ValueError(f"the pixel store holds observations {dataset.meta['obs_shape']}, "
                                 f"the env {list(env.observation_shape)}")
            dataset._valid_starts(train.seq_len)  # raises when no history is as long as a window

            def loader_fn(start_step: int, shard=(0, 1)) -> StepWindowsLoader:
                return StepWindowsLoader(dataset, env.num_actions, train.batch_size // shard[1],
                                         train.seq_len, train.steps_per_call, start_step,
                                         seed=config.seed, prefetch=train.prefetch, shard=shard)

            return TrainData(example_step_windows(dataset, env.num_actions, train.seq_len),
                             loader_fn=loader_fn)
        if not isinstance(dataset, History):
            raise TypeError(f"{self.name} trains on learning histories or a pixel store, got "
                            f"{type(dataset).__name__}")
        history, lengths = subsample_episodes(dataset, config.data.subsample)
        check_dataset(history, num_actions=env.num_actions, num_observations=env.num_observations,
                      observation_shape=env.observation_shape, window=train.seq_len,
                      lengths=lengths)
        return on_device(to_step_windows(history, lengths), sample_windows, train.seq_len)

    def policies(self, params, env, config) -> dict[str, Any]:
        return {"model": in_context_source(self, params, env, config.train.seq_len,
                                           config.eval.greedy, max_steps=config.eval.num_steps,
                                           temperature=config.eval.temperature,
                                           context_caches=config.eval.context_caches)}
