"""Episode replay: explore at random until an episode pays, then replay its actions.

An in-context RL algorithm for deterministic episodic tasks with a fixed start (the Dark Room
family). It remembers the shortest rewarded episode so far, keyed either by step (`key_by="step"`:
at step k of every later episode take that episode's k-th action) or by cell (`key_by="cell"`,
discrete observations: in cell c take the action that episode last took in c, i.e. its path with
the loops cut out, a function of the cell alone). Unremembered steps or cells, and with
probability eps(t) (decaying linearly over the history) any step, take a uniformly random
available action. The noise keeps exploring, and a noisy episode that pays in fewer steps
replaces the memory, so episodes get shorter over the history.

Unlike the noisy oracle it reads nothing privileged, and what it does never depends on what an
action means: only on which action was taken where. That is what a learner that meets its
actions as fresh random embeddings (Headless-AD) can imitate in context, on any action set.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import uniform_pick


@flax.struct.dataclass
class ReplayState:
    """t: int32 step of the history. step: int32 step within the episode.
    episode: int32 `(K,)` this episode's action per key (step or cell; -1: none yet).
    best: int32 `(K,)` the remembered episode's. best_len: int32 its length (0: none yet)."""

    t: jax.Array
    step: jax.Array
    episode: jax.Array
    best: jax.Array
    best_len: jax.Array


KEYS = ("step", "cell")


#: What `data.source_kwargs` take (core/validation.py `kwargs_of`).
KWARGS = (
    validation.number("eps_start", 0.5, low=0, high=1), validation.number("eps_end", 0.0, low=0, high=1),
    validation.non_negative("decay_fraction", 0.8), validation.choice("key_by", KEYS),
    validation.env_requirement("needs an episodic env with a fixed episode length",
                      lambda env: env.episode_length is not None and not env.host),
    validation.relation(("key_by",), "key_by='cell' needs discrete observations",
               lambda env, key_by: key_by != "cell" or env.discrete_observations,
               lambda env, key_by: "key_by=step", needs="env"),
)


def episode_replay(env, num_steps: int, eps_start: float = 0.5, eps_end: float = 0.0,
                   decay_fraction: float = 0.8, key_by: str = "step") -> "sources.Source":
    """Episode-replay source (see the module docstring).

    Args:
      env: an episodic env with `episode_length` (the most steps an episode can take); with
        `key_by="cell"`, also discrete observations (`num_observations`).
      num_steps: history length; eps decays from eps_start to eps_end over the first
        `decay_fraction * num_steps` steps, then stays at eps_end.
      key_by: "step" or "cell", what the remembered actions are looked up by.
    """
    horizon = getattr(env, "episode_length", None)
    if horizon is None:
        raise ValueError(f"episode_replay needs an episodic env with `episode_length`; "
                         f"{type(env).__name__} has none")
    if key_by not in KEYS:
        raise ValueError(f"episode_replay key_by must be one of {KEYS}, got {key_by!r}")
    if key_by == "cell" and not getattr(env, "discrete_observations", False):
        raise ValueError(f"episode_replay key_by='cell' needs discrete observations; "
                         f"{type(env).__name__} has none")
    size = int(env.num_observations) if key_by == "cell" else int(horizon)
    decay_steps = max(decay_fraction * num_steps, 1e-6)

    def lookup_key(state, obs):
        return jnp.clip(obs if key_by == "cell" else state.step, 0, size - 1)

    def init(key, params):
        del key, params
        empty = jnp.full(size, -1, jnp.int32)
        return ReplayState(jnp.int32(0), jnp.int32(0), empty, empty, jnp.int32(0))

    def act(key, state, obs, env_state, params):
        del env_state
        u = jax.random.uniform(key, (2,))
        eps = eps_start + (eps_end - eps_start) * jnp.minimum(state.t / decay_steps, 1.0)
        random_action = uniform_pick(u[1], params.action_mask)
        remembered = state.best[lookup_key(state, obs)]
        return jnp.where((remembered >= 0) & (u[0] >= eps), remembered, random_action), state

    def update(key, state, tr, params):
        del key, params
        episode = state.episode.at[lookup_key(state, tr.obs)].set(tr.action)
        length = state.step + 1
        improved = (tr.reward > 0) & ((state.best_len == 0) | (length < state.best_len))
        return ReplayState(
            t=state.t + 1,
            step=jnp.where(tr.done, 0, length),
            episode=jnp.where(tr.done, -1, episode),
            best=jnp.where(improved, episode, state.best),
            best_len=jnp.where(improved, length, state.best_len))

    return sources.Source(init, act, update, name="episode_replay")
