"""Config fields of the shared methods (AD, DT), declared beside them.

Pure ml_collections (no model code), so that experiment files, which import these, load fast.
`ad_config()` and `dt_model_config()` give an experiment its method's fields (`ad_model_config()`
the whole `model` section of AD's, for code that builds a model alone); a paper's own
methods declare theirs in their package's `fields.py`.
"""

from __future__ import annotations

import ml_collections

from icrl_jax.core import validation
from icrl_jax.core.config import base_config, default_transformer_config
from icrl_jax.models.fields import memory_model_fields, ngram_model_fields


def ad_model_fields() -> dict:
    """AD's (and its variants') fields of `config.model`, beside the shared transformer's."""
    return dict(
        **ngram_model_fields(),
        **memory_model_fields(),
        label_smoothing=0.0,
        # Grid worlds: add the cell's (row, column) features to its id embedding.
        grid_observations=False,
        # Mark each episode's first step in its token (a learned vector), so the model need not
        # infer resets from the observations (a Key-to-Door agent must know when its key is gone).
        episode_starts=False,
        # Add each step's episode return so far (a learned vector times it) to its token; on
        # Key-to-Door that is the key flag, which the observation hides and the context shows.
        episode_returns=False,
        # Pixel observations: "cnn" embeds frames with a strided CNN (`models/encoders.py`) of
        # `encoder_channels`, pooled by `encoder_pool`, to `encoder_dim` features (0 = d_model).
        # XLand-MiniGrid's (tile, colour) views: "xland", an MLP of `encoder_channels` widths
        # to `encoder_dim` features (`models/xland_view.py`).
        observation_encoder="none",
        encoder_channels=(32, 64, 64),
        encoder_pool=1,
        encoder_dim=0,
    )


#: What AD's model fields take (core/validation.py).
AD_CONSTRAINTS = validation.declare("ad", (
    validation.fraction("model.label_smoothing", 0.0), validation.boolean("model.grid_observations"),
    validation.boolean("model.episode_starts"), validation.boolean("model.episode_returns"),
    validation.choice("model.observation_encoder", ("none", "cnn", "xland")),
    validation.int_tuple("model.encoder_channels", "'(32, 64, 64)'", nonempty=True),
    validation.positive_int("model.encoder_pool", 1), validation.non_negative_int("model.encoder_dim", 0),
    # Checked here, not when the trained model is rolled out (methods/in_context.py): the
    # staggered caches split the context (train.seq_len steps), and a shuffled n-gram pattern
    # cannot be decoded from a cache.
    validation.relation(("eval.context_caches", "train.seq_len", "model.grid_observations"),
               "eval.context_caches must be at most the context, train.seq_len",
               lambda caches, seq_len, _: caches <= seq_len,
               lambda caches, seq_len, _: f"eval.context_caches={seq_len}"),
    validation.relation(("eval.context_caches", "model.ngram_shuffle"),
               "shuffled n-gram patterns cannot be decoded from caches",
               lambda caches, shuffle: caches == 0 or not shuffle,
               lambda caches, shuffle: "eval.context_caches=0"),
))

def ad_model_config() -> ml_collections.ConfigDict:
    """The `model` section of an AD-family method: the shared transformer's fields and AD's."""
    config = default_transformer_config()
    config.update(ad_model_fields())
    return config


def ad_config(method: str = "ad") -> ml_collections.ConfigDict:
    """`base_config()` for an in-context method of the AD family: `config.method = method` and
    AD's model fields."""
    config = base_config()
    config.method = method
    config.model = ad_model_config()
    return config


def dt_model_config() -> ml_collections.ConfigDict:
    """The Decision Transformer fields of `config.model` (added by DT experiments)."""
    return ml_collections.ConfigDict(dict(
        timestep_encoding="timestep",  # timestep | position | none
        max_timestep=1000,  # rows of the timestep table
        rtg_scale=1.0,  # returns-to-go are divided by this before embedding
        action_prediction="state",  # state | autoregressive (multi-action tokens)
        # Pixel (uint8 image) states only:
        cnn_channels=(32, 64, 64),  # strided conv widths of the state encoder
        cnn_kernel=4,
        obs_pool=1,  # average-pool the image by this factor before the CNN (1 = off)
        embed_norm_epsilon=1e-6,  # the token LayerNorm's epsilon (CORL's DT: PyTorch's 1e-5)
        # Multiplies the returns-to-go (0: behaviour cloning without them, Uni[MASK]'s DT-BC).
        return_conditioned=1.0,
    ))


#: What the Decision Transformer's model fields take (core/validation.py).
DT_CONSTRAINTS = validation.declare("dt", (
    validation.choice("model.timestep_encoding", ("timestep", "position", "none")),
    validation.positive("model.max_timestep", 1000), validation.positive("model.rtg_scale", 1.0),
    validation.choice("model.action_prediction", ("state", "autoregressive")),
    validation.int_tuple("model.cnn_channels", "'(32, 64, 64)'", nonempty=True),
    validation.positive_int("model.cnn_kernel", 4), validation.positive_int("model.obs_pool", 1),
    validation.positive("model.embed_norm_epsilon", 1e-6),
    validation.number("model.return_conditioned", 1.0),
    # DT decodes every step from its window of tokens (model.timestep_encoding marks DT's).
    validation.Constraint(("eval.context_caches", "model.timestep_encoding"), "",
                 lambda caches, _: caches == 0, "",
                 message=lambda caches, _: f"config eval.context_caches={caches} has no effect "
                 f"with a Decision Transformer (AD-family rollouts only); leave it at 0"),
    # DT evaluates one policy per target return (model.timestep_encoding marks DT's configs).
    validation.Constraint(("eval.target_returns", "model.timestep_encoding"), "",
                 lambda targets, _: isinstance(targets, (tuple, list)) and len(targets) > 0
                 and all(validation.is_number(t) for t in targets), "",
                 message=lambda targets, _: f"config eval.target_returns={targets!r} must be a "
                 f"non-empty tuple of returns to condition on (one evaluation policy each); e.g. "
                 f"--config.eval.target_returns='(1.0,)'"),
))
