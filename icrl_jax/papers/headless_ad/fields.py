"""Headless-AD's config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections

from icrl_jax.core import validation
from icrl_jax.methods.fields import ad_model_config


def default_headless_config() -> dict:
    """Headless-AD fields to add to a `model` config (values: the paper's Bernoulli bandit)."""
    return dict(action_embed_dim=64, tau=1.34, loss="infonce", prompt=True,
                embeddings="orthonormal", eval_embedding_seed=0, reward_gated_actions=False,
                # "set": the prompt is order-free; "causal": ordered (the authors' causal prompt)
                prompt_order="set",
                # "reference": the authors' bandit model (reference_method.py)
                layout="ours")


def headless_model_config(**overrides) -> ml_collections.ConfigDict:
    """The `model` section of Headless-AD: the transformer's, AD's and its own fields
    (defaults, then `overrides`)."""
    config = ad_model_config()
    config.update(dict(default_headless_config(), **overrides))
    return config


def add_headless_fields(config: ml_collections.ConfigDict, **overrides) -> None:
    """Give `config.model` the Headless-AD fields (defaults, then `overrides`)."""
    fields = dict(default_headless_config(), **overrides)
    for key, value in fields.items():
        config.model[key] = value


def variant_fields() -> dict:
    """One entry of `config.variants` (the `variants` report, `papers/headless_ad/variants.py`);
    an entry gives the fields it changes."""
    return dict(
        env={},  # env kwargs overriding the config's (with env_name: the env's kwargs alone)
        tasks="test",  # test | train: held-out or training tasks
        actions="",  # a named action set of the env ("" = its own)
        env_name="",  # another registered env ("" = the config's)
    )


#: What the Headless-AD fields take (core/validation.py).
HEADLESS_CONSTRAINTS = validation.declare("headless_ad", (
    validation.positive_int("model.action_embed_dim", 64), validation.positive("model.tau", 1.34),
    validation.choice("model.loss", ("infonce", "mse")), validation.boolean("model.prompt"),
    validation.choice("model.embeddings", ("orthonormal", "normal")),
    validation.integer("model.eval_embedding_seed", 0), validation.boolean("model.reward_gated_actions"),
    validation.choice("model.layout", ("ours", "reference")),
    validation.choice("model.prompt_order", ("set", "causal")),
))
