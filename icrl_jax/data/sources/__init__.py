"""Source algorithms whose learning histories are distilled, as pure functions.

A `Source` is three pure, jittable functions over a per-history learner state `S` (any pytree).
They see ONE history (one task); `generate_histories` vmaps them over tasks and scans over steps.

* `init(key, env_params) -> S`
* `act(key, S, obs, env_state, env_params) -> action` (int32 `()`, always an available action)
* `update(key, S, transition, env_params) -> S` with a `Transition` of that step.

Privileged sources (the noisy oracle, Q-learning's key flag on Key-to-Door) may read `env_state`
and `env_params`; the recorded `History` holds only what the learner sees (obs, action, reward,
done). Schedules (epsilon decay) keep their own counters in `S`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flax.struct
import jax


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
    act: Callable[..., jax.Array]
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
from icrl_jax.data.sources.linucb import linucb  # noqa: E402
from icrl_jax.data.sources.noisy_oracle import grid_oracle_action, noisy_oracle  # noqa: E402
from icrl_jax.data.sources.q_learning import q_learning  # noqa: E402
from icrl_jax.data.sources.thompson import BETA_SAMPLERS, sample_beta, thompson_sampling  # noqa: E402
from icrl_jax.data.sources.uniform import masked_uniform_action, uniform_random  # noqa: E402

__all__ = ["Source", "ParamSource", "Transition", "thompson_sampling", "sample_beta", "BETA_SAMPLERS", "linucb",
           "q_learning", "noisy_oracle", "episode_replay", "grid_oracle_action", "uniform_random",
           "masked_uniform_action"]
