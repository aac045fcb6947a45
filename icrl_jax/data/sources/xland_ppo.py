"""Recurrent PPO on XLand-MiniGrid rulesets, one agent per ruleset, all in one jitted program.

XLand-100B's learning histories come from a recurrent PPO agent trained on each ruleset alone
with thousands of envs, whose first 32 envs' interaction is recorded from its first step to its
last, and whose final policy then relabels every recorded step with its own action (the
"expert" actions). This is that source, in PureJaxRL's shape: `make_train(env, config, ...)`
returns `init` and `update`; `update` collects `rollout_steps` steps from each agent's `num_envs`
envs (`lax.scan` over steps, `vmap` over envs), computes GAE advantages and takes
`epochs x minibatches` clipped-surrogate Adam steps, backpropagating through the GRU over the
rollout from its first hidden state. Both are `vmap`ped over rulesets, so R agents train side
by side in one program; the host only loops over chunks of `updates_per_call` updates, to
print progress and move the recorded steps off the device.

The agent (after the XLand-MiniGrid / XLand-100B baselines, written our own way): each cell's
tile and colour embedded, the 5 x 5 view flattened through a dense layer, the previous action
embedded, a GRU whose state is never reset (the XLand-100B collection found it works better; an
agent only ever sees its own ruleset, so its goal and rules, a constant input there, are left
out), then separate tanh heads for the policy and the value.

`train_on_rulesets(env, params, config, num_steps, num_recorded, seed)` runs it on R rulesets
and returns `XLandPPOHistories`: each agent's first `num_recorded` envs, `num_steps` steps each
(observations acted on, actions, rewards, dones), the expert actions, and the mean episode
return per update (a learning curve).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import warnings
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from icrl_jax.core import validation
from icrl_jax.core.errors import UserError
from icrl_jax.core.metrics import episode_returns


@dataclasses.dataclass(frozen=True)
class XLandPPOConfig:
    """PPO hyperparameters (`data.source_kwargs`); the defaults suit a CPU-sized run."""

    num_envs: int = 64  # envs per agent (per ruleset)
    rollout_steps: int = 64  # steps per env per update
    epochs: int = 1
    minibatches: int = 4  # over envs: each minibatch holds num_envs / minibatches whole rollouts
    learning_rate: float = 1e-3
    anneal_lr: bool = True  # linearly to 0 over the run
    discount: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    obs_embedding: int = 16  # features per tile and per colour id
    action_embedding: int = 16
    obs_features: int = 128  # the flattened view's dense layer
    rnn_hidden: int = 256
    head_hidden: int = 256
    updates_per_call: int = 8  # updates per jitted call (the host loops over calls)

    def validate(self) -> None:
        for name in ("num_envs", "rollout_steps", "epochs", "minibatches", "obs_embedding",
                     "action_embedding", "obs_features", "rnn_hidden", "head_hidden", "updates_per_call"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"xland_ppo {name} must be >= 1, got {getattr(self, name)}")
        if self.num_envs % self.minibatches:
            raise UserError(f"xland_ppo num_envs={self.num_envs} must divide into "
                            f"minibatches={self.minibatches}")


#: What `data.source_kwargs` take (core/validation.py).
KWARGS = (
    *(validation.positive_int(name, 16) for name in ("num_envs", "rollout_steps", "epochs", "minibatches",
                                            "obs_embedding", "action_embedding", "obs_features",
                                            "rnn_hidden", "head_hidden", "updates_per_call")),
    validation.positive("learning_rate", 1e-3), validation.boolean("anneal_lr"),
    validation.number("discount", 0.99, low=0, high=1), validation.number("gae_lambda", 0.95, low=0, high=1),
    validation.positive("clip_eps", 0.2), validation.non_negative("entropy_coef", 0.01),
    validation.non_negative("value_coef", 0.5), validation.positive("max_grad_norm", 0.5),
    validation.relation(("num_envs", "minibatches"), "num_envs must divide into minibatches (whole rollouts)",
               lambda envs, minibatches: envs % minibatches == 0,
               lambda envs, minibatches: f"minibatches={max(1, math.gcd(envs, minibatches))}"),
)


class RecurrentActorCritic(nn.Module):
    """Time-major inputs: hidden `(B, H)`, views uint8 `(T, B, 5, 5, 2)`, previous actions int
    `(T, B)` -> (hidden `(B, H)`, logits `(T, B, A)`, values `(T, B)`)."""

    num_actions: int
    config: XLandPPOConfig

    @nn.compact
    def __call__(self, hidden, views, prev_actions):
        c = self.config
        ids = views.astype(jnp.int32)
        cells = jnp.concatenate([nn.Embed(256, c.obs_embedding, name="tile")(ids[..., 0]),
                                 nn.Embed(256, c.obs_embedding, name="colour")(ids[..., 1])], -1)
        view = nn.relu(nn.Dense(c.obs_features, name="view")(cells.reshape(cells.shape[:2] + (-1,))))
        action = nn.Embed(self.num_actions + 1, c.action_embedding, name="prev_action")(prev_actions)
        core = nn.scan(nn.GRUCell, variable_broadcast="params", split_rngs={"params": False})(
            features=c.rnn_hidden, name="gru")
        hidden, out = core(hidden, jnp.concatenate([view, action], -1))

        def head(x, size, scale, name):
            x = nn.tanh(nn.Dense(c.head_hidden, kernel_init=nn.initializers.orthogonal(2.0),
                                 name=f"{name}_hidden")(x))
            return nn.Dense(size, kernel_init=nn.initializers.orthogonal(scale), name=f"{name}_out")(x)

        return hidden, head(out, self.num_actions, 0.01, "policy"), head(out, 1, 1.0, "value")[..., 0]


@flax.struct.dataclass
class Runner:
    """One agent's training state between updates (leading axis R when vmapped)."""

    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array  # uint8 (num_envs, 5, 5, 2)
    prev_action: jax.Array  # int32 (num_envs,)
    hidden: jax.Array  # float32 (num_envs, rnn_hidden)
    key: jax.Array


def make_train(env, config: XLandPPOConfig, num_updates: int, num_recorded: int):
    """`init(key, env_params) -> Runner` and `update(runner, env_params) -> (runner, out)` for
    one agent on one ruleset; `out` holds the recorded envs' steps of the update (time-major
    `(rollout_steps, num_recorded, ...)`) and its `mean_return` (NaN when no episode ended)."""
    c = config
    net = RecurrentActorCritic(env.num_actions, c)
    steps_per_epoch = c.minibatches
    schedule = (optax.linear_schedule(c.learning_rate, 0.0, num_updates * c.epochs * steps_per_epoch)
                if c.anneal_lr else c.learning_rate)
    optimiser = optax.chain(optax.clip_by_global_norm(c.max_grad_norm), optax.adam(schedule, eps=1e-5))
    step_envs = jax.vmap(env.transition, in_axes=(0, 0, 0, None))

    def init(key, env_params) -> Runner:
        k_net, k_env, key = jax.random.split(key, 3)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, c.num_envs), env_params)
        hidden = jnp.zeros((c.num_envs, c.rnn_hidden), jnp.float32)
        prev_action = jnp.zeros((c.num_envs,), jnp.int32)  # XLand-100B's first previous action
        params = net.init(k_net, hidden, obs[None], prev_action[None])
        return Runner(params, optimiser.init(params), env_state, obs, prev_action, hidden, key)

    def loss_fn(params, hidden0, batch, advantages, targets):
        _, logits, values = net.apply(params, hidden0, batch["obs"], batch["prev_action"])
        log_probs = jax.nn.log_softmax(logits)
        log_prob = jnp.take_along_axis(log_probs, batch["action"][..., None], -1)[..., 0]
        ratio = jnp.exp(log_prob - batch["log_prob"])
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -jnp.minimum(ratio * advantages,
                                   jnp.clip(ratio, 1 - c.clip_eps, 1 + c.clip_eps) * advantages).mean()
        value_loss = jnp.square(values - targets).mean()
        entropy = -(jnp.exp(log_probs) * log_probs).sum(-1).mean()
        return policy_loss + c.value_coef * value_loss - c.entropy_coef * entropy

    def update(runner: Runner, env_params):
        # ------------------------------------------------ collect rollout_steps steps
        def env_step(carry, _):
            r = carry
            key, k_act, k_env = jax.random.split(r.key, 3)
            hidden, logits, value = net.apply(r.params, r.hidden, r.obs[None], r.prev_action[None])
            action = jax.random.categorical(k_act, logits[0])
            log_prob = jax.nn.log_softmax(logits[0])[jnp.arange(c.num_envs), action]
            obs, env_state, reward, term, trunc, _ = step_envs(
                jax.random.split(k_env, c.num_envs), r.env_state, action, env_params)
            step = dict(obs=r.obs, prev_action=r.prev_action, action=action, log_prob=log_prob,
                        value=value[0], reward=reward, done=term | trunc, terminated=term)
            return r.replace(env_state=env_state, obs=obs, prev_action=action, hidden=hidden, key=key), step

        start = runner
        runner, batch = jax.lax.scan(env_step, runner, None, length=c.rollout_steps)

        # ------------------------------------------------ advantages (GAE)
        _, _, last_value = net.apply(runner.params, runner.hidden, runner.obs[None], runner.prev_action[None])

        def gae_step(carry, step):
            advantage, next_value = carry
            # Truncated episodes are treated as ended (XLand-100B's collection does the same).
            delta = step["reward"] + c.discount * next_value * (1 - step["done"]) - step["value"]
            advantage = delta + c.discount * c.gae_lambda * (1 - step["done"]) * advantage
            return (advantage, step["value"]), advantage

        _, advantages = jax.lax.scan(gae_step, (jnp.zeros(c.num_envs), last_value[0]),
                                     {k: batch[k] for k in ("reward", "done", "value")}, reverse=True)
        targets = advantages + batch["value"]

        # ------------------------------------------------ epochs x minibatches of whole rollouts
        def epoch(carry, key):
            params, opt_state = carry
            order = jax.random.permutation(key, c.num_envs).reshape(c.minibatches, -1)

            def minibatch(carry, envs):
                params, opt_state = carry
                pick = lambda x: x[:, envs]  # noqa: E731 (time-major)
                grads = jax.grad(loss_fn)(params, start.hidden[envs],
                                          {k: pick(batch[k]) for k in ("obs", "prev_action", "action", "log_prob")},
                                          pick(advantages), pick(targets))
                updates, opt_state = optimiser.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), None

            return jax.lax.scan(minibatch, (params, opt_state), order)[0], None

        key, k_epochs = jax.random.split(runner.key)
        (params, opt_state), _ = jax.lax.scan(epoch, (runner.params, runner.opt_state),
                                              jax.random.split(k_epochs, c.epochs))
        runner = runner.replace(params=params, opt_state=opt_state, key=key)
        done = batch["done"].astype(jnp.float32)
        mean_return = jnp.where(done.sum() > 0, batch["reward"].sum() / jnp.maximum(done.sum(), 1), jnp.nan)
        recorded = {k: batch[k][:, :num_recorded] for k in ("obs", "action", "reward", "done")}
        return runner, dict(recorded, mean_return=mean_return)

    def act_greedily(params, hidden, views, prev_actions):
        """The policy's most likely actions over a time-major sequence (expert relabelling)."""
        hidden, logits, _ = net.apply(params, hidden, views, prev_actions)
        return hidden, jnp.argmax(logits, -1).astype(jnp.int32)

    return init, update, act_greedily


@dataclasses.dataclass
class XLandPPOHistories:
    """Recorded learning histories of R agents (host arrays).

    observations: uint8 `(R, H, T, 5, 5, 2)`; actions, expert_actions: uint8 `(R, H, T)`;
    rewards: float32 `(R, H, T)`; dones: bool `(R, H, T)`; learning_curve: float `(U,)` the mean
    return of the episodes that ended in each update, over all agents and envs (early updates
    see only the episodes short enough to end: `return_by_episode` is the unbiased curve);
    returns_per_update: `(R, U)` the same per agent; env_steps: steps taken by all envs;
    final_params: each agent's final network parameters (leading axis R).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    expert_actions: np.ndarray
    learning_curve: np.ndarray
    returns_per_update: np.ndarray
    env_steps: int
    final_params: Any

    def return_by_episode(self) -> np.ndarray:
        """Mean return of each recorded history's k-th episode, over the histories that completed
        k episodes: float `(K,)`, K the most episodes at least half of them completed."""
        rewards = self.rewards.reshape(-1, self.rewards.shape[-1])
        dones = self.dones.reshape(rewards.shape)
        returns = np.asarray(episode_returns(rewards, dones, max(int(dones.sum(1).max()), 1)))
        reached = (~np.isnan(returns)).mean(0) >= 0.5
        with np.errstate(all="ignore"):
            return np.nanmean(returns[:, reached], axis=0)


def train_on_rulesets(env, params, config: XLandPPOConfig, num_steps: int, num_recorded: int,
                      seed: int = 0, show_progress: bool = True) -> XLandPPOHistories:
    """Train one agent per ruleset of `params` (batched along R) for ceil(num_steps /
    rollout_steps) updates, recording its first `num_recorded` envs for `num_steps` steps, then
    relabel every recorded step with the final policy's greedy action."""
    config.validate()
    if num_recorded > config.num_envs:
        raise UserError(f"xland_ppo records {num_recorded} histories per ruleset but runs "
                        f"num_envs={config.num_envs}: raise data.source_kwargs.num_envs")
    num_rulesets = int(np.shape(jax.tree.leaves(params)[0])[0])
    per_call = config.updates_per_call
    num_calls = math.ceil(math.ceil(num_steps / config.rollout_steps) / per_call)
    num_updates = num_calls * per_call
    init, update, act_greedily = make_train(env, config, num_updates, num_recorded)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(jnp.arange(num_rulesets))
    # lax.map, not vmap: a vmapped orthogonal init is a batched QR, which can deadlock the
    # LAPACK thread pool of a small CPU host.
    runner = jax.jit(lambda k, p: jax.lax.map(lambda kp: init(*kp), (k, p)))(keys, params)

    @jax.jit
    def run_chunk(runner, params):
        def one_update(runner, _):
            return jax.vmap(update)(runner, params)
        runner, out = jax.lax.scan(one_update, runner, None, length=per_call)
        # (calls, R, T, H, ...) -> (R, H, calls x T, ...)
        out = {k: (jnp.moveaxis(v, 1, 0).reshape((num_rulesets, -1) + v.shape[3:]).swapaxes(1, 2)
                   if k != "mean_return" else v.T) for k, v in out.items()}
        return runner, out

    parts, start = [], time.perf_counter()
    for call in range(num_calls):
        runner, out = run_chunk(runner, params)
        parts.append(jax.device_get(out))
        if show_progress:
            recent = np.nanmean(parts[-1]["mean_return"]) if np.isfinite(parts[-1]["mean_return"]).any() else np.nan
            print(f"xland_ppo: update {(call + 1) * per_call}/{num_updates}, return per episode {recent:.3f}, "
                  f"{time.perf_counter() - start:.0f}s", file=sys.stderr, flush=True)
    recorded = {k: np.concatenate([p[k] for p in parts], axis=-1 if k == "mean_return" else 2)
                for k in parts[0]}
    recorded = {k: v if k == "mean_return" else v[:, :, :num_steps] for k, v in recorded.items()}

    # ------------------------------------------------ relabel with the final policy
    @jax.jit
    def relabel(params, views, prev_actions, hidden):
        # (R, H, L, ...) -> time-major per agent
        def one(p, v, a, h):
            return act_greedily(p, h, jnp.swapaxes(v, 0, 1), jnp.swapaxes(a, 0, 1))
        hidden, actions = jax.vmap(one)(params, views, prev_actions, hidden)
        return hidden, jnp.swapaxes(actions, 1, 2)

    actions = recorded["action"].astype(np.int32)
    prev_actions = np.concatenate([np.zeros_like(actions[:, :, :1]), actions[:, :, :-1]], axis=2)
    hidden = jnp.zeros((num_rulesets, num_recorded, config.rnn_hidden), jnp.float32)
    expert, window = [], per_call * config.rollout_steps
    for begin in range(0, num_steps, window):  # one compiled window, the last one padded
        sl = slice(begin, begin + window)
        views, prevs = recorded["obs"][:, :, sl], prev_actions[:, :, sl]
        pad = window - views.shape[2]
        if pad:
            views = np.pad(views, [(0, 0), (0, 0), (0, pad)] + [(0, 0)] * 3)
            prevs = np.pad(prevs, [(0, 0), (0, 0), (0, pad)])
        hidden, labels = relabel(runner.params, views, prevs, hidden)
        expert.append(np.asarray(labels)[:, :, : window - pad])
    returns = np.asarray(recorded["mean_return"], np.float64)
    with warnings.catch_warnings():  # an update in which no agent ended an episode is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        curve = np.nanmean(returns, axis=0)
    return XLandPPOHistories(
        observations=recorded["obs"], actions=recorded["action"].astype(np.uint8),
        rewards=recorded["reward"].astype(np.float32), dones=recorded["done"].astype(bool),
        expert_actions=np.concatenate(expert, axis=2).astype(np.uint8), learning_curve=curve,
        returns_per_update=returns,
        env_steps=int(num_rulesets * config.num_envs * num_updates * config.rollout_steps),
        final_params=jax.device_get(runner.params))
