"""Tabular epsilon-greedy Q-learning (the Headless-AD / n-gram-paper grid-world generator).

Q starts uniform in [0, 1) (as in the Headless-AD generator) or at zero; epsilon decays linearly
per *episode* from `eps_start` to `eps_end` over `decay_fraction * num_episodes` episodes. The
with zero init, greedy ties are broken from a random cyclic offset (`rotated_argmax`). The
bootstrap target uses the true next state (not gymnax's auto-reset one) and is cut only on
termination, so time-limit truncation still bootstraps.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import (available_actions, first_argmax, pick_available,
                                          rotated_argmax)


def key_flag_index(num_cells: int) -> Callable:
    """Q-table index (cell, has_key) -> cell + num_cells * has_key, read from the env state."""

    def index(obs, env_state):
        return obs + num_cells * env_state.has_key.astype(jnp.int32)

    return index


#: What `data.source_kwargs` take (core/validation.py `kwargs_of`); a history must span at
#: least one episode (the epsilon schedule counts episodes).
KWARGS = (
    validation.number("lr", 0.3, low=0, high=1, low_open=True), validation.number("discount", 0.9, low=0, high=1),
    validation.number("eps_start", 1.0, low=0, high=1), validation.number("eps_end", 0.0, low=0, high=1),
    validation.number("decay_fraction", 0.9, low=0, high=1, low_open=True),
    validation.choice("q_init", ("uniform", "zeros")), validation.optional(validation.boolean("use_key_flag")),
    validation.env_requirement("needs an episodic env with discrete observations",
                      lambda env: env.discrete_observations and env.episode_length is not None
                      and not env.host),
    validation.relation(("data.num_steps",), lambda env, steps: f"data.num_steps must be at least one "
               f"episode ({env.episode_length} steps) for q_learning",
               lambda env, steps: env.episode_length is None or steps >= env.episode_length,
               lambda env, steps: f"data.num_steps={env.episode_length * 10}", needs="env"),
)


def q_learning(env, num_episodes: int, lr: float = 0.9933, discount: float = 0.6238,
               eps_start: float = 1.0, eps_end: float = 0.0, decay_fraction: float = 0.9,
               q_init: str = "uniform", use_key_flag: bool | None = None) -> "sources.Source":
    """Q-learning source for a discrete-observation env.

    Args:
      env: the environment (for `num_observations`, `num_actions`).
      num_episodes: episodes the history spans (sets the epsilon schedule's length).
      lr, discount: defaults are the Headless-AD composite-darkroom values (lr 0.9933,
        gamma 0.6238); the n-gram paper's grids work with e.g. lr 0.3, gamma 0.9.
      eps_start, eps_end, decay_fraction: linear per-episode epsilon schedule.
      q_init: "uniform" (U[0, 1), Headless-AD) or "zeros".
      use_key_flag: index Q by (cell, has_key) read from the env state (privileged). Default:
        on when the env's state has `has_key` (Key-to-Door).

    State: dict(q float32 `(num_states, A)`, episode int32 `()`, available int32 `(A,)` and
    count int32 `()` (the available actions, for exploration without a per-step cumsum)).
    """
    if env.num_observations is None:
        raise ValueError("q_learning needs an env with discrete observations")
    if q_init not in ("uniform", "zeros"):
        raise ValueError(f"q_init must be 'uniform' or 'zeros', got {q_init!r}")
    num_cells = env.num_observations
    if use_key_flag is None:
        use_key_flag = env.key_flag
    index = key_flag_index(num_cells) if use_key_flag else (lambda obs, env_state: obs)
    num_states = num_cells * (2 if use_key_flag else 1)
    decay_episodes = max(decay_fraction * num_episodes, 1e-6)

    def epsilon(episode):
        frac = jnp.minimum(episode.astype(jnp.float32) / decay_episodes, 1.0)
        return eps_start + (eps_end - eps_start) * frac

    def init(key, params):
        shape = (num_states, params.action_mask.shape[0])
        q = (jax.random.uniform(key, shape, jnp.float32) if q_init == "uniform"
             else jnp.zeros(shape, jnp.float32))
        available, count = available_actions(params.action_mask)
        return {"q": q, "episode": jnp.int32(0), "available": available, "count": count}

    def act(key, state, obs, env_state, params):
        # Three uniforms from one draw: explore coin, random action, tie-break offset.
        u = jax.random.uniform(key, (3,))
        row = state["q"][index(obs, env_state)]
        if q_init == "uniform":
            # Continuous random init: exact ties have probability ~0, so skip the tie-break.
            greedy = first_argmax(jnp.where(params.action_mask, row, -jnp.inf))
        else:
            greedy = rotated_argmax(u[2], row, params.action_mask)
        explore = u[0] < epsilon(state["episode"])
        random_action = pick_available(u[1], state["available"], state["count"])
        return jnp.where(explore, random_action, greedy), state

    def update(key, state, tr, params):
        q = state["q"]
        s, s_next = index(tr.obs, tr.env_state), index(tr.next_obs, tr.next_env_state)
        next_value = jnp.where(params.action_mask, q[s_next], -jnp.inf).max()
        target = tr.reward + discount * jnp.where(tr.terminated, 0.0, next_value)
        q = q.at[s, tr.action].add(lr * (target - q[s, tr.action]))
        return dict(state, q=q, episode=state["episode"] + tr.done.astype(jnp.int32))

    return sources.Source(init, act, update, name="q_learning")
