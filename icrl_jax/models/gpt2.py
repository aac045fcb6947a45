"""GPT-2 on the shared transformer, and Hugging Face GPT-2 checkpoints in and out.

`GPT2LM` is a token embedding, the shared `Transformer` configured as GPT-2 (pre-norm with
LayerNorm epsilon 1e-5, tanh-GELU, learned positions, fused qkv with biases, causal) and the
output head tied to the token embedding. `load_hf_gpt2(path)` reads a local Hugging Face
directory (`config.json` + `model.safetensors`, transformers' key names, with or without the
`transformer.` prefix) into its parameters; `save_hf_gpt2` writes one that transformers'
`GPT2LMHeadModel.from_pretrained` loads. Nothing is ever downloaded.

Key map (transformers' Conv1D layers store `(in, out)` kernels, as flax does):

    wte.weight (V, D)                -> wte
    wpe.weight (P, D)                -> transformer/position_embedding
    h.{i}.ln_1.{weight,bias}         -> transformer/block_{i}/norm1/{scale,bias}
    h.{i}.attn.c_attn.weight (D, 3D) -> .../attention/qkv/kernel (D, 3, H, D/H)  [q | k | v]
    h.{i}.attn.c_proj.weight (D, D)  -> .../attention/out/kernel (H, D/H, D)
    h.{i}.ln_2.*                     -> .../norm2/*
    h.{i}.mlp.c_fc.weight (D, 4D)    -> .../Dense_0/kernel   (the block's feed-forward)
    h.{i}.mlp.c_proj.weight (4D, D)  -> .../Dense_1/kernel
    ln_f.*                           -> transformer/final_norm/*
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

from icrl_jax.core.errors import UserError
from icrl_jax.models.transformer import Transformer


class CheckpointFormatError(UserError):
    """A Hugging Face checkpoint that does not fit the model (names the parameter)."""


@dataclasses.dataclass(frozen=True)
class GPT2Config:
    """The fields of transformers' `GPT2Config` that fix the architecture."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "GPT2Config":
        activation = hf.get("activation_function", "gelu_new")
        if activation not in ("gelu_new", "gelu_pytorch_tanh"):
            raise CheckpointFormatError(f"activation_function {activation!r}: our GPT-2 uses the "
                                        "tanh GELU (gelu_new)")
        if hf.get("n_inner") not in (None, 4 * hf.get("n_embd", cls.n_embd)):
            raise CheckpointFormatError(f"n_inner={hf['n_inner']}: our feed-forward is 4 x n_embd")
        return cls(**{f.name: hf[f.name] for f in dataclasses.fields(cls) if f.name in hf})

    def to_hf(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self), model_type="gpt2",
                    architectures=["GPT2LMHeadModel"], activation_function="gelu_new",
                    n_inner=None, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                    tie_word_embeddings=True, bos_token_id=self.vocab_size - 1,
                    eos_token_id=self.vocab_size - 1)

    def backbone(self, **overrides) -> Transformer:
        """The shared transformer as GPT-2's block stack."""
        kwargs = dict(num_layers=self.n_layer, num_heads=self.n_head, mlp_ratio=4, pre_norm=True,
                      position="learned", max_len=self.n_positions, causal=True,
                      norm_epsilon=self.layer_norm_epsilon)
        kwargs.update(overrides)
        return Transformer(**kwargs)


class GPT2LM(nn.Module):
    """Token ids `(B, T)` -> next-token logits `(B, T, vocab_size)`."""

    config: GPT2Config

    @nn.compact
    def __call__(self, ids: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.config
        wte = self.param("wte", nn.initializers.normal(0.02), (cfg.vocab_size, cfg.n_embd))
        hidden = cfg.backbone(name="transformer")(jnp.take(wte, ids, axis=0),
                                                  deterministic=deterministic)
        return hidden @ wte.T.astype(hidden.dtype)


# -- Hugging Face checkpoints -----------------------------------------------------------------

def _hf_to_ours(cfg: GPT2Config) -> list[tuple[str, tuple[str, ...], Any, Any]]:
    """(HF key, our path, HF array -> ours, ours -> HF array) for every parameter."""
    d, h = cfg.n_embd, cfg.n_head
    same = (lambda a: a, lambda a: a)
    rows = [("wte.weight", ("wte",), *same),
            ("wpe.weight", ("transformer", "position_embedding"), *same),
            ("ln_f.weight", ("transformer", "final_norm", "scale"), *same),
            ("ln_f.bias", ("transformer", "final_norm", "bias"), *same)]
    for i in range(cfg.n_layer):
        hf, ours = f"h.{i}.", ("transformer", f"block_{i}")
        rows += [
            (hf + "ln_1.weight", ours + ("norm1", "scale"), *same),
            (hf + "ln_1.bias", ours + ("norm1", "bias"), *same),
            (hf + "ln_2.weight", ours + ("norm2", "scale"), *same),
            (hf + "ln_2.bias", ours + ("norm2", "bias"), *same),
            (hf + "attn.c_attn.weight", ours + ("attention", "qkv", "kernel"),
             lambda a: a.reshape(d, 3, h, d // h), lambda a: a.reshape(d, 3 * d)),
            (hf + "attn.c_attn.bias", ours + ("attention", "qkv", "bias"),
             lambda a: a.reshape(3, h, d // h), lambda a: a.reshape(3 * d)),
            (hf + "attn.c_proj.weight", ours + ("attention", "out", "kernel"),
             lambda a: a.reshape(h, d // h, d), lambda a: a.reshape(d, d)),
            (hf + "attn.c_proj.bias", ours + ("attention", "out", "bias"), *same),
            (hf + "mlp.c_fc.weight", ours + ("Dense_0", "kernel"), *same),
            (hf + "mlp.c_fc.bias", ours + ("Dense_0", "bias"), *same),
            (hf + "mlp.c_proj.weight", ours + ("Dense_1", "kernel"), *same),
            (hf + "mlp.c_proj.bias", ours + ("Dense_1", "bias"), *same),
        ]
    return rows


def _hf_shape(key: str, cfg: GPT2Config) -> tuple[int, ...]:
    d, v, p = cfg.n_embd, cfg.vocab_size, cfg.n_positions
    name = key.split(".", 2)[-1] if key.startswith("h.") else key
    return {"wte.weight": (v, d), "wpe.weight": (p, d), "attn.c_attn.weight": (d, 3 * d),
            "attn.c_attn.bias": (3 * d,), "attn.c_proj.weight": (d, d),
            "mlp.c_fc.weight": (d, 4 * d), "mlp.c_fc.bias": (4 * d,),
            "mlp.c_proj.weight": (4 * d, d)}.get(name, (d,))


def load_hf_gpt2(path: str) -> tuple[GPT2Config, dict[str, Any]]:
    """A local Hugging Face GPT-2 directory -> (config, `GPT2LM` params, float32 numpy).

    Raises `CheckpointFormatError` naming the file, or the parameter and both shapes, or the
    missing key."""
    from safetensors.numpy import load_file

    config_path, weights_path = (os.path.join(path, f) for f in ("config.json",
                                                                 "model.safetensors"))
    for f in (config_path, weights_path):
        if not os.path.isfile(f):
            raise CheckpointFormatError(f"no {os.path.basename(f)} in {path} (a Hugging Face "
                                        "GPT-2 directory has config.json and model.safetensors)")
    with open(config_path) as f:
        cfg = GPT2Config.from_hf(json.load(f))
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(weights_path).items()}
    params: dict[str, Any] = {}
    for key, path_, to_ours, _ in _hf_to_ours(cfg):
        if key not in tensors:
            raise CheckpointFormatError(f"{weights_path} has no parameter {key!r}")
        array = np.asarray(tensors[key], np.float32)
        want = _hf_shape(key, cfg)
        if array.shape != want:
            raise CheckpointFormatError(f"parameter {key!r} has shape {array.shape} in "
                                        f"{weights_path}; the model ({cfg}) needs {want}")
        node = params
        for part in path_[:-1]:
            node = node.setdefault(part, {})
        node[path_[-1]] = to_ours(array)
    return cfg, params


def save_hf_gpt2(path: str, cfg: GPT2Config, params: dict[str, Any]) -> None:
    """Write `GPT2LM` params as a Hugging Face GPT-2 directory (config.json +
    model.safetensors, transformers' key names; the tied output head is not stored)."""
    from safetensors.numpy import save_file

    os.makedirs(path, exist_ok=True)
    tensors = {}
    for key, path_, _, to_hf in _hf_to_ours(cfg):
        node = params
        for part in path_:
            node = node[part]
        tensors["transformer." + key] = np.ascontiguousarray(to_hf(np.asarray(node, np.float32)))
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg.to_hf(), f, indent=1)


def transformer_params(params: dict[str, Any]) -> dict[str, Any]:
    """The block stack of `GPT2LM` params (blocks, final norm, learned positions): what GPT-DT
    keeps from a language model, whose token embedding and output head it replaces
    (`models/pretrained.py`)."""
    return params["transformer"]
