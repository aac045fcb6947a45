"""Pretrained block stacks for `model.pretrained=DIR`: GPT-2 (GPT-DT) or CLIP's text encoder
(CLIP-DT, GPT-DTMA Table 3), from a local Hugging Face directory.

`load_pretrained(path)` is the one place that looks at which model a directory holds (its
config.json's `model_type`); it returns the architecture facts a backbone must match
(`PretrainedStack`) and the block stack's params in our `Transformer` layout (`block_{i}`,
`final_norm`, `position_embedding`). `check_backbone_fits` and `backbone_from_lm` need nothing
else, so a method never branches on the model family.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax
import jax.numpy as jnp

from icrl_jax.models.clip_text import CLIPTextConfig, load_hf_clip_text, read_hf_config
from icrl_jax.models.gpt2 import (CheckpointFormatError, GPT2Config, load_hf_gpt2,
                                  transformer_params)
from icrl_jax.models.transformer import Transformer

#: config.json `model_type` -> family; a `CLIPModel` ("clip") gives its text tower.
FAMILIES = {"gpt2": "gpt", "clip_text_model": "clip", "clip": "clip"}


@dataclasses.dataclass(frozen=True)
class PretrainedStack:
    """What a backbone must agree on to take a pretrained block stack."""

    family: str  # "gpt" (GPT-2) | "clip" (CLIP's text encoder): names the DT variant
    d_model: int
    num_layers: int
    num_heads: int
    mlp_ratio: int
    norm_epsilon: float
    activation: str  # a key of transformer.ACTIVATIONS


def _family(path: str, hf: dict[str, Any]) -> str:
    family = FAMILIES.get(hf.get("model_type"))
    if family is None:
        raise CheckpointFormatError(f"{path}/config.json has model_type {hf.get('model_type')!r};"
                                    f" model.pretrained takes one of {', '.join(FAMILIES)}")
    return family


def _stack(family: str, cfg: GPT2Config | CLIPTextConfig) -> PretrainedStack:
    if family == "gpt":
        return PretrainedStack("gpt", cfg.n_embd, cfg.n_layer, cfg.n_head, 4,
                               cfg.layer_norm_epsilon, "gelu_tanh")
    return PretrainedStack("clip", cfg.hidden_size, cfg.num_hidden_layers,
                           cfg.num_attention_heads, cfg.mlp_ratio, cfg.layer_norm_eps,
                           cfg.activation)


def pretrained_architecture(path: str) -> PretrainedStack:
    """The architecture of the GPT-2 or CLIP (text) directory `path`, from its config.json alone
    (no weights read)."""
    hf = read_hf_config(path)
    family = _family(path, hf)
    return _stack(family, (GPT2Config if family == "gpt" else CLIPTextConfig).from_hf(hf))


def load_pretrained(path: str) -> tuple[PretrainedStack, dict[str, Any]]:
    """A local Hugging Face GPT-2 or CLIP (text) directory -> (architecture facts, the block
    stack's `Transformer` params, float32 numpy). The token embedding (and GPT-2's tied output
    head) are dropped: a method brings its own embeddings and heads.

    Raises `CheckpointFormatError` for a missing file, a `model_type` that is neither, or a
    checkpoint that does not fit its own config (naming the parameter and shapes)."""
    family = _family(path, read_hf_config(path))
    if family == "gpt":
        cfg, params = load_hf_gpt2(path)
        return _stack(family, cfg), transformer_params(params)
    cfg, params = load_hf_clip_text(path)
    return _stack(family, cfg), params["transformer"]


def adopt_pretrained_architecture(model_config) -> None:
    """With `model.pretrained_architecture` on, set the model's architecture fields (d_model,
    num_layers, num_heads, mlp_ratio, norm_epsilon, activation) to `model.pretrained`'s, in
    place: a table column that starts from another family (CLIP-DT next to GPT-DT) takes its
    LM's shape instead of failing `check_backbone_fits`."""
    if not (model_config.get("pretrained_architecture") and model_config.get("pretrained")):
        return
    stack = pretrained_architecture(model_config.pretrained)
    model_config.update(dict(d_model=stack.d_model, num_layers=stack.num_layers,
                             num_heads=stack.num_heads, mlp_ratio=stack.mlp_ratio,
                             pre_norm=True, norm_epsilon=stack.norm_epsilon,
                             activation=stack.activation))


@functools.lru_cache(maxsize=4)
def cached_pretrained(path: str) -> tuple[PretrainedStack, dict[str, Any]]:
    """`load_pretrained`, read once per process (a method is built by training, evaluation and
    each sweep replica)."""
    return load_pretrained(path)


def check_backbone_fits(stack: PretrainedStack, d_model: int, backbone: Transformer,
                        path: str) -> None:
    """Raise `CheckpointFormatError` naming every model field that differs from the pretrained
    stack's architecture (the backbone's blocks must be the LM's to take its weights)."""
    wanted = dict(d_model=(d_model, stack.d_model),
                  num_layers=(backbone.num_layers, stack.num_layers),
                  num_heads=(backbone.num_heads, stack.num_heads),
                  mlp_ratio=(backbone.mlp_ratio, stack.mlp_ratio),
                  pre_norm=(backbone.pre_norm, True),
                  norm_epsilon=(backbone.norm_epsilon, stack.norm_epsilon),
                  activation=(backbone.activation, stack.activation))
    bad = [f"model.{k}={ours!r} (the LM has {theirs!r})" for k, (ours, theirs) in wanted.items()
           if ours != theirs]
    if bad:
        raise CheckpointFormatError(f"the language model in {path} does not fit this model: "
                                    + ", ".join(bad))


def backbone_from_lm(backbone_params: dict[str, Any], stack_params: dict[str, Any],
                     path: str) -> dict[str, Any]:
    """A `Transformer`'s params with every block and the final norm taken from a pretrained
    stack (GPT-DT / CLIP-DT: the LM's blocks, with the RL model's own embeddings and heads).

    Parameters the LM lacks (MoA gates) keep their fresh values; the LM's learned positions are
    not used when the backbone has none (a Decision Transformer adds timestep embeddings).
    Raises `CheckpointFormatError` naming a parameter whose shapes differ, or one the backbone
    lacks."""
    ours = flax.traverse_util.flatten_dict(flax.core.unfreeze(backbone_params), sep="/")
    for key, value in flax.traverse_util.flatten_dict(stack_params, sep="/").items():
        if key == "position_embedding" and key not in ours:
            continue
        if key not in ours:
            raise CheckpointFormatError(f"the language model in {path} has {key!r}, which this "
                                        "model's transformer lacks")
        if tuple(ours[key].shape) != tuple(value.shape):
            raise CheckpointFormatError(f"parameter {key!r} has shape {tuple(value.shape)} in "
                                        f"{path}; this model needs {tuple(ours[key].shape)}")
        ours[key] = jnp.asarray(value, ours[key].dtype)
    return flax.traverse_util.unflatten_dict(ours, sep="/")


def pretrained_family(path: str) -> str:
    """"gpt" or "clip" from `path/config.json` alone (no weights read), for run labels
    (`gpt_dt` / `clip_dt`). A directory without a readable config is labelled "gpt"; building
    the model then names what is missing."""
    try:
        model_type = read_hf_config(path).get("model_type")
    except (CheckpointFormatError, OSError, ValueError):
        return "gpt"
    return FAMILIES.get(model_type, "gpt")
