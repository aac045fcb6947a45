"""Bernoulli and linear contextual bandits with variable arm counts (Headless-AD, sections 4.1-4.2).

Arm counts vary between tasks, so every task is padded to `max_arms` arms and `params.action_mask`
marks the real ones (arms `0..num_arms-1`).

**Episodes.** A bandit has no state to carry between pulls, so each pull is a complete one-step
episode: `step` always returns `terminated=True, truncated=False`. A history of T pulls is then T
episodes of length 1; per-step done flags are harmless for AD tokens, and bootstrapping learners
correctly see a target of just `r`. Because every step ends an episode, `transition` is overridden to
skip gymnax's reset-and-select (bandits are stepped millions of times).

**Regret.** `expected_rewards(state, params)` gives the mean reward of every arm, shape
`(num_actions,)`, with masked arms at `-inf`; `optimal_expected_reward(state, params)` is its max.
For the contextual bandit these depend on the context in `state` (the one the agent observes before
acting), so call them with the state the action was chosen in.

**Arm parity (Bernoulli "train"/"inverse").** The paper numbers arms from 1 and gives the
"odd-numbered arms" mu ~ U(0.5, 1) in 95% of training bandits. We keep that 1-based reading:
arms 1, 3, 5, ... are array **indices 0, 2, 4, ...** (`HIGH_ARM_PARITY = 0`). So:

* ``"train"``: with prob. 0.95 even indices ~ U(0.5, 1) and odd indices ~ U(0, 0.5); with prob. 0.05
  the ranges are swapped.
* ``"inverse"``: odd indices (1-based even arms) ~ U(0.5, 1), even indices ~ U(0, 0.5), always.
* ``"uniform"``: every arm ~ U(0, 1).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from icrl_jax.core import validation
from icrl_jax.envs.base import BANDIT, ICRLEnv
from icrl_jax.envs.tasks import as_task_ids, task_key

#: Index parity (i % 2) of the arms that are "high" (mu in [0.5, 1]) in a non-inverted train task.
HIGH_ARM_PARITY = 0
DISTRIBUTIONS = ("train", "inverse", "uniform")

def _fits_arms(arms, max_arms) -> bool:
    return max_arms is None or max_arms >= (arms if isinstance(arms, int) else arms[1])


#: The arm-count arguments both bandits take (core/validation.py `kwargs_of`).
ARM_KWARGS = (
    validation.pair("arms", "'(4, 20)'"), validation.optional(validation.positive_int("max_arms", 20)),
    validation.integer("seed", 0),
    validation.relation(("arms", "max_arms"), "env.kwargs.max_arms must be at least the largest arm count",
               _fits_arms, lambda arms, max_arms: "max_arms=None"),
)


@struct.dataclass(kw_only=True)
class BernoulliBanditParams(environment.EnvParams):
    """One Bernoulli bandit task.

    means: float32 `(max_arms,)`, reward probability per arm (0 for padded arms).
    action_mask: bool `(max_arms,)`, True for arms `0..num_arms-1`.
    num_arms: int32 `()`.
    max_steps_in_episode: 1 (each pull is an episode).
    """

    means: jax.Array
    action_mask: jax.Array
    num_arms: jax.Array
    #: float32 `(context_dim,)`, the task's fixed observation when `context_dim > 0`, else None.
    context: jax.Array | None = None
    max_steps_in_episode: int = 1


@struct.dataclass(kw_only=True)
class BanditState(environment.EnvState):
    """Bernoulli bandit state: only `time` (always 0 between pulls, every pull is an episode)."""

    time: jax.Array = 0


@struct.dataclass(kw_only=True)
class ContextualBanditParams(environment.EnvParams):
    """One linear contextual bandit task.

    arm_features: float32 `(max_arms, context_dim)` (zero rows for padded arms).
    action_mask: bool `(max_arms,)`. num_arms: int32 `()`.
    """

    arm_features: jax.Array
    action_mask: jax.Array
    num_arms: jax.Array
    max_steps_in_episode: int = 1


@struct.dataclass(kw_only=True)
class ContextualBanditState(environment.EnvState):
    """context: float32 `(context_dim,)`, the context the agent observes and acts on next."""

    context: jax.Array
    time: jax.Array = 0


def _arm_counts(arms: int | tuple[int, int], max_arms: int | None) -> tuple[int, int, int]:
    """Normalise an arm-count spec to `(min_arms, max_count, max_arms)` and validate it."""
    lo, hi = (arms, arms) if isinstance(arms, (int, np.integer)) else tuple(int(a) for a in arms)
    max_arms = hi if max_arms is None else int(max_arms)
    if not 1 <= lo <= hi <= max_arms:
        raise ValueError(f"need 1 <= min arms ({lo}) <= max arms ({hi}) <= max_arms ({max_arms})")
    return int(lo), int(hi), max_arms


def _sample_num_arms(key: jax.Array, lo: int, hi: int) -> jax.Array:
    """Arm count ~ U{lo..hi} (int32 scalar); constant when lo == hi."""
    if lo == hi:
        return jnp.int32(lo)
    return jax.random.randint(key, (), lo, hi + 1, dtype=jnp.int32)


def _one_step_info(obs, terminated, truncated) -> dict[str, Any]:
    """The info gymnax's step would produce for an episode that ends every step."""
    return {"discount": jnp.float32(0.0), "terminated": terminated, "truncated": truncated,
            "final_observation": obs}


class _Bandit(ICRLEnv):
    """Shared arm-count bookkeeping and the one-step-episode fast path."""

    def __init__(self, arms: int | tuple[int, int], max_arms: int | None, seed: int):
        super().__init__()
        self.min_arms, self.max_count, self.max_arms = _arm_counts(arms, max_arms)
        self.seed = int(seed)

    @property
    def num_actions(self) -> int:
        return self.max_arms

    #: Bandit tasks are drawn from a distribution: any int32 id is a task.
    num_tasks = None
    kind = BANDIT

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.max_arms)

    def is_truncated(self, state, params) -> jax.Array:
        # Pulls end by termination, never by a time limit (keeps gymnax's generic step consistent).
        return jnp.bool_(False)

    def _mask(self, num_arms: jax.Array) -> jax.Array:
        return jnp.arange(self.max_arms) < num_arms

    def optimal_expected_reward(self, state, params) -> jax.Array:
        """Best arm's expected reward, float32 `()`: the per-step regret baseline."""
        return jnp.max(self.expected_rewards(state, params))

    def task_params(self, task_ids, **kwargs):
        """Params for task ids: int `()` -> one task, int `(n,)` -> batched params with leading n.

        Deterministic in (seed, task id, constructor options): task `i` draws from
        `fold_in(PRNGKey(seed), i)`. Traceable, so it can also be vmapped or jitted.
        """
        ids = as_task_ids(task_ids, None)
        one = partial(self._task_params_one, **kwargs)
        if ids.ndim == 0:
            return one(ids)
        return jax.vmap(one)(ids.reshape(-1))


class BernoulliBandit(_Bandit):
    """Multi-armed Bernoulli bandit; reward ~ Bernoulli(means[a]) as float32 0/1.

    Args:
      arms: arm count per task: an int (fixed, e.g. 20, 25, 30, 40, 50) or an inclusive range
        `(lo, hi)` sampled uniformly per task (Headless-AD: `(4, 20)`).
      distribution: "train", "inverse" or "uniform" (see the module docstring).
      max_arms: padded action count (default: the largest arm count); larger values let tasks of
        different envs share one action width.
      seed: task-sampling seed.
      flip_prob: share of "train" tasks with the odd/even ranges swapped (paper: 0.05).
      context_dim: 0 (default) or the size of a fixed random observation per task.

    Observations are the constant int32 id 0 (`num_observations=1`): a bandit has no state. With
    `context_dim > 0` they are instead one float32 vector `(context_dim,)` per task, drawn as a
    `ContextualBandit`'s contexts are and shown at every pull: a single-context contextual
    bandit with Bernoulli rewards, on which a model trained on contextual bandits can act
    (Headless-AD appendix D, Figure 9). The arm means are the same either way.
    """

    num_observations = 1
    observation_shape = ()
    #: What `env.kwargs` take (checked before anything is built; core/validation.py).
    KWARGS = ARM_KWARGS + (
        validation.choice("distribution", DISTRIBUTIONS),
        validation.number("flip_prob", 0.05, low=0, high=1), validation.non_negative_int("context_dim", 0))

    def __init__(self, arms: int | tuple[int, int] = (4, 20), distribution: str = "train",
                 max_arms: int | None = None, seed: int = 0, flip_prob: float = 0.05,
                 context_dim: int = 0):
        super().__init__(arms, max_arms, seed)
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {distribution!r}; valid: {DISTRIBUTIONS}")
        if context_dim < 0:
            raise ValueError(f"context_dim must be >= 0, got {context_dim}")
        self.distribution = distribution
        self.flip_prob = float(flip_prob)
        self.context_dim = int(context_dim)
        if self.context_dim:
            self.num_observations = None
            self.observation_shape = (self.context_dim,)

    @property
    def name(self) -> str:
        return "bernoulli_bandit"

    @property
    def default_params(self) -> BernoulliBanditParams:
        return self.task_params(0)

    def params_from_means(self, means, context=None) -> BernoulliBanditParams:
        """Params for explicit arm means, float `(n,)` with n <= max_arms (padded and masked),
        and, when `context_dim > 0`, the observed context `(context_dim,)`."""
        means = jnp.asarray(means, jnp.float32)
        n = means.shape[0]
        if n > self.max_arms:
            raise ValueError(f"{n} arms exceed max_arms={self.max_arms}")
        if self.context_dim and (context is None or np.shape(context) != (self.context_dim,)):
            raise ValueError(f"this bandit observes a context of shape ({self.context_dim},); "
                             f"got {None if context is None else np.shape(context)}")
        padded = jnp.zeros(self.max_arms, jnp.float32).at[:n].set(means)
        return BernoulliBanditParams(
            means=padded, action_mask=self._mask(n), num_arms=jnp.int32(n),
            context=None if not self.context_dim else jnp.asarray(context, jnp.float32))

    def _task_params_one(self, task_id, distribution: str | None = None) -> BernoulliBanditParams:
        distribution = self.distribution if distribution is None else distribution
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {distribution!r}; valid: {DISTRIBUTIONS}")
        k_arms, k_flip, k_mu = jax.random.split(task_key(self.seed, task_id), 3)
        num_arms = _sample_num_arms(k_arms, self.min_arms, self.max_count)
        u = jax.random.uniform(k_mu, (self.max_arms,), jnp.float32)
        parity = jnp.arange(self.max_arms) % 2
        if distribution == "uniform":
            means = u
        else:
            high = parity == HIGH_ARM_PARITY
            if distribution == "train":
                high = high ^ jax.random.bernoulli(k_flip, self.flip_prob)
            else:
                high = ~high
            means = jnp.where(high, 0.5 + 0.5 * u, 0.5 * u)
        mask = self._mask(num_arms)
        context = None
        if self.context_dim:  # from a key of its own: the means equal those without a context
            context = jax.random.normal(jax.random.fold_in(task_key(self.seed, task_id), 1),
                                        (self.context_dim,)) / np.sqrt(self.context_dim)
        return BernoulliBanditParams(means=jnp.where(mask, means, 0.0), action_mask=mask,
                                     num_arms=num_arms, context=context)

    def expected_rewards(self, state, params) -> jax.Array:
        """Mean reward per arm, float32 `(max_arms,)`, `-inf` on masked arms."""
        return jnp.where(params.action_mask, params.means, -jnp.inf)

    def reset_env(self, key, params):
        return self.get_obs(None, params), BanditState(time=jnp.int32(0))

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        """The (constant) observation of any state: int32 0, or the task's context."""
        if not self.context_dim:
            return jnp.int32(0)
        if params is None or params.context is None:
            raise ValueError("a BernoulliBandit with context_dim > 0 observes its params' context; "
                             "use params from this env's task_params")
        return params.context.astype(jnp.float32)

    def step_env(self, key, state, action, params):
        reward = (jax.random.uniform(key) < params.means[action]).astype(jnp.float32)
        return (self.get_obs(state, params), BanditState(time=state.time + 1), reward,
                jnp.bool_(True), {"discount": jnp.float32(0.0)})

    @partial(jax.jit, static_argnames=("self",))
    def transition(self, key, state, action, params):
        # Every pull ends its episode and the reset state is constant, so: one uniform, one gather.
        reward = (jax.random.uniform(key) < params.means[action]).astype(jnp.float32)
        obs, done, not_trunc = self.get_obs(state, params), jnp.bool_(True), jnp.bool_(False)
        return (obs, BanditState(time=jnp.zeros_like(state.time)), reward, done, not_trunc,
                _one_step_info(obs, done, not_trunc))

    def observation_space(self, params=None) -> spaces.Discrete | spaces.Box:
        if self.context_dim:
            return spaces.Box(-jnp.inf, jnp.inf, self.observation_shape, jnp.float32)
        return spaces.Discrete(1)


class ContextualBandit(_Bandit):
    """Linear contextual bandit (Headless-AD 4.2).

    Arm features ~ N(0, I)/sqrt(context_dim) live in params; each step shows a fresh context
    x ~ N(0, I)/sqrt(context_dim) (the float32 observation, shape `(context_dim,)`), and pulling arm a
    pays r ~ N(<x, arm_features[a]>, noise_std^2).

    Args:
      arms: fixed int or inclusive `(lo, hi)` range of arm counts (paper: `(4, 20)`).
      context_dim: context/feature dimension (paper: 2).
      noise_std: reward noise standard deviation (paper: 1).
      max_arms, seed: as for `BernoulliBandit`.
    """

    num_observations = None
    KWARGS = ARM_KWARGS + (validation.positive_int("context_dim", 2), validation.non_negative("noise_std", 1.0))

    def __init__(self, arms: int | tuple[int, int] = (4, 20), context_dim: int = 2,
                 noise_std: float = 1.0, max_arms: int | None = None, seed: int = 0):
        super().__init__(arms, max_arms, seed)
        self.context_dim = int(context_dim)
        self.noise_std = float(noise_std)
        self.observation_shape = (self.context_dim,)
        self._scale = float(1.0 / np.sqrt(self.context_dim))

    @property
    def name(self) -> str:
        return "contextual_bandit"

    @property
    def default_params(self) -> ContextualBanditParams:
        return self.task_params(0)

    def params_from_features(self, arm_features) -> ContextualBanditParams:
        """Params for explicit arm features, float `(n, context_dim)`, padded to max_arms."""
        feats = jnp.asarray(arm_features, jnp.float32)
        n = feats.shape[0]
        if n > self.max_arms or feats.shape[1:] != (self.context_dim,):
            raise ValueError(f"arm_features shape {feats.shape} must be (<= {self.max_arms}, "
                             f"{self.context_dim})")
        padded = jnp.zeros((self.max_arms, self.context_dim), jnp.float32).at[:n].set(feats)
        return ContextualBanditParams(arm_features=padded, action_mask=self._mask(n),
                                      num_arms=jnp.int32(n))

    def _task_params_one(self, task_id) -> ContextualBanditParams:
        k_arms, k_feat = jax.random.split(task_key(self.seed, task_id))
        num_arms = _sample_num_arms(k_arms, self.min_arms, self.max_count)
        feats = self._scale * jax.random.normal(k_feat, (self.max_arms, self.context_dim))
        mask = self._mask(num_arms)
        return ContextualBanditParams(arm_features=jnp.where(mask[:, None], feats, 0.0),
                                      action_mask=mask, num_arms=num_arms)

    def _context(self, key) -> jax.Array:
        return self._scale * jax.random.normal(key, (self.context_dim,), jnp.float32)

    def expected_rewards(self, state, params) -> jax.Array:
        """Mean reward per arm under `state.context`, float32 `(max_arms,)`, `-inf` if masked."""
        return jnp.where(params.action_mask, params.arm_features @ state.context, -jnp.inf)

    def reset_env(self, key, params):
        context = self._context(key)
        return context, ContextualBanditState(context=context, time=jnp.int32(0))

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        """The observation of `state`: its context, float32 `(context_dim,)`."""
        return state.context

    def _pull(self, key, state, action, params):
        k_noise, k_ctx = jax.random.split(key)
        mean = params.arm_features[action] @ state.context
        reward = mean + self.noise_std * jax.random.normal(k_noise, (), jnp.float32)
        return reward, self._context(k_ctx)

    def step_env(self, key, state, action, params):
        reward, context = self._pull(key, state, action, params)
        return (context, ContextualBanditState(context=context, time=state.time + 1), reward,
                jnp.bool_(True), {"discount": jnp.float32(0.0)})

    @partial(jax.jit, static_argnames=("self",))
    def transition(self, key, state, action, params):
        # The next episode's context is drawn here, so no separate reset draw and select is needed.
        reward, context = self._pull(key, state, action, params)
        done, not_trunc = jnp.bool_(True), jnp.bool_(False)
        new_state = ContextualBanditState(context=context, time=jnp.zeros_like(state.time))
        return context, new_state, reward, done, not_trunc, _one_step_info(context, done, not_trunc)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, self.observation_shape, jnp.float32)
