"""DPT (Lee et al., 2023): a causal transformer reads a query state, then an in-context dataset
of transitions of one task, one token each, and predicts the task's optimal action at the query.

Tokens (the authors' `net.py`): a transition is the vector [s, one-hot a, s', r] and the query
[s_q, 0, 0, 0]; one linear map embeds both. The sequence is the query first, then the L
transitions; a linear head reads every position. Position i (1 <= i <= L) has seen the query
and the first i transitions, and the loss is the cross entropy of the optimal action at every
such position: one sequence trains predictions from datasets of 1 to L transitions. The
context is an unordered set: training contexts are shuffled (`model.shuffle_context`), and
with `model.position="none"` the transformer has no positions at all (the authors' GPT-2 adds
learned ones, `model.position="learned"`, which their shuffled contexts leave carrying only
how many transitions a position has seen).

States are features of the env's observations (`StateFeatures`): a grid cell's (row, column)
(the authors' Dark Room (x, y)), a one-hot of other discrete ids (a bandit's one observation:
the authors' constant state [1]), XLand-MiniGrid's view as one-hot tiles and colours, float
vectors as they are.

Policies (`DPTPolicy`):
* online: the context holds the model's own transitions, added when their episode ends (each
  pull of a bandit is an episode); at every step the query is the current observation. When
  the query never changes (a bandit's one observation) and the rollout fits in the context, the
  transitions are decoded one at a time from a key/value cache: exact, since a position's
  output depends only on the query and the transitions before it. Otherwise every step
  recomputes the query and the last `train.seq_len` transitions (the query comes first, so
  every key depends on it);
* offline: a fixed dataset per task, made at the rollout's start by `dpt.offline_source` from
  the rollout's own key, never added to; the model acts greedily on it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.data import sources
from icrl_jax.data.sources import ParamSource, Source, Transition
from icrl_jax.data.train_data import TrainData, on_device
from icrl_jax.envs.base import BANDIT
from icrl_jax.envs.xland import XLandMiniGrid
from icrl_jax.methods import register
from icrl_jax.methods.base import Method
from icrl_jax.models.compiled import Compiled
from icrl_jax.models.heads import checked_temperature, select_actions, smoothed_cross_entropy
from icrl_jax.models.transformer import DecodeCache, Transformer, ring_cache_mask
from icrl_jax.models.xland_view import NUM_COLORS, NUM_TILES
from icrl_jax.papers.dpt.data import ContextBatch, LabelledHistory, sample_contexts

#: Most discrete observation ids embedded as one-hot state features.
MAX_ONE_HOT = 4096


@dataclasses.dataclass(frozen=True)
class StateFeatures:
    """An env's observations as float32 state vectors of `dim` features (module docstring).

    kind: "grid" (cell id -> (row, column) of a `grid_size` grid), "one_hot" (`dim` ids),
    "xland_view" (XLand-MiniGrid's `(H, W, 2)` (tile, colour) ids: each cell's one-hot tile and
    colour, flattened), or "vector" (float observations of shape `shape`, flattened).
    """

    kind: str
    dim: int
    grid_size: int = 0
    shape: tuple[int, ...] = ()

    @classmethod
    def of(cls, env) -> "StateFeatures":
        if env.host or env.pixels:
            raise UserError(f"dpt reads state vectors; {type(env).__name__} observes "
                            f"{'pixels' if env.pixels else 'a host simulator'}")
        if isinstance(env, XLandMiniGrid):
            shape = tuple(int(n) for n in env.observation_shape)
            return cls("xland_view", shape[0] * shape[1] * (NUM_TILES + NUM_COLORS), shape=shape)
        if env.discrete_observations and env.grid_size:
            return cls("grid", 2, grid_size=int(env.grid_size))
        if env.discrete_observations:
            if env.num_observations > MAX_ONE_HOT:
                raise UserError(f"dpt embeds discrete observations one-hot; "
                                f"{type(env).__name__} has {env.num_observations} "
                                f"(at most {MAX_ONE_HOT})")
            return cls("one_hot", int(env.num_observations))
        shape = tuple(int(n) for n in env.observation_shape)
        return cls("vector", int(np.prod(shape)), shape=shape)

    def __call__(self, obs: jax.Array) -> jax.Array:
        """Observations `(..., *obs_shape)` -> float32 `(..., dim)`."""
        if self.kind == "grid":
            obs = jnp.asarray(obs, jnp.int32)
            return jnp.stack([obs // self.grid_size, obs % self.grid_size], -1).astype(jnp.float32)
        if self.kind == "one_hot":
            return jax.nn.one_hot(obs, self.dim, dtype=jnp.float32)
        if self.kind == "xland_view":
            ids = jnp.asarray(obs, jnp.int32)
            cells = jnp.concatenate([jax.nn.one_hot(ids[..., 0], NUM_TILES, dtype=jnp.float32),
                                     jax.nn.one_hot(ids[..., 1], NUM_COLORS, dtype=jnp.float32)], -1)
            return jnp.reshape(cells, ids.shape[:-3] + (self.dim,))
        lead = obs.shape[:obs.ndim - len(self.shape)]
        return jnp.reshape(obs, lead + (self.dim,)).astype(jnp.float32)


class DPTNet(nn.Module):
    """Token vectors `(B, T, F)` -> action logits `(B, T, A)`: a linear embedding, the shared
    transformer, a linear head (the authors' `embed_transition`, `GPT2Model`, `pred_actions`)."""

    num_actions: int
    d_model: int
    backbone: Transformer

    @nn.compact
    def __call__(self, tokens, key_mask=None, positions=None, deterministic: bool = True,
                 cache: DecodeCache | None = None, cache_index=None, attention_mask=None):
        """`key_mask`: bool `(B, T)`, False for tokens no position may attend to; `positions`:
        int `(T,)`. With `cache` (decoding): `attention_mask`, `positions` and `cache_index`
        as `Transformer` takes them; returns `(logits, cache)`."""
        x = nn.Dense(self.d_model, name="embed_transition")(tokens)
        head = nn.Dense(self.num_actions, name="action_head")
        if cache is not None:
            hidden, cache = self.backbone(x, attention_mask=attention_mask, positions=positions,
                                          cache=cache, cache_index=cache_index)
            return head(hidden), cache
        return head(self.backbone(x, key_mask, deterministic=deterministic, positions=positions))


@register
class DPT(Method):
    """The DPT method (module docstring).

    Args:
      model_config: `d_model`, `shuffle_context` and the transformer's fields.
      env: the environment (its observations give the state features, its actions the head).
      context_len: L, transitions per in-context dataset (`train.seq_len`).
    """

    name = "dpt"
    display_name = "DPT"

    @classmethod
    def from_config(cls, config, env, model_config) -> "DPT":
        return cls(model_config, env, int(config.train.seq_len))

    @classmethod
    def prepare_config(cls, config) -> None:
        # The query takes a position before the L transitions.
        config.model.max_len = max(int(config.model.max_len), int(config.train.seq_len) + 1)

    def __init__(self, model_config, env, context_len: int):
        self.config = model_config
        self.num_actions = int(env.num_actions)
        self.features = StateFeatures.of(env)
        self.context_len = int(context_len)
        self.shuffle = bool(model_config.shuffle_context)
        self.learned_positions = model_config.position == "learned"
        if model_config.position == "rotary":
            raise UserError("model.position='rotary' would order the in-context dataset; dpt "
                            "takes 'none' (an unordered set) or 'learned' (the authors' GPT-2)")
        self.model = Compiled(DPTNet(self.num_actions, int(model_config.d_model),
                                     Transformer.from_config(model_config)))

    @property
    def token_dim(self) -> int:
        """F: [s, one-hot a, s', r]."""
        return 2 * self.features.dim + self.num_actions + 1

    # -- tokens --------------------------------------------------------------------------

    def transition_tokens(self, observations, actions, next_observations, rewards) -> jax.Array:
        """Transitions `(...)` -> token vectors float32 `(..., F)`."""
        return jnp.concatenate([self.features(observations),
                                jax.nn.one_hot(actions, self.num_actions, dtype=jnp.float32),
                                self.features(next_observations),
                                jnp.asarray(rewards, jnp.float32)[..., None]], -1)

    def query_tokens(self, observations) -> jax.Array:
        """Query observations `(...)` -> token vectors float32 `(..., F)`: [s_q, 0, 0, 0]."""
        state = self.features(observations)
        return jnp.concatenate([state, jnp.zeros(state.shape[:-1] + (self.token_dim
                                                                      - self.features.dim,))], -1)

    def batch_tokens(self, batch: ContextBatch) -> jax.Array:
        """The query, then the context: float32 `(B, L + 1, F)`."""
        context = self.transition_tokens(batch.observations, batch.actions,
                                         batch.next_observations, batch.rewards)
        return jnp.concatenate([self.query_tokens(batch.query_observations)[:, None], context], 1)

    # -- training ------------------------------------------------------------------------

    def training_data(self, dataset, config, env) -> TrainData:
        if not isinstance(dataset, LabelledHistory):
            raise UserError(f"dpt trains on labelled histories (data.builder='dpt_histories'), "
                            f"got {type(dataset).__name__} from data.builder="
                            f"{config.data.builder!r}")
        if dataset.num_actions != self.num_actions:
            raise UserError(f"the dataset has {dataset.num_actions} actions, the env "
                            f"{self.num_actions}")
        arrays = jax.tree.map(jnp.asarray, dataset)
        shuffle = self.shuffle
        return on_device(arrays, lambda data, key, batch_size, window: sample_contexts(
            data, key, batch_size, window, shuffle), self.context_len)

    def init(self, key: jax.Array, example: ContextBatch):
        return self.model.init({"params": key}, self.batch_tokens(example))["params"]

    def logits(self, params, batch: ContextBatch, key=None, deterministic: bool = True):
        """Logits `(B, L + 1, A)` at the query and after each transition."""
        rngs = {} if key is None else {"dropout": key}
        return self.model.apply({"params": params}, self.batch_tokens(batch),
                                deterministic=deterministic, rngs=rngs)

    def loss(self, params, batch: ContextBatch, key: jax.Array, deterministic: bool = False):
        """Cross entropy of the optimal action at positions 1..L (after 1..L transitions; the
        query's own position is not trained, as in the authors' code), averaged."""
        logits = self.logits(params, batch, key, deterministic)[:, 1:]
        labels = jnp.broadcast_to(batch.labels[:, None], logits.shape[:2])
        mask = batch.action_mask[:, None, :]
        loss = smoothed_cross_entropy(logits, labels, mask, 0.0).mean()
        accuracy = (jnp.argmax(jnp.where(mask, logits, -jnp.inf), -1) == labels).mean()
        return loss, {"loss": loss, "accuracy": accuracy}

    # -- acting --------------------------------------------------------------------------

    def positions(self, first_valid: jax.Array, length: int) -> jax.Array | None:
        """Learned positions of the query and `length` context slots whose valid tokens start
        at slot `first_valid`: 0 for the query, 1, 2, ... for the valid slots (None without
        learned positions)."""
        if not self.learned_positions:
            return None
        slots = jnp.arange(length, dtype=jnp.int32)
        return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.maximum(slots - first_valid + 1, 0)])

    def query_logits(self, params, query: jax.Array, context: jax.Array,
                     count: jax.Array) -> jax.Array:
        """Logits `(A,)` of one query token `(F,)` given the last `count` of the context's
        slots `(C, F)` (right-aligned: the valid ones end it)."""
        slots = context.shape[0]
        first_valid = slots - count
        tokens = jnp.concatenate([query[None], context])[None]
        key_mask = jnp.concatenate([jnp.ones(1, bool), jnp.arange(slots) >= first_valid])[None]
        logits = self.model.apply({"params": params}, tokens, key_mask,
                                  self.positions(first_valid, slots))[0]
        # The newest transition's position, or the query's own when the context is empty.
        return logits[jnp.where(count > 0, slots, 0)]

    def decode(self, params, cache: DecodeCache, token: jax.Array,
               index: jax.Array) -> tuple[jax.Array, DecodeCache]:
        """Logits `(A,)` of the token `(F,)` at sequence position `index` given the cache of
        the tokens before it; returns the cache with it written."""
        positions = jnp.reshape(index, (1,)).astype(jnp.int32)
        slot, mask = ring_cache_mask(positions, cache.slots)
        logits, cache = self.model.apply({"params": params}, token[None, None], cache=cache,
                                         cache_index=slot, attention_mask=mask[None, None],
                                         positions=positions)
        return logits[0, 0], cache

    def policies(self, params, env, config) -> dict[str, Any]:
        """"model" (online), and with `dpt.offline` "model_offline"; the comparison sources
        (`dpt.comparisons`, `dpt.offline_comparisons` as "<name>_offline")."""
        out = {"model": ParamSource(DPTPolicy(
            self, env, self.context_len, bool(config.eval.greedy),
            checked_temperature(config.eval.temperature), int(config.eval.num_steps)),
            params, name="model")}
        steps = int(config.dpt.offline_steps) or self.context_len
        offline = config.dpt.offline or len(config.dpt.offline_comparisons)
        dataset_source = sources.build_source(
            config.dpt.offline_source or config.data.source, env, steps,
            config.data.source_kwargs.to_dict() if not config.dpt.offline_source else {}
        ) if offline else None
        if config.dpt.offline:
            out["model_offline"] = ParamSource(DPTPolicy(
                self, env, self.context_len, True, 1.0, int(config.eval.num_steps),
                dataset_source, steps), params, name="model_offline")
        for name, kwargs in config.dpt.comparisons.items():
            out[name] = sources.build_source(name, env, int(config.eval.num_steps), dict(kwargs))
        for name, kwargs in config.dpt.offline_comparisons.items():
            policy = sources.build_source(name, env, int(config.eval.num_steps), dict(kwargs))
            out[f"{name}_offline"] = offline_source(policy, dataset_source, env, steps)
        return out


def collect_transitions(env, source: Source, key: jax.Array, params, num_steps: int) -> Transition:
    """`source` on one task for `num_steps` steps: its `Transition`s stacked `(num_steps, ...)`
    (next observations before any auto-reset)."""
    source_key, env_key, run_key = jax.random.split(key, 3)
    obs, state = env.reset(env_key, params)

    def step(carry, _):
        key, obs, state, source_state = carry
        key, act_key, env_key, update_key = jax.random.split(key, 4)
        action, source_state = source.act(act_key, source_state, obs, state, params)
        action = jnp.asarray(action, jnp.int32)
        next_obs, next_state, reward, terminated, truncated, info = env.transition(
            env_key, state, action, params)
        transition = Transition(obs=obs, action=action, reward=jnp.asarray(reward, jnp.float32),
                                next_obs=info["final_observation"], terminated=terminated,
                                truncated=truncated, env_state=state, next_env_state=next_state)
        source_state = source.update(update_key, source_state, transition, params)
        return (key, next_obs, next_state, source_state), transition

    carry = (run_key, obs, state, source.init(source_key, params))
    return jax.lax.scan(step, carry, None, length=num_steps)[1]


def offline_source(policy: Source, dataset_source: Source, env, num_steps: int) -> Source:
    """`policy` reading a fixed dataset: at the start, `num_steps` transitions of
    `dataset_source` on the task (from the rollout's own key) go through its `update`; then it
    acts on them and never updates again."""

    def init(key, params):
        transitions = collect_transitions(env, dataset_source, key, params, num_steps)

        def read(state, transition):
            return policy.update(key, state, transition, params), None

        return jax.lax.scan(read, policy.init(key, params), transitions)[0]

    def update(key, state, transition, params):
        return state

    return Source(init, policy.act, update, name=f"{policy.name}_offline")


@flax.struct.dataclass
class OnlineContext:
    """One rollout's in-context dataset (`DPTPolicy`).

    context: float32 `(C, F)` transition tokens, right-aligned: the last `count` are valid.
    pending: float32 `(E, F)` this episode's transitions so far (the first `episode_steps`),
      added to the context when the episode ends.
    """

    context: jax.Array
    count: jax.Array
    pending: jax.Array
    episode_steps: jax.Array


@flax.struct.dataclass
class CachedContext:
    """A bandit rollout decoded from a key/value cache: the query and the `written - 1`
    transitions so far, and the logits after the last of them."""

    cache: DecodeCache
    written: jax.Array
    logits: jax.Array


@dataclasses.dataclass(frozen=True)
class DPTPolicy:
    """`ParamSource.build` of DPT's online or (with `dataset_source`) offline policy (module
    docstring). Frozen, so rollouts with the same settings reuse one compiled program."""

    method: DPT
    env: Any
    context_len: int
    greedy: bool
    temperature: float
    max_steps: int
    dataset_source: Source | None = None
    dataset_steps: int = 0

    @property
    def constant_query(self) -> bool:
        """The query never changes: a bandit with one observation id."""
        env = self.env
        return env.kind == BANDIT and env.discrete_observations and env.num_observations == 1

    @property
    def cached(self) -> bool:
        """Decode from a cache: online, the query is constant and every step's transition
        stays in the context."""
        return (self.dataset_source is None and self.constant_query
                and self.max_steps <= self.context_len)

    @property
    def episode_slots(self) -> int:
        """E: the most transitions an episode holds before it is added to the context."""
        if self.env.kind == BANDIT:
            return 1
        if not self.env.episode_length:
            raise UserError(f"dpt's online policy adds whole episodes to its context; "
                            f"{type(self.env).__name__} has no episode length")
        return int(self.env.episode_length)

    def __call__(self, params) -> Source:
        if self.dataset_source is not None and self.constant_query:
            return self._fixed(params)
        return self._cached(params) if self.cached else self._recomputed(params)

    def _act(self, key, logits, params):
        _, action_key = jax.random.split(key)
        return select_actions(action_key, logits, self.env.action_mask(params), self.greedy,
                              self.temperature)

    def _dataset(self, key, env_params) -> tuple[jax.Array, jax.Array]:
        """The offline dataset's last `context_len` transitions as context slots (right-aligned)
        and their count."""
        slots, method = self.context_len, self.method
        data = collect_transitions(self.env, self.dataset_source, key, env_params,
                                   self.dataset_steps)
        tokens = method.transition_tokens(data.obs, data.action, data.next_obs, data.reward)
        context = jnp.concatenate([jnp.zeros((slots, method.token_dim), jnp.float32), tokens])
        return context[-slots:], jnp.asarray(min(self.dataset_steps, slots), jnp.int32)

    def _recomputed(self, params) -> Source:
        method, slots = self.method, self.context_len
        width = method.token_dim

        def init(key, env_params):
            context = jnp.zeros((slots, width), jnp.float32)
            count = jnp.zeros((), jnp.int32)
            if self.dataset_source is not None:
                context, count = self._dataset(key, env_params)
            return OnlineContext(context, count, jnp.zeros((self.episode_slots, width), jnp.float32),
                                 jnp.zeros((), jnp.int32))

        def act(key, state, obs, env_state, env_params):
            logits = method.query_logits(params, method.query_tokens(obs), state.context,
                                         state.count)
            return self._act(key, logits, env_params), state

        def update(key, state, transition, env_params):
            if self.dataset_source is not None:  # offline: the dataset never changes
                return state
            token = method.transition_tokens(transition.obs, transition.action,
                                             transition.next_obs, transition.reward)
            index = jnp.minimum(state.episode_steps, self.episode_slots - 1)
            pending = state.pending.at[index].set(token)
            steps = state.episode_steps + 1
            # The episode's transitions join the context's end; the oldest slide out.
            joined = jax.lax.dynamic_slice_in_dim(jnp.concatenate([state.context, pending]),
                                                  steps, slots)
            done = transition.done
            return OnlineContext(jnp.where(done, joined, state.context),
                                 jnp.where(done, jnp.minimum(state.count + steps, slots),
                                           state.count),
                                 pending, jnp.where(done, 0, steps))

        return Source(init, act, update, name="dpt_offline" if self.dataset_source else "dpt")

    def _fixed(self, params) -> Source:
        """Offline with a constant query: one pass at the start; the state is its logits."""
        method = self.method

        def init(key, env_params):
            obs, _ = self.env.reset(key, env_params)
            return method.query_logits(params, method.query_tokens(obs),
                                       *self._dataset(key, env_params))

        def act(key, logits, obs, env_state, env_params):
            return self._act(key, logits, env_params), logits

        def update(key, logits, transition, env_params):
            return logits

        return Source(init, act, update, name="dpt_offline")

    def _cached(self, params) -> Source:
        method = self.method

        def init(key, env_params):
            obs, _ = self.env.reset(key, env_params)
            cache = method.model.backbone.init_cache(1, self.context_len + 1,
                                                     int(method.config.d_model))
            logits, cache = method.decode(params, cache, method.query_tokens(obs),
                                          jnp.zeros((), jnp.int32))
            return CachedContext(cache, jnp.ones((), jnp.int32), logits)

        def act(key, state, obs, env_state, env_params):
            return self._act(key, state.logits, env_params), state

        def update(key, state, transition, env_params):
            token = method.transition_tokens(transition.obs, transition.action,
                                             transition.next_obs, transition.reward)
            logits, cache = method.decode(params, state.cache, token, state.written)
            return CachedContext(cache, state.written + 1, logits)

        return Source(init, act, update, name="dpt_cached")
