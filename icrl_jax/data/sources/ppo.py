"""PPO on device (PureJaxRL style) for continuous-action envs, and its trained policy as a source.

Why our own PPO rather than `brax.training.agents.ppo`: brax's trainer is a host loop (Python
loop over epochs, `pmap`, `jax.device_put_replicated`, which jax 0.10 no longer has) that does
not expose the experience it collects; D4RL's `medium-replay` needs exactly that experience, and
our data layer wants the whole loop as one jitted program on any `ICRLEnv`. A shim would keep the
host loop and a monkey-patch of jax; this file is ~250 lines and has neither.

`train_ppo(env, key, total_steps, config)` runs `num_envs` copies of the env (`vmap`) for
`rollout_steps` steps (`lax.scan`), computes GAE advantages, and takes `epochs x minibatches`
clipped-surrogate Adam steps; a chunk of updates is one jitted `lax.scan`, and the host only loops
over chunks (to stop at `target_return`, D4RL's "medium" policy, and to hand back the recorded
experience). Details, CleanRL's continuous PPO: separate tanh MLPs for actor and critic
(orthogonal init), a state-independent log std, running observation normalisation (clipped to
+-10), advantages normalised per minibatch, global-norm gradient clipping, linear lr decay.
Truncated episodes bootstrap from the value of their final observation; terminated ones do not.
Actions are sampled from the Gaussian and clipped to [-1, 1] by the env (the log-probability is
the unclipped sample's).

`ppo_policy(agent, ...)` is the trained policy as a `ParamSource` (per history: normalise the
observation, sample or take the mean, clip to [-1, 1]), which the rollout driver vmaps and scans.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.core.errors import UserError


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters (CleanRL's MuJoCo defaults, more envs per update for `vmap`)."""

    num_envs: int = 32
    rollout_steps: int = 64  # per env per update: num_envs * rollout_steps steps per update
    epochs: int = 10
    minibatches: int = 32
    learning_rate: float = 3e-4
    anneal_lr: bool = True
    discount: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    entropy_coef: float = 0.0
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    reward_scale: float = 0.1  # rewards x this for learning (values stay O(10)); returns unscaled
    hidden: tuple[int, ...] = (64, 64)

    def validate(self) -> None:
        batch = self.num_envs * self.rollout_steps
        for name in ("num_envs", "rollout_steps", "epochs", "minibatches"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"ppo {name} must be >= 1, got {getattr(self, name)}")
        if batch % self.minibatches:
            raise UserError(f"ppo num_envs * rollout_steps = {batch} must divide into "
                            f"minibatches = {self.minibatches}")


#: What `data.source_kwargs` of the `ppo` source (and the locomotion builder's PPO) take:
#: `PPOConfig`'s fields and the run's (core/validation.py `kwargs_of`).
KWARGS = (
    validation.positive_int("num_envs", 32), validation.positive_int("rollout_steps", 64),
    validation.positive_int("epochs", 10), validation.positive_int("minibatches", 32),
    validation.positive("learning_rate", 3e-4), validation.boolean("anneal_lr"),
    validation.number("discount", 0.99, low=0, high=1), validation.number("gae_lambda", 0.95, low=0, high=1),
    validation.positive("clip_eps", 0.2), validation.non_negative("entropy_coef", 0.0),
    validation.non_negative("value_coef", 0.5), validation.positive("max_grad_norm", 0.5),
    validation.positive("reward_scale", 0.1), validation.int_tuple("hidden", "'(64, 64)'", nonempty=True),
    validation.positive_int("train_steps", 1_000_000), validation.integer("seed", 0),
    validation.optional(validation.number("target_return", 1000.0)), validation.boolean("deterministic"),
    validation.relation(("num_envs", "rollout_steps", "minibatches"),
               "data.source_kwargs.num_envs x rollout_steps must divide into minibatches",
               lambda envs, steps, minibatches: (envs * steps) % minibatches == 0,
               lambda envs, steps, minibatches: f"minibatches={math.gcd(envs * steps, 32)}"),
    validation.env_requirement("needs a JAX-native env with continuous actions",
                      lambda env: env.continuous_actions and not env.host),
)


class ActorCritic(nn.Module):
    """obs float32 `(..., obs_dim)` (normalised) -> action mean `(..., d)`, log std `(d,)`,
    value `(...)`."""

    action_dim: int
    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        def mlp(x, out, scale, name):
            for i, h in enumerate(self.hidden):
                x = nn.tanh(nn.Dense(h, kernel_init=nn.initializers.orthogonal(math.sqrt(2)),
                                     name=f"{name}_{i}")(x))
            return nn.Dense(out, kernel_init=nn.initializers.orthogonal(scale),
                            name=f"{name}_out")(x)

        mean = mlp(x, self.action_dim, 0.01, "actor")  # small init: near-zero initial actions
        value = mlp(x, 1, 1.0, "critic")[..., 0]
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return mean, log_std, value


def _normalise(obs, stats):
    return jnp.clip((obs - stats["mean"]) / jnp.sqrt(stats["var"] + 1e-8), -10.0, 10.0)


def _update_stats(stats, batch):
    """Running mean / variance (Chan et al.'s parallel merge) with a batch `(B, obs_dim)`."""
    n = jnp.float32(batch.shape[0])
    mean, var = batch.mean(0), batch.var(0)
    total = stats["count"] + n
    delta = mean - stats["mean"]
    new_mean = stats["mean"] + delta * n / total
    m2 = stats["var"] * stats["count"] + var * n + delta ** 2 * stats["count"] * n / total
    return {"mean": new_mean, "var": m2 / total, "count": total}


def _log_prob(mean, log_std, action):
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z ** 2 - log_std - 0.5 * math.log(2 * math.pi), -1)


class PPO:
    """PPO for one continuous-action `ICRLEnv` and config (see the module docstring)."""

    def __init__(self, env, config: PPOConfig = PPOConfig(), total_steps: int = 1_000_000):
        if not env.continuous_actions:
            raise UserError(f"ppo needs a continuous-action env; {type(env).__name__} has "
                            f"discrete actions")
        config.validate()
        self.env, self.config = env, config
        self.net = ActorCritic(env.action_dim, tuple(config.hidden))
        self.steps_per_update = config.num_envs * config.rollout_steps
        self.num_updates = max(1, int(total_steps) // self.steps_per_update)
        lr = config.learning_rate
        if config.anneal_lr:  # linear decay to 0 over the planned updates (CleanRL)
            n_opt = self.num_updates * config.epochs * config.minibatches
            lr = optax.linear_schedule(config.learning_rate, 0.0, n_opt)
        self.optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                                     optax.adam(lr, eps=1e-5))
        self.params = env.task_params(np.zeros(config.num_envs, np.int32))

    def init(self, key) -> dict:
        """Train state: network params, optimiser state, observation statistics, the envs'
        states and observations, per-env running episode returns."""
        k_net, k_env, key = jax.random.split(key, 3)
        obs_dim = self.env.observation_shape[0]
        net_params = self.net.init(k_net, jnp.zeros((obs_dim,), jnp.float32))
        obs, env_state = jax.vmap(self.env.reset)(
            jax.random.split(k_env, self.config.num_envs), self.params)
        stats = {"mean": jnp.zeros(obs_dim, jnp.float32), "var": jnp.ones(obs_dim, jnp.float32),
                 "count": jnp.float32(1e-4)}
        return {"net": net_params, "opt": self.optimizer.init(net_params), "stats": stats,
                "env_state": env_state, "obs": obs, "key": key,
                "ep_return": jnp.zeros(self.config.num_envs, jnp.float32)}

    def _rollout(self, state):
        cfg, env = self.config, self.env

        def step(carry, key):
            env_state, obs, ep_return = carry
            k_act, k_env = jax.random.split(key)
            x = _normalise(obs, state["stats"])
            mean, log_std, value = self.net.apply(state["net"], x)
            action = mean + jnp.exp(log_std) * jax.random.normal(k_act, mean.shape)
            logp = _log_prob(mean, log_std, action)
            next_obs, env_state, reward, term, trunc, info = jax.vmap(env.transition)(
                jax.random.split(k_env, cfg.num_envs), env_state, action, self.params)
            final = info["final_observation"]
            done = term | trunc
            ep_return = ep_return + reward
            out = dict(obs=obs, x=x, action=action, clipped=jnp.clip(action, -1.0, 1.0),
                       logp=logp, value=value, reward=reward, terminated=term, truncated=trunc,
                       final=final, final_x=_normalise(final, state["stats"]),
                       finished_return=jnp.where(done, ep_return, 0.0))
            return (env_state, next_obs, jnp.where(done, 0.0, ep_return)), out

        key, k_steps = jax.random.split(state["key"])
        (env_state, obs, ep_return), traj = jax.lax.scan(
            step, (state["env_state"], state["obs"], state["ep_return"]),
            jax.random.split(k_steps, cfg.rollout_steps))
        return dict(state, env_state=env_state, obs=obs, ep_return=ep_return, key=key), traj

    def _advantages(self, state, traj):
        cfg = self.config
        _, _, final_value = self.net.apply(state["net"], traj["final_x"])
        reward = traj["reward"] * cfg.reward_scale
        not_term = 1.0 - traj["terminated"].astype(jnp.float32)
        not_done = 1.0 - (traj["terminated"] | traj["truncated"]).astype(jnp.float32)
        delta = reward + cfg.discount * not_term * final_value - traj["value"]

        def back(next_adv, xs):
            d, nd = xs
            adv = d + cfg.discount * cfg.gae_lambda * nd * next_adv
            return adv, adv

        _, adv = jax.lax.scan(back, jnp.zeros(cfg.num_envs, jnp.float32), (delta, not_done),
                              reverse=True)
        return adv, adv + traj["value"]

    def _loss(self, net_params, batch):
        cfg = self.config
        mean, log_std, value = self.net.apply(net_params, batch["x"])
        logp = _log_prob(mean, log_std, batch["action"])
        ratio = jnp.exp(logp - batch["logp"])
        adv = (batch["adv"] - batch["adv"].mean()) / (batch["adv"].std() + 1e-8)
        policy_loss = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - cfg.clip_eps,
                                                         1 + cfg.clip_eps) * adv).mean()
        value_loss = 0.5 * ((value - batch["ret"]) ** 2).mean()
        entropy = jnp.sum(log_std + 0.5 * math.log(2 * math.pi * math.e))
        return policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy

    def update(self, state, _=None):
        """One PPO update: rollout, GAE, epochs x minibatches of Adam steps. Returns the new
        state and this update's record (its experience and the returns of episodes it ended)."""
        cfg = self.config
        state, traj = self._rollout(state)
        adv, ret = self._advantages(state, traj)
        flat = jax.tree.map(lambda a: a.reshape((self.steps_per_update,) + a.shape[2:]),
                            dict(x=traj["x"], action=traj["action"], logp=traj["logp"],
                                 adv=adv, ret=ret))
        grad_fn = jax.grad(self._loss)

        def epoch(carry, key):
            net, opt = carry
            perm = jax.random.permutation(key, self.steps_per_update)
            mbs = jax.tree.map(lambda a: a[perm].reshape((cfg.minibatches, -1) + a.shape[1:]),
                               flat)

            def minibatch(carry, mb):
                net, opt = carry
                updates, opt = self.optimizer.update(grad_fn(net, mb), opt, net)
                return (optax.apply_updates(net, updates), opt), None

            return jax.lax.scan(minibatch, (net, opt), mbs)[0], None

        key, k_epochs = jax.random.split(state["key"])
        (net, opt), _ = jax.lax.scan(epoch, (state["net"], state["opt"]),
                                     jax.random.split(k_epochs, cfg.epochs))
        # Statistics move after the update, so the minibatches saw the rollout's normalisation.
        stats = _update_stats(state["stats"], traj["obs"].reshape(self.steps_per_update, -1))
        done = traj["terminated"] | traj["truncated"]
        record = dict(observations=traj["obs"], actions=traj["clipped"], rewards=traj["reward"],
                      terminated=traj["terminated"], truncated=traj["truncated"],
                      final_observations=traj["final"],
                      return_sum=traj["finished_return"].sum(), episodes=done.sum())
        return dict(state, net=net, opt=opt, stats=stats, key=key), record

    @functools.partial(jax.jit, static_argnums=(0, 2, 3))
    def run(self, state, num_updates: int, record: bool):
        """`num_updates` updates as one program; per update the mean return of the episodes it
        ended (NaN if none) and, with `record`, its experience `(U, T, num_envs, ...)`."""

        def body(state, _):
            state, rec = self.update(state)
            mean = rec["return_sum"] / jnp.maximum(rec["episodes"], 1)
            out = {"mean_return": jnp.where(rec["episodes"] > 0, mean, jnp.nan),
                   "episodes": rec["episodes"]}
            if record:
                out.update({k: v for k, v in rec.items() if k not in ("return_sum", "episodes")})
            return state, out

        return jax.lax.scan(body, state, None, length=num_updates)


def plan_chunks(total_steps: int, config: PPOConfig, chunk_updates: int) -> tuple[int, int]:
    """(number of chunks, updates per chunk): equal chunks of at most `chunk_updates` updates
    covering `total_steps` (at least one update), so every chunk reuses one compiled program."""
    updates = max(1, -(-int(total_steps) // (config.num_envs * config.rollout_steps)))
    num_chunks = -(-updates // max(1, int(chunk_updates)))
    return num_chunks, -(-updates // num_chunks)


def train_ppo(env, key, total_steps: int, config: PPOConfig = PPOConfig(), *,
              target_return: float | None = None, chunk_updates: int = 50,
              record: bool = False) -> tuple[PPO, dict, dict]:
    """Train PPO on `env` for about `total_steps` env steps.

    The updates run in equal chunks of at most `chunk_updates` (`plan_chunks`: one compiled
    program), so the total rounds up to whole updates and chunks. With `target_return`, training
    stops after the first chunk whose last `min(10, chunk)` updates' episodes average at least
    that return. Returns `(ppo, state, log)`: the `PPO` (its `run` continues training), the train
    state (`agent_of(state)` is the policy) and host numpy arrays per update: `mean_return`
    `(U,)` (NaN where no episode ended), `episodes` `(U,)`, `steps` `(U,)` (cumulative env
    steps); with `record`, also each update's experience `(U, rollout_steps, num_envs, ...)`:
    observations, actions (clipped), rewards, terminated, truncated, final_observations.
    """
    num_chunks, chunk = plan_chunks(total_steps, config, chunk_updates)
    ppo = PPO(env, config, num_chunks * chunk * config.num_envs * config.rollout_steps)
    state = ppo.init(key)
    logs = []
    for _ in range(num_chunks):
        state, out = ppo.run(state, chunk, record)
        logs.append(jax.device_get(out))
        if target_return is not None:
            recent = logs[-1]["mean_return"][-min(10, chunk):]
            if np.isfinite(recent).any() and np.nanmean(recent) >= target_return:
                break
    log = {k: np.concatenate([part[k] for part in logs]) for k in logs[0]}
    log["steps"] = ppo.steps_per_update * np.arange(1, len(log["mean_return"]) + 1)
    return ppo, state, log


def agent_of(state: dict) -> dict:
    """What the policy needs of a train state: network params and observation statistics."""
    return {"net": state["net"], "stats": {k: state["stats"][k] for k in ("mean", "var")}}


@dataclasses.dataclass(frozen=True)
class _PolicyBuilder:
    """Hashable `ParamSource.build`: one compiled rollout serves every agent of one shape."""

    action_dim: int
    hidden: tuple[int, ...]
    deterministic: bool

    def __call__(self, agent) -> "sources.Source":
        net = ActorCritic(self.action_dim, self.hidden)

        def init(key, params):
            return ()

        def act(key, state, obs, env_state, params):
            mean, log_std, _ = net.apply(agent["net"], _normalise(obs, agent["stats"]))
            if not self.deterministic:
                mean = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
            return jnp.clip(mean, -1.0, 1.0), state

        def update(key, state, transition, params):
            return state

        return sources.Source(init, act, update, name="ppo")


def ppo_policy(env, agent: dict, config: PPOConfig = PPOConfig(),
               deterministic: bool = False) -> "sources.ParamSource":
    """A trained PPO agent (`agent_of(state)`) as a source: float32 `(action_dim,)` actions in
    [-1, 1], sampled from the Gaussian (or its mean with `deterministic`). State: `()`."""
    return sources.ParamSource(_PolicyBuilder(env.action_dim, tuple(config.hidden),
                                              bool(deterministic)), agent, name="ppo")


def ppo_source(env, train_steps: int = 1_000_000, seed: int = 0,
               target_return: float | None = None, deterministic: bool = False,
               **config: Any) -> "sources.ParamSource":
    """The `ppo` source of the registry: trains PPO on `env` on device (`train_ppo`; `config`
    holds `PPOConfig` fields) and acts with the trained policy."""
    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = sorted(set(config) - fields)
    if unknown:
        raise UserError(f"unknown ppo source_kwargs {unknown}; valid: "
                        f"{sorted(fields | {'train_steps', 'seed', 'target_return', 'deterministic'})}")
    if "hidden" in config:
        config["hidden"] = tuple(config["hidden"])
    cfg = PPOConfig(**config)
    _, state, log = train_ppo(env, jax.random.PRNGKey(seed), int(train_steps), cfg,
                           target_return=target_return)
    return ppo_policy(env, agent_of(state), cfg, deterministic)
