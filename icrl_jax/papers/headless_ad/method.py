"""Headless-AD (Sinii et al., 2024): AD without an output layer over actions.

Every action is represented by a random embedding, drawn afresh at each training step (one map
for the whole batch, consistent along every sequence) and once per evaluation run. The model
reads previous actions as their embeddings, sees the embeddings of all available actions as a
prompt, and predicts the embedding of the next action; its policy is a softmax over the
dot-product similarities (divided by the temperature tau) between that prediction and the
available actions' embeddings. Nothing in the network depends on the number, order or identity of
actions, so one model serves action sets of any size.

Invariance to the action-set order is exact by construction: the prompt tokens form a set (they
attend to one another bidirectionally and share one position id), step tokens attend to all of
them, and the output is scored against each action's own embedding.

Ablations (config switches in `model`): `prompt=False` (no action-set prompt),
`prompt_order="causal"` (each prompt token attends only to those before it, as in the authors'
causal sequence; the policy then depends on the action-set order), `loss="mse"`
(regress the target embedding, act by nearest neighbour) and `embeddings="normal"` (i.i.d.
Gaussian instead of orthonormal embeddings). N-gram induction-head layers (`ngram_positions`,
models/ngram.py) work as in AD; the action ids they match are indices into the action set, so
they too are blind to the order of the set.

This file also holds `PermutedAD`, the AD baseline trained on randomly permuted action sets.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from icrl_jax.papers.headless_ad.fields import add_headless_fields, default_headless_config  # noqa: F401
from icrl_jax.data.windows import StepWindows
from icrl_jax.methods import register
from icrl_jax.methods.ad import AD, grid_size_of
from icrl_jax.methods.in_context import InContextMethod
from icrl_jax.models.heads import MASKED_LOGIT, mask_logits
from icrl_jax.models.ngram import config_ngram_ids
from icrl_jax.models.step_tokens import ADStepTokens
from icrl_jax.models.transformer import (DISTANCE_POSITIONS, DecodeCache, Transformer,
                                         ring_cache_mask)
from icrl_jax.models.compiled import Compiled

EMBEDDING_KINDS = ("orthonormal", "normal")


def orthonormal_columns(matrix: jax.Array) -> jax.Array:
    """`(E, A)` of full column rank -> Q `(E, A)` with orthonormal columns and `Q^T matrix`
    upper triangular with a positive diagonal: the Q of a QR decomposition with the signs of
    R's diagonal folded in (unique), by Gram-Schmidt, each column orthogonalised twice ("twice
    is enough" for full-rank matrices).

    Why not `jnp.linalg.qr`: on a CPU it calls LAPACK, whose threads contend with XLA's; in
    the Headless-AD paper-scale training step one device's QR held up the other
    (benchmarks/RESULTS.md). This is plain XLA, O(E A^2)."""
    def column(j, q):
        v = jax.lax.dynamic_index_in_dim(matrix, j, axis=1, keepdims=False)
        for _ in range(2):  # q's columns from j on are still zero
            v = v - q @ (q.T @ v)
        return jax.lax.dynamic_update_index_in_dim(q, v / jnp.linalg.norm(v), j, axis=1)

    return jax.lax.fori_loop(0, matrix.shape[1], column, jnp.zeros_like(matrix))


def sample_action_embeddings(key: jax.Array, num_actions: int, dim: int,
                             kind: str = "orthonormal") -> jax.Array:
    """A random action -> embedding map, float32 `(num_actions, dim)`.

    "orthonormal": rows are orthonormal (Haar-distributed: QR of a Gaussian matrix with the signs
    of R's diagonal folded into Q), so a prediction aligned with one action puts no similarity on
    any other; needs `num_actions <= dim`.
    "normal": i.i.d. N(0, 1/dim) entries (the paper's embedding ablation); the 1/dim variance gives
    unit norm in expectation, so only orthogonality differs from the default.
    """
    if kind == "orthonormal":
        if num_actions > dim:
            raise ValueError(f"{num_actions} orthonormal action embeddings need "
                             f"action_embed_dim >= {num_actions}, got {dim}")
        return orthonormal_columns(jax.random.normal(key, (dim, num_actions), jnp.float32)).T
    if kind == "normal":
        return jax.random.normal(key, (num_actions, dim), jnp.float32) / jnp.sqrt(dim)
    raise ValueError(f"unknown action embedding kind {kind!r}; valid: {EMBEDDING_KINDS}")


def embed_actions(actions: jax.Array, action_embeddings: jax.Array) -> jax.Array:
    """int `(B, L)` action ids -> `(B, L, E)` embeddings; ids outside `[0, A)` (the "no previous
    action" id at a history's start) map to the zero vector."""
    num_actions = action_embeddings.shape[0]
    valid = (actions >= 0) & (actions < num_actions)
    return jnp.where(valid[..., None], action_embeddings[jnp.clip(actions, 0, num_actions - 1)],
                     0.0)


def prompt_attention_mask(action_mask: jax.Array, length: int, causal_prompt: bool = False) -> jax.Array:
    """Attention mask for `[prompt (A tokens), steps (L tokens)]`, bool `(B, 1, A+L, A+L)`.

    Prompt tokens attend to every available prompt token (a set: no order), or with
    `causal_prompt` to the available ones up to themselves (an ordered prompt, as in the
    authors' causal sequence); step tokens attend to every available prompt token and causally
    to steps. Nothing attends to padded actions.
    """
    batch, num_actions = action_mask.shape
    total = num_actions + length
    key_is_prompt = jnp.arange(total) < num_actions
    query_is_prompt = key_is_prompt[:, None]
    causal_steps = jnp.tril(jnp.ones((total, total), bool), k=0) & ~key_is_prompt[None, :]
    allowed_keys_of_steps = key_is_prompt[None, :] | causal_steps  # (T, T)
    prompt_keys = key_is_prompt[None, :] & (jnp.tril(jnp.ones((total, total), bool)) if causal_prompt
                                            else True)
    structure = jnp.where(query_is_prompt, prompt_keys, allowed_keys_of_steps)
    available = jnp.concatenate([action_mask, jnp.ones((batch, length), bool)], axis=1)
    return structure[None, None] & available[:, None, None, :]


def with_prompt_ids(ngram_ids: jax.Array, num_prompt: int) -> jax.Array:
    """Step ids `(B, L[, K])` -> `(B, num_prompt + L, K)` with the prompt's ids in front.

    Prompt token p gets -(p + 1) in every component: unique, and never a step's id (ids of
    actions and discrete observations are >= 0; as float bit patterns these small negative
    integers are NaNs), so prompt tokens match nothing.
    """
    ids = ngram_ids if ngram_ids.ndim == 3 else ngram_ids[..., None]
    batch, _, parts = ids.shape
    prompt = -(1 + jnp.arange(num_prompt, dtype=ids.dtype))
    prompt = jnp.broadcast_to(prompt[None, :, None], (batch, num_prompt, parts))
    return jnp.concatenate([prompt, ids], axis=1)


class HeadlessADModel(nn.Module):
    """[action-set prompt, step tokens] -> transformer -> predicted next-action embedding."""

    num_observations: int | None
    d_model: int
    action_embed_dim: int
    prompt: bool
    backbone: Transformer
    grid_size: int | None = None  # see `ADStepTokens`
    # Also feed r_{t-1} * e(a_{t-1}): a token-wise product that lets one attention head sum
    # rewards per action (a linear token map of [e(a), r] cannot); not in the paper.
    reward_gated_actions: bool = False
    # "set": prompt tokens attend to one another (order-free); "causal": each to those before it.
    prompt_order: str = "set"

    def _action_inputs(self, prev_actions, prev_rewards, action_embeddings):
        """Previous-action inputs of the step tokens, `(B, L, E)` or `(B, L, 2E)`."""
        embedded = embed_actions(prev_actions, action_embeddings)
        if not self.reward_gated_actions:
            return embedded
        return jnp.concatenate([embedded, prev_rewards[..., None] * embedded], axis=-1)

    @nn.compact
    def __call__(self, observations, prev_actions, prev_rewards, action_embeddings, action_mask,
                 deterministic: bool = True, cache: DecodeCache | None = None,
                 step_index: jax.Array | None = None, ngram_ids: jax.Array | None = None):
        """Args:
          observations: int `(B, L)` or float `(B, L, *obs_shape)`.
          prev_actions: int `(B, L)` (ids >= A: no previous action).
          prev_rewards: float `(B, L)`.
          action_embeddings: float `(A, E)`, shared by the batch.
          action_mask: bool `(B, A)`.
          cache: incremental decoding (the backbone's `init_cache` with A + max steps slots):
            with `step_index` None, the steps are ignored and the prompt is written to slots
            [0, A); otherwise the L steps are steps `step_index + [0, L)` of the sequence,
            written after the prompt.
          ngram_ids: int `(B, L[, K])` step ids for the backbone's n-gram layers, if it has any
            (full forward pass only). Prompt tokens get ids that match nothing.
        Returns:
          predicted embeddings `(B, L, E)`; with a cache, `(embeddings, cache)`, or only the
          cache when writing the prompt.
        """
        if cache is not None:
            return self._decode(observations, prev_actions, prev_rewards, action_embeddings,
                                action_mask, cache, step_index, ngram_ids)
        batch, length = prev_actions.shape
        # ADStepTokens takes float previous-action inputs through a linear map: num_actions unused.
        tokens = ADStepTokens(self.d_model, 1, self.num_observations, self.grid_size,
                              name="tokens")(
            observations, self._action_inputs(prev_actions, prev_rewards, action_embeddings),
            prev_rewards)
        if self.prompt:
            num_actions = action_embeddings.shape[0]
            prompt = nn.Dense(self.d_model, name="prompt")(action_embeddings)  # (A, D)
            prompt = jnp.broadcast_to(prompt[None], (batch,) + prompt.shape)
            hidden = self.backbone(
                jnp.concatenate([prompt, tokens], axis=1), deterministic=deterministic,
                attention_mask=prompt_attention_mask(action_mask, length,
                                                     self.prompt_order == "causal"),
                causal_from=num_actions,
                positions=jnp.concatenate([jnp.zeros(num_actions, jnp.int32),
                                           jnp.arange(length, dtype=jnp.int32)]),
                ngram_ids=None if ngram_ids is None else with_prompt_ids(ngram_ids, num_actions))
            hidden = hidden[:, num_actions:]
        else:
            hidden = self.backbone(tokens, deterministic=deterministic, ngram_ids=ngram_ids)
        return nn.Dense(self.action_embed_dim, name="predicted_embedding")(hidden)

    def _decode(self, observations, prev_actions, prev_rewards, action_embeddings, action_mask,
                cache, step_index, ngram_ids):
        """The full forward pass split into cached pieces (same parameters, same outputs);
        `ngram_ids` are the prompt's (`with_prompt_ids`) when writing it, else the steps'."""
        num_prompt = action_embeddings.shape[0] if self.prompt else 0
        slots = cache.slots
        slot = jnp.arange(slots)
        prompt_keys = (slot[None, :] < num_prompt) & jnp.pad(
            action_mask, ((0, 0), (0, slots - action_mask.shape[1])))[:, :slots]
        if step_index is None:  # write the prompt: a set (or ordered prompt) attending to itself
            if not self.prompt:
                return cache
            prompt = nn.Dense(self.d_model, name="prompt")(action_embeddings)
            prompt = jnp.broadcast_to(prompt[None], (action_mask.shape[0],) + prompt.shape)
            mask = jnp.broadcast_to(prompt_keys[:, None, None, :],
                                    (action_mask.shape[0], 1, num_prompt, slots))
            if self.prompt_order == "causal":
                mask = mask & (slot[None, :] <= jnp.arange(num_prompt)[:, None])
            _, cache = self.backbone(prompt, attention_mask=mask, cache=cache,
                                     cache_index=jnp.int32(0),
                                     positions=jnp.zeros(num_prompt, jnp.int32),
                                     ngram_ids=ngram_ids)
            return cache
        length = prev_actions.shape[1]
        tokens = ADStepTokens(self.d_model, 1, self.num_observations, self.grid_size,
                              name="tokens")(
            observations, self._action_inputs(prev_actions, prev_rewards, action_embeddings),
            prev_rewards)
        positions = step_index + jnp.arange(length, dtype=jnp.int32)
        # The steps' slots after the prompt are a ring (`ring_cache_mask`): causal, and within
        # the backbone's attention window (the prompt stays visible, as in the full pass).
        first_slot, ring = ring_cache_mask(positions, slots - num_prompt,
                                           self.backbone.attention_window)
        step_keys = jnp.concatenate([jnp.zeros((length, num_prompt), bool), ring], axis=1)
        mask = prompt_keys[:, None, None, :] | step_keys[None, None]
        hidden, cache = self.backbone(tokens, attention_mask=mask, positions=positions,
                                      cache=cache, cache_index=num_prompt + first_slot,
                                      ngram_ids=ngram_ids)
        return nn.Dense(self.action_embed_dim, name="predicted_embedding")(hidden), cache


#: Other token layouts of Headless-AD (`model.layout` -> its method class, built from the model
#: config and the env); each registers itself from its module (reference_method.py).
LAYOUTS: dict = {}


@register
class HeadlessAD(InContextMethod):
    """The Headless-AD method: model, per-step random embeddings, loss and policy logits.

    Args:
      model_config: transformer fields of `default_transformer_config()`, `d_model`, and the
        Headless-AD fields of `default_headless_config()`.
      num_observations: number of discrete observation ids, or None for float vectors.
      grid_size: side of the grid whose cells the observation ids are (adds row/column
        features, as in AD), or None.
    """

    name = "headless_ad"
    has_cache_decoder = True  # decode_init / decode_logits
    any_action_count = True  # its parameters do not depend on the action count

    @classmethod
    def from_config(cls, config, env, model_config) -> "HeadlessAD":
        """`model.layout`: "ours" (this model) or another registered in `LAYOUTS` (the
        authors' bandit model, "reference": `reference_method.ReferenceHeadlessAD`)."""
        if model_config.layout != "ours":
            return LAYOUTS[model_config.layout](model_config, env)
        return cls(model_config, None if env.pixels else env.num_observations,
                   grid_size_of(config, env))

    @classmethod
    def variant_name(cls, config) -> str:
        """Headless-AD with its ablation switches named (Table 1 rows)."""
        model = config.model
        parts = [name for name, ablated in (
            ("Prompt Ablation", not model.prompt), ("Loss Ablation", model.loss != "infonce"),
            ("Embed Ablation", model.embeddings != "orthonormal")) if ablated]
        return " + ".join(parts) or "Headless-AD"

    def __init__(self, model_config: ml_collections.ConfigDict, num_observations: int | None,
                 grid_size: int | None = None):
        self.config = model_config
        for flag in ("episode_starts", "episode_returns"):
            if model_config[flag]:
                raise ValueError(f"model.{flag} is an AD option; Headless-AD's tokens do not "
                                 "carry it")
        self.tau = float(model_config.tau)
        self.loss_kind = model_config.loss
        self.embedding_kind = model_config.embeddings
        self.embed_dim = int(model_config.action_embed_dim)
        # N-gram induction-head layers (models/ngram.py), as in AD: step ids per window.
        self.ngram_ids = config_ngram_ids(model_config)
        self.model = HeadlessADModel(num_observations, model_config.d_model, self.embed_dim,
                                     bool(model_config.prompt),
                                     Transformer.from_config(model_config), grid_size,
                                     bool(model_config.reward_gated_actions),
                                     str(model_config.prompt_order))
        self.model = Compiled(self.model)  # eager init / apply: one program each

    @property
    def decode_window(self) -> int:
        """`InContextMethod.decode_window`, except with the action-set prompt and rotary or
        ALiBi positions: the prompt sits at position 0, so a step's distance to it grows with the
        rollout, past what a training window shows (such a model recomputes the window)."""
        if self.model.prompt and self.config.position in DISTANCE_POSITIONS:
            return 0
        return super().decode_window

    def action_embeddings(self, key: jax.Array, num_actions: int) -> jax.Array:
        """One random embedding map `(num_actions, E)` (a training step or an evaluation run)."""
        return sample_action_embeddings(key, num_actions, self.embed_dim, self.embedding_kind)

    def eval_params(self, params, key: jax.Array, env) -> dict:
        """Trained params plus the embedding map of one evaluation run (what `context_logits`
        and `in_context_source` take)."""
        return {"model": params, "action_embeddings": self.action_embeddings(key, env.num_actions)}

    def window_ngram_ids(self, window: StepWindows) -> jax.Array | None:
        return None if self.ngram_ids is None else self.ngram_ids(window)

    def init(self, key: jax.Array, example: StepWindows):
        num_actions = example.action_mask.shape[-1]
        return self.model.init({"params": key}, example.observations, example.prev_actions,
                               example.prev_rewards, self.action_embeddings(key, num_actions),
                               example.action_mask,
                               ngram_ids=self.window_ngram_ids(example))["params"]

    def predict(self, params, window: StepWindows, action_embeddings: jax.Array,
                key: jax.Array | None = None, deterministic: bool = True) -> jax.Array:
        """Predicted next-action embeddings `(B, L, E)`."""
        rngs = None if key is None else {"dropout": key}
        return self.model.apply({"params": params}, window.observations, window.prev_actions,
                                window.prev_rewards, action_embeddings, window.action_mask,
                                deterministic=deterministic, rngs=rngs,
                                ngram_ids=self.window_ngram_ids(window))

    def similarity_logits(self, predicted: jax.Array, action_embeddings: jax.Array) -> jax.Array:
        """`(B, L, E) x (A, E)` -> dot-product similarities over tau, float32 `(B, L, A)`
        (unmasked)."""
        return jnp.einsum("ble,ae->bla", predicted, action_embeddings).astype(jnp.float32) / self.tau

    def loss(self, params, batch: StepWindows, key: jax.Array, deterministic: bool = False):
        """InfoNCE over the available actions (or MSE to the target embedding); (loss, metrics).

        The embedding map is drawn from `key`, i.e. afresh at every training step.
        """
        embed_key, dropout_key = jax.random.split(key)
        num_actions = batch.action_mask.shape[-1]
        embeddings = self.action_embeddings(embed_key, num_actions)
        predicted = self.predict(params, batch, embeddings, dropout_key, deterministic)
        logits = mask_logits(self.similarity_logits(predicted, embeddings),
                             batch.action_mask[:, None, :])
        if self.loss_kind == "infonce":
            log_probs = jax.nn.log_softmax(logits, axis=-1)
            loss = -jnp.take_along_axis(log_probs, batch.actions[..., None], -1).mean()
            chosen = jnp.argmax(logits, -1)
        else:
            target = embeddings[batch.actions]
            loss = jnp.square(predicted - target).sum(-1).mean()
            chosen = self._nearest(predicted, embeddings, batch.action_mask)
        accuracy = (chosen == batch.actions).mean()
        return loss, {"loss": loss, "accuracy": accuracy}

    @staticmethod
    def _nearest(predicted, embeddings, action_mask):
        """Nearest available embedding (Euclidean), int `(B, L)`."""
        distance = jnp.square(predicted[:, :, None, :] - embeddings[None, None]).sum(-1)
        return jnp.argmin(jnp.where(action_mask[:, None, :], distance, jnp.inf), -1)

    def _split_eval_params(self, params, num_actions: int):
        if isinstance(params, dict) and "action_embeddings" in params:
            return params["model"], params["action_embeddings"]
        return params, self.action_embeddings(
            jax.random.PRNGKey(int(self.config.eval_embedding_seed)), num_actions)

    def decode_init(self, params, example: StepWindows, max_steps: int) -> DecodeCache:
        """A cache for B rollouts of up to `max_steps` steps, with the action-set prompt already
        written. example: any `(B, L)` window of theirs (its action masks `(B, A)` build the
        prompt; its shapes size the n-gram ids)."""
        action_mask = example.action_mask
        batch, num_actions = action_mask.shape
        model_params, embeddings = self._split_eval_params(params, num_actions)
        slots = (num_actions if self.model.prompt else 0) + int(max_steps)
        parts = self.ngram_id_parts(example)
        cache = self.model.backbone.init_cache(batch, slots, self.config.d_model,
                                               ngram_parts=parts)
        prompt_ids = (None if parts is None else  # the prompt's own ids, as in the full pass
                      with_prompt_ids(jnp.zeros((batch, 0, parts), jnp.int32), num_actions))
        return self.model.apply({"params": model_params}, None, None, None, embeddings,
                                action_mask, cache=cache, ngram_ids=prompt_ids)

    def decode_logits(self, params, cache: DecodeCache, step: StepWindows,
                      step_index: jax.Array) -> tuple[jax.Array, DecodeCache]:
        """Policy logits `(B, L, A)` of steps `step_index + [0, L)` given the cache of the earlier
        ones (and the prompt); equal to `context_logits` on the whole sequence. Returns the
        cache with these steps written."""
        num_actions = step.action_mask.shape[-1]
        model_params, embeddings = self._split_eval_params(params, num_actions)
        predicted, cache = self.model.apply(
            {"params": model_params}, step.observations, step.prev_actions, step.prev_rewards,
            embeddings, step.action_mask, cache=cache, step_index=step_index,
            ngram_ids=self.window_ngram_ids(step))
        return self._policy_logits(predicted, embeddings, step.action_mask), cache

    def _policy_logits(self, predicted, embeddings, action_mask):
        if self.loss_kind == "mse":
            nearest = self._nearest(predicted, embeddings, action_mask)
            return jnp.where(jax.nn.one_hot(nearest, embeddings.shape[0], dtype=bool), 0.0,
                             MASKED_LOGIT)
        return self.similarity_logits(predicted, embeddings)

    def context_logits(self, params, context: StepWindows, key: jax.Array) -> jax.Array:
        """Policy logits `(B, L, A)` for every position of an evaluation context.

        `params` is `eval_params(...)` (trained params + the run's embedding map). Plain trained
        params also work (the generic `pipeline.evaluate`): the map is then drawn from the fixed
        `eval_embedding_seed`, which is likewise one map for the whole run.
        With the MSE loss the policy is the nearest neighbour: all logits but its are masked.
        """
        del key
        model_params, embeddings = self._split_eval_params(params, context.action_mask.shape[-1])
        predicted = self.predict(model_params, context, embeddings)
        return self._policy_logits(predicted, embeddings, context.action_mask)


def permute_action_ids(key: jax.Array, batch: StepWindows) -> StepWindows:
    """Relabel each window's actions by its own random permutation of the action indices.

    Available actions are shuffled among themselves (padding keeps its place), which is what a
    history generated with a permuted action set looks like. Shapes are unchanged.
    """
    batch_size, num_actions = batch.action_mask.shape
    index = jnp.arange(num_actions)

    def new_of_old(key, mask):
        # Both orders list the available indices first and then the padded ones in index order,
        # the first in index order, the second shuffled: pairing them permutes only available ids.
        in_order = jnp.argsort(~mask, stable=True)
        shuffled = jnp.argsort(jnp.where(mask, jax.random.uniform(key, (num_actions,)),
                                         2.0 + index))
        return jnp.zeros(num_actions, jnp.int32).at[in_order].set(shuffled.astype(jnp.int32))

    mapping = jax.vmap(new_of_old)(jax.random.split(key, batch_size), batch.action_mask)

    def relabel(actions):
        valid = (actions >= 0) & (actions < num_actions)
        mapped = jnp.take_along_axis(mapping, jnp.clip(actions, 0, num_actions - 1), -1)
        return jnp.where(valid, mapped, actions).astype(actions.dtype)

    return batch.replace(actions=relabel(batch.actions), prev_actions=relabel(batch.prev_actions))


@register
class PermutedAD(AD):
    """AD trained on randomly permuted action sets (the paper's appendix C baseline): every
    training window gets its own permutation of the action labels; evaluation is plain AD."""

    name = "ad_permuted"
    display_name = "AD (permuted training)"

    def loss(self, params, batch: StepWindows, key: jax.Array, deterministic: bool = False):
        permute_key, key = jax.random.split(key)
        return super().loss(params, permute_action_ids(permute_key, batch), key, deterministic)
