"""Thompson sampling for Bernoulli bandits, with fast exact Beta samplers.

Posterior per arm: Beta(1 + successes, 1 + failures); each step draws one sample per arm and pulls
the argmax over available arms. Counts are integers >= 1, which all samplers below rely on.

Beta(a, b) = G_a / (G_a + G_b) with independent G_k ~ Gamma(k, 1). Samplers (`BETA_SAMPLERS`):

* ``"exact"`` (default): Marsaglia-Tsang gamma (shape >= 1), one proposal for every draw, then only
  the rejected draws (~1-5%) are compacted into a small buffer and re-proposed in a `while_loop`
  until every draw is accepted. Exact in distribution (rejection sampling run to acceptance). The
  compaction needs the whole batch, so under `vmap` a `custom_vmap` rule flattens all histories
  into one array: a naive vmapped while loop would redo the full batch ~5 times per step.
* ``"mt_vmap_loop"``: the same sampler without compaction (exact; full-batch rounds).
* ``"mt_fixed"``: `proposals` fixed Marsaglia-Tsang proposals, the last one kept if all are
  rejected: approximate (bias ~ 0.05**proposals), benchmark reference only.
* ``"jax"``: `jax.random.beta` (exact, slow on CPU).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap

from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import first_argmax

BETA_SAMPLERS = ("exact", "mt_vmap_loop", "mt_fixed", "jax")


def _mt_propose(key: jax.Array, shape: jax.Array):
    """One Marsaglia-Tsang proposal per entry of `shape` (float32 `(...)`, >= 1).

    Returns (sample, accepted), both `shape.shape`.
    """
    d = shape - 1.0 / 3.0
    c = jax.lax.rsqrt(9.0 * d)
    k_x, k_u = jax.random.split(key)
    x = jax.random.normal(k_x, shape.shape, jnp.float32)
    u = jax.random.uniform(k_u, shape.shape, jnp.float32, minval=jnp.finfo(jnp.float32).tiny)
    v = 1.0 + c * x
    v3 = v * v * v
    ok = (v > 0) & (jnp.log(u) < 0.5 * x * x + d - d * v3 + d * jnp.log(jnp.maximum(v3, 1e-30)))
    return d * v3, ok


def _gamma_compacted(key: jax.Array, shape: jax.Array, first=None) -> jax.Array:
    """Exact Gamma(shape) draws for a flat float32 `(M,)` array of shapes >= 1.

    `first`: optional (sample, accepted) of a first proposal round made by the caller.
    Rejected entries are gathered (up to `cap` at a time) and re-proposed until all are accepted.
    """
    m = shape.shape[0]
    k_first, k_loop = jax.random.split(key)
    sample, ok = _mt_propose(k_first, shape) if first is None else first
    cap = min(m, m // 16 + 64)  # expected rejections are < 5%: one small pass nearly always

    def cond(carry):
        return ~jnp.all(carry[1])

    def body(carry):
        sample, ok, i = carry
        (idx,) = jnp.nonzero(~ok, size=cap, fill_value=m)
        s_c, ok_c = _mt_propose(jax.random.fold_in(k_loop, i), shape.at[idx].get(mode="fill", fill_value=1.0))
        valid = idx < m
        sample = sample.at[idx].set(jnp.where(ok_c, s_c, sample.at[idx].get(mode="fill", fill_value=0.0)), mode="drop")
        ok = ok.at[idx].set(ok_c | ~valid, mode="drop")
        return sample, ok, i + 1

    sample, _, _ = jax.lax.while_loop(cond, body, (sample, ok, jnp.int32(0)))
    return sample


def _beta_exact_flat(keys: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """Exact Beta(a, b) for keys `(N,)`, a, b float32 `(N, A)`: first round per history key,
    compacted retries from one key derived from all of them."""
    shape = jnp.concatenate([a, b], axis=-1)
    first = jax.vmap(_mt_propose)(keys, shape)
    fold = jax.random.key_data(keys).reshape(keys.shape[0], -1).sum(0, dtype=jnp.uint32)
    k_loop = jax.random.fold_in(keys[0], fold[0] ^ fold[-1])
    g = _gamma_compacted(k_loop, shape.reshape(-1), tuple(x.reshape(-1) for x in first))
    g = g.reshape(shape.shape)
    ga, gb = g[:, : a.shape[1]], g[:, a.shape[1]:]
    return ga / (ga + gb)


@custom_vmap
def _beta_exact(key: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    return _beta_exact_flat(key[None], a[None], b[None])[0]


@_beta_exact.def_vmap
def _beta_exact_vmap(axis_size, in_batched, key, a, b):
    key_b, a_b, b_b = in_batched
    key = key if key_b else jnp.broadcast_to(key, (axis_size,) + key.shape)
    a = a if a_b else jnp.broadcast_to(a, (axis_size,) + a.shape)
    b = b if b_b else jnp.broadcast_to(b, (axis_size,) + b.shape)
    return _beta_exact_flat(key, a, b), True


def _beta_vmap_loop(key, a, b):
    """Exact MT Beta whose while loop redoes all entries until all accepted (no compaction)."""
    shape = jnp.concatenate([a, b], axis=-1)

    def body(carry):
        sample, ok, i = carry
        s, o = _mt_propose(jax.random.fold_in(key, i), shape)
        return jnp.where(ok, sample, s), ok | o, i + 1

    init = (jnp.zeros_like(shape), jnp.zeros(shape.shape, bool), jnp.int32(0))
    g, _, _ = jax.lax.while_loop(lambda c: ~jnp.all(c[1]), body, init)
    ga, gb = g[: a.shape[0]], g[a.shape[0]:]
    return ga / (ga + gb)


def _beta_fixed(key, a, b, proposals: int):
    shape = jnp.concatenate([a, b], axis=-1)
    g, ok = _mt_propose(jax.random.fold_in(key, 0), shape)
    for i in range(1, proposals):
        s, o = _mt_propose(jax.random.fold_in(key, i), shape)
        g, ok = jnp.where(ok, g, s), ok | o
    ga, gb = g[: a.shape[0]], g[a.shape[0]:]
    return ga / (ga + gb)


def sample_beta(key: jax.Array, a: jax.Array, b: jax.Array, sampler: str = "exact",
                proposals: int = 2) -> jax.Array:
    """Beta(a, b) draws, float32 `(A,)`, for float32 `(A,)` parameters >= 1 (vmappable)."""
    if sampler == "exact":
        return _beta_exact(key, a, b)
    if sampler == "mt_vmap_loop":
        return _beta_vmap_loop(key, a, b)
    if sampler == "mt_fixed":
        return _beta_fixed(key, a, b, proposals)
    if sampler == "jax":
        return jax.random.beta(key, a, b, dtype=jnp.float32)
    raise ValueError(f"unknown beta sampler {sampler!r}; valid: {BETA_SAMPLERS}")


#: What `data.source_kwargs` take (core/validation.py `kwargs_of`, registered as the source).
KWARGS = (
    validation.choice("sampler", BETA_SAMPLERS), validation.positive_int("proposals", 2),
    validation.Constraint(("prior",), "must be a Beta prior (alpha0, beta0) of two numbers >= 1",
                 lambda v: isinstance(v, (tuple, list)) and len(v) == 2
                 and all(validation.is_number(x) and x >= 1 for x in v), "'(1.0, 1.0)'"),
    validation.env_requirement("needs a bandit (every step one pull with a 0/1 reward)",
                      lambda env: env.kind == "bandit" and not env.continuous_actions),
)


def thompson_sampling(sampler: str = "exact", proposals: int = 2,
                      prior: tuple[float, float] = (1.0, 1.0)) -> "sources.Source":
    """Thompson sampling for Bernoulli bandits (rewards 0/1).

    Args:
      sampler: Beta sampler, one of `BETA_SAMPLERS` ("exact" unless benchmarking).
      proposals: proposals of the approximate "mt_fixed" sampler.
      prior: Beta prior (alpha0, beta0), each >= 1 (paper: Beta(1, 1)).

    State: (alpha, beta), float32 `(A,)` posterior parameters. Masked arms are never pulled.
    """
    if sampler not in BETA_SAMPLERS:
        raise ValueError(f"unknown beta sampler {sampler!r}; valid: {BETA_SAMPLERS}")
    if min(prior) < 1:
        raise ValueError(f"prior parameters must be >= 1 (Marsaglia-Tsang shapes), got {prior}")
    sample = functools.partial(sample_beta, sampler=sampler, proposals=proposals)

    def init(key, params):
        ones = jnp.ones(params.action_mask.shape, jnp.float32)
        return ones * prior[0], ones * prior[1]

    def act(key, state, obs, env_state, params):
        # Continuous draws tie with probability 0: a plain argmax needs no tie-break randomness.
        theta = jnp.where(params.action_mask, sample(key, *state), -jnp.inf)
        return first_argmax(theta), state

    def update(key, state, tr, params):
        alpha, beta = state
        r = jnp.clip(tr.reward, 0.0, 1.0)
        return alpha.at[tr.action].add(r), beta.at[tr.action].add(1.0 - r)

    return sources.Source(init, act, update, name=f"thompson_sampling[{sampler}]")
