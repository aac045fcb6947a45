"""In-context evaluation on host simulators (Miniworld, ViZDoom) through the bridge.

`InContextHostPolicy` is the trained model as a `HostPolicy` (envs/host/bridge.py): the same
sliding context and action rule as the on-device `InContextPolicy` (icrl_jax/evaluate.py), vmapped
over the worker pool, so a rollout is `host_rollout`'s one jitted `lax.scan` with one batched
callback per step. The bridge hands the policy the previous step's reward with the new
observation, so each step first commits the previous (action, reward) and then pushes the
observation and acts. A method with a pixel encoder (`caches_encoded_context`) keeps encoder
features in the context, so each frame goes through the CNN once rather than at each of the L
steps it spends in the window.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from envs.host.bridge import HostStep
from icrl_jax.evaluate import context_policy_action, empty_context, record_outcome
from icrl_jax.models.heads import checked_temperature


class InContextHostPolicy:
    """A method's in-context policy over a batch of host envs.

    Args:
      method: an AD-style method with `context_logits(params, window (1, L), key) -> (1, L, A)`.
      params: its parameters (constants of the compiled rollout).
      context_len: L, the training window.
      num_actions: A; observation_shape / observation_dtype: one observation (e.g. (64, 64, 3)
        uint8).
      greedy: argmax instead of sampling. temperature: sampling temperature (> 0).
    State: (per-env `ContextState` batched over N, last actions int32 `(N,)`).
    """

    def __init__(self, method, params: Any, context_len: int, num_actions: int,
                 observation_shape: tuple[int, ...], observation_dtype=jnp.uint8,
                 greedy: bool = False, temperature: float = 1.0):
        self.method, self.params, self.context_len = method, params, int(context_len)
        self.num_actions, self.greedy = int(num_actions), bool(greedy)
        self.temperature = checked_temperature(temperature)
        self.observation = jax.ShapeDtypeStruct(tuple(observation_shape), observation_dtype)
        # Methods with a pixel encoder keep features in the context: each frame is encoded
        # once when it arrives instead of at all L steps it spends in the window.
        self.cached = bool(getattr(method, "caches_encoded_context", False))
        self.token = self.observation
        if self.cached:
            self.token = jax.eval_shape(method.encode_observations, params,
                                        jnp.zeros((1,) + self.observation.shape,
                                                  self.observation.dtype))
            self.token = jax.ShapeDtypeStruct(self.token.shape[1:], self.token.dtype)
        self._scorer = _EncodedScorer(method) if self.cached else method

    def init(self, key: jax.Array, num_envs: int):
        del key
        one = empty_context(self.context_len, jnp.zeros(self.token.shape, self.token.dtype),
                            jnp.ones(self.num_actions, bool))
        batched = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs,) + x.shape), one)
        return batched, jnp.zeros(num_envs, jnp.int32)

    def act(self, key: jax.Array, state, step: HostStep):
        contexts, last_actions = state
        if step.obs.shape[1:] != self.observation.shape:
            raise ValueError(f"observations {step.obs.shape[1:]} differ from the policy's "
                             f"{self.observation.shape}")
        started = step.t > 0
        obs = (self.method.encode_observations(self.params, step.obs) if self.cached
               else step.obs)

        def one(context, obs, reward, last_action, k):
            committed = record_outcome(context, last_action, reward)
            context = jax.tree.map(lambda a, b: jnp.where(started, a, b), committed, context)
            return context_policy_action(self._scorer, self.params, context, obs, k, self.greedy,
                                         self.temperature)

        keys = jax.random.split(key, step.obs.shape[0])
        contexts, actions = jax.vmap(one)(contexts, obs, step.reward, last_actions, keys)
        return actions, (contexts, actions)


class _EncodedScorer:
    """A method seen through its `encoded_context_logits` (contexts of encoder features)."""

    def __init__(self, method):
        self.method = method

    def context_logits(self, params, context, key):
        return self.method.encoded_context_logits(params, context, key)
