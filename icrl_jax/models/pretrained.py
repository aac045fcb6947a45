"""Pretrained block stacks for `model.pretrained=PATH`: GPT-2 (GPT-DT), CLIP's text encoder
(CLIP-DT, GPT-DTMA Table 3) or a Llama-family LM (e.g. SmolLM2), from a local Hugging Face
directory or a GGUF file.

`load_pretrained(path)` is the one place that looks at which model a path holds (a `.gguf` file,
or config.json's `model_type`); it returns the architecture facts a backbone must match
(`PretrainedStack`: the shared transformer's fields) and the block stack's params in our
`Transformer` layout (`block_{i}`, `final_norm`, `position_embedding`). `check_backbone_fits`
and `backbone_from_lm` need nothing else, so a method never branches on the model family.

Loading refuses what it cannot compute: every config field is in its family's audited table
(`gpt2.GPT2_FIELDS`, `clip_text.CLIP_TEXT_FIELDS`, `llama.LLAMA_FIELDS` / `GGUF_LLAMA_FIELDS`,
with `gpt2.BASE_FIELDS`), as accepted (changes nothing we compute), implemented, or refused
unless at a value we compute; an unlisted field is refused too (`unaudited_fields` checks a
transformers release's fields against the tables). A checkpoint with more or fewer blocks than
its config is refused; only `model.pretrained_layers=k` takes its first k blocks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any

import flax
import jax.numpy as jnp

from icrl_jax.core.extras import import_extra
from icrl_jax.models.clip_text import (CLIP_TEXT_FIELDS, CLIPTextConfig, load_hf_clip_text,
                                      read_hf_config)
from icrl_jax.models.gpt2 import (BASE_FIELDS, GPT2_FIELDS, CheckpointFormatError, GPT2Config,
                                  load_hf_gpt2, transformer_params)
from icrl_jax.models.llama import (LLAMA_FIELDS, LlamaConfig, gguf_llama_config,
                                   llama_config_from_hf, load_gguf_llama, load_hf_llama)
from icrl_jax.models.transformer import Transformer

#: config.json `model_type` (or a GGUF file) -> family; a `CLIPModel` ("clip") gives its text
#: tower.
FAMILIES = {"gpt2": "gpt", "clip_text_model": "clip", "clip": "clip", "llama": "llama"}

#: The block fields every family sets: GPT-2's and CLIP's values unless the family says others.
_BLOCK_DEFAULTS = dict(pre_norm=True, norm="layernorm", mlp_type="dense", mlp_hidden=0,
                       mlp_bias=True, attention_bias=True, num_kv_heads=0)


@dataclasses.dataclass(frozen=True)
class PretrainedStack:
    """What a backbone must agree on to take a pretrained block stack: `d_model` and the
    shared transformer's `fields` (num_layers, num_heads, norm, feed-forward, ...)."""

    family: str  # "gpt" (GPT-2) | "clip" (CLIP's text encoder) | "llama": names the DT variant
    d_model: int
    fields: tuple[tuple[str, Any], ...]

    @property
    def num_layers(self) -> int:
        return dict(self.fields)["num_layers"]


def _family(path: str, hf: dict[str, Any] | None) -> str:
    if hf is None:  # a GGUF file
        return "llama"
    family = FAMILIES.get(hf.get("model_type"))
    if family is None:
        raise CheckpointFormatError(f"{path}/config.json has model_type {hf.get('model_type')!r};"
                                    f" model.pretrained takes one of {', '.join(FAMILIES)} "
                                    f"(or a llama GGUF file)")
    return family


def _stack(family: str, cfg: GPT2Config | CLIPTextConfig | LlamaConfig) -> PretrainedStack:
    if family == "gpt":
        d, fields = cfg.n_embd, dict(num_layers=cfg.n_layer, num_heads=cfg.n_head,
                                     norm_epsilon=cfg.layer_norm_epsilon,
                                     activation=cfg.activation)
        fields.update(dict(mlp_hidden=cfg.n_inner) if cfg.n_inner else dict(mlp_ratio=4))
    elif family == "clip":
        d, fields = cfg.hidden_size, dict(num_layers=cfg.num_hidden_layers,
                                          num_heads=cfg.num_attention_heads,
                                          norm_epsilon=cfg.layer_norm_eps,
                                          activation=cfg.activation)
        fields.update(dict(mlp_ratio=cfg.mlp_ratio) if cfg.mlp_ratio
                      else dict(mlp_hidden=cfg.intermediate_size))
    else:
        d, fields = cfg.d_model, dict(num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                                      norm_epsilon=cfg.norm_epsilon, norm="rmsnorm",
                                      mlp_type="swiglu", mlp_hidden=cfg.mlp_hidden,
                                      mlp_bias=cfg.mlp_bias, attention_bias=cfg.attention_bias,
                                      num_kv_heads=0 if cfg.num_kv_heads == cfg.num_heads
                                      else cfg.num_kv_heads, rotary_base=cfg.rope_base)
    return PretrainedStack(family, d, tuple(dict(fields, **{
        k: v for k, v in _BLOCK_DEFAULTS.items() if k not in fields}).items()))


def _first_layers(stack: PretrainedStack, layers: int, path: str) -> PretrainedStack:
    """`stack` cut to its first `layers` blocks (`model.pretrained_layers`; 0 = all of them).
    Raises `CheckpointFormatError` naming the field when the LM has fewer."""
    if not layers:
        return stack
    if not 1 <= layers <= stack.num_layers:
        raise CheckpointFormatError(f"model.pretrained_layers={layers}: the language model in "
                                    f"{path} has {stack.num_layers} layers (take 1 .. "
                                    f"{stack.num_layers}, or 0 for all)")
    return dataclasses.replace(stack, fields=tuple(
        (k, layers if k == "num_layers" else v) for k, v in stack.fields))


def _hf_config_or_none(path: str) -> dict[str, Any] | None:
    return None if path.endswith(".gguf") else read_hf_config(path)


def pretrained_architecture(path: str, layers: int = 0) -> PretrainedStack:
    """The architecture of the model at `path` (a GPT-2, CLIP (text) or Llama directory, or a
    llama GGUF file), from its config alone (no weights read); `layers` > 0: of its first
    `layers` blocks (`model.pretrained_layers`)."""
    hf = _hf_config_or_none(path)
    family = _family(path, hf)
    where = path if hf is None else os.path.join(path, "config.json")
    if family == "llama":
        if hf is None:
            GGUFReader = import_extra("gguf", "a GGUF model file").GGUFReader
            cfg = gguf_llama_config(GGUFReader(path), path)
        else:
            cfg = llama_config_from_hf(hf, where)
    else:
        cfg = (GPT2Config if family == "gpt" else CLIPTextConfig).from_hf(hf, where)
    return _first_layers(_stack(family, cfg), layers, path)


def load_pretrained(path: str, layers: int = 0) -> tuple[PretrainedStack, dict[str, Any]]:
    """A local Hugging Face GPT-2, CLIP (text) or Llama directory, or a llama GGUF file ->
    (architecture facts, the block stack's `Transformer` params, float32 numpy). The token
    embedding and the output head are dropped: a method brings its own embeddings and heads.

    The whole checkpoint is read and checked against its own config first (a checkpoint with
    more or fewer blocks than its config is refused); then `layers` > 0 keeps only its first
    `layers` blocks and its final norm (`model.pretrained_layers`: asked for, never implied).

    Raises `CheckpointFormatError` for a missing file, a model of another family, a setting we
    do not compute, or a checkpoint that does not fit its own config (naming the field, or the
    parameter and shapes)."""
    family = _family(path, _hf_config_or_none(path))
    if family == "gpt":
        cfg, params = load_hf_gpt2(path)
        stack, blocks = _stack(family, cfg), transformer_params(params)
    elif family == "llama":
        cfg, params = (load_gguf_llama if path.endswith(".gguf") else load_hf_llama)(path)
        stack, blocks = _stack(family, cfg), params["backbone"]
    else:
        cfg, params = load_hf_clip_text(path)
        stack, blocks = _stack(family, cfg), params["transformer"]
    stack = _first_layers(stack, layers, path)
    kept = {f"block_{i}" for i in range(stack.num_layers)}
    return stack, {k: v for k, v in blocks.items() if not k.startswith("block_") or k in kept}


def adopt_pretrained_architecture(model_config) -> None:
    """With `model.pretrained_architecture` on, set the model's architecture fields (d_model
    and the stack's transformer fields; num_layers = `model.pretrained_layers` when set) to
    `model.pretrained`'s, in place: a table column that starts from another family (CLIP-DT
    next to GPT-DT) takes its LM's shape instead of failing `check_backbone_fits`."""
    if not (model_config.pretrained_architecture and model_config.pretrained):
        return
    stack = pretrained_architecture(model_config.pretrained, int(model_config.pretrained_layers))
    model_config.update(dict(stack.fields, d_model=stack.d_model))


@functools.lru_cache(maxsize=4)
def cached_pretrained(path: str, layers: int = 0) -> tuple[PretrainedStack, dict[str, Any]]:
    """`load_pretrained`, read once per process (a method is built by training, evaluation and
    each sweep replica)."""
    return load_pretrained(path, layers)


def unaudited_fields(fields: dict[str, list[str]]) -> dict[str, list[str]]:
    """family ("gpt2" | "clip_text" | "llama") -> the config fields of a transformers release
    (the fixture script's list) that the family's table and `BASE_FIELDS` do not list; empty
    when every field is audited."""
    tables = {"gpt2": GPT2_FIELDS, "clip_text": CLIP_TEXT_FIELDS, "llama": LLAMA_FIELDS}
    bad = {family: sorted(set(names) - set(tables[family]) - set(BASE_FIELDS))
           for family, names in fields.items()}
    return {family: names for family, names in bad.items() if names}


def check_backbone_fits(stack: PretrainedStack, d_model: int, backbone: Transformer,
                        path: str) -> None:
    """Raise `CheckpointFormatError` naming every model field that differs from the pretrained
    stack's architecture (the backbone's blocks must be the LM's to take its weights)."""
    wanted = dict(d_model=(d_model, stack.d_model), **{
        k: (getattr(backbone, k) or 0 if k == "mlp_hidden" else getattr(backbone, k), v)
        for k, v in stack.fields})
    # Floats (norm epsilons) as the checkpoint stores them: a GGUF's float32 1e-5 fits 1e-5.
    bad = [f"model.{k}={ours!r} (the LM has {theirs!r})" for k, (ours, theirs) in wanted.items()
           if not (ours == theirs or isinstance(theirs, float) and isinstance(ours, (int, float))
                   and not isinstance(ours, bool) and math.isclose(ours, theirs, rel_tol=1e-6))]
    if bad:
        ours, theirs = wanted["num_layers"]
        hint = (f"; model.pretrained_layers={ours} takes only the LM's first {ours} blocks"
                if 0 < ours < theirs else "")
        raise CheckpointFormatError(f"the language model in {path} does not fit this model: "
                                    + ", ".join(bad) + hint)


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
    """"gpt", "clip" or "llama" from `path/config.json` (or a `.gguf` name) alone (no weights
    read), for run labels (`gpt_dt` / `clip_dt` / `llama_dt`). A directory without a readable
    config is labelled "gpt"; building the model then names what is missing."""
    if path.endswith(".gguf"):
        return "llama"
    try:
        model_type = read_hf_config(path).get("model_type")
    except (CheckpointFormatError, OSError, ValueError):
        return "gpt"
    return FAMILIES.get(model_type, "gpt")
