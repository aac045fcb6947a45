"""Noisy-rational expert (Uni[MASK] App. E): p(a) proportional to exp(beta * C(a)).

C(a) = +1 if action a brings the agent closer to its current sub-goal, -1 if further, 0
otherwise (`env.subgoal_progress`, privileged: it reads the env state). beta = 1 is the paper's
agent; beta -> infinity approaches the optimal one, beta = 0 is uniform.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icrl_jax.core import validation
from icrl_jax.envs.base import EnvSpec
from icrl_jax.data import sources


def noisy_rational_probs(progress: jax.Array, beta: float | jax.Array = 1.0) -> jax.Array:
    """Action probabilities, float32 `(A,)`, from per-action progress int `(A,)`."""
    return jax.nn.softmax(beta * progress.astype(jnp.float32))


#: What `data.source_kwargs` take (core/validation.py `kwargs_of`).
KWARGS = (validation.number("beta", 1.0),
          validation.env_requirement("needs an env that scores sub-goal progress (Uni[MASK]'s DoorKey)",
                            lambda env: type(env).subgoal_progress
                            is not EnvSpec.subgoal_progress))


def noisy_rational(env, beta: float = 1.0) -> "sources.Source":
    """The noisy-rational expert as a stateless source (state: None)."""
    def init(key, params):
        return None

    def act(key, state, obs, env_state, params):
        logits = beta * env.subgoal_progress(env_state, params).astype(jnp.float32)
        logits = jnp.where(env.action_mask(params), logits, -jnp.inf)
        return jax.random.categorical(key, logits).astype(jnp.int32), state

    def update(key, state, transition, params):
        return state

    return sources.Source(init, act, update, name="noisy_rational")
