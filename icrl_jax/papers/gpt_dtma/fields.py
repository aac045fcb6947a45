"""GPT-DTMA's config fields (pure ml_collections: experiment files import this)."""

from __future__ import annotations

import ml_collections

from icrl_jax.core import validation
from icrl_jax.methods.fields import dt_model_config


def gpt_dt_fields() -> dict:
    """GPT-DT's own fields of `config.model` (`papers/gpt_dtma/method.py`), beside the DT's."""
    return dict(
        # a Hugging Face GPT-2, CLIP text or Llama directory, or a Llama GGUF file, whose blocks
        # initialise it
        pretrained="",
        pretrained_architecture=False,  # take d_model, layers, heads... from `pretrained`
        # take only the LM's first k blocks (and its final norm); 0 = all of them. Never
        # implied: a model with fewer layers than the LM is refused unless this says k.
        pretrained_layers=0,
        mixture_of_attention=False,  # MoA: a softmax gate over each layer's heads, per token
        markov_penalty=0.0,  # alpha of GPT-DTMA-R: alpha x the Markov heads' mean MoA gates
        freeze_attention=False,  # GPT-DT(part): the LM's attention stays frozen
    )


def gpt_dt_model_config() -> ml_collections.ConfigDict:
    """The DT fields and GPT-DT's of `config.model`."""
    config = dt_model_config()
    config.update(gpt_dt_fields())
    return config


#: What GPT-DT's fields and the language model's `lm` section take (core/validation.py).
GPT_DT_CONSTRAINTS = validation.declare("gpt_dt", (
    validation.string("model.pretrained", "runs/gpt2_lm_quick/hf"), validation.boolean("model.pretrained_architecture"),
    validation.non_negative_int("model.pretrained_layers", 6),
    validation.boolean("model.mixture_of_attention"), validation.non_negative("model.markov_penalty", 0.1),
    validation.boolean("model.freeze_attention"),
    validation.string("lm.corpus", "pydoc_topics"),
    validation.number("lm.validation_fraction", 0.05, low=0, high=1, low_open=True, high_open=True),
))
