"""Decision Transformer sequence formats: (R_t, s_t, a_t) per step, and M-SAT / MAT action tokens.

A step of the sequence is `P = 2 + k` tokens, in this order:

    R_t (return-to-go), s_t (state), a_t^1 ... a_t^k (action tokens)

with k = 1 for the Decision Transformer (one token for the whole, possibly multi-discrete,
action) and k = n for M-SAT and MAT (one token per component of an n-component action).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def component_one_hots(actions: jax.Array, action_dims: Sequence[int]) -> jax.Array:
    """int `(B, L, n)` components -> float32 `(B, L, n, sum(action_dims))`.

    Component i's one-hot sits in its own slot [offset_i, offset_i + dims_i) of a shared width:
    with one width-max(dims) one-hot for all components, a^1 = 0 and a^2 = 0 would be the same
    token, distinguishable only by position, which M-SAT's no-PE variant removes.
    """
    offsets = jnp.cumsum(jnp.asarray((0,) + tuple(action_dims[:-1]), jnp.int32))
    return jax.nn.one_hot(actions + offsets, sum(action_dims), dtype=jnp.float32)


class TokenMLP(nn.Module):
    """Dense -> GELU -> Dense to `d_model`: the papers' MLP tokeniser for discrete inputs."""

    d_model: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.d_model, name="out")(nn.gelu(nn.Dense(self.d_model, name="hidden")(x)))


class ReturnEmbedding(nn.Module):
    """Scaled return-to-go float `(B, L)` -> `(B, L, D)` by a linear map."""

    d_model: int

    @nn.compact
    def __call__(self, returns_to_go):
        return nn.Dense(self.d_model, name="linear")(returns_to_go[..., None].astype(jnp.float32))


class SingleActionToken(nn.Module):
    """The Decision Transformer action token: one token per step, `(B, L, 1, D)`.

    Discrete / multi-discrete: an MLP of the concatenated component one-hots (the M-SAT paper's
    baseline); continuous (`action_dims` empty): a linear map of the action vector.
    """

    d_model: int
    action_dims: tuple[int, ...]

    @nn.compact
    def __call__(self, actions):
        if not self.action_dims:
            return nn.Dense(self.d_model, name="linear")(actions.astype(jnp.float32))[:, :, None]
        one_hots = component_one_hots(actions, self.action_dims).sum(2)  # disjoint slots
        return TokenMLP(self.d_model, name="mlp")(one_hots)[:, :, None]


class MultiActionTokens(nn.Module):
    """M-SAT (with_state) or MAT action tokens: `(B, L, n, D)`, one per component.

    M-SAT: token_i = MLP([one_hot(a^i_t), e(s_t)]), the step's state embedding concatenated to
    every component (paper, appendix 7.1); MAT: token_i = MLP(one_hot(a^i_t)). One MLP serves
    all components.
    """

    d_model: int
    action_dims: tuple[int, ...]
    with_state: bool = True

    @nn.compact
    def __call__(self, actions, state_embedding):
        """actions int `(B, L, n)`; state_embedding `(B, L, D)` (ignored by MAT)."""
        x = component_one_hots(actions, self.action_dims)
        if self.with_state:
            state = jnp.broadcast_to(state_embedding[:, :, None],
                                     x.shape[:3] + state_embedding.shape[-1:])
            x = jnp.concatenate([x, state.astype(x.dtype)], axis=-1)
        return TokenMLP(self.d_model, name="mlp")(x)


def interleave_step_tokens(returns: jax.Array, states: jax.Array, actions: jax.Array) -> jax.Array:
    """`(B, L, D)`, `(B, L, D)`, `(B, L, k, D)` -> `(B, L * (2 + k), D)` as R_t, s_t, a_t^1..k."""
    batch, length, d_model = states.shape
    stacked = jnp.concatenate([returns[:, :, None], states[:, :, None], actions], axis=2)
    return stacked.reshape(batch, -1, d_model)


def step_attention_mask(step_mask: jax.Array, tokens_per_step: int) -> jax.Array:
    """bool `(B, L)` valid steps -> `(B, 1, L*P, L*P)` causal mask over valid keys.

    A padding token attends to itself only, so that no softmax row is empty (an all-masked row
    would be NaN); valid tokens never see padding.
    """
    valid = jnp.repeat(step_mask, tokens_per_step, axis=1)
    length = valid.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    allowed = causal[None] & (valid[:, None, :] | jnp.eye(length, dtype=bool)[None])
    return allowed[:, None]


def token_labels(timesteps: Sequence[int], num_action_tokens: int) -> list[str]:
    """Labels of a step sequence, as in the M-SAT paper's appendix 7.6.

    `r{t}`, `s{t}`, then `a{t}` for a single action token or `a{i}_{t}` (component i, from 1) for
    multi-action tokens; `timesteps` are the steps' episode timesteps.
    """
    labels = []
    for t in timesteps:
        labels += [f"r{t}", f"s{t}"]
        if num_action_tokens == 1:
            labels.append(f"a{t}")
        else:
            labels += [f"a{i}_{t}" for i in range(1, num_action_tokens + 1)]
    return labels
