"""Algorithm Distillation (Laskin et al., 2022): predict the source algorithm's next action from
its learning history, one token per step, with a categorical head over the action set."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from icrl_jax.data.windows import StepWindows
from icrl_jax.methods import register
from icrl_jax.methods.in_context import InContextMethod
from icrl_jax.models.encoders import CNNEncoder
from icrl_jax.models.heads import smoothed_cross_entropy
from icrl_jax.models.ngram import config_ngram_ids
from icrl_jax.models.xland_view import XLandViewEncoder
from icrl_jax.models.step_tokens import ADStepTokens
from icrl_jax.models.transformer import DecodeCache, Transformer, ring_cache_mask
from icrl_jax.models.compiled import Compiled


class ADModel(nn.Module):
    """Step tokens -> causal transformer -> logits over the (padded) action set."""

    num_actions: int
    num_observations: int | None
    d_model: int
    backbone: Transformer
    grid_size: int | None = None
    #: Pixel observations `(B, L, H, W, C)` -> features `(B, L, E)`, trained end to end.
    obs_encoder: nn.Module | None = None
    #: Mark episodes' first steps in their tokens (`model.episode_starts`; see `ADStepTokens`).
    episode_starts: bool = False
    #: Add each step's episode return so far to its token (`model.episode_returns`).
    episode_returns: bool = False

    def encode(self, observations):
        """Pixel observations `(..., H, W, C)` -> encoder features `(..., E)`."""
        return self.obs_encoder(observations)

    @nn.compact
    def __call__(self, observations, prev_actions, prev_rewards, deterministic: bool = True,
                 return_attention: bool = False, ngram_ids: jax.Array | None = None,
                 encoded: bool = False, cache: DecodeCache | None = None,
                 step_index: jax.Array | None = None, episode_starts: jax.Array | None = None,
                 episode_returns: jax.Array | None = None):
        """Returns logits `(B, L, A)` (unmasked), plus attention maps when asked.

        `ngram_ids`: int `(B, L[, K])` step ids for the backbone's n-gram layers, if it has any.
        `episode_starts`: bool `(B, L)`, read when the model marks episode starts (else unused);
        `episode_returns`: float `(B, L)`, read when it adds returns so far (else unused).
        `encoded`: the observations are already `encode`d features `(B, L, E)`.
        `cache`: incremental decoding (`Transformer.init_cache`, one slot per step): the inputs
        are steps `step_index + [0, L)` of a rollout whose earlier steps the cache holds (with
        n-gram layers, `ngram_ids` are these steps' ids); returns `(logits, cache)` with these
        steps written, the logits equal to those of the whole sequence so far.
        """
        if self.obs_encoder is not None and not encoded:
            if observations.ndim != 5:
                raise ValueError(f"the pixel observation encoder needs (B, L, H, W, C) "
                                 f"observations, got shape {observations.shape}")
            observations = self.obs_encoder(observations)  # then embedded as float vectors
        for flag, value in (("episode_starts", episode_starts),
                            ("episode_returns", episode_returns)):
            if getattr(self, flag) and value is None:
                raise ValueError(f"model.{flag}: these windows do not record it (pixel stores "
                                 f"do not); set it to False")
        tokens = ADStepTokens(self.d_model, self.num_actions, self.num_observations,
                              self.grid_size, name="tokens")(
            observations, prev_actions, prev_rewards,
            episode_starts if self.episode_starts else None,
            episode_returns if self.episode_returns else None)
        head = nn.Dense(self.num_actions, name="action_head")
        if cache is not None:
            positions = step_index + jnp.arange(tokens.shape[1], dtype=jnp.int32)
            # A ring of slots (step p at slot p mod S), masked to the backbone's window.
            first_slot, causal = ring_cache_mask(positions, cache.slots,
                                                 self.backbone.attention_window)
            hidden, cache = self.backbone(tokens, attention_mask=causal[None, None],
                                          positions=positions, ngram_ids=ngram_ids, cache=cache,
                                          cache_index=first_slot)
            return head(hidden), cache
        hidden = self.backbone(tokens, deterministic=deterministic,
                               return_attention=return_attention, ngram_ids=ngram_ids)
        hidden, attention = hidden if return_attention else (hidden, None)
        logits = head(hidden)
        return (logits, attention) if return_attention else logits


def observation_encoder(model_config) -> nn.Module | None:
    """`model.observation_encoder`: "none" (ids / float vectors go straight to the token
    embedding), "cnn" (`CNNEncoder` for uint8 pixels, widths `model.encoder_channels`, output
    `model.encoder_dim`, input average-pooled by `model.encoder_pool`) or "xland"
    (`XLandViewEncoder` for XLand-MiniGrid's (tile, colour) views: an MLP of widths
    `model.encoder_channels` to `model.encoder_dim` features)."""
    kind = model_config.observation_encoder  # one of the choices its validation declares
    if kind == "none":
        return None
    dim = int(model_config.encoder_dim or model_config.d_model)
    if kind == "xland":
        return XLandViewEncoder(out_dim=dim, hidden=tuple(model_config.encoder_channels),
                                name="obs_encoder")
    return CNNEncoder(out_dim=dim, channels=tuple(model_config.encoder_channels),
                      pool=int(model_config.encoder_pool), name="obs_encoder")


def grid_size_of(config, env) -> int | None:
    """`env.grid_size` when `model.grid_observations` asks for (row, column) features."""
    if not config.model.grid_observations:
        return None
    if env.grid_size is None:
        raise ValueError(f"model.grid_observations needs a grid-world env; {config.env.name} "
                         "has no grid size")
    return env.grid_size


def episode_fields(window: StepWindows) -> dict:
    """The per-step episode fields `ADModel` can read from a window (it reads those its
    config turns on)."""
    return dict(episode_starts=window.episode_starts, episode_returns=window.episode_returns)


@register
class AD(InContextMethod):
    """The AD method: model, loss and in-context policy logits.

    Args:
      model_config: `d_model`, `label_smoothing`, optionally `ngram_match` (which step ids the
        n-gram layers match: "transition", "observation", "observation_return" (the cell and
        the episode's reward so far), or "vq", the codes of the pretrained VQ-VAE at
        `vq_checkpoint`; see `models/ngram.py`), `episode_starts` (mark episodes'
        first steps in their tokens: `StepWindows.episode_starts`), `episode_returns` (add
        each step's episode return so far: `StepWindows.episode_returns`), and the
        transformer fields of `default_transformer_config()`. Any mapping with attribute access
        works; `label_smoothing` and the dropout rates may be traced arrays (a vmapped sweep).
      num_actions: padded action-set size.
      num_observations: number of discrete observation ids, or None for float vectors.
      grid_size: side of the grid whose cells the observation ids are (see
        `ObservationEmbedding`); None embeds ids by table alone.
    With `model_config.observation_encoder = "cnn"` the observations are uint8 pixels
    `(B, L, H, W, C)`, encoded per frame by a CNN trained with the transformer (then
    `num_observations` must be None).
    """

    name = "ad"
    has_cache_decoder = True  # decode_init / decode_logits
    display_name = "AD"

    @classmethod
    def from_config(cls, config, env, model_config) -> "AD":
        return cls(model_config, env.num_actions,
                   None if env.pixels else env.num_observations, grid_size_of(config, env))

    def __init__(self, model_config: ml_collections.ConfigDict, num_actions: int,
                 num_observations: int | None, grid_size: int | None = None):
        self.config = model_config
        self.num_actions = num_actions
        smoothing = model_config.label_smoothing
        self.label_smoothing = smoothing if isinstance(smoothing, jax.Array) else float(smoothing)
        # Step ids for the n-gram layers, computed from each window (None: no n-gram layers).
        self.ngram_ids = config_ngram_ids(model_config)
        encoder = observation_encoder(model_config)
        if encoder is not None and num_observations is not None:
            raise ValueError("a pixel observation encoder needs num_observations=None, got "
                             f"{num_observations} discrete observations")
        self.model = ADModel(num_actions, num_observations, model_config.d_model,
                             Transformer.from_config(model_config), grid_size, encoder,
                             bool(model_config.episode_starts), bool(model_config.episode_returns))
        self.model = Compiled(self.model)  # eager init / apply: one program each

    def window_ngram_ids(self, window: StepWindows) -> jax.Array | None:
        return None if self.ngram_ids is None else self.ngram_ids(window)

    def init(self, key: jax.Array, example: StepWindows):
        return self.model.init({"params": key}, example.observations, example.prev_actions,
                               example.prev_rewards, ngram_ids=self.window_ngram_ids(example),
                               **episode_fields(example))["params"]

    def loss(self, params, batch: StepWindows, key: jax.Array, deterministic: bool = False):
        """Mean smoothed cross entropy over all window positions; returns (loss, metrics)."""
        logits = self.model.apply({"params": params}, batch.observations, batch.prev_actions,
                                  batch.prev_rewards, deterministic=deterministic,
                                  rngs={"dropout": key}, ngram_ids=self.window_ngram_ids(batch),
                                  **episode_fields(batch))
        mask = batch.action_mask[:, None, :]
        loss = smoothed_cross_entropy(logits, batch.actions, mask, self.label_smoothing).mean()
        masked = jnp.where(mask, logits, -jnp.inf)
        accuracy = (jnp.argmax(masked, -1) == batch.actions).mean()
        return loss, {"loss": loss, "accuracy": accuracy}

    @property
    def caches_encoded_context(self) -> bool:
        """In-context rollouts keep each frame's encoder features (and its n-gram ids, when
        they depend on the frame alone, like VQ codes) in the context instead of its pixels:
        each frame is encoded once, not once per step it stays in the window."""
        return self.model.obs_encoder is not None and (
            self.ngram_ids is None or hasattr(self.ngram_ids, "per_frame"))

    def encode_observations(self, params, observations: jax.Array):
        """uint8 `(..., H, W, C)` -> encoder features float32 `(..., E)`; with n-gram layers,
        `{"features": (..., E), "ngram_ids": int32 (..., K)}`."""
        features = self.model.apply({"params": params}, observations, method=ADModel.encode)
        if self.ngram_ids is None:
            return features
        return {"features": features, "ngram_ids": self.ngram_ids.per_frame(observations)}

    def encoded_context_logits(self, params, context: StepWindows, key: jax.Array) -> jax.Array:
        """`context_logits` for a context whose observations are `encode_observations` outputs
        with leading dims `(E, L)`."""
        del key
        if not self.caches_encoded_context:
            raise ValueError("encoded contexts need a pixel encoder and n-gram ids (if any) "
                             "computed per frame")
        encoded = context.observations
        features, ngram_ids = ((encoded["features"], encoded["ngram_ids"])
                               if isinstance(encoded, dict) else (encoded, None))
        return self.model.apply({"params": params}, features, context.prev_actions,
                                context.prev_rewards, deterministic=True, encoded=True,
                                ngram_ids=ngram_ids, **episode_fields(context))

    def decode_init(self, params, example: StepWindows, max_steps: int) -> DecodeCache:
        """An empty cache for B rollouts of up to `max_steps` steps; `example` is any `(B, L)`
        window of theirs (its shapes size the n-gram ids)."""
        del params
        return self.model.backbone.init_cache(example.prev_actions.shape[0], int(max_steps),
                                              self.config.d_model,
                                              ngram_parts=self.ngram_id_parts(example))

    def decode_logits(self, params, cache: DecodeCache, step: StepWindows,
                      step_index: jax.Array) -> tuple[jax.Array, DecodeCache]:
        """Logits `(B, L, A)` of steps `step_index + [0, L)` given the cache of the earlier ones;
        equal to `context_logits` on the whole sequence. Returns the cache with these steps
        written."""
        return self.model.apply({"params": params}, step.observations, step.prev_actions,
                                step.prev_rewards, cache=cache, step_index=step_index,
                                ngram_ids=self.window_ngram_ids(step),
                                **episode_fields(step))

    def context_logits(self, params, context: StepWindows, key: jax.Array) -> jax.Array:
        """Logits `(E, L, A)` for every position of an evaluation context (no dropout)."""
        del key
        return self.model.apply({"params": params}, context.observations, context.prev_actions,
                                context.prev_rewards, deterministic=True,
                                ngram_ids=self.window_ngram_ids(context),
                                **episode_fields(context))
