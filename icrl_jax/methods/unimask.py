"""Uni[MASK] (Carroll et al. 2022): one masked bidirectional model of trajectory snippets.

Tokens (App. D): one stacked input per timestep, so a snippet of k steps is k tokens:
[factors of s_t one-hot | a_t one-hot | (R, t0) | visibility flags], each part zeroed when masked.
Only the first token carries the return-to-go, as the tuple (return-to-go / rtg_scale, episode
timestep / max_timestep): positions are the snippet's own (`position="learned"`), so the tuple
tells the model the horizon. The backbone is the shared `Transformer` with `causal=False`, or an
MLP over the flattened snippet (`model.backbone="mlp"`, the paper's baseline). Separate heads
give state-factor logits and action logits per token; the loss is the softmax cross entropy of
the predicted tokens (`methods/unimask_masks.py`), action and state parts weighted by
`model.action_weight` : `model.state_weight` (Table 2's "Action:State loss").

The training regime (`model.regime`: a name in `unimask_masks.REGIMES`, or its index, which may
be traced so that replicas of different regimes train in one vmapped program) picks the masks.

Shapes: B snippets, k steps, F state factors (DoorKey: agent cell and key cell, 16 values each),
A actions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.data.history import History
from icrl_jax.data.sources import ParamSource, Source
from icrl_jax.data.train_data import TrainData, on_device
from icrl_jax.data.trajectories import Trajectories, episodes_from_history, sample_trajectory_windows
from icrl_jax.errors import UserError
from icrl_jax.methods import register
from icrl_jax.methods.base import Method
from icrl_jax.methods.unimask_masks import Mask, REGIMES, TASKS, evaluation_masks, regime_index, sample_mask
from icrl_jax.models.transformer import Dropout, Transformer

BACKBONES = ("transformer", "mlp")


class UniMaskNet(nn.Module):
    """Snippet `(B, k)` tokens -> (state-factor logits `(B, k, sum(F))`, action logits
    `(B, k, A)`)."""

    state_factors: tuple[int, ...]
    num_actions: int
    d_model: int
    backbone: nn.Module | None  # the shared Transformer, or None for the MLP baseline
    mlp_layers: int = 3
    mlp_width: int = 128
    dropout: Any = 0.0

    @nn.compact
    def __call__(self, states, actions, rtg, mask: Mask, deterministic: bool = True):
        """states int32 `(B, k, F)`; actions int32 `(B, k)`; rtg float32 `(B, 2)`; `mask` fields
        `(B, k)` (rtg_in `(B,)`)."""
        batch, k = actions.shape
        s_in = mask.state_in[..., None].astype(jnp.float32)
        a_in = mask.action_in[..., None].astype(jnp.float32)
        first = (jnp.arange(k) == 0)[None, :, None]
        r_in = (mask.rtg_in[:, None, None] & first).astype(jnp.float32)
        parts = [jax.nn.one_hot(states[..., f], n) * s_in for f, n in enumerate(self.state_factors)]
        parts += [jax.nn.one_hot(actions, self.num_actions) * a_in,
                  jnp.broadcast_to(rtg[:, None, :], (batch, k, rtg.shape[-1])) * r_in,
                  s_in, a_in, r_in]
        x = jnp.concatenate(parts, -1)
        if self.backbone is not None:
            h = self.backbone(nn.Dense(self.d_model, name="embed")(x), deterministic=deterministic)
        else:  # the MLP baseline sees the whole flattened snippet and emits all k outputs
            h = x.reshape(batch, -1)
            for i in range(self.mlp_layers):
                h = nn.relu(nn.Dense(self.mlp_width, name=f"mlp_{i}")(h))
                h = Dropout(self.dropout)(h, deterministic=deterministic)
            h = nn.Dense(k * self.d_model, name="mlp_out")(h).reshape(batch, k, self.d_model)
        return (nn.Dense(sum(self.state_factors), name="state_head")(h),
                nn.Dense(self.num_actions, name="action_head")(h))


def token_cross_entropy(logits: jax.Array, targets: jax.Array, sizes: tuple[int, ...]) -> jax.Array:
    """Summed over factors: logits `(..., sum(sizes))`, targets int `(..., len(sizes))` ->
    `(...)`."""
    logits = logits.astype(jnp.float32)  # bf16 runs: the loss in float32
    total = 0.0
    for f, part in enumerate(jnp.split(logits, np.cumsum(sizes)[:-1].tolist(), axis=-1)):
        log_probs = jax.nn.log_softmax(part, -1)
        total = total + -jnp.take_along_axis(log_probs, targets[..., f:f + 1], -1)[..., 0]
    return total


def masked_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
    weights = weights.astype(jnp.float32)
    return (values * weights).sum() / jnp.maximum(weights.sum(), 1.0)


@register
class UniMask(Method):
    """The Uni[MASK] method (see the module docstring).

    Args:
      model_config: `d_model`, the transformer fields, and `backbone`, `regime`,
        `action_weight`, `state_weight`, `rtg_scale`, `max_timestep`, `mlp_layers`,
        `mlp_width` (`unimask_model_config()`).
      env: a discrete-state env (`observation_factors`, `split_observation`).
      snippet_len: k.
      pretrained: optional stacked parameters `(S, ...)` to start from instead of a random
        init (fine-tuning): replica init takes row `model_config.init_from` (may be traced).
    """

    name = "unimask"
    display_name = "Uni[MASK]"

    @classmethod
    def from_config(cls, config, env, model_config) -> "UniMask":
        return cls(model_config, env, int(config.train.seq_len))

    @classmethod
    def signature(cls, config, env) -> dict:
        return dict(super().signature(config, env), backbone=config.model.backbone,
                    snippet_len=int(config.train.seq_len))

    def __init__(self, model_config, env, snippet_len: int, pretrained=None):
        if env.continuous_actions or not env.discrete_observations:
            raise UserError("unimask is built for discrete states and actions (DoorKey); "
                            f"{type(env).__name__} is not")
        if model_config.backbone not in BACKBONES:
            raise UserError(f"model.backbone must be one of {BACKBONES}, "
                            f"got {model_config.backbone!r}")
        regime = model_config.regime
        self.regime = regime_index(regime) if isinstance(regime, str) else regime
        self.snippet_len = int(snippet_len)
        self.state_factors = tuple(int(n) for n in env.observation_factors)
        self.split_observation = env.split_observation
        self.join_observation = env.join_observation
        self.num_actions = int(env.num_actions)
        self.rtg_scale = float(model_config.rtg_scale)
        self.max_timestep = float(model_config.max_timestep)
        self.action_weight = model_config.action_weight
        self.state_weight = model_config.state_weight
        self.pretrained = pretrained
        self.init_from = model_config.get("init_from", 0)
        backbone = None
        if model_config.backbone == "transformer":
            backbone = Transformer.from_config(model_config, causal=False, position="learned",
                                               max_len=self.snippet_len)
        self.model = UniMaskNet(self.state_factors, self.num_actions, int(model_config.d_model),
                                backbone, int(model_config.mlp_layers),
                                int(model_config.mlp_width), model_config.residual_dropout)

    # -- data -------------------------------------------------------------------------------

    def training_data(self, dataset, config, env) -> TrainData:
        """Whole-step snippets of k steps cut from fixed-length episodes (never padded: a
        snippet the episodes cannot supply is an error)."""
        if not isinstance(dataset, History):
            raise TypeError(f"unimask trains on learning histories, got {type(dataset).__name__}")
        episodes = self.episodes(dataset, env)
        if episodes.length < self.snippet_len:
            raise UserError(f"train.seq_len={self.snippet_len}: the dataset's episodes have "
                            f"{episodes.length} steps, too few for one snippet")
        return on_device(episodes, sample_trajectory_windows, self.snippet_len)

    def episodes(self, history: History, env) -> Trajectories:
        return episodes_from_history(history, env.episode_length)

    def snippets(self, episodes: Trajectories) -> Trajectories:
        """Every k-step window of every episode, `(N * (T - k + 1), k, ...)` (validation)."""
        k, length = self.snippet_len, episodes.length
        if length < k:
            raise UserError(f"episodes of {length} steps cannot supply snippets of {k} steps")
        windows = [jax.tree.map(lambda x: x[:, s:s + k], episodes) for s in range(length - k + 1)]
        return jax.tree.map(lambda *xs: jnp.concatenate(xs, 0), *windows)

    # -- model ------------------------------------------------------------------------------

    def inputs(self, batch: Trajectories):
        """(states `(B, k, F)`, actions `(B, k)`, rtg tuple `(B, 2)`) of snippets."""
        states = self.split_observation(batch.observations)
        rtg = jnp.stack([batch.returns_to_go[:, 0] / self.rtg_scale,
                         batch.timesteps[:, 0].astype(jnp.float32) / self.max_timestep], -1)
        return states, batch.actions[..., 0], rtg

    def apply(self, params, batch: Trajectories, mask: Mask, deterministic: bool = True,
              key: jax.Array | None = None):
        rngs = {"dropout": key} if key is not None else {}
        return self.model.apply({"params": params}, *self.inputs(batch), mask,
                                deterministic=deterministic, rngs=rngs)

    def init(self, key: jax.Array, example: Trajectories):
        if self.pretrained is not None:
            row = jnp.asarray(self.init_from, jnp.int32)
            return jax.tree.map(lambda p: jnp.asarray(p)[row], self.pretrained)
        mask = jax.vmap(lambda _: sample_mask(0, jax.random.key(0), self.snippet_len))(
            jnp.arange(example.actions.shape[0]))
        return self.model.init({"params": key}, *self.inputs(example), mask)["params"]

    def losses(self, params, batch: Trajectories, mask: Mask, deterministic: bool = True,
               key: jax.Array | None = None) -> dict[str, jax.Array]:
        """Mean cross entropy of the predicted action tokens and of the predicted state tokens
        (factors summed), each over the batch's predicted tokens of that kind (0 if none)."""
        state_logits, action_logits = self.apply(params, batch, mask, deterministic, key)
        states, actions, _ = self.inputs(batch)
        state_ce = token_cross_entropy(state_logits, states, self.state_factors)
        action_ce = token_cross_entropy(action_logits, actions[..., None], (self.num_actions,))
        correct = jnp.argmax(action_logits, -1) == actions
        return dict(state_loss=masked_mean(state_ce, mask.state_pred),
                    action_loss=masked_mean(action_ce, mask.action_pred),
                    accuracy=masked_mean(correct, mask.action_pred))

    def loss(self, params, batch: Trajectories, key: jax.Array):
        mask_key, dropout_key = jax.random.split(key)
        keys = jax.random.split(mask_key, batch.actions.shape[0])
        mask = jax.vmap(lambda kk: sample_mask(self.regime, kk, self.snippet_len))(keys)
        parts = self.losses(params, batch, mask, deterministic=False, key=dropout_key)
        loss = self.action_weight * parts["action_loss"] + self.state_weight * parts["state_loss"]
        return loss, dict(parts, loss=loss)

    def task_losses(self, params, snippets: Trajectories, tasks=tuple(TASKS)) -> jax.Array:
        """Validation loss (action + state cross entropy, unweighted) of each evaluation task,
        float32 `(len(tasks),)`: every snippet under every index of the task (the exact
        expectation over the task's uniform index)."""
        out = []
        for task in tasks:
            masks = evaluation_masks(task, self.snippet_len)
            per_index = jax.vmap(lambda m: self._under_mask(params, snippets, m))(masks)
            # The mean over the task's predicted tokens of each kind, pooled over the indices.
            out.append(_pooled(per_index))
        return jnp.stack(out)

    def _under_mask(self, params, snippets: Trajectories, mask: Mask):
        batch_mask = jax.tree.map(lambda m: jnp.broadcast_to(m, (snippets.actions.shape[0],)
                                                              + m.shape), mask)
        state_logits, action_logits = self.apply(params, snippets, batch_mask)
        states, actions, _ = self.inputs(snippets)
        state_ce = token_cross_entropy(state_logits, states, self.state_factors)
        action_ce = token_cross_entropy(action_logits, actions[..., None], (self.num_actions,))
        s_w = batch_mask.state_pred.astype(jnp.float32)
        a_w = batch_mask.action_pred.astype(jnp.float32)
        return (state_ce * s_w).sum(), s_w.sum(), (action_ce * a_w).sum(), a_w.sum()

    # -- acting -----------------------------------------------------------------------------

    #: Regimes whose training shows the return-to-go token (the others never learn to read it).
    RTG_REGIMES = ("reward_conditioned", "all", "random")

    def policies(self, params, env, config) -> dict:
        """Behaviour cloning (`model_bc`): sample a_t from the model given s_0..s_t and
        a_0..a_{t-1} of the episode's last k steps (the paper's Fig. 8 rollouts); and, per
        `eval.target_returns`, reward-conditioned policies (`model@<R>`) that also see the
        return-to-go tuple (R, 0) on the first step."""
        out = {"model_bc": ParamSource(SnippetPolicy(self), params, name="model_bc")}
        targets = tuple(config.eval.get("target_returns", ()))
        regime = config.model.regime
        if targets and regime not in self.RTG_REGIMES:
            raise UserError(f"eval.target_returns asks for return-to-go conditioning, but "
                            f"model.regime={regime!r} never shows the return-to-go in training "
                            f"(regimes that do: {', '.join(self.RTG_REGIMES)})")
        for target in targets:
            name = f"model@{float(target):g}"
            out[name] = ParamSource(SnippetPolicy(self, float(target)), params, name=name)
        return out


def _pooled(per_index) -> jax.Array:
    state_sum, state_n, action_sum, action_n = (x.sum() for x in per_index)
    return state_sum / jnp.maximum(state_n, 1.0) + action_sum / jnp.maximum(action_n, 1.0)


@dataclasses.dataclass(frozen=True, eq=False)
class SnippetPolicy:
    """`ParamSource.build` of a policy that fills in the next action of its episode's snippet:
    behaviour cloning, or reward-conditioned with the episode's target return `target` (shown
    as the return-to-go tuple (target, 0)). State: the last k observations and actions, int32
    `(k,)`, and rewards, float32 `(k,)`; the rewards of the steps that have slid out of the
    snippet, and the count of steps taken this episode."""

    method: UniMask
    target: float | None = None

    def __call__(self, params) -> Source:
        method, k = self.method, self.method.snippet_len

        def init(key, env_params):
            return dict(obs=jnp.zeros(k, jnp.int32), actions=jnp.zeros(k, jnp.int32),
                        rewards=jnp.zeros(k, jnp.float32), collected=jnp.float32(0.0),
                        t=jnp.int32(0))

        def act(key, state, obs, env_state, env_params):
            slot = jnp.minimum(state["t"], k - 1)
            # Past k steps, slide left by one so that the newest step sits in the last slot.
            full = state["t"] >= k
            obs_buf = jnp.where(full, jnp.roll(state["obs"], -1), state["obs"]).at[slot].set(obs)
            act_buf = jnp.where(full, jnp.roll(state["actions"], -1), state["actions"])
            conditioned = self.target is not None
            # The return still to collect from the snippet's first step (the target less the
            # rewards of the steps that have slid out), and that step's time.
            first = jnp.maximum(state["t"] - (k - 1), 0)
            collected = state["collected"] + jnp.where(full, state["rewards"][0], 0.0)
            rewards = jnp.where(full, jnp.roll(state["rewards"], -1), state["rewards"])
            rtg = jnp.float32(self.target if conditioned else 0.0) - collected
            snippet = Trajectories(
                observations=obs_buf[None], actions=act_buf[None, :, None],
                rewards=jnp.zeros((1, k)), returns_to_go=jnp.full((1, k), rtg),
                timesteps=jnp.full((1, k), first, jnp.int32), mask=jnp.ones((1, k), bool))
            task = "reward_conditioned" if conditioned else "behaviour_cloning"
            mask = jax.tree.map(lambda m: m[None], TASKS[task].mask(slot, k))
            logits = method.apply(params, snippet, mask)[1][0, slot]
            action = jax.random.categorical(key, logits).astype(jnp.int32)
            return action, dict(obs=obs_buf, actions=act_buf.at[slot].set(action),
                                rewards=rewards, collected=collected, t=state["t"] + 1)

        def update(key, state, transition, env_params):
            slot = jnp.minimum(state["t"] - 1, k - 1)  # the step just taken
            state = dict(state, rewards=state["rewards"].at[slot].set(transition.reward))
            return jax.tree.map(lambda new, reset: jnp.where(transition.done, reset, new),
                                state, init(key, env_params))

        return Source(init, act, update, name="model_bc" if self.target is None else "model_rc")


def sample_past(method: UniMask, params, snippets: Trajectories, start: int, key: jax.Array,
                next_observation) -> tuple[Trajectories, jax.Array]:
    """Backward inference by sampling: given steps `start..k-1` of each snippet, draw steps
    `start-1` down to 0, one at a time, each from the past-inference mask of what is known so
    far, rejecting dynamics-inconsistent draws (App. E). The rejection is exact: a draw
    (s_t, a_t) is kept only if `next_observation(s_t, a_t)` is the known s_{t+1}, and redrawing
    until one passes samples the model's distribution restricted to the consistent pairs; we
    sample that distribution directly by enumerating every (observation, action) pair (DoorKey:
    256 x 4) instead of looping over draws.

    Args:
      snippets: `(B, k)` snippets; only steps `start..` are read.
      next_observation: deterministic dynamics, obs ids int `(...)`, actions `(...)` -> ids.
    Returns:
      (the snippets with steps `0..start-1` sampled, the model's probability mass on
      inconsistent pairs averaged over the sampled steps, float32 `()`: how often a plain draw
      would have been rejected).
    """
    k = method.snippet_len
    num_obs = int(np.prod(method.state_factors))
    all_obs = jnp.repeat(jnp.arange(num_obs), method.num_actions)
    all_actions = jnp.tile(jnp.arange(method.num_actions), num_obs)
    factors = method.split_observation(all_obs)  # (P, F)
    rejected = []
    for t in range(start - 1, -1, -1):
        mask = jax.tree.map(lambda m: jnp.broadcast_to(m, (snippets.actions.shape[0],) + m.shape),
                            TASKS["past_inference"].mask(t + 1, k))
        state_logits, action_logits = method.apply(params, snippets, mask)
        splits = np.cumsum(method.state_factors)[:-1].tolist()
        log_p = jnp.take(jax.nn.log_softmax(action_logits[:, t], -1), all_actions, axis=1)
        for f, logits in enumerate(jnp.split(state_logits[:, t], splits, -1)):
            log_p = log_p + jnp.take(jax.nn.log_softmax(logits, -1), factors[:, f], axis=1)
        ok = next_observation(all_obs, all_actions)[None] == snippets.observations[:, t + 1, None]
        rejected.append(1.0 - (jnp.exp(log_p) * ok).sum(-1).mean())
        key, draw_key = jax.random.split(key)
        pick = jax.random.categorical(draw_key, jnp.where(ok, log_p, -jnp.inf))
        snippets = snippets.replace(
            observations=snippets.observations.at[:, t].set(all_obs[pick]),
            actions=snippets.actions.at[:, t, 0].set(all_actions[pick]))
    return snippets, jnp.mean(jnp.stack(rejected)) if rejected else jnp.float32(0.0)


__all__ = ["UniMask", "UniMaskNet", "SnippetPolicy", "REGIMES", "TASKS", "sample_past"]
