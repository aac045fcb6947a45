"""The DPT paper's bandits: Gaussian-reward arms, its pretraining behaviour and its comparison
algorithms, as a registered env and registered sources.

* `gaussian_bandit`: arm means ~ U(0, 1), reward = mean + noise * N(0, 1) (the paper's 5 arms,
  noise 0.3). Regret is scored on the means, as for every bandit here.
* `dirichlet_mixture` (the paper's pretraining data): each history draws arm probabilities
  (1 - c) * Dirichlet(1) + c * (a point mass on a random arm), c uniform on {0, 0.1, ..., 1},
  and pulls from them at every step: datasets from balanced to all on one arm.
* `empirical_mean`, `ucb`, `lcb`, `gaussian_thompson`: the paper's comparison algorithms on the
  arms' pull counts n and reward sums. Empirical mean is sum / max(1, n); UCB adds
  c / max(1, sqrt(n)) (c = 1), LCB subtracts it (c = 0.8); online (`untried_first`) an arm never
  pulled is pulled first. Thompson sampling keeps a Gaussian posterior per arm (prior
  N(0.5, 1/12), known noise) and pulls the argmax of one draw per arm, or, with `draws` > 1,
  the arm that is the argmax of most of that many draws (the paper's offline variant).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from icrl_jax import envs
from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import first_argmax
from icrl_jax.envs.bandits import ARM_KWARGS, BanditState, BernoulliBandit


class GaussianBandit(BernoulliBandit):
    """Multi-armed bandit with Gaussian rewards: means ~ U(0, 1) per task (`BernoulliBandit`'s
    "uniform" distribution), reward = means[a] + noise * N(0, 1).

    Args:
      arms: arm count (an int, or an inclusive range sampled per task).
      noise: the rewards' standard deviation (the paper: 0.3).
      max_arms, seed: as `BernoulliBandit`'s.
    """

    #: What `env.kwargs` take (core/validation.py): not the Bernoulli arms' distribution.
    KWARGS = ARM_KWARGS + (validation.non_negative("noise", 0.3),)

    def __init__(self, arms: int | tuple[int, int] = 5, noise: float = 0.3,
                 max_arms: int | None = None, seed: int = 0):
        super().__init__(arms, distribution="uniform", max_arms=max_arms, seed=seed)
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.noise = float(noise)

    @property
    def name(self) -> str:
        return "gaussian_bandit"

    def _reward(self, key, action, params) -> jax.Array:
        return (params.means[action] + self.noise * jax.random.normal(key)).astype(jnp.float32)

    def step_env(self, key, state, action, params):
        return (self.get_obs(state, params), BanditState(time=state.time + 1),
                self._reward(key, action, params), jnp.bool_(True), {"discount": jnp.float32(0.0)})

    @partial(jax.jit, static_argnames=("self",))
    def transition(self, key, state, action, params):
        # Every pull ends its episode, as in BernoulliBandit.transition: no reset to select.
        obs, done, not_truncated = self.get_obs(state, params), jnp.bool_(True), jnp.bool_(False)
        info = {"discount": jnp.float32(0.0), "terminated": done, "truncated": not_truncated,
                "final_observation": obs}
        return (obs, BanditState(time=jnp.zeros_like(state.time)),
                self._reward(key, action, params), done, not_truncated, info)


envs.register("gaussian_bandit", GaussianBandit)


def dirichlet_mixture() -> sources.Source:
    """The paper's pretraining behaviour (module docstring). State: the arm probabilities."""

    def init(key, params):
        mix_key, arm_key, weights_key = jax.random.split(key, 3)
        mask = params.action_mask
        cov = jax.random.randint(mix_key, (), 0, 11).astype(jnp.float32) / 10.0
        gamma = jnp.where(mask, jax.random.gamma(weights_key, 1.0, mask.shape), 0.0)
        dirichlet = gamma / jnp.maximum(gamma.sum(), 1e-12)
        point = jax.random.categorical(arm_key, jnp.where(mask, 0.0, -jnp.inf))
        return (1.0 - cov) * dirichlet + cov * jax.nn.one_hot(point, mask.shape[0])

    def act(key, probs, obs, env_state, params):
        logits = jnp.where(params.action_mask & (probs > 0), jnp.log(probs), -jnp.inf)
        return jax.random.categorical(key, logits).astype(jnp.int32), probs

    def update(key, probs, transition, params):
        return probs

    return sources.Source(init, act, update, name="dirichlet_mixture")


def _counts_init(key, params):
    zeros = jnp.zeros(params.action_mask.shape, jnp.float32)
    return zeros, zeros  # pulls and reward sums per arm


def _counts_update(key, state, transition, params):
    counts, sums = state
    return counts.at[transition.action].add(1.0), sums.at[transition.action].add(transition.reward)


def _index_policy(index, untried_first: bool, name: str) -> sources.Source:
    """Pull the available arm of highest `index(counts, sums)` (float32 `(A,)`), or with
    `untried_first` the first available arm never pulled."""

    def act(key, state, obs, env_state, params):
        counts, sums = state
        values = jnp.where(params.action_mask, index(counts, sums), -jnp.inf)
        untried = params.action_mask & (counts == 0)
        if untried_first:
            values = jnp.where(untried.any(), jnp.where(untried, 0.0, -jnp.inf), values)
        return first_argmax(values), state

    return sources.Source(_counts_init, act, _counts_update, name=name)


def _means(counts, sums):
    return sums / jnp.maximum(counts, 1.0)


def _bonus(counts, scale):
    return scale / jnp.maximum(jnp.sqrt(counts), 1.0)


def empirical_mean(untried_first: bool = True) -> sources.Source:
    return _index_policy(_means, untried_first, "empirical_mean")


def ucb(bonus: float = 1.0, untried_first: bool = True) -> sources.Source:
    return _index_policy(lambda n, s: _means(n, s) + _bonus(n, bonus), untried_first, "ucb")


def lcb(bonus: float = 0.8, untried_first: bool = False) -> sources.Source:
    return _index_policy(lambda n, s: _means(n, s) - _bonus(n, bonus), untried_first, "lcb")


def gaussian_posterior(counts, sums, noise: float, prior_mean: float, prior_var: float):
    """Each arm's Gaussian posterior (mean, variance), float32 `(A,)`: a N(prior_mean,
    prior_var) prior on its mean and N(0, noise^2) reward noise; arms never pulled keep the
    prior."""
    noise_var = max(noise, 1e-6) ** 2
    weight = noise_var / (noise_var + counts * prior_var)  # of the prior mean
    mean = weight * prior_mean + (1.0 - weight) * _means(counts, sums)
    variance = 1.0 / (1.0 / prior_var + counts / noise_var)
    return mean, variance


def gaussian_thompson(noise: float, prior_mean: float = 0.5, prior_var: float = 1.0 / 12.0,
                      draws: int = 1) -> sources.Source:
    """Thompson sampling with Gaussian posteriors (module docstring); `noise`: the rewards'
    standard deviation it assumes."""
    if draws < 1:
        raise ValueError(f"gaussian_thompson draws must be >= 1, got {draws}")

    def act(key, state, obs, env_state, params):
        mean, variance = gaussian_posterior(*state, noise, prior_mean, prior_var)
        samples = mean + jnp.sqrt(variance) * jax.random.normal(key, (draws,) + mean.shape)
        best = jax.vmap(first_argmax)(jnp.where(params.action_mask, samples, -jnp.inf))
        votes = jnp.zeros(mean.shape, jnp.float32).at[best].add(1.0)
        return first_argmax(jnp.where(params.action_mask, votes, -jnp.inf)), state

    return sources.Source(_counts_init, act, _counts_update, name="gaussian_thompson")


def _noise_of(env, kwargs: dict) -> dict:
    """`gaussian_thompson`'s kwargs, with the env's reward noise unless they name one."""
    if "noise" not in kwargs:
        if not isinstance(env, GaussianBandit):
            raise ValueError(f"gaussian_thompson needs data.source_kwargs.noise on "
                             f"{type(env).__name__} (a GaussianBandit supplies its own)")
        kwargs = dict(kwargs, noise=env.noise)
    return kwargs


#: What each source needs of the env: arms (an action mask) and one pull a step.
_NEEDS_ARMS = validation.env_requirement(
    "needs a bandit (every step one pull of an arm)",
    lambda env: env.kind == "bandit" and not env.continuous_actions)
_UNTRIED_FIRST = validation.boolean("untried_first")

#: name -> (builder, what its `data.source_kwargs` take).
for _name, (_builder, _kwargs) in {
    "dirichlet_mixture": (lambda env, num_steps, kw: dirichlet_mixture(**kw), ()),
    "empirical_mean": (lambda env, num_steps, kw: empirical_mean(**kw), (_UNTRIED_FIRST,)),
    "ucb": (lambda env, num_steps, kw: ucb(**kw),
            (validation.non_negative("bonus", 1.0), _UNTRIED_FIRST)),
    "lcb": (lambda env, num_steps, kw: lcb(**kw),
            (validation.non_negative("bonus", 0.8), _UNTRIED_FIRST)),
    "gaussian_thompson": (
        lambda env, num_steps, kw: gaussian_thompson(**_noise_of(env, kw)),
        (validation.non_negative("noise", 0.3), validation.number("prior_mean", 0.5),
         validation.positive("prior_var", 0.08), validation.positive_int("draws", 1))),
}.items():
    sources.register(_name, _builder, _kwargs + (_NEEDS_ARMS,))
