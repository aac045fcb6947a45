"""N-gram induction-head layers (Akyürek et al., 2024), as used for in-context RL by the n-gram
paper (section 2.2): an attention pattern computed from discrete token ids, with no parameters.

Orientation. `ngram_pattern(ids, n)[b, i, j]` is indexed [query, key]: query position i reads
key/value position j when the occurrence of tokens ending at m = j - 1 repeats the n tokens ending
at i, i.e. `ids[i - k] == ids[m - k]` for k = 0..n-1, with the occurrence strictly in the past
(m < i, so j <= i) and both n-grams inside the window. Position j is the step that *followed* the
earlier occurrence, so in AD's step format (a_{t-1}, r_{t-1}, o_t) its token carries the action
the source took the last time the same situation arose. This is Akyürek et al.'s induction head
(strictly lower-triangular match, then a shift by one step). The paper writes the pattern as
`A(n)` indexed [key, query], hence `NGH(h) = W1 h + W2 A(n)^T h`; here that is
`W1 h + W2 (P h)` with `P = A(n)^T` row-normalised: each query averages uniformly over its matches,
and a query with no match reads nothing (its row is zero).

What counts as a token is pluggable: an id function maps a `StepWindows` to int32 ids `(B, L)` or
`(B, L, K)`; two steps are equal when all K components are equal (e.g. the 4x4 VQ codes of a pixel
observation, K = 16, as in the paper's Miniworld experiments). `register_ngram_ids` adds a fixed
one; `register_ngram_ids_factory` one that is built from the model config (e.g. "vq": the codes
of the pretrained VQ-VAE at `model.vq_checkpoint`, `encoders.vq_ids_from_config`), so training and
in-context rollouts get the same function from the config alone.

Decoding (in-context rollouts that fit the context): a step's id depends on that step alone,
and its matches are all in the past, so a decoder keeps every written step's ids and each
layer's inputs (`transformer.DecodeCache`) and computes only the new tokens' pattern rows
(`ngram_pattern_rows`), never the whole window's. The shuffled ablation cannot (its rows are
drawn from the whole window).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from icrl_jax.models.encoders import vq_ids_from_config
from icrl_jax.models.features import FEATURES

#: window (a `StepWindows`, or anything with its fields) -> int32 `(B, L)` or `(B, L, K)` ids.
NGramIds = Callable[..., jax.Array]


def _float_bits(x: jax.Array) -> jax.Array:
    """Exact-equality ids of float values: their float32 bit patterns as int32 (-0.0 -> 0.0)."""
    return jax.lax.bitcast_convert_type(x.astype(jnp.float32) + 0.0, jnp.int32)


def observation_ids(window) -> jax.Array:
    """Observations only: discrete ids `(B, L)` -> `(B, L, 1)`; float observations
    `(B, L, *shape)` -> their bit patterns `(B, L, prod(shape))` (exact match)."""
    obs = window.observations
    if jnp.issubdtype(obs.dtype, jnp.integer):
        return obs.reshape(obs.shape[:2] + (-1,)).astype(jnp.int32)
    return _float_bits(obs.reshape(obs.shape[:2] + (-1,)))


def transition_ids(window) -> jax.Array:
    """Whole transitions (a_{t-1}, r_{t-1}, o_t): `(B, L, 2 + K_obs)` int32."""
    prev = jnp.stack([window.prev_actions.astype(jnp.int32), _float_bits(window.prev_rewards)],
                     axis=-1)
    return jnp.concatenate([prev, observation_ids(window)], axis=-1)


def observation_return_ids(window) -> jax.Array:
    """The observation and the reward collected in its episode before it
    (`StepWindows.episode_returns`): `(B, L, K_obs + 1)` int32. On Dark Key-to-Door a cell
    visited with and without the key gets two ids, so the latest match of a step taken with the
    key is a step taken with the key too, not the same cell on the way to the key."""
    if window.episode_returns is None:
        raise ValueError("ngram_match='observation_return' needs windows that record each "
                         "step's return so far (pixel stores do not); use 'observation'")
    return jnp.concatenate([observation_ids(window), _float_bits(window.episode_returns)[..., None]],
                           axis=-1)


NGRAM_IDS: dict[str, NGramIds] = {"transition": transition_ids, "observation": observation_ids,
                                  "observation_return": observation_return_ids}
#: name -> factory(model_config) -> id function, for ids that need something the config names.
NGRAM_ID_FACTORIES: dict[str, Callable[..., NGramIds]] = {"vq": vq_ids_from_config}


def register_ngram_ids(name: str, fn: NGramIds) -> None:
    """Make `fn` selectable as `model.ngram_match=name`."""
    NGRAM_IDS[name] = fn


def register_ngram_ids_factory(name: str, factory: Callable[..., NGramIds]) -> None:
    """Make `factory(model_config)` build the id function of `model.ngram_match=name`."""
    NGRAM_ID_FACTORIES[name] = factory


def _unknown(name: str) -> ValueError:
    return ValueError(f"unknown model.ngram_match {name!r}; available: "
                      f"{sorted(NGRAM_IDS) + sorted(NGRAM_ID_FACTORIES)}")


def get_ngram_ids(name: str) -> NGramIds:
    """The fixed id function `name` (ids built from a model config: `config_ngram_ids`)."""
    if name not in NGRAM_IDS:
        if name in NGRAM_ID_FACTORIES:
            raise ValueError(f"model.ngram_match {name!r} is built from a model config: use "
                             "config_ngram_ids(model_config)")
        raise _unknown(name)
    return NGRAM_IDS[name]


def config_ngram_ids(model_config) -> NGramIds | None:
    """The step-id function of a model config's n-gram layers (`ngram_match`, default
    "transition"); None when it has none (`ngram_positions` empty)."""
    if not model_config.ngram_positions:
        return None
    name = model_config.ngram_match
    if name in NGRAM_ID_FACTORIES:
        return NGRAM_ID_FACTORIES[name](model_config)
    return get_ngram_ids(name)


class NGramFeature:
    """The n-gram layers as a model feature (`models/features.py`): " + n-gram" in the labels of
    models that have them, and in checkpoint signatures the fingerprint of ids built from files
    (the VQ codes' parameters: a checkpoint trained on other codes is another model)."""

    @staticmethod
    def label(model_config) -> str:
        # Only the configs of methods that declare the n-gram fields (the AD family) have them.
        has = "ngram_positions" in model_config and bool(model_config.ngram_positions)
        return " + n-gram" if has else ""

    @staticmethod
    def signature(model_config) -> dict:
        if "ngram_positions" not in model_config:
            return {}
        fingerprint = getattr(config_ngram_ids(model_config), "fingerprint", None)
        return {} if fingerprint is None else {"ngram_ids": fingerprint}


FEATURES.register("ngram", NGramFeature())


def token_equality(ids: jax.Array) -> jax.Array:
    """int `(B, L)` or `(B, L, K)` -> bool `(B, L, L)`: step i equals step m (all K components)."""
    if ids.ndim == 2:
        ids = ids[..., None]
    return (ids[:, :, None, :] == ids[:, None, :, :]).all(-1)


def _shift_diagonal(x: jax.Array, k: int) -> jax.Array:
    """`(B, L, L)` -> `y[:, i, m] = x[:, i - k, m - k]`, False where either index is negative."""
    if k == 0:
        return x
    length = x.shape[-1]
    return jnp.pad(x, ((0, 0), (k, 0), (k, 0)))[:, :length, :length]


def ngram_pattern(ids: jax.Array, n: int) -> jax.Array:
    """The n-gram induction pattern, bool `(B, L, L)` indexed [query i, key j] (module docstring).

    O(n L^2) boolean work: one equality matrix, AND-ed with its diagonal shifts.
    """
    if n < 1:
        raise ValueError(f"n-gram length must be >= 1, got {n}")
    equal = token_equality(ids)
    match = equal
    for k in range(1, n):  # static n (1..3): the n-gram's k-th token back must match too
        match = match & _shift_diagonal(equal, k)
    length = equal.shape[-1]
    match = match & jnp.tril(jnp.ones((length, length), bool), k=-1)  # occurrence m < i
    # Read the step after the occurrence: key j = m + 1.
    return jnp.pad(match, ((0, 0), (0, 0), (1, 0)))[:, :, :length]


def ngram_pattern_rows(ids: jax.Array, queries: jax.Array, n: int) -> jax.Array:
    """Rows `queries` of `ngram_pattern` over every slot of a decoding cache: bool `(B, T, S)`.

    ids: int `(B, S)` or `(B, S, K)`, the step ids of slots `[0, S)`; slots after the last
      query are never read (matches are strictly in the past), so unwritten slots may hold
      anything.
    queries: int32 `(T,)` slot positions of the query tokens (traced values are fine).
    With `queries = arange(S)` it equals `ngram_pattern(ids, n)`; a decoder computes only the
    new tokens' rows, O(n T S K) instead of recomputing the window's O(n S^2 K).
    """
    if n < 1:
        raise ValueError(f"n-gram length must be >= 1, got {n}")
    if ids.ndim == 2:
        ids = ids[..., None]
    slots = jnp.arange(ids.shape[1])
    match = (slots[None, :] < queries[:, None])[None]  # occurrence m < i, (1, T, S)
    for k in range(n):  # the n-gram's k-th token back: ids[i - k] == ids[m - k], m - k >= 0
        query_ids = jnp.take(ids, jnp.maximum(queries - k, 0), axis=1)  # (B, T, K)
        key_ids = jnp.pad(ids, ((0, 0), (k, 0), (0, 0)))[:, :ids.shape[1]]  # ids[m - k]
        equal = (query_ids[:, :, None, :] == key_ids[:, None, :, :]).all(-1)
        match = match & equal & (slots >= k)[None, None, :]  # (i - k >= 0 follows from m < i)
    return jnp.pad(match, ((0, 0), (0, 0), (1, 0)))[:, :, :ids.shape[1]]  # key j = m + 1


def shuffle_pattern(pattern: jax.Array, key: jax.Array) -> jax.Array:
    """Ablation (appendix E.2): the same number of matches per query, at random causal keys.

    Each query i with c matches gets c keys drawn without replacement from j <= i, so the
    layer sees a pattern with the right density but no n-gram information. bool `(B, L, L)`.
    """
    length = pattern.shape[-1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    scores = jnp.where(causal, jax.random.uniform(key, pattern.shape), 2.0)
    rank = jnp.argsort(jnp.argsort(scores, axis=-1), axis=-1)  # 0 = first random causal key
    return causal & (rank < pattern.sum(-1, keepdims=True))


def ngram_attention(pattern: jax.Array) -> jax.Array:
    """bool `(B, L, L)` -> float32 row-stochastic weights; rows with no match are all zero."""
    weights = pattern.astype(jnp.float32)
    return weights / jnp.maximum(weights.sum(-1, keepdims=True), 1.0)


class LatestMatch(NamedTuple):
    """A pattern with at most one key per query (`latest_match`), as indices: the layer reads
    `h[key]` with a gather instead of a `(B, L, L)` matmul (same values; the matmul is most of
    the n-gram layer's cost on a CPU). key int32 `(B, L)`; found bool `(B, L)`, False where the
    query has no match (it reads nothing)."""

    key: jax.Array
    found: jax.Array

    def pattern(self) -> jax.Array:
        """The same as a bool `(B, L, L)` pattern (one True per row at most)."""
        return (jax.nn.one_hot(self.key, self.key.shape[-1], dtype=bool)
                & self.found[..., None])


def read_matches(weights: "jax.Array | LatestMatch", h: jax.Array) -> jax.Array:
    """`P h`: float weights `(B, L, L)` or a `LatestMatch`, and `(B, L, D)` -> `(B, L, D)`."""
    if isinstance(weights, LatestMatch):
        picked = jnp.take_along_axis(h, weights.key[..., None], axis=1)
        return jnp.where(weights.found[..., None], picked, 0.0)
    return jnp.einsum("bij,bjd->bid", weights.astype(h.dtype), h)


class NGramHead(nn.Module):
    """`NGH(h) = W1 h + W2 (P h)`: `(B, L, D)`, weights (`read_matches`) -> `(B, L, D)`.

    `memory`: when decoding, the inputs `(B, S, D)` of every cache slot (these tokens' rows
    written), which the weights `(B, L, S)` read; default `h` itself.
    """

    @nn.compact
    def __call__(self, h: jax.Array, weights: "jax.Array | LatestMatch",
                 memory: jax.Array | None = None) -> jax.Array:
        d_model = h.shape[-1]
        read = read_matches(weights, h if memory is None else memory)
        return nn.Dense(d_model, name="w1")(h) + nn.Dense(d_model, name="w2")(read)


class NGramLayer(nn.Module):
    """`NGL(h) = h + MLP(NGH(h))`, normed like the transformer's blocks (pre- or post-norm).

    `dropout` is the block's residual dropout module (so swept rates reach it too).
    Decoding: `memory` `(B, S, D)` holds the head's inputs at every cache slot; these tokens'
    inputs are written at slots `[cache_index, cache_index + L)` and the weights `(B, L, S)`
    read it. Returns `(x, memory)`, memory None when not decoding.
    """

    mlp_ratio: int
    pre_norm: bool

    @nn.compact
    def __call__(self, x: jax.Array, weights: jax.Array, dropout: Callable,
                 deterministic: bool, memory: jax.Array | None = None,
                 cache_index: jax.Array | None = None) -> tuple[jax.Array, jax.Array | None]:
        d_model = x.shape[-1]
        norm = nn.LayerNorm(name="norm")
        h = norm(x) if self.pre_norm else x
        if memory is not None:
            memory = jax.lax.dynamic_update_slice_in_dim(memory, h.astype(memory.dtype),
                                                         cache_index, axis=1)
        h = NGramHead(name="head")(h, weights, memory)
        h = nn.Dense(self.mlp_ratio * d_model, name="mlp_in")(h)
        h = nn.Dense(d_model, name="mlp_out")(nn.gelu(h))
        x = x + dropout(h, deterministic=deterministic)
        return (x if self.pre_norm else norm(x)), memory


def latest_match(pattern: jax.Array) -> LatestMatch:
    """Keep only each query's most recent match (the largest key index) of a bool `(B, L, L)`
    pattern: a hard induction head that reads the last occurrence."""
    key = jnp.where(pattern, jnp.arange(pattern.shape[-1]), -1).max(-1)
    return LatestMatch(jnp.maximum(key, 0).astype(jnp.int32), key >= 0)


def ngram_weights(ids: jax.Array, ngram_max: int, shuffle: bool = False,
                  shuffle_seed: int = 0, latest: bool = False,
                  queries: jax.Array | None = None) -> list:
    """Attention weights of the 1..ngram_max-gram layers ("up to n"), each float `(B, L, L)`;
    `latest`: each query reads only its most recent match instead of all of them uniformly,
    given as a `LatestMatch` (indices). `queries`: only these rows `(T,)` over all of `ids`'s
    S slots (`ngram_pattern_rows`), each `(B, T, S)`: a decoder's new tokens."""
    if shuffle and queries is not None:
        raise ValueError("shuffled n-gram patterns draw each row from the whole window; they "
                         "cannot be decoded row by row")
    weights = []
    for n in range(1, ngram_max + 1):
        pattern = (ngram_pattern(ids, n) if queries is None
                   else ngram_pattern_rows(ids, queries, n))
        if shuffle:
            pattern = shuffle_pattern(pattern, jax.random.fold_in(jax.random.key(shuffle_seed), n))
        if latest:
            weights.append(latest_match(pattern))
        else:
            weights.append(ngram_attention(pattern))
    return weights


__all__: Sequence[str] = ("NGramIds", "observation_ids", "transition_ids",
                          "observation_return_ids", "register_ngram_ids",
                          "register_ngram_ids_factory", "get_ngram_ids", "config_ngram_ids",
                          "NGramFeature",
                          "token_equality", "ngram_pattern", "ngram_pattern_rows",
                          "shuffle_pattern", "ngram_attention", "NGramHead", "NGramLayer",
                          "ngram_weights", "latest_match", "LatestMatch", "read_matches")
