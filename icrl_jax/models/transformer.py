"""One transformer for every method: causal or bidirectional, configurable norms and positions.

Configured as GPT-2 (pre-norm, LayerNorm epsilon 1e-5, learned positions, tanh-GELU feed-forward
of width 4d, fused qkv projection with biases, causal) it is GPT-2's block stack exactly:
`models/gpt2.py` adds the token embedding and the tied output head and loads Hugging Face
checkpoints into it.

Configured as TinyLlama's block (`norm="rmsnorm"`, `mlp_type="swiglu"` without biases,
`position="rotary"`; the Headless-AD authors' backbone, `papers/headless_ad/reference_layout.py`)
it is that network instead: the options below are all of one block stack.

Methods differ in how they build input tokens and read outputs (see `tokens.py`, `heads.py`),
never in copies of this network.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.dtypes import promote_dtype

from icrl_jax.core.config import POSITION_KINDS
from icrl_jax.models.attention import BLOCK_SIZE, BLOCKWISE_FROM, MultiHeadAttention
from icrl_jax.models.attention_masks import AttentionMask
from icrl_jax.models.dropout import Dropout
from icrl_jax.models.matmul import activated_product, dense_dot_general
from icrl_jax.models.ngram import NGramLayer, ngram_weights

#: Positions that encode a query's distance to each key, not where the pair sits: rotary's
#: angles and ALiBi's slopes.
DISTANCE_POSITIONS = ("rotary", "alibi")
#: Positions under which a step's scores do not depend on its offset in the context (distances
#: or none), so that cached keys and values stay exact when the context shifts.
RELATIVE_POSITIONS = DISTANCE_POSITIONS + ("none",)

#: The feed-forward's nonlinearity (`Transformer.activation`): GPT-2's tanh GELU (the default),
#: the exact erf GELU, CLIP's text encoder's x * sigmoid(1.702 x), and ReLU (torch's
#: `TransformerEncoderLayer` default).
ACTIVATIONS = {"gelu_tanh": lambda x: nn.gelu(x, approximate=True),
               "gelu_exact": lambda x: nn.gelu(x, approximate=False),
               "quick_gelu": lambda x: x * jax.nn.sigmoid(1.702 * x),
               "relu": nn.relu}

#: Normalisation layers (`Transformer.norm`): LayerNorm (scale and bias; the default) and RMSNorm
#: (x / sqrt(mean(x^2) + eps) times a scale, no bias: LLaMA / TinyLlama).
NORMS = ("layernorm", "rmsnorm")

#: Feed-forward kinds (`Transformer.mlp_type`): "dense" is Dense -> `activation` -> Dense (GPT-2);
#: "swiglu" is down(silu(gate(x)) * up(x)) (LLaMA / TinyLlama; `activation` unused).
MLP_TYPES = ("dense", "swiglu")


def make_norm(kind: str, epsilon: float, name: str) -> nn.Module:
    """The normalisation layer `kind` (one of `NORMS`) named `name`."""
    if kind == "layernorm":
        return nn.LayerNorm(epsilon=epsilon, name=name)
    if kind == "rmsnorm":
        return nn.RMSNorm(epsilon=epsilon, name=name)
    raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")


class ActivatedDense(nn.Module):
    """`activation(*inputs) @ kernel + bias` with `nn.Dense`'s parameters and initialisers: a
    feed-forward's second layer that keeps only its `inputs` (each `(..., K)`) for the backward
    pass and recomputes the activation there (`matmul.activated_product`) -> `(..., features)`.
    The same values and gradients as `nn.Dense(features)(activation(*inputs))`, in less memory:
    a SwiGLU keeps 2 hidden-layer tensors a block instead of 5, a GELU feed-forward 1 of 2."""

    features: int
    activation: Callable
    use_bias: bool = True

    @nn.compact
    def __call__(self, *inputs):
        width = inputs[0].shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (width, self.features))
        bias = (self.param("bias", nn.initializers.zeros_init(), (self.features,))
                if self.use_bias else None)
        *inputs, kernel = promote_dtype(*inputs, kernel, dtype=None)
        rows = tuple(x.reshape(-1, width) for x in inputs)
        out = activated_product(self.activation, rows, kernel)
        out = out.reshape(inputs[0].shape[:-1] + (self.features,))
        return out if bias is None else out + bias.astype(out.dtype)


def silu_gate(gate: jax.Array, up: jax.Array) -> jax.Array:
    """SwiGLU's hidden layer: silu(gate) * up."""
    return nn.silu(gate) * up


class SwiGLU(nn.Module):
    """`down(silu(gate(x)) * up(x))`: gate and up map to `hidden` features, down back to
    `features` (xformers' SwiGLU with w1 = gate, w2 = up, w3 = down)."""

    hidden: int
    features: int
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):
        gate = nn.Dense(self.hidden, use_bias=self.use_bias, dot_general=dense_dot_general,
                        name="gate")(x)
        up = nn.Dense(self.hidden, use_bias=self.use_bias, dot_general=dense_dot_general,
                      name="up")(x)
        return ActivatedDense(self.features, silu_gate, self.use_bias, name="down")(gate, up)


class DecodeCache(NamedTuple):
    """What incremental decoding keeps of the tokens written so far (`Transformer.init_cache`).

    blocks: per attention layer (keys, values), each `(B, S, H, Dh)`.
    ngram_ids: int32 `(B, S, K)` step ids of the written tokens, None without n-gram layers.
    ngram_inputs: n-gram layer name -> its head's inputs `(B, S, D)` at the written tokens (what
      a match reads); empty without n-gram layers.
    """

    blocks: list
    ngram_ids: jax.Array | None
    ngram_inputs: dict
    #: int32 `(B, S)` positions of the written tokens (ALiBi's distances), None without ALiBi.
    positions: jax.Array | None = None

    @property
    def slots(self) -> int:
        return (self.blocks[0][0] if self.blocks else self.ngram_ids).shape[1]


class Block(nn.Module):
    num_heads: int
    mlp_ratio: int
    pre_norm: bool
    residual_dropout: float
    attention_dropout: float
    rotary: bool
    normalize_qk: bool
    norm_epsilon: float = 1e-6
    mixture_of_attention: bool = False
    activation: str = "gelu_tanh"
    norm: str = "layernorm"
    mlp_type: str = "dense"
    mlp_hidden: int | None = None  # feed-forward width; None: mlp_ratio x d
    mlp_bias: bool = True
    attention_bias: bool = True
    rotary_base: float = 10000.0
    rotary_table_dtype: str = "float32"
    num_kv_heads: int = 0
    alibi: bool = False
    attention_impl: str = "auto"
    attention_block_size: int = BLOCK_SIZE
    attention_blockwise_from: int = BLOCKWISE_FROM

    @nn.compact
    def __call__(self, x, mask, positions, deterministic: bool, return_weights: bool = False,
                 kv_cache=None, cache_index=None, head_scale=None,
                 causal_from: int | None = None, key_positions=None):
        """Returns (x, attention weights or None, updated kv cache or None). `mask`: an
        `AttentionMask` or a bool array; `causal_from`: a bool `mask` is causal after that many
        tokens; `key_positions`: ALiBi's key positions (`MultiHeadAttention`)."""
        attention = MultiHeadAttention(self.num_heads, self.attention_dropout, self.rotary,
                                       self.normalize_qk, self.mixture_of_attention,
                                       use_bias=self.attention_bias,
                                       rotary_base=self.rotary_base,
                                       rotary_table_dtype=self.rotary_table_dtype,
                                       num_kv_heads=self.num_kv_heads, alibi=self.alibi,
                                       implementation=self.attention_impl,
                                       block_size=self.attention_block_size,
                                       blockwise_from=self.attention_blockwise_from,
                                       name="attention")
        dropout = Dropout(self.residual_dropout)
        norm1 = make_norm(self.norm, self.norm_epsilon, "norm1")
        norm2 = make_norm(self.norm, self.norm_epsilon, "norm2")
        hidden = self.mlp_hidden or self.mlp_ratio * x.shape[-1]  # 0 / None: the ratio
        if self.mlp_type == "dense":  # parameters Dense_0, Dense_1 of the block (GPT-2's names)
            first = nn.Dense(hidden, use_bias=self.mlp_bias, dot_general=dense_dot_general,
                             name="Dense_0")
            second = ActivatedDense(x.shape[-1], ACTIVATIONS[self.activation], self.mlp_bias,
                                    name="Dense_1")

            def mlp(h):
                return second(first(h))
        elif self.mlp_type == "swiglu":
            mlp = SwiGLU(hidden, x.shape[-1], self.mlp_bias, name="mlp")
        else:
            raise ValueError(f"mlp_type must be one of {MLP_TYPES}, got {self.mlp_type!r}")

        h = norm1(x) if self.pre_norm else x
        attended = attention(h, mask, positions, deterministic, return_weights, kv_cache,
                             cache_index, head_scale, causal_from, key_positions)
        if kv_cache is not None:
            *attended, kv_cache = attended
            attended = tuple(attended) if return_weights else attended[0]
        attended, weights = attended if return_weights else (attended, None)
        x = x + dropout(attended, deterministic=deterministic)
        if not self.pre_norm:
            x = norm1(x)
        h = norm2(x) if self.pre_norm else x
        x = x + dropout(mlp(h), deterministic=deterministic)
        if not self.pre_norm:
            x = norm2(x)
        return x, weights, kv_cache


class Transformer(nn.Module):
    """A stack of attention blocks over already-embedded tokens.

    Attributes mirror `default_transformer_config()`.
    """

    num_layers: int
    num_heads: int
    mlp_ratio: int = 4
    pre_norm: bool = True
    position: str = "learned"  # POSITION_KINDS: learned | rotary | alibi (`alibi.py`) | none
    max_len: int = 256
    embedding_dropout: float = 0.0
    residual_dropout: float = 0.0
    attention_dropout: float = 0.0
    normalize_qk: bool = False
    causal: bool = True
    ngram_positions: tuple[int, ...] = ()
    ngram_max: int = 1
    ngram_shuffle: bool = False
    ngram_latest: bool = False
    norm_epsilon: float = 1e-6  # LayerNorm epsilon (flax's default; GPT-2 uses 1e-5)
    mixture_of_attention: bool = False  # MoA gates over each layer's heads (attention.py)
    activation: str = "gelu_tanh"  # feed-forward nonlinearity (ACTIVATIONS; CLIP: quick_gelu)
    norm: str = "layernorm"  # NORMS: layernorm | rmsnorm (LLaMA); every norm, the final one too
    mlp_type: str = "dense"  # MLP_TYPES: dense (Dense, activation, Dense) | swiglu (LLaMA)
    mlp_hidden: int | None = None  # feed-forward width; None: mlp_ratio x d_model
    mlp_bias: bool = True  # biases of the feed-forward's linear maps
    attention_bias: bool = True  # biases of the qkv and output projections
    rotary_base: float = 10000.0  # RoPE's base (position="rotary")
    # dtype the RoPE cos / sin tables are rounded to before use: float32 (no rounding), or
    # bfloat16 as TinyLlama's cache (the Headless-AD authors' model) holds them.
    rotary_table_dtype: str = "float32"
    #: Grouped-query attention: key/value heads, each shared by num_heads / num_kv_heads query
    #: heads (0 = one per query head).
    num_kv_heads: int = 0
    #: Sliding-window attention: each token attends to itself and the W - 1 tokens before it
    #: (and to the whole prefix the caller names with `causal_from`, such as Headless-AD's
    #: action-set prompt); 0 = no window. With relative positions (position="rotary" or "none")
    #: a ring of W key/value slots then decodes a sequence of any length exactly as the full
    #: pass computes it (`ring_cache_mask`).
    attention_window: int = 0
    #: `attention.dot_product_attention`'s implementation (`attention.IMPLEMENTATIONS`; "auto"
    #: picks a fused kernel where one applies, else dense or blockwise by length), blockwise
    #: attention's block, and the length from which "auto" takes blockwise attention.
    attention_impl: str = "auto"
    attention_block_size: int = BLOCK_SIZE
    attention_blockwise_from: int = BLOCKWISE_FROM
    #: Activation rematerialisation: each block keeps only its input for the backward pass and
    #: recomputes the rest there (`nn.remat`), so that training memory holds one block's
    #: activations plus every block's input; the same values and gradients, about a third more
    #: compute. On a CPU only under `models.fields.REMAT_CPU_XLA_FLAG`.
    remat: bool = False

    @classmethod
    def from_config(cls, config, **overrides) -> "Transformer":
        """Build from a model config, taking only the fields the backbone has (a method's own
        fields, such as d_model or label_smoothing, stay with the method)."""
        fields = set(cls.__dataclass_fields__) - {"parent", "name"}
        kwargs = {k: v for k, v in dict(config).items() if k in fields}
        if "ngram_positions" in kwargs:  # configs may hold a list; module fields must hash
            kwargs["ngram_positions"] = tuple(int(p) for p in kwargs["ngram_positions"])
        kwargs.update(overrides)
        return cls(**kwargs)

    #: Fields that change how the same function is computed (its memory and speed), not what:
    #: models built on the Transformer pass them on from their config.
    EXECUTION_FIELDS = ("attention_impl", "attention_block_size", "attention_blockwise_from",
                        "remat")
    #: Fields that change only training (dropout), or only shapes the checkpointer compares.
    _NOT_IN_SIGNATURE = ("embedding_dropout", "residual_dropout", "attention_dropout", "max_len",
                         "num_layers", "num_heads", "mlp_ratio", "mlp_hidden", *EXECUTION_FIELDS)

    @classmethod
    def changed_settings(cls, config) -> dict:
        """{field: value} of the backbone fields `config` sets away from their defaults that can
        change what the same parameters compute (activation, norms, positions, ...): a
        checkpoint's signature names them, so that a run with other settings refuses it rather
        than restoring it into another function. Defaults are left out, so that checkpoints
        written before a field existed still restore."""
        out = {}
        for k, field in cls.__dataclass_fields__.items():
            if k in ("parent", "name") or k in cls._NOT_IN_SIGNATURE or k not in config:
                continue
            value, default = config[k], field.default
            if value == default or (default is None and not value):
                continue
            out[k] = list(value) if isinstance(value, tuple) else value
        return out

    @nn.compact
    def __call__(self, x: jax.Array, padding_mask: jax.Array | None = None,
                 deterministic: bool = True, return_attention: bool = False,
                 attention_mask: jax.Array | None = None, positions: jax.Array | None = None,
                 ngram_ids: jax.Array | None = None, cache: list | None = None,
                 cache_index: jax.Array | None = None, head_scale: jax.Array | None = None,
                 causal_from: int | None = None):
        """Args:
          x: `(B, T, D)` token embeddings.
          padding_mask: optional bool `(B, T)`, False for padding tokens (never attended to).
          attention_mask: optional bool `(B or 1, 1, T, T)` (True = query may attend to key) that
            replaces the causal/full mask, for sequences with a non-causal part (Headless-AD's
            action-set prompt); `padding_mask` still applies on top.
          positions: optional int `(T,)` position ids (default `arange(T)`); tokens that must be
            interchangeable (a set) share one id.
          ngram_ids: int `(B, T)` or `(B, T, K)` step ids for the n-gram layers (see
            `models/ngram.py`); required when `ngram_positions` is non-empty, ignored otherwise.
          cache: incremental decoding (a `DecodeCache` from `init_cache`) holding earlier
            tokens; `x` holds the new tokens, written at slots `[cache_index, cache_index + T)`;
            `attention_mask` `(B or 1, 1, T, S)` and `positions` are then required, and with
            n-gram layers the new tokens' `ngram_ids` (ids must be per step: a step's id never
            depends on other steps). Exact: a token's keys, values and ids never change once
            written, and its n-gram matches are all in the past.
          cache_index: int32 `()`, the first slot of the new tokens, or int32 `(T,)` the slot
            of each (`ring_cache_slots`; not with n-gram layers). With a cache the caller's
            `attention_mask` is the whole mask (`attention_window` is not applied: a ring of
            slots masks by age: `ring_cache_mask`).
          head_scale: optional float `(num_layers, H)` multipliers of each head's output (zero
            removes a head; see `MultiHeadAttention`).
          causal_from: with `attention_mask`, the caller's guarantee that it is causal after its
            first `causal_from` tokens, which attend only among themselves (a prefix such as
            Headless-AD's action-set prompt): attention then skips later keys
            (`attention.dot_product_attention`). Our own causal mask implies 0.
        Returns:
          `(B, T, D)` hidden states, plus a list of per-layer `(B, H, T, T)` attention weights
          when `return_attention`, plus the updated cache when `cache` is given.
        """
        if self.position not in POSITION_KINDS:
            raise ValueError(f"position must be one of {POSITION_KINDS}, got {self.position!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, "
                             f"got {self.activation!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.mlp_type not in MLP_TYPES:
            raise ValueError(f"mlp_type must be one of {MLP_TYPES}, got {self.mlp_type!r}")
        batch, length, d_model = x.shape
        if positions is None and length > self.max_len and self.position == "learned":
            raise ValueError(f"sequence of {length} tokens exceeds max_len={self.max_len}")
        positions = jnp.arange(length) if positions is None else positions
        if self.position == "learned":
            table = self.param("position_embedding", nn.initializers.normal(0.02),
                               (self.max_len, d_model))
            x = x + jnp.take(table, positions, axis=0).astype(x.dtype)
        x = Dropout(self.embedding_dropout)(x, deterministic=deterministic)

        if cache is not None and (attention_mask is None or positions is None):
            raise ValueError("decoding with a cache needs attention_mask and positions")
        # A causal mask (ours, or the caller's after its prefix; padding only removes keys):
        # attention may skip later keys.
        if attention_mask is None:
            causal_from = 0 if self.causal else None
        if cache is not None:  # the caller's mask over the slots is the whole mask
            mask = AttentionMask(explicit=attention_mask, key_valid=padding_mask)
        else:
            if self.attention_window and causal_from is None:
                raise ValueError("model.attention_window needs a causal mask (after a prefix: "
                                 "causal_from)")
            # Structure, not a (T, T) array: blockwise attention computes it block by block.
            mask = AttentionMask(explicit=attention_mask, key_valid=padding_mask,
                                 causal_from=causal_from, window=self.attention_window)

        bad = [p for p in self.ngram_positions if not 0 <= p <= self.num_layers]
        if bad:
            raise ValueError(f"ngram_positions {bad} outside [0, num_layers={self.num_layers}]")
        if self.ngram_positions and ngram_ids is None:
            raise ValueError("n-gram layers (ngram_positions="
                             f"{self.ngram_positions}) need ngram_ids")
        # The patterns depend only on the ids: computed once, shared by every position. A
        # decoder writes the new ids and computes only the new tokens' rows over every slot.
        ngram_memory = {}
        if self.ngram_positions and cache is not None:
            ids = ngram_ids if ngram_ids.ndim == 3 else ngram_ids[..., None]
            ngram_ids = jax.lax.dynamic_update_slice_in_dim(
                cache.ngram_ids, ids.astype(jnp.int32), cache_index, axis=1)
            ngram_memory = dict(cache.ngram_inputs)
        weights_by_n = (ngram_weights(
            ngram_ids, self.ngram_max, self.ngram_shuffle, latest=self.ngram_latest,
            queries=None if cache is None else cache_index + jnp.arange(length))
            if self.ngram_positions else [])

        def ngram_layers(x, after: int):
            if after not in self.ngram_positions:
                return x
            for n, ngram_attention in enumerate(weights_by_n, start=1):
                name = f"ngram_{after}_{n}"
                x, memory = NGramLayer(self.mlp_ratio, self.pre_norm, name=name)(
                    x, ngram_attention, Dropout(self.residual_dropout), deterministic,
                    ngram_memory.get(name), cache_index)
                if memory is not None:
                    ngram_memory[name] = memory
            return x

        key_positions = None
        if cache is not None and self.position == "alibi":  # ALiBi reads each slot's position
            if cache.positions is None:
                raise ValueError("position='alibi' decodes from a cache that keeps its slots' "
                                 "positions (init_cache of an ALiBi model)")
            written = jnp.broadcast_to(positions, (batch, length)).astype(jnp.int32)
            if jnp.ndim(cache_index):
                key_positions = cache.positions.at[:, cache_index].set(written)
            else:
                key_positions = jax.lax.dynamic_update_slice(cache.positions, written,
                                                             (0, cache_index))

        attention_maps, new_blocks = [], []
        # Static arguments of Block.__call__ (self is 0): deterministic, return_weights and
        # causal_from choose the program; the rest are arrays or pytrees (AttentionMask).
        block_class = nn.remat(Block, static_argnums=(4, 5, 9)) if self.remat else Block
        x = ngram_layers(x, 0)
        for i in range(self.num_layers):
            x, weights, layer_cache = block_class(
                self.num_heads, self.mlp_ratio, self.pre_norm, self.residual_dropout,
                self.attention_dropout, self.position == "rotary", self.normalize_qk,
                self.norm_epsilon, self.mixture_of_attention, self.activation,
                norm=self.norm, mlp_type=self.mlp_type, mlp_hidden=self.mlp_hidden,
                mlp_bias=self.mlp_bias, attention_bias=self.attention_bias,
                rotary_base=self.rotary_base, rotary_table_dtype=self.rotary_table_dtype,
                num_kv_heads=self.num_kv_heads, alibi=self.position == "alibi",
                attention_impl=self.attention_impl,
                attention_block_size=self.attention_block_size,
                attention_blockwise_from=self.attention_blockwise_from, name=f"block_{i}")(
                x, mask, positions, deterministic, return_attention,
                None if cache is None else cache.blocks[i], cache_index,
                None if head_scale is None else head_scale[i], causal_from, key_positions)
            attention_maps.append(weights)
            new_blocks.append(layer_cache)
            x = ngram_layers(x, i + 1)
        if self.pre_norm:
            x = make_norm(self.norm, self.norm_epsilon, "final_norm")(x)
        outputs = (x, attention_maps) if return_attention else (x,)
        if cache is not None:
            outputs = outputs + (DecodeCache(new_blocks, ngram_ids if self.ngram_positions
                                             else None, ngram_memory, key_positions),)
        return outputs if len(outputs) > 1 else x

    def init_cache(self, batch: int, slots: int, d_model: int, dtype=jnp.float32,
                   ngram_parts: int | None = None) -> DecodeCache:
        """An empty `DecodeCache` of `slots` tokens: keys and values `(batch, slots, H, Dh)` per
        layer and, with n-gram layers, step ids `(batch, slots, ngram_parts)` (the K of the
        ids, required then) and each n-gram layer's inputs `(batch, slots, d_model)`."""
        shape = (batch, slots, self.num_heads, d_model // self.num_heads)
        positions = jnp.zeros((batch, slots), jnp.int32) if self.position == "alibi" else None
        blocks = [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))
                  for _ in range(self.num_layers)]
        if not self.ngram_positions:
            return DecodeCache(blocks, None, {}, positions)
        if self.ngram_shuffle:
            raise ValueError("shuffled n-gram patterns (model.ngram_shuffle) draw each row from "
                             "the whole window; they cannot decode from a cache")
        if ngram_parts is None:
            raise ValueError("a cache for n-gram layers needs ngram_parts, the number of "
                             "components of a step's id")
        inputs = {f"ngram_{after}_{n}": jnp.zeros((batch, slots, d_model), dtype)
                  for after in self.ngram_positions for n in range(1, self.ngram_max + 1)}
        return DecodeCache(blocks, jnp.zeros((batch, slots, ngram_parts), jnp.int32), inputs,
                           positions)


def ring_cache_slots(positions: jax.Array, slots: int, window: int = 0
                     ) -> tuple[jax.Array, jax.Array]:
    """Where tokens at sequence positions `positions` (int `(L,)`, consecutive) go in a ring of
    `slots` key/value slots (position p at slot p mod `slots`), and which slots each may attend
    to: bool `(L, S)`, True where the slot holds a token at most `window - 1` (0: any number)
    and at least 0 positions before the query. Returns (int32 `(L,)` slots, mask).

    A token at a negative position is written (to a slot no query reads before a real token
    overwrites it) but attends to nothing and is seen by no later query: a placeholder that
    keeps a call's shape fixed. A cache never longer than its slots (positions < `slots`) is the
    plain causal cache. Exact with a window while `slots >= window + L - 1`: then no token of a
    call overwrites one that an earlier query of the same call still sees."""
    slot = jnp.arange(slots, dtype=jnp.int32)
    positions = jnp.asarray(positions, jnp.int32)
    age = jnp.mod(positions[:, None] - slot[None, :], slots)  # how far back each slot's token is
    mask = age <= positions[:, None]
    if window:
        mask = mask & (age < window)
    return jnp.mod(positions, slots).astype(jnp.int32), mask


def ring_cache_mask(positions: jax.Array, slots: int, window: int = 0
                    ) -> tuple[jax.Array, jax.Array]:
    """`ring_cache_slots` for a call whose tokens are written from one first slot on (int32
    `()`, `dynamic_update_slice`): exact as long as they do not run past the ring's end, so once
    the ring has wrapped, decode one token per call (the in-context policies do)."""
    written, mask = ring_cache_slots(positions, slots, window)
    return written[0], mask


def count_params(params) -> int:
    return sum(int(p.size) for p in jax.tree.leaves(params))


def flops_per_token(num_params_nonembedding: int, num_layers: int, d_model: int,
                    context: int) -> float:
    """Training FLOPs per token, Kaplan et al. (2020) convention: 6N + 12 L d T.

    N counts non-embedding parameters; 12 L d T is the attention score/value work for a context
    of T tokens (forward + backward).
    """
    return 6.0 * num_params_nonembedding + 12.0 * num_layers * d_model * context


__all__: Sequence[str] = ("Transformer", "DecodeCache", "ring_cache_mask", "ring_cache_slots",
                          "count_params", "flops_per_token")
