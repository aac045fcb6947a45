"""GPT-2 on the shared transformer, and Hugging Face GPT-2 checkpoints in and out.

`GPT2LM` is a token embedding, the shared `Transformer` configured as GPT-2 (pre-norm with
LayerNorm epsilon 1e-5, tanh-GELU, learned positions, fused qkv with biases, causal; or the
checkpoint's feed-forward width, GELU and epsilon) and the output head, tied to the token
embedding or (tie_word_embeddings=False) its own. `load_hf_gpt2(path)` reads a local Hugging Face
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
    h.{i}.mlp.c_fc.weight (D, I)     -> .../Dense_0/kernel  (I = n_inner or 4D)
    h.{i}.mlp.c_proj.weight (I, D)   -> .../Dense_1/kernel
    ln_f.*                           -> transformer/final_norm/*
    lm_head.weight (V, D)            -> lm_head  (tie_word_embeddings=False only)

Every config field is audited (`GPT2_FIELDS`: accepted, implemented, or refused with one line
naming it); `audit_fields` and `HF_ACTIVATIONS` are shared with the CLIP and Llama loaders.
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


# -- safetensors files, bfloat16 included -----------------------------------------------------

#: safetensors dtype names -> little-endian numpy dtypes of the stored bytes (bfloat16 as its
#: 16-bit pattern: numpy has no bfloat16, so `safetensors.numpy` cannot read it).
_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}


class SafetensorsFile:
    """The tensors of a `.safetensors` file, each read on demand as float32 numpy: F32, F16,
    F64 and BF16 (the dtype most Hugging Face LLM checkpoints store; widened exactly, its 16 bits
    are the top half of a float32). Reads the format's header (8-byte length, JSON) itself."""

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size))
        except (OSError, ValueError, UnicodeDecodeError) as error:
            raise CheckpointFormatError(f"{path} is not a readable safetensors file "
                                        f"({error})") from None
        header.pop("__metadata__", None)
        self.header, self.start = header, 8 + size

    def keys(self) -> list[str]:
        return list(self.header)

    def __contains__(self, key: str) -> bool:
        return key in self.header

    def get(self, key: str) -> np.ndarray:
        info = self.header[key]
        kind, shape, (lo, hi) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        if kind not in _SAFETENSORS_DTYPES:
            raise CheckpointFormatError(f"{self.path}: tensor {key!r} has dtype {kind}; the "
                                        f"loaders read {', '.join(_SAFETENSORS_DTYPES)}")
        dtype = np.dtype(_SAFETENSORS_DTYPES[kind])
        raw = np.fromfile(self.path, dtype, (hi - lo) // dtype.itemsize, offset=self.start + lo)
        if kind == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        return raw.astype(np.float32).reshape(shape)

    def tensors(self, keep=lambda key: True) -> dict[str, np.ndarray]:
        """Every tensor whose key `keep` accepts, float32."""
        return {k: self.get(k) for k in self.header if keep(k)}


# -- the audit of config fields every loader shares ----------------------------------------------

#: A config field that changes nothing we compute (bookkeeping, token ids, caching, training-only
#: dropout, initialisation, generation settings, heads we never load).
ACCEPTED = "accepted"
#: A field that changes the computation, and our model computes it.
IMPLEMENTED = "implemented"


@dataclasses.dataclass(frozen=True)
class Refused:
    """A field that changes the computation in a way our model does not compute: a config loads
    only with one of `allowed` (the values that compute what the default does)."""

    allowed: tuple
    why: str


#: The base `PretrainedConfig` fields of transformers 4 and 5 (written into every config.json)
#: that no loader here reads. A family's own table comes first (GPT-2 refuses
#: add_cross_attention; every family sets tie_word_embeddings).
BASE_FIELDS: dict[str, Any] = {
    **{k: ACCEPTED for k in (
        "model_type", "architectures", "transformers_version", "_name_or_path", "_commit_hash",
        "name_or_path", "dtype", "torch_dtype", "use_bfloat16",  # we compute in float32
        "output_hidden_states", "output_attentions", "return_dict", "torchscript",
        "chunk_size_feed_forward",  # chunking the feed-forward over tokens changes no value
        "is_encoder_decoder", "is_decoder", "tie_encoder_decoder", "cross_attention_hidden_size",
        "add_cross_attention", "id2label", "label2id", "num_labels", "_num_labels",
        "problem_type", "finetuning_task", "task_specific_params", "tokenizer_class", "prefix",
        "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
        "tf_legacy_loss", "gradient_checkpointing", "use_cache", "initializer_range",
        "_attn_implementation", "_attn_implementation_internal", "attn_implementation",
        "transformers.js_config",
        # generation settings (transformers 4 wrote them into every config)
        "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
        "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
        "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
        "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
        "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
        "begin_suppress_tokens")},
    "pruned_heads": Refused(({}, None), "pruned attention heads change the heads' shapes"),
}


def audit_fields(hf: dict[str, Any], table: dict[str, Any], where: str) -> None:
    """Raise `CheckpointFormatError` (one line naming the field and its value) for a field of
    `hf` that `table` (then `BASE_FIELDS`) refuses at that value, or that neither lists: a field
    we have not audited may change the computation, so it is never loaded silently."""
    for key, value in hf.items():
        rule = table.get(key, BASE_FIELDS.get(key))
        if rule is None:
            raise CheckpointFormatError(
                f"{where}: config field {key}={value!r} is not one this loader knows changes "
                "nothing or computes; refusing a model we may compute differently")
        if isinstance(rule, Refused) and value not in rule.allowed:
            allowed = " or ".join(repr(a) for a in rule.allowed)
            raise CheckpointFormatError(f"{where}: {key}={value!r} is not implemented "
                                        f"({rule.why}); it loads with {key}={allowed}")


#: transformers' activation names (`ACT2FN`) -> our `Transformer.activation`. The tanh GELUs
#: are one formula written five ways; others (relu, silu, ...) are refused.
HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                  "gelu_python_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                  "gelu_accurate": "gelu_tanh", "gelu": "gelu_exact", "gelu_python": "gelu_exact",
                  "quick_gelu": "quick_gelu"}


def activation_rule(field: str) -> Refused:
    """The table entry of an activation-name field: the names `HF_ACTIVATIONS` maps load."""
    return Refused(tuple(HF_ACTIVATIONS), f"our feed-forward computes the GELUs only; {field} "
                   "picks the nonlinearity")


#: Every field of transformers' `GPT2Config` (5.24; the fixture script checks the list):
#: accepted (changes nothing we compute), implemented, or refused unless at a value we compute.
GPT2_FIELDS: dict[str, Any] = {
    "vocab_size": IMPLEMENTED, "n_positions": IMPLEMENTED, "n_embd": IMPLEMENTED,
    "n_layer": IMPLEMENTED, "n_head": IMPLEMENTED,
    "n_inner": IMPLEMENTED,  # the feed-forward width (None: 4 x n_embd)
    "layer_norm_epsilon": IMPLEMENTED,
    "activation_function": activation_rule("activation_function"),
    # No 1/sqrt(Dh), and 1/(layer + 1): folded into the query projection at loading (exact).
    "scale_attn_weights": IMPLEMENTED, "scale_attn_by_inverse_layer_idx": IMPLEMENTED,
    # Computes the same scores in float32 (only their order and dtype under half precision).
    "reorder_and_upcast_attn": ACCEPTED,
    "tie_word_embeddings": IMPLEMENTED,  # an lm_head of its own when False
    # Dropout acts in training only. Fine-tuning (GPT-DT) takes its rates from its own config
    # (model.embedding_dropout / residual_dropout / attention_dropout), never the checkpoint's.
    "resid_pdrop": ACCEPTED, "embd_pdrop": ACCEPTED, "attn_pdrop": ACCEPTED,
    "add_cross_attention": Refused((False, None), "cross-attention layers over an encoder's "
                                   "states: a decoder of an encoder-decoder model"),
    # GPT2DoubleHeadsModel's summary head and old names, never read by the LM.
    "summary_type": ACCEPTED, "summary_use_proj": ACCEPTED, "summary_activation": ACCEPTED,
    "summary_proj_to_labels": ACCEPTED, "summary_first_dropout": ACCEPTED,
    "summary_last_dropout": ACCEPTED, "n_ctx": ACCEPTED, "n_special": ACCEPTED,
    "predict_special_tokens": ACCEPTED,
}


@dataclasses.dataclass(frozen=True)
class GPT2Config:
    """The fields of transformers' `GPT2Config` that fix the architecture (`GPT2_FIELDS` audits
    all of them)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5
    n_inner: int | None = None  # feed-forward width; None: 4 x n_embd
    activation_function: str = "gelu_new"
    tie_word_embeddings: bool = True

    @classmethod
    def from_hf(cls, hf: dict[str, Any], where: str = "config.json") -> "GPT2Config":
        """From a config.json dict, refusing (one line naming the field) what we do not compute.
        `scale_attn_weights` / `scale_attn_by_inverse_layer_idx` are not fields here: the
        loader folds them into the weights (`attention_scale_folds`)."""
        audit_fields(hf, GPT2_FIELDS, where)
        cfg = cls(**{f.name: hf[f.name] for f in dataclasses.fields(cls) if f.name in hf})
        if cfg.n_inner == 4 * cfg.n_embd:
            cfg = dataclasses.replace(cfg, n_inner=None)
        if cfg.n_embd % cfg.n_head:
            raise CheckpointFormatError(
                f"{where}: n_head={cfg.n_head} does not divide n_embd={cfg.n_embd}: parameter "
                f"'h.0.attn.c_attn.weight' of shape ({cfg.n_embd}, {3 * cfg.n_embd}) cannot be "
                f"split into {cfg.n_head} heads of ({cfg.n_embd}, 3, {cfg.n_head}, head size)")
        return cfg

    @property
    def inner(self) -> int:
        return self.n_inner or 4 * self.n_embd

    @property
    def activation(self) -> str:
        return HF_ACTIVATIONS[self.activation_function]

    def to_hf(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self), model_type="gpt2",
                    architectures=["GPT2LMHeadModel"], resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, bos_token_id=self.vocab_size - 1,
                    eos_token_id=self.vocab_size - 1)

    def backbone(self, **overrides) -> Transformer:
        """The shared transformer as GPT-2's block stack."""
        kwargs = dict(num_layers=self.n_layer, num_heads=self.n_head, mlp_ratio=4, pre_norm=True,
                      position="learned", max_len=self.n_positions, causal=True,
                      norm_epsilon=self.layer_norm_epsilon, mlp_hidden=self.n_inner,
                      activation=self.activation)
        kwargs.update(overrides)
        return Transformer(**kwargs)


def attention_scale_folds(hf: dict[str, Any], cfg: GPT2Config) -> list[float]:
    """Per layer, the factor that makes our attention's softmax(q k^T / sqrt(Dh)) compute
    transformers' scores under `scale_attn_weights` / `scale_attn_by_inverse_layer_idx`, when
    multiplied into that layer's query projection (kernel and bias): (c q) k^T = c (q k^T), so
    the folded model computes the checkpoint's function exactly. (Fine-tuning then sees the
    query weights scaled by c: the same function, a reparametrised optimisation; the Markov
    tests R.1 / R.2 of W_q W_k^T are unchanged by a positive factor.)"""
    base = 1.0 if hf.get("scale_attn_weights", True) else float(np.sqrt(cfg.n_embd // cfg.n_head))
    inverse = bool(hf.get("scale_attn_by_inverse_layer_idx", False))
    return [base / (i + 1) if inverse else base for i in range(cfg.n_layer)]


class GPT2LM(nn.Module):
    """Token ids `(B, T)` -> next-token logits `(B, T, vocab_size)`."""

    config: GPT2Config

    @nn.compact
    def __call__(self, ids: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.config
        wte = self.param("wte", nn.initializers.normal(0.02), (cfg.vocab_size, cfg.n_embd))
        hidden = cfg.backbone(name="transformer")(jnp.take(wte, ids, axis=0),
                                                  deterministic=deterministic)
        head = wte if cfg.tie_word_embeddings else self.param(
            "lm_head", nn.initializers.normal(0.02), (cfg.vocab_size, cfg.n_embd))
        return hidden @ head.T.astype(hidden.dtype)


# -- Hugging Face checkpoints -----------------------------------------------------------------

def _hf_to_ours(cfg: GPT2Config) -> list[tuple[str, tuple[str, ...], Any, Any]]:
    """(HF key, our path, HF array -> ours, ours -> HF array) for every parameter."""
    d, h = cfg.n_embd, cfg.n_head
    same = (lambda a: a, lambda a: a)
    rows = [("wte.weight", ("wte",), *same),
            ("wpe.weight", ("transformer", "position_embedding"), *same),
            ("ln_f.weight", ("transformer", "final_norm", "scale"), *same),
            ("ln_f.bias", ("transformer", "final_norm", "bias"), *same)]
    if not cfg.tie_word_embeddings:
        rows.append(("lm_head.weight", ("lm_head",), *same))
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
    d, v, p, inner = cfg.n_embd, cfg.vocab_size, cfg.n_positions, cfg.inner
    name = key.split(".", 2)[-1] if key.startswith("h.") else key
    return {"wte.weight": (v, d), "lm_head.weight": (v, d), "wpe.weight": (p, d),
            "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
            "attn.c_proj.weight": (d, d), "mlp.c_fc.weight": (d, inner),
            "mlp.c_fc.bias": (inner,), "mlp.c_proj.weight": (inner, d)}.get(name, (d,))


#: Buffers older transformers saved beside the weights (the causal mask): not parameters.
_GPT2_BUFFERS = (".attn.bias", ".attn.masked_bias")


def unexpected_blocks(extra: list[str], prefix: str, count: int, field: str) -> str:
    """The part of a refusal that says a checkpoint holds more blocks (`{prefix}{i}.` keys) than
    its config's `field`=count: e.g. "it has blocks 0 .. 11 (12), n_layer is 2"; "" if not."""
    layers = sorted({int(k[len(prefix):].split(".", 1)[0]) for k in extra
                     if k.startswith(prefix) and k[len(prefix):].split(".", 1)[0].isdigit()})
    if not layers or layers[-1] < count:
        return ""
    return (f"it has blocks 0 .. {layers[-1]} ({layers[-1] + 1}), config.json's {field} is "
            f"{count}; a model that takes only the first k blocks says so with "
            "model.pretrained_layers=k")


def missing_blocks(keys, prefix: str, count: int, field: str, where: str) -> None:
    """Raise `CheckpointFormatError` when the checkpoint's `keys` hold fewer blocks
    (`{prefix}{i}.` keys) than its config's `field`=count."""
    layers = {int(k[len(prefix):].split(".", 1)[0]) for k in keys
              if k.startswith(prefix) and k[len(prefix):].split(".", 1)[0].isdigit()}
    have = max(layers) + 1 if layers else 0
    if have < count:
        raise CheckpointFormatError(f"{where} has {have} blocks ({prefix}0 .. {prefix}{have - 1})"
                                    f" but config.json's {field} is {count}")


def load_hf_gpt2(path: str) -> tuple[GPT2Config, dict[str, Any]]:
    """A local Hugging Face GPT-2 directory -> (config, `GPT2LM` params, float32 numpy).

    Every config field is audited (`GPT2_FIELDS`); `scale_attn_weights=False` and
    `scale_attn_by_inverse_layer_idx` are folded into the query projections
    (`attention_scale_folds`), so the returned config and params compute the checkpoint's
    function with our attention. Raises `CheckpointFormatError` naming the file, the field, the
    parameter and both shapes, a missing key, or tensors the config has no place for (a
    checkpoint with more blocks than n_layer is refused, never cut)."""
    config_path, weights_path = (os.path.join(path, f) for f in ("config.json",
                                                                 "model.safetensors"))
    for f in (config_path, weights_path):
        if not os.path.isfile(f):
            raise CheckpointFormatError(f"no {os.path.basename(f)} in {path} (a Hugging Face "
                                        "GPT-2 directory has config.json and model.safetensors)")
    with open(config_path) as f:
        hf = json.load(f)
    cfg = GPT2Config.from_hf(hf, config_path)
    tensors = {k.removeprefix("transformer."): v for k, v in SafetensorsFile(weights_path).tensors(
        lambda k: not k.endswith(_GPT2_BUFFERS)).items()}
    if cfg.tie_word_embeddings and "lm_head.weight" in tensors:  # a saved copy of the tie
        if not np.array_equal(tensors.pop("lm_head.weight"), tensors.get("wte.weight")):
            raise CheckpointFormatError(f"{weights_path}: tie_word_embeddings is set but "
                                        "lm_head.weight differs from wte.weight")
    rows = _hf_to_ours(cfg)
    extra = sorted(set(tensors) - {key for key, *_ in rows})
    if extra:
        raise CheckpointFormatError(
            f"{weights_path} does not fit {config_path}: "
            + (unexpected_blocks(extra, "h.", cfg.n_layer, "n_layer")
               or f"unexpected parameters {extra[:6]}{'...' if len(extra) > 6 else ''}"))
    missing_blocks(tensors, "h.", cfg.n_layer, "n_layer", weights_path)
    params: dict[str, Any] = {}
    for key, path_, to_ours, _ in rows:
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
    for i, factor in enumerate(attention_scale_folds(hf, cfg)):
        if factor != 1.0:
            qkv = params["transformer"][f"block_{i}"]["attention"]["qkv"]
            for name in ("kernel", "bias"):
                qkv[name] = qkv[name].copy()
                qkv[name][..., 0, :, :] *= np.float32(factor)  # the query third of (.., 3, H, Dh)
    return cfg, params


def save_hf_gpt2(path: str, cfg: GPT2Config, params: dict[str, Any]) -> None:
    """Write `GPT2LM` params as a Hugging Face GPT-2 directory (config.json +
    model.safetensors, transformers' key names; a tied output head is not stored, an untied one
    is `lm_head.weight`)."""
    from safetensors.numpy import save_file

    os.makedirs(path, exist_ok=True)
    tensors = {}
    for key, path_, _, to_hf in _hf_to_ours(cfg):
        node = params
        for part in path_:
            node = node[part]
        name = key if key == "lm_head.weight" else "transformer." + key  # the head is outside
        tensors[name] = np.ascontiguousarray(to_hf(np.asarray(node, np.float32)))
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg.to_hf(), f, indent=1)


def transformer_params(params: dict[str, Any]) -> dict[str, Any]:
    """The block stack of `GPT2LM` params (blocks, final norm, learned positions): what GPT-DT
    keeps from a language model, whose token embedding and output head it replaces
    (`models/pretrained.py`)."""
    return params["transformer"]
