"""CLIP's text encoder on the shared transformer, and local Hugging Face CLIP checkpoints in.

`CLIPTextEncoder` is a token embedding plus a learned position embedding, the shared
`Transformer` configured as CLIP's text tower (pre-norm, causal, CLIP's quick GELU
x * sigmoid(1.702 x), fused qkv with biases, feed-forward of width `intermediate_size`) and its
final layer norm; it returns `last_hidden_state`. `load_hf_clip_text(path)` reads a local Hugging
Face directory of a `CLIPTextModel` (or of a whole `CLIPModel`, whose `text_model.` weights and
`text_config` it takes) into its parameters; transformers 4 writes a `CLIPTextModel`'s keys with
the `text_model.` prefix, transformers 5 without it, and both load. Nothing is ever downloaded.
CLIP-DT (GPT-DTMA Table 3) starts a Decision Transformer from these blocks
(`models/pretrained.py`).

Key map (under `text_model.` where the file has that prefix; torch `Linear` weights are
`(out, in)`, flax kernels `(in, out)`, hence the transposes):

    embeddings.token_embedding.weight (V, D)      -> token_embedding
    embeddings.position_embedding.weight (P, D)   -> transformer/position_embedding
    encoder.layers.{i}.layer_norm1.{weight,bias}  -> transformer/block_{i}/norm1/{scale,bias}
    encoder.layers.{i}.self_attn.{q,k,v}_proj.weight (D, D), .bias (D,)
                                                  -> .../attention/qkv/kernel (D, 3, H, D/H),
                                                     .../attention/qkv/bias (3, H, D/H)
    encoder.layers.{i}.self_attn.out_proj.weight (D, D) -> .../attention/out/kernel (H, D/H, D)
    encoder.layers.{i}.layer_norm2.*              -> .../norm2/*
    encoder.layers.{i}.mlp.fc1.weight (I, D)      -> .../Dense_0/kernel (D, I)
    encoder.layers.{i}.mlp.fc2.weight (D, I)      -> .../Dense_1/kernel (I, D)
    final_layer_norm.*                            -> transformer/final_norm/*
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.models.gpt2 import (ACCEPTED, HF_ACTIVATIONS, IMPLEMENTED, CheckpointFormatError,
                                  SafetensorsFile, activation_rule, audit_fields, missing_blocks,
                                  unexpected_blocks)
from icrl_jax.models.transformer import Transformer

TEXT_PREFIX = "text_model."

#: Every field of transformers' `CLIPTextConfig` (5.24; the fixture script checks the list).
CLIP_TEXT_FIELDS: dict[str, Any] = {
    "vocab_size": IMPLEMENTED, "max_position_embeddings": IMPLEMENTED,
    "hidden_size": IMPLEMENTED, "num_hidden_layers": IMPLEMENTED,
    "num_attention_heads": IMPLEMENTED, "layer_norm_eps": IMPLEMENTED,
    "intermediate_size": IMPLEMENTED,  # any width (mlp_hidden where not a multiple of d)
    "hidden_act": activation_rule("hidden_act"),
    # The projection and eos_token_id act on the pooled output (the eos token's state) of
    # CLIPTextModelWithProjection / CLIPModel; we compute last_hidden_state, which they leave.
    "projection_dim": ACCEPTED, "eos_token_id": ACCEPTED,
    "attention_dropout": ACCEPTED, "dropout": ACCEPTED,  # training only (see GPT2_FIELDS)
    "initializer_factor": ACCEPTED, "tie_word_embeddings": ACCEPTED,  # no output head
}

#: A whole `CLIPModel`'s config.json: the text tower's fields are under `text_config` (older
#: files: `text_config_dict`); the vision tower and the projections are never read.
CLIP_MODEL_FIELDS: dict[str, Any] = {k: ACCEPTED for k in (
    "text_config", "text_config_dict", "vision_config", "vision_config_dict", "projection_dim",
    "logit_scale_init_value", "initializer_factor", "tie_word_embeddings")}


@dataclasses.dataclass(frozen=True)
class CLIPTextConfig:
    """The fields of transformers' `CLIPTextConfig` that fix the architecture (defaults: those
    of OpenAI's CLIP ViT-B/32 text tower, for config files that leave a field out;
    `CLIP_TEXT_FIELDS` audits every field)."""

    vocab_size: int = 49408
    max_position_embeddings: int = 77
    hidden_size: int = 512
    intermediate_size: int = 2048
    num_hidden_layers: int = 12
    num_attention_heads: int = 8
    layer_norm_eps: float = 1e-5
    hidden_act: str = "quick_gelu"

    @classmethod
    def from_hf(cls, hf: dict[str, Any], where: str = "config.json") -> "CLIPTextConfig":
        """From a `config.json`: a `CLIPTextModel`'s, or a `CLIPModel`'s `text_config`; refuses
        (one line naming the field) what we do not compute."""
        if hf.get("model_type") == "clip":
            audit_fields(hf, CLIP_MODEL_FIELDS, where)
            hf = hf.get("text_config") or hf.get("text_config_dict") or {}
            where += " text_config"
        audit_fields(hf, CLIP_TEXT_FIELDS, where)
        cfg = cls(**{f.name: hf[f.name] for f in dataclasses.fields(cls) if f.name in hf})
        if cfg.hidden_size % cfg.num_attention_heads:
            d, h = cfg.hidden_size, cfg.num_attention_heads
            raise CheckpointFormatError(
                f"{where}: num_attention_heads={h} does not divide hidden_size={d}: parameter "
                f"'encoder.layers.0.self_attn.q_proj.weight' of shape ({d}, {d}) cannot be split "
                f"into {h} heads of ({d}, {h}, head size)")
        return cfg

    @property
    def mlp_ratio(self) -> int:
        """The feed-forward width over the model width, where it is an integer (else 0: the
        width is `intermediate_size`, `Transformer.mlp_hidden`)."""
        ratio, rest = divmod(self.intermediate_size, self.hidden_size)
        return 0 if rest else ratio

    @property
    def activation(self) -> str:
        """Our `Transformer.activation` for `hidden_act`."""
        return HF_ACTIVATIONS[self.hidden_act]

    def backbone(self, **overrides) -> Transformer:
        """The shared transformer as CLIP's text block stack (with its final layer norm)."""
        kwargs = dict(num_layers=self.num_hidden_layers, num_heads=self.num_attention_heads,
                      mlp_ratio=self.mlp_ratio or 4, mlp_hidden=self.intermediate_size,
                      pre_norm=True, position="learned", max_len=self.max_position_embeddings,
                      causal=True, norm_epsilon=self.layer_norm_eps, activation=self.activation)
        kwargs.update(overrides)
        return Transformer(**kwargs)


class CLIPTextEncoder(nn.Module):
    """Token ids `(B, T)` -> `last_hidden_state` `(B, T, hidden_size)` (after the final layer
    norm), as transformers' `CLIPTextModel` with no attention mask (causal only)."""

    config: CLIPTextConfig

    @nn.compact
    def __call__(self, ids: jax.Array, padding_mask: jax.Array | None = None,
                 deterministic: bool = True) -> jax.Array:
        """`padding_mask`: optional bool `(B, T)`, False for padding tokens (never attended)."""
        cfg = self.config
        table = self.param("token_embedding", nn.initializers.normal(0.02),
                           (cfg.vocab_size, cfg.hidden_size))
        return cfg.backbone(name="transformer")(jnp.take(table, ids, axis=0),
                                                padding_mask=padding_mask,
                                                deterministic=deterministic)


# -- Hugging Face checkpoints -----------------------------------------------------------------

def _hf_to_ours(cfg: CLIPTextConfig) -> list[tuple[Any, tuple[str, ...], tuple[int, ...], Any]]:
    """(HF key or (q, k, v) keys, our path, HF shape of each, HF array(s) -> ours) for every
    parameter. HF shapes are torch's: Linear weights `(out, in)`."""
    d, h, inner = cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size
    same = lambda a: a  # noqa: E731
    t = lambda a: a.T  # noqa: E731  (torch Linear (out, in) -> flax kernel (in, out))
    rows = [("embeddings.token_embedding.weight", ("token_embedding",), (cfg.vocab_size, d), same),
            ("embeddings.position_embedding.weight", ("transformer", "position_embedding"),
             (cfg.max_position_embeddings, d), same),
            ("final_layer_norm.weight", ("transformer", "final_norm", "scale"), (d,), same),
            ("final_layer_norm.bias", ("transformer", "final_norm", "bias"), (d,), same)]
    for i in range(cfg.num_hidden_layers):
        hf, ours = f"encoder.layers.{i}.", ("transformer", f"block_{i}")
        attn = hf + "self_attn."
        qkv = tuple(attn + f"{p}_proj" for p in "qkv")
        rows += [
            (hf + "layer_norm1.weight", ours + ("norm1", "scale"), (d,), same),
            (hf + "layer_norm1.bias", ours + ("norm1", "bias"), (d,), same),
            (hf + "layer_norm2.weight", ours + ("norm2", "scale"), (d,), same),
            (hf + "layer_norm2.bias", ours + ("norm2", "bias"), (d,), same),
            # Each (D_out, D_in) -> (D_in, D_out), stacked on axis 1 as [q | k | v], then the
            # output axis split into heads: (D, 3, H, D/H), our fused qkv layout.
            (tuple(k + ".weight" for k in qkv), ours + ("attention", "qkv", "kernel"), (d, d),
             lambda q, k, v: np.stack([q.T, k.T, v.T], axis=1).reshape(d, 3, h, d // h)),
            (tuple(k + ".bias" for k in qkv), ours + ("attention", "qkv", "bias"), (d,),
             lambda q, k, v: np.stack([q, k, v]).reshape(3, h, d // h)),
            (attn + "out_proj.weight", ours + ("attention", "out", "kernel"), (d, d),
             lambda a: a.T.reshape(h, d // h, d)),
            (attn + "out_proj.bias", ours + ("attention", "out", "bias"), (d,), same),
            (hf + "mlp.fc1.weight", ours + ("Dense_0", "kernel"), (inner, d), t),
            (hf + "mlp.fc1.bias", ours + ("Dense_0", "bias"), (inner,), same),
            (hf + "mlp.fc2.weight", ours + ("Dense_1", "kernel"), (d, inner), t),
            (hf + "mlp.fc2.bias", ours + ("Dense_1", "bias"), (d,), same),
        ]
    return rows


#: Keys beside the text tower's parameters: the position-id buffer older transformers saved,
#: and CLIPTextModelWithProjection's projection (prefix-free files; a CLIPModel's vision tower
#: and projections lie outside the `text_model.` prefix).
_NOT_TEXT_TOWER = {"embeddings.position_ids", "text_projection.weight"}


def read_hf_config(path: str) -> dict[str, Any]:
    """`path/config.json` as a dict (`CheckpointFormatError` when there is none)."""
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise CheckpointFormatError(f"no config.json in {path} (a Hugging Face model directory "
                                    "has config.json and model.safetensors)")
    with open(config_path) as f:
        return json.load(f)


def load_hf_clip_text(path: str) -> tuple[CLIPTextConfig, dict[str, Any]]:
    """A local Hugging Face `CLIPTextModel` (or `CLIPModel`) directory -> (config,
    `CLIPTextEncoder` params, float32 numpy). Only the text tower's tensors are read.

    Raises `CheckpointFormatError` naming the missing file, or the parameter and both shapes,
    or the missing key."""
    cfg = CLIPTextConfig.from_hf(read_hf_config(path), os.path.join(path, "config.json"))
    weights_path = os.path.join(path, "model.safetensors")
    if not os.path.isfile(weights_path):
        raise CheckpointFormatError(f"no model.safetensors in {path} (a Hugging Face model "
                                    "directory has config.json and model.safetensors)")
    params: dict[str, Any] = {}
    f = SafetensorsFile(weights_path)
    present = set(f.keys())
    # A CLIPModel (and transformers 4's CLIPTextModel) prefixes the text tower's keys; a
    # CLIPModel's vision tower and projections are never read.
    prefix = TEXT_PREFIX if any(k.startswith(TEXT_PREFIX) for k in present) else ""
    tower = {k[len(prefix):] for k in present if k.startswith(prefix)} - _NOT_TEXT_TOWER
    rows = _hf_to_ours(cfg)
    expected = {k for keys, *_ in rows for k in (keys if isinstance(keys, tuple) else (keys,))}
    extra = sorted(tower - expected)
    if extra:
        raise CheckpointFormatError(
            f"{weights_path} does not fit its config.json: "
            + (unexpected_blocks(extra, "encoder.layers.", cfg.num_hidden_layers,
                                 "num_hidden_layers")
               or f"unexpected parameters {extra[:6]}{'...' if len(extra) > 6 else ''}"))
    missing_blocks(tower, "encoder.layers.", cfg.num_hidden_layers, "num_hidden_layers",
                   weights_path)

    def read(key: str, want: tuple[int, ...]) -> np.ndarray:
        if prefix + key not in present:
            raise CheckpointFormatError(f"{weights_path} has no parameter "
                                        f"{prefix + key!r}")
        array = f.get(prefix + key)
        if array.shape != want:
            raise CheckpointFormatError(
                f"parameter {prefix + key!r} has shape {array.shape} in {weights_path}; "
                f"the model ({cfg}) needs {want}")
        return array

    for keys, path_, want, to_ours in rows:
        keys = keys if isinstance(keys, tuple) else (keys,)
        node = params
        for part in path_[:-1]:
            node = node.setdefault(part, {})
        node[path_[-1]] = to_ours(*(read(k, want) for k in keys))
    return cfg, params
