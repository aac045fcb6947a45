"""Noisy oracle (noise distillation, Zisman et al. 2024): with probability eps(t) an available
action uniformly at random, otherwise the oracle's action; eps decays linearly over the history.

The oracle is privileged (reads params and env state):
* bandits (envs with `expected_rewards`): the arm with the highest expected reward;
* Dark Room / composite Dark Room: the available action that brings the agent closest to the goal
  (a composite action that passes through the goal wins);
* Key-to-Door: the same, towards the key until it is held, then towards the door.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icrl_jax.core.errors import UserError
from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import first_argmax, uniform_pick


def _distance(env, pos, target_cell):
    return jnp.abs(pos - env.position(target_cell)).sum(-1)


def grid_oracle_action(env, env_state, params) -> jax.Array:
    """Oracle action, int32 `()`, for the Dark Room family (first best available action)."""
    if env.key_flag:
        target = jnp.where(env_state.has_key, params.door, params.key)
    else:
        target = params.goal
    if env.composite_actions:
        # Composite actions: run every row's moves; an action scores 0 if any sub-step hits the
        # target, else the distance where it ends. Stop at the target like the env does.
        def score(moves):
            pos, hit = env_state.pos, jnp.bool_(False)
            for j in range(moves.shape[0]):
                pos = jnp.where(hit, pos, env.move(pos, moves[j]))
                hit = hit | (env.cell(pos) == target)
            return jnp.where(hit, 0, _distance(env, pos, target))

        scores = jax.vmap(score)(params.action_set)
    else:
        atomic = jnp.arange(params.action_mask.shape[0])
        ends = jax.vmap(lambda a: env.move(env_state.pos, a))(atomic)
        # On the target the noop (distance 0) wins: the Dark Room goal pays on every step there,
        # and on the Key-to-Door key cell at an episode's start a noop picks the key up.
        scores = _distance(env, ends, target)
    scores = jnp.where(params.action_mask, scores, jnp.iinfo(jnp.int32).max)
    return first_argmax(-scores)


def _oracle_for(env):
    if env.has_oracle:  # envs that ship their own expert (e.g. the button room)
        return env.expert_action
    if env.kind == "bandit":
        return lambda env_state, params: first_argmax(env.expected_rewards(env_state, params))
    return lambda env_state, params: grid_oracle_action(env, env_state, params)


#: What `data.source_kwargs` of `noisy_oracle` and `noisy_expert` take (core/validation.py).
ORACLE_KWARGS = (
    validation.number("eps_start", 1.0, low=0, high=1), validation.number("eps_end", 0.0, low=0, high=1),
    validation.non_negative("decay_fraction", 0.9),
)
KWARGS = ORACLE_KWARGS + (validation.env_requirement(
    "needs an env with an oracle: a privileged expert, a bandit or a grid world",
    lambda env: not env.host and (env.has_oracle or env.kind == "bandit"
                                  or env.grid_size is not None)),)
EXPERT_KWARGS = ORACLE_KWARGS + (validation.env_requirement(
    "needs an env with a privileged expert", lambda env: env.has_oracle and not env.host),)


def noisy_oracle(env, num_steps: int, eps_start: float = 1.0, eps_end: float = 0.0,
                 decay_fraction: float = 0.9) -> "sources.Source":
    """Noisy-oracle source.

    Args:
      env: the environment (selects the oracle, see the module docstring).
      num_steps: history length; eps decays linearly from eps_start to eps_end over the first
        `decay_fraction * num_steps` steps, then stays at eps_end.

    State: int32 `()` step counter.
    """
    oracle = _oracle_for(env)
    decay_steps = max(decay_fraction * num_steps, 1e-6)

    def init(key, params):
        return jnp.int32(0)

    def act(key, t, obs, env_state, params):
        u = jax.random.uniform(key, (2,))
        eps = eps_start + (eps_end - eps_start) * jnp.minimum(t / decay_steps, 1.0)
        if env.continuous_actions:  # uniform in [-1, 1]^d instead of an available index
            random_action = jax.random.uniform(jax.random.fold_in(key, 1), (env.action_dim,),
                                               jnp.float32, -1.0, 1.0)
        else:
            random_action = uniform_pick(u[1], params.action_mask)
        return jnp.where(u[0] < eps, random_action, oracle(env_state, params)), t

    def update(key, t, tr, params):
        return t + 1

    return sources.Source(init, act, update, name="noisy_oracle")


def noisy_expert(env, num_steps: int, eps_start: float = 1.0, eps_end: float = 0.0,
                 decay_fraction: float = 1.0) -> "sources.Source":
    """Source acting like `env.expert_action` with prob 1 - eps, else uniformly at random.

    eps decays linearly from `eps_start` to `eps_end` over `decay_fraction * num_steps` steps, so
    one history holds episodes of every quality from random to expert: the spread of returns a
    Decision Transformer needs to learn what a return-to-go means. State: int32 `()` step count.
    """
    if not env.has_oracle:
        raise UserError(f"source noisy_expert needs an env with a privileged expert; "
                        f"{type(env).__name__} has none")
    return noisy_oracle(env, num_steps, eps_start, eps_end, decay_fraction)._replace(
        name="noisy_expert")
