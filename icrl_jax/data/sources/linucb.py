"""LinUCB (Li et al., 2010) for the linear contextual bandit, disjoint per-arm ridge regression.

As in the Headless-AD generator, the learner does not see arm features: each arm a keeps its own
ridge estimate theta_a of E[r | x, a] = <x, theta_a> over the observed context x (d = 2), with
A_a = I + sum x x^T, b_a = sum r x, and pulls argmax_a x.theta_a + alpha sqrt(x^T A_a^-1 x) over
available arms, ties broken at random (all arms tie before any pull).
"""

from __future__ import annotations

import jax.numpy as jnp

from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import masked_argmax


#: What `data.source_kwargs` take (core/validation.py `kwargs_of`).
KWARGS = (
    validation.non_negative("alpha", 1.0), validation.positive("ridge", 1.0),
    validation.env_requirement("needs a bandit with float context observations",
                      lambda env: env.kind == "bandit" and not env.discrete_observations
                      and len(env.observation_shape) == 1),
)


def linucb(context_dim: int, alpha: float = 1.0, ridge: float = 1.0) -> "sources.Source":
    """LinUCB source.

    Args:
      context_dim: d, the size of the float context each step observes.
      alpha: width of the confidence bonus.
      ridge: ridge regulariser (A_a starts at ridge * I).

    State: (A_inv float32 `(num_arms, d, d)`, b float32 `(num_arms, d)`), updated by
    Sherman-Morrison (no matrix inverse per step). Observations must be float contexts `(d,)`.
    """
    d = int(context_dim)
    if d < 1:
        raise ValueError(f"linucb needs float contexts of size >= 1, got context_dim={context_dim}")

    def init(key, params):
        num_arms = params.action_mask.shape[0]
        a_inv = jnp.broadcast_to(jnp.eye(d, dtype=jnp.float32) / ridge, (num_arms, d, d))
        return a_inv, jnp.zeros((num_arms, d), jnp.float32)

    def act(key, state, obs, env_state, params):
        a_inv, b = state
        x = obs.astype(jnp.float32)
        theta = jnp.einsum("aij,aj->ai", a_inv, b)
        width = jnp.sqrt(jnp.maximum(jnp.einsum("i,aij,j->a", x, a_inv, x), 0.0))
        return masked_argmax(key, theta @ x + alpha * width, params.action_mask), state

    def update(key, state, tr, params):
        a_inv, b = state
        x = tr.obs.astype(jnp.float32)
        m = a_inv[tr.action]
        mx = m @ x
        m_new = m - jnp.outer(mx, mx) / (1.0 + x @ mx)
        return a_inv.at[tr.action].set(m_new), b.at[tr.action].add(tr.reward * x)

    return sources.Source(init, act, update, name="linucb")
