"""Headless-AD with the authors' bandit layout and blocks (`model.layout="reference"`).

`HeadlessAD.from_config` builds this method instead of the default one when the config says
`model.layout="reference"`: the model is `reference_layout.ReferenceBanditModel` (an action token
and a reward token per step after a learned start pair, the ordered causal action-set prompt,
TinyLlama blocks: RMSNorm, SwiGLU, rotary positions), initialised as their `Model._init_weights`
does, trained with their InfoNCE loss (unavailable actions' similarities zeroed, not removed) and
acting with their policy (a softmax over the raw similarities of the available actions: no tau).
It trains and evaluates through the normal `icrl-jax train` path.

Of the model fields it reads `d_model`, `num_layers`, `num_heads`, `action_embed_dim` (their
`token_embed_dim`), `prompt`, `tau`, `mlp_hidden` (their `intermediate_size`; 0: 4 d),
`attention_dropout` and `residual_dropout`, and the fields that choose only how the backbone
computes (`Transformer.EXECUTION_FIELDS`: the attention implementation and block, `remat`); the
other block fields (`norm`, `mlp_type`, `position`, ...) are the authors' and are not read.
Evaluation recomputes the sliding window at every step (no key/value cache): each step costs a
full pass over `2 L + A` tokens.

Refused, in one line each: another env than the Bernoulli bandit (their token layout has no
observation and a two-row reward table), an attention window, n-gram layers, reward-gated action
inputs, AD's episode fields, the MSE loss and Gaussian embeddings (their code has them; this port
does not).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.data.windows import StepWindows
from icrl_jax.models.heads import mask_logits
from icrl_jax.models.transformer import Transformer
from icrl_jax.papers.headless_ad import reference_layout as RL
from icrl_jax.papers.headless_ad.method import LAYOUTS, HeadlessAD, embed_actions


def check_reference_config(model_config, env) -> None:
    """Raise a one-line `UserError` for what the authors' bandit model cannot compute."""
    def refuse(what: str):
        raise UserError(f"model.layout='reference' (the authors' Bernoulli-bandit model) {what}")

    if env.name != "bernoulli_bandit" or env.num_observations != 1:
        refuse(f"needs env bernoulli_bandit without a context, got {env.name!r}"
               + ("" if env.num_observations == 1 else " with observations"))
    if model_config.attention_window:
        refuse("attends over the whole sequence: set model.attention_window=0")
    if model_config.ngram_positions:
        refuse("has no n-gram layers: set model.ngram_positions=()")
    if model_config.reward_gated_actions:
        refuse("has no reward-gated action inputs: set model.reward_gated_actions=False")
    if model_config.prompt_order != "set":
        refuse("orders its prompt causally already: leave model.prompt_order='set'")
    for flag in ("episode_starts", "episode_returns"):
        if model_config[flag]:
            refuse(f"has no episode fields: set model.{flag}=False")
    if model_config.loss != "infonce":
        refuse(f"is ported with the InfoNCE loss only, got model.loss={model_config.loss!r}")
    if model_config.embeddings != "orthonormal":
        refuse("is ported with orthonormal embeddings only, got "
               f"model.embeddings={model_config.embeddings!r}")


def reference_init(params: dict, num_layers: int, key: jax.Array) -> dict:
    """Re-draw flax's initial parameters as their `Model._init_weights` draws them: linear and
    embedding weights ~ N(0, 2 / (5 fan_in)) (an embedding's fan_in is its width), biases 0, the
    SwiGLU's output weights ~ N(0, 1 / (hidden n_layer^2)); norm scales (1) and the start pair
    (N(0, 1)) stay as flax draws them."""
    leaves, tree = jax.tree_util.tree_flatten_with_path(params)
    out = []
    for i, (path, value) in enumerate(leaves):
        names = [getattr(k, "key", str(k)) for k in path]
        leaf, parent = names[-1], names[-2] if len(names) > 1 else ""
        normal = jax.random.normal(jax.random.fold_in(key, i), value.shape, jnp.float32)
        if leaf == "bias":
            value = jnp.zeros_like(value)
        elif leaf == "kernel" and parent == "down":  # their SwiGLU w3
            value = normal / np.sqrt(value.shape[0]) / num_layers
        elif leaf == "kernel":  # the attention output's kernel is (H, Dh, D): fan_in H Dh
            fan_in = int(np.prod(value.shape[:2])) if value.ndim == 3 and parent == "out" \
                else value.shape[0]
            value = normal * np.sqrt(2.0 / (5 * fan_in))
        elif leaf == "embedding":
            value = normal * np.sqrt(2.0 / (5 * value.shape[-1]))
        out.append(value.astype(jnp.float32))
    return jax.tree_util.tree_unflatten(tree, out)


class ReferenceHeadlessAD(HeadlessAD):
    """Headless-AD on the authors' layout (`reference_layout.ReferenceBanditModel`)."""

    has_cache_decoder = False  # recomputes the window at every evaluation step

    def __init__(self, model_config, env):
        check_reference_config(model_config, env)
        super().__init__(model_config, env.num_observations, None)
        backbone = RL.reference_backbone(
            int(model_config.num_layers), int(model_config.num_heads),
            int(model_config.mlp_hidden) or None,
            attention_dropout=float(model_config.attention_dropout),
            residual_dropout=float(model_config.residual_dropout),
            **{field: model_config[field] for field in Transformer.EXECUTION_FIELDS
               if field in model_config})
        self.reference = RL.ReferenceBanditModel(
            "headless", int(model_config.d_model), self.embed_dim, backbone,
            prompt=bool(model_config.prompt))

    @property
    def decode_window(self) -> int:
        return 0

    def _inputs(self, window: StepWindows, action_embeddings: jax.Array):
        actions, rewards = RL.window_inputs(window.prev_actions, window.prev_rewards)
        # ids past the filled part of an evaluation context (no action yet) embed as zeros;
        # causal attention keeps them from the outputs read
        vectors = embed_actions(actions, action_embeddings)
        arms = window.action_mask.sum(-1).astype(jnp.int32)
        prompt = RL.action_set_prompt(action_embeddings, arms) if self.reference.prompt else None
        return vectors, jnp.clip(rewards, 0, 1), prompt, arms

    def init(self, key: jax.Array, example: StepWindows):
        embeddings = self.action_embeddings(key, example.action_mask.shape[-1])
        vectors, rewards, prompt, _ = self._inputs(example, embeddings)
        init_key, draw_key = jax.random.split(key)
        params = self.reference.init({"params": init_key}, vectors, rewards, prompt)["params"]
        return reference_init(params, self.reference.backbone.num_layers, draw_key)

    def predict(self, params, window: StepWindows, action_embeddings: jax.Array,
                key: jax.Array | None = None, deterministic: bool = True) -> jax.Array:
        """Predicted next-action embeddings `(B, L, E)` (output i predicts `window.actions[:, i]`)."""
        vectors, rewards, prompt, _ = self._inputs(window, action_embeddings)
        rngs = None if key is None else {"dropout": key}
        return self.reference.apply({"params": params}, vectors, rewards, prompt,
                                    deterministic=deterministic, rngs=rngs)

    def loss(self, params, batch: StepWindows, key: jax.Array, deterministic: bool = False):
        """Their InfoNCE loss (`reference_layout.infonce_loss`); (loss, metrics)."""
        embed_key, dropout_key = jax.random.split(key)
        embeddings = self.action_embeddings(embed_key, batch.action_mask.shape[-1])
        predicted = self.predict(params, batch, embeddings, dropout_key, deterministic)
        arms = batch.action_mask.sum(-1).astype(jnp.int32)
        loss, _ = RL.infonce_loss(predicted, embeddings, batch.actions, arms, self.tau)
        chosen = jnp.argmax(mask_logits(RL.similarities(predicted, embeddings),
                                        batch.action_mask[:, None, :]), -1)
        return loss, {"loss": loss, "accuracy": (chosen == batch.actions).mean()}

    def _policy_logits(self, predicted, embeddings, action_mask):
        """Their policy: the raw similarities (no tau); `select_actions` masks the unavailable."""
        return RL.similarities(predicted, embeddings).astype(jnp.float32)

    def decode_init(self, *args, **kwargs):
        raise NotImplementedError("model.layout='reference' recomputes the window (no cache)")

    decode_logits = decode_init


LAYOUTS["reference"] = ReferenceHeadlessAD
