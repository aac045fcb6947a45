"""One transformer for every method: causal or bidirectional, configurable norms and positions.

Methods differ in how they build input tokens and read outputs (see `tokens.py`, `heads.py`),
never in copies of this network.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from icrl_jax.models.attention import MultiHeadAttention

POSITION_KINDS = ("learned", "rotary", "none")


def default_transformer_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        num_layers=2,
        d_model=64,
        num_heads=4,
        mlp_ratio=4,
        pre_norm=True,
        position="learned",  # learned | rotary | none
        max_len=256,  # longest sequence the learned position table covers
        embedding_dropout=0.0,
        residual_dropout=0.0,
        attention_dropout=0.0,
        normalize_qk=False,
        causal=True,
    ))


class Block(nn.Module):
    num_heads: int
    mlp_ratio: int
    pre_norm: bool
    residual_dropout: float
    attention_dropout: float
    rotary: bool
    normalize_qk: bool

    @nn.compact
    def __call__(self, x, mask, positions, deterministic: bool, return_weights: bool = False):
        attention = MultiHeadAttention(self.num_heads, self.attention_dropout, self.rotary,
                                       self.normalize_qk, name="attention")
        dropout = nn.Dropout(self.residual_dropout)
        norm1, norm2 = nn.LayerNorm(name="norm1"), nn.LayerNorm(name="norm2")
        mlp = nn.Sequential([nn.Dense(self.mlp_ratio * x.shape[-1]), nn.gelu, nn.Dense(x.shape[-1])],
                            name="mlp")

        h = norm1(x) if self.pre_norm else x
        attended = attention(h, mask, positions, deterministic, return_weights)
        attended, weights = attended if return_weights else (attended, None)
        x = x + dropout(attended, deterministic=deterministic)
        if not self.pre_norm:
            x = norm1(x)
        h = norm2(x) if self.pre_norm else x
        x = x + dropout(mlp(h), deterministic=deterministic)
        if not self.pre_norm:
            x = norm2(x)
        return x, weights


class Transformer(nn.Module):
    """A stack of attention blocks over already-embedded tokens.

    Attributes mirror `default_transformer_config()`.
    """

    num_layers: int
    num_heads: int
    mlp_ratio: int = 4
    pre_norm: bool = True
    position: str = "learned"
    max_len: int = 256
    embedding_dropout: float = 0.0
    residual_dropout: float = 0.0
    attention_dropout: float = 0.0
    normalize_qk: bool = False
    causal: bool = True

    @classmethod
    def from_config(cls, config, **overrides) -> "Transformer":
        """Build from a model config, taking only the fields the backbone has (a method's own
        fields, such as d_model or label_smoothing, stay with the method)."""
        fields = set(cls.__dataclass_fields__) - {"parent", "name"}
        kwargs = {k: v for k, v in dict(config).items() if k in fields}
        kwargs.update(overrides)
        return cls(**kwargs)

    @nn.compact
    def __call__(self, x: jax.Array, padding_mask: jax.Array | None = None,
                 deterministic: bool = True, return_attention: bool = False,
                 attention_mask: jax.Array | None = None, positions: jax.Array | None = None):
        """Args:
          x: `(B, T, D)` token embeddings.
          padding_mask: optional bool `(B, T)`, False for padding tokens (never attended to).
          attention_mask: optional bool `(B or 1, 1, T, T)` (True = query may attend to key) that
            replaces the causal/full mask, for sequences with a non-causal part (Headless-AD's
            action-set prompt); `padding_mask` still applies on top.
          positions: optional int `(T,)` position ids (default `arange(T)`); tokens that must be
            interchangeable (a set) share one id.
        Returns:
          `(B, T, D)` hidden states, plus a list of per-layer `(B, H, T, T)` attention weights
          when `return_attention`.
        """
        if self.position not in POSITION_KINDS:
            raise ValueError(f"position must be one of {POSITION_KINDS}, got {self.position!r}")
        batch, length, d_model = x.shape
        if positions is None and length > self.max_len and self.position == "learned":
            raise ValueError(f"sequence of {length} tokens exceeds max_len={self.max_len}")
        positions = jnp.arange(length) if positions is None else positions
        if self.position == "learned":
            table = self.param("position_embedding", nn.initializers.normal(0.02),
                               (self.max_len, d_model))
            x = x + jnp.take(table, positions, axis=0).astype(x.dtype)
        x = nn.Dropout(self.embedding_dropout)(x, deterministic=deterministic)

        if attention_mask is not None:
            mask = attention_mask
        else:
            mask = jnp.ones((1, 1, length, length), bool)
            if self.causal:
                mask = jnp.tril(mask)
        if padding_mask is not None:
            mask = mask & padding_mask[:, None, None, :]

        attention_maps = []
        for i in range(self.num_layers):
            x, weights = Block(self.num_heads, self.mlp_ratio, self.pre_norm, self.residual_dropout,
                               self.attention_dropout, self.position == "rotary", self.normalize_qk,
                               name=f"block_{i}")(x, mask, positions, deterministic, return_attention)
            attention_maps.append(weights)
        if self.pre_norm:
            x = nn.LayerNorm(name="final_norm")(x)
        return (x, attention_maps) if return_attention else x


def count_params(params) -> int:
    return sum(int(p.size) for p in jax.tree.leaves(params))


def flops_per_token(num_params_nonembedding: int, num_layers: int, d_model: int,
                    context: int) -> float:
    """Training FLOPs per token, Kaplan et al. (2020) convention: 6N + 12 L d T.

    N counts non-embedding parameters; 12 L d T is the attention score/value work for a context
    of T tokens (forward + backward).
    """
    return 6.0 * num_params_nonembedding + 12.0 * num_layers * d_model * context


__all__: Sequence[str] = ("Transformer", "default_transformer_config", "count_params",
                          "flops_per_token")
