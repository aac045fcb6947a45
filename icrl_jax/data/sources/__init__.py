"""Policies as pure functions: the source algorithms whose histories are distilled, and (built
by the methods) trained models acting in context.

A `Source` is three pure, jittable functions over a per-history policy state `S` (any pytree).
They see ONE history (one task); the rollout driver (`data.histories.generate_histories`, and
`run_on_host` for simulators behind the bridge) vmaps them over envs and scans over steps.

* `init(key, env_params) -> S`
* `act(key, S, obs, env_state, env_params) -> (action, S)`: an action (int32 `()`, always an
  available one; float32 `(d,)` for continuous envs) and the state after acting (a transformer
  keeps the token it just decoded; most sources return `S` unchanged).
* `update(key, S, transition, env_params) -> S` with the `Transition` of that step.

Privileged sources (the noisy oracle, Q-learning's key flag on Key-to-Door) may read `env_state`
and `env_params`; the recorded `History` holds only what the learner sees (obs, action, reward,
done). Schedules (epsilon decay) keep their own counters in `S`.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, NamedTuple

import flax.struct
import jax

from icrl_jax.core import validation
from icrl_jax.core.errors import UserError
from icrl_jax.core.registry import Registry


@flax.struct.dataclass
class Transition:
    """One environment step as a learner sees it (per history, no batch axis).

    obs: observation acted on. action: int32 `()`. reward: float32 `()`.
    next_obs: the true next observation (before gymnax's auto-reset replaces it).
    terminated, truncated: bool `()`; done = terminated | truncated ends the episode.
    env_state: state the action was taken in. next_env_state: state after the step, before the
      auto-reset (privileged; equals the reset state for envs that override `transition`).
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    next_obs: Any
    terminated: jax.Array
    truncated: jax.Array
    env_state: Any
    next_env_state: Any

    @property
    def done(self) -> jax.Array:
        return self.terminated | self.truncated


class Source(NamedTuple):
    """A learning algorithm as pure functions (see the module docstring). `name` is for metadata."""

    init: Callable[..., Any]
    act: Callable[..., tuple[jax.Array, Any]]
    update: Callable[..., Any]
    name: str = "source"


class ParamSource(NamedTuple):
    """A source whose functions depend on arrays, such as a trained model's parameters.

    `build(params) -> Source` is called inside the jitted rollout with `params` as traced
    arguments, so the arrays are not baked into the program as constants and one compiled rollout
    serves every parameter value. `build` must be hashable and stable (e.g. a frozen dataclass
    instance) for the compiled rollout to be reused.
    """

    build: Callable[[Any], Source]
    params: Any
    name: str = "param_source"


from icrl_jax.data.sources.episode_replay import episode_replay  # noqa: E402
from icrl_jax.data.sources.grid_explorer import grid_explorer  # noqa: E402
from icrl_jax.data.sources.linucb import linucb  # noqa: E402
from icrl_jax.data.sources.noisy_oracle import grid_oracle_action, noisy_expert, noisy_oracle  # noqa: E402
from icrl_jax.data.sources.noisy_rational import noisy_rational  # noqa: E402
from icrl_jax.data.sources.q_learning import q_learning  # noqa: E402
from icrl_jax.data.sources.thompson import BETA_SAMPLERS, sample_beta, thompson_sampling  # noqa: E402
from icrl_jax.data.sources.uniform import masked_uniform_action, uniform_random  # noqa: E402
from icrl_jax.data.sources.waypoint import waypoint_controller  # noqa: E402
from icrl_jax.data.sources.ppo import ppo_policy, ppo_source, train_ppo  # noqa: E402



#: Source name -> `builder(env, num_steps, kwargs)`; `num_steps` is the history length. A
#: paper's own sources register here from its package.
SOURCES = Registry("source")
for _name, _builder in {
    "thompson_sampling": lambda env, num_steps, kw: thompson_sampling(**kw),
    # d from the env's float observations (a contextual bandit, or a Bernoulli one with context)
    "linucb": lambda env, num_steps, kw: linucb(
        int(env.observation_shape[0]) if env.observation_shape and not env.discrete_observations
        else 0, **kw),
    "q_learning": lambda env, num_steps, kw: q_learning(
        env, num_episodes=num_steps // env.episode_length, **kw),
    "noisy_oracle": lambda env, num_steps, kw: noisy_oracle(env, num_steps=num_steps, **kw),
    "episode_replay": lambda env, num_steps, kw: episode_replay(env, num_steps=num_steps, **kw),
    "grid_explorer": lambda env, num_steps, kw: grid_explorer(env, **kw),
    "uniform_random": lambda env, num_steps, kw: uniform_random(
        **kw, action_dim=env.action_dim if env.continuous_actions else 0),
    "noisy_expert": lambda env, num_steps, kw: noisy_expert(env, num_steps, **kw),
    "waypoint": lambda env, num_steps, kw: waypoint_controller(env, **kw),
    "noisy_rational": lambda env, num_steps, kw: noisy_rational(env, **kw),
    # trains PPO on device first (data/sources/ppo.py), then acts with the trained policy
    "ppo": lambda env, num_steps, kw: ppo_source(env, **kw),
}.items():
    SOURCES.register(_name, _builder)

#: The module declaring each source's `data.source_kwargs` (its `KWARGS`, beside the source).
_DECLARED_IN = {"thompson_sampling": "thompson", "linucb": "linucb", "q_learning": "q_learning",
                "noisy_oracle": "noisy_oracle", "episode_replay": "episode_replay",
                "grid_explorer": "grid_explorer", "waypoint": "waypoint",
                "noisy_rational": "noisy_rational", "ppo": "ppo"}
for _name in SOURCES._parts:
    _module = _DECLARED_IN.get(_name)
    validation.kwargs_of("source", _name, () if _module is None else
                importlib.import_module(f"icrl_jax.data.sources.{_module}").KWARGS)
validation.kwargs_of("source", "noisy_expert",
            importlib.import_module("icrl_jax.data.sources.noisy_oracle").EXPERT_KWARGS)
# Recurrent PPO on XLand rulesets is no per-history Source: data.builder='xland_ppo' runs it.
validation.kwargs_of("source", "xland_ppo",
            importlib.import_module("icrl_jax.data.sources.xland_ppo").KWARGS)


def register(name: str, builder: Callable, kwargs: tuple = ()) -> None:
    """Register a source `builder(env, num_steps, kwargs)` under `name`, with what its
    `data.source_kwargs` take (`core.validation.kwargs_of`; none by default)."""
    SOURCES.register(name, builder)
    validation.kwargs_of("source", name, kwargs)


def build_source(name: str, env, num_steps: int, kwargs: dict[str, Any]):
    """The source `name` for `env` and histories of `num_steps` steps. On a host simulator the
    source is the env's own privileged oracle (a bridge `HostPolicy`); validation has checked
    that `name` is the one the env's spec gives its oracle (`ORACLE_SOURCE`)."""
    if env.host:
        return env.oracle(num_steps, **dict(kwargs))
    builder = SOURCES.get(name)
    try:
        return builder(env, num_steps, dict(kwargs))
    except (TypeError, ValueError) as e:  # what the declared kwargs cannot say
        if isinstance(e, UserError):
            raise
        raise UserError(f"bad data.source_kwargs for source {name!r}: {e}") from e


__all__ = [
    "SOURCES", "build_source", "register", "Source", "ParamSource", "Transition", "thompson_sampling",
    "sample_beta", "BETA_SAMPLERS", "linucb", "q_learning", "noisy_oracle", "episode_replay",
    "grid_explorer", "grid_oracle_action", "uniform_random", "masked_uniform_action",
    "noisy_expert", "waypoint_controller", "train_ppo", "ppo_policy", "ppo_source",
]
