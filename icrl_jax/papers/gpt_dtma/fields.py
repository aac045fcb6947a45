"""GPT-DTMA's config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections

from icrl_jax.methods.fields import dt_model_config


def gpt_dt_fields() -> dict:
    """GPT-DT's own fields of `config.model` (`papers/gpt_dtma/method.py`), beside the DT's."""
    return dict(
        pretrained="",  # a Hugging Face GPT-2 or CLIP text directory whose blocks initialise it
        pretrained_architecture=False,  # take d_model, layers, heads... from `pretrained`
        mixture_of_attention=False,  # MoA: a softmax gate over each layer's heads, per token
        markov_penalty=0.0,  # alpha of GPT-DTMA-R: alpha x the Markov heads' mean MoA gates
        freeze_attention=False,  # GPT-DT(part): the LM's attention stays frozen
    )


def gpt_dt_model_config() -> ml_collections.ConfigDict:
    """The DT fields and GPT-DT's of `config.model`."""
    config = dt_model_config()
    config.update(gpt_dt_fields())
    return config
