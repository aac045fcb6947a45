"""Uni[MASK] (Carroll et al. 2022): one masked bidirectional model of trajectory snippets.

Tokens (App. D): one stacked input per timestep, so a snippet of k steps is k tokens:
[factors of s_t one-hot | a_t one-hot | (R, t0) | visibility flags], each part zeroed when masked.
Only the first token carries the return-to-go, as the tuple (return-to-go / rtg_scale, episode
timestep / max_timestep): positions are the snippet's own (`position="learned"`), so the tuple
tells the model the horizon. The backbone is the shared `Transformer` with `causal=False`, or an
MLP over the flattened snippet (`model.backbone="mlp"`, the paper's baseline). Separate heads
give state-factor logits and action logits per token; the loss is the softmax cross entropy of
the predicted tokens (`papers/unimask/masks.py`), action and state parts weighted by
`model.action_weight` : `model.state_weight` (Table 2's "Action:State loss").

The training regime (`model.regime`: a name in `unimask_masks.REGIMES`, or its index, which may
be traced so that replicas of different regimes train in one vmapped program) picks the masks.

Continuous states and actions (the point maze, App. H) enter as vectors, the action head ends in
tanh, and the losses are squared errors (the paper's L2).

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
from icrl_jax.data.train_data import TrainData, on_device, window_at
from icrl_jax.data.minari_io import MinariEpisodes
from icrl_jax.data.trajectories import (Trajectories, episodes_from_history, full_window_starts,
                                        sample_listed_windows, sample_trajectory_windows)
from icrl_jax.core.errors import UserError
from icrl_jax.methods import register
from icrl_jax.methods.base import Method
from icrl_jax.papers.unimask.fields import unimask_model_config
from icrl_jax.papers.unimask.masks import (Mask, REGIMES, TASKS, check_snippet_len,
                                           evaluation_masks, regime_index, sample_batch_masks,
                                           task_set)
from icrl_jax.models.dropout import Dropout
from icrl_jax.models.transformer import Transformer
from icrl_jax.models.compiled import Compiled

class UniMaskNet(nn.Module):
    """Snippet `(B, k)` tokens -> (state outputs `(B, k, state_out)`, action outputs
    `(B, k, action_out)`): logits of each categorical factor side by side, or vectors."""

    state_out: int
    action_out: int
    d_model: int
    backbone: nn.Module | None  # the shared Transformer, or None for the MLP baseline
    mlp_layers: int = 3
    mlp_width: int = 128
    dropout: Any = 0.0
    sinusoidal: bool = False  # add the fixed sine/cosine positions after the input embedding
    mask_flags: bool = True  # append the visibility flags to each token
    relu_embedding: bool = False  # the authors' input map: relu(Dense(x)) * sqrt(d_model)

    @nn.compact
    def __call__(self, states, actions, rtg, mask: Mask, deterministic: bool = True):
        """states float32 `(B, k, Ds)` and actions `(B, k, Da)` (one-hot factors or vectors);
        rtg float32 `(B, 2)`; `mask` fields `(B, k)` (rtg_in `(B,)`)."""
        batch, k = actions.shape[:2]
        s_in = mask.state_in[..., None].astype(jnp.float32)
        a_in = mask.action_in[..., None].astype(jnp.float32)
        first = (jnp.arange(k) == 0)[None, :, None]
        r_in = (mask.rtg_in[:, None, None] & first).astype(jnp.float32)
        parts = [states * s_in, actions * a_in,
                 jnp.broadcast_to(rtg[:, None, :], (batch, k, rtg.shape[-1])) * r_in]
        x = jnp.concatenate(parts + ([s_in, a_in, r_in] if self.mask_flags else []), -1)
        if self.backbone is not None:
            h = nn.Dense(self.d_model, name="embed")(x)
            if self.relu_embedding:
                h = nn.relu(h) * np.sqrt(self.d_model)
            if self.sinusoidal:
                h = h + sinusoidal_positions(k, self.d_model)[None].astype(h.dtype)
            h = self.backbone(h, deterministic=deterministic)
        else:  # the MLP baseline sees the whole flattened snippet and emits all k outputs
            h = x.reshape(batch, -1)
            for i in range(self.mlp_layers):
                h = nn.relu(nn.Dense(self.mlp_width, name=f"mlp_{i}")(h))
                h = Dropout(self.dropout)(h, deterministic=deterministic)
            h = nn.Dense(k * self.d_model, name="mlp_out")(h).reshape(batch, k, self.d_model)
        return (nn.Dense(self.state_out, name="state_head")(h),
                nn.Dense(self.action_out, name="action_head")(h))


def sinusoidal_positions(length: int, d_model: int) -> jax.Array:
    """The fixed encoding of "Attention is all you need", float32 `(length, d_model)`: sines in
    the even channels, cosines in the odd ones, wavelengths 2 pi .. 10000 * 2 pi."""
    position = np.arange(length, dtype=np.float64)[:, None]
    rate = np.exp(np.arange(0, d_model, 2) * (-np.log(10000.0) / d_model))
    table = np.zeros((length, d_model))
    table[:, 0::2] = np.sin(position * rate)
    table[:, 1::2] = np.cos(position * rate)[:, :d_model // 2]
    return jnp.asarray(table, jnp.float32)


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
        # Named only when not the default, so that earlier checkpoints still restore.
        defaults = unimask_model_config()
        named = {k: config.model[k] for k in ("inverse_dynamics_index", "input_embedding")}
        return dict(super().signature(config, env), backbone=config.model.backbone,
                    snippet_len=int(config.train.seq_len),
                    **{k: v for k, v in named.items() if v != defaults[k]})

    def __init__(self, model_config, env, snippet_len: int, pretrained=None):
        if env.continuous_actions != (not env.discrete_observations):
            raise UserError("unimask models discrete states and actions (DoorKey) or continuous "
                            f"ones (the point maze), not a mix ({type(env).__name__})")
        regime = model_config.regime
        self.regime = regime_index(regime) if isinstance(regime, str) else regime
        self.snippet_len = int(snippet_len)
        check_snippet_len(self.snippet_len)
        self.continuous = bool(env.continuous_actions)
        self.state_factors = tuple(int(n) for n in env.observation_factors)
        self.split_observation = env.split_observation
        self.join_observation = env.join_observation
        self.num_actions = int(env.num_actions)
        self.state_dim = (int(np.prod(env.observation_shape)) if self.continuous
                          else sum(self.state_factors))
        self.action_dim = int(env.action_dim) if self.continuous else self.num_actions
        self.rtg_scale = float(model_config.rtg_scale)
        self.max_timestep = float(model_config.max_timestep)
        self.action_weight = model_config.action_weight
        self.state_weight = model_config.state_weight
        self.pretrained = pretrained
        self.init_from = model_config.init_from
        self.all_per = str(model_config.all_per)
        self.tasks = task_set(str(model_config.inverse_dynamics_index))
        self.rtg_encoding = str(model_config.rtg_encoding)
        self.rtg_low, self.rtg_high = int(model_config.rtg_low), int(model_config.rtg_high)
        positions = str(model_config.positions)
        backbone = None
        if model_config.backbone == "transformer":
            backbone = Transformer.from_config(
                model_config, causal=False, max_len=self.snippet_len,
                position="learned" if positions == "learned" else "none")
        self.model = UniMaskNet(self.state_dim, self.action_dim, int(model_config.d_model),
                                backbone, int(model_config.mlp_layers),
                                int(model_config.mlp_width), model_config.residual_dropout,
                                sinusoidal=positions == "sinusoidal",
                                mask_flags=bool(model_config.mask_flags),
                                relu_embedding=model_config.input_embedding == "relu_scaled")
        self.model = Compiled(self.model)  # eager init / apply: one program each

    # -- data -------------------------------------------------------------------------------

    def training_data(self, dataset, config, env) -> TrainData:
        """Snippets of k real steps (never padded: a snippet length the episodes cannot supply
        is an error): from fixed-length episodes of learning histories (DoorKey), or from the
        episodes of any lengths of a Minari dataset (the point maze)."""
        if isinstance(dataset, MinariEpisodes):
            episodes = dataset.to_trajectories()
            starts = full_window_starts(np.asarray(episodes.mask), self.snippet_len)
            if not len(starts):
                raise UserError(f"train.seq_len={self.snippet_len}: no episode of the dataset "
                                f"has that many steps (longest {int(dataset.lengths.max())})")
            return on_device((episodes, jnp.asarray(starts)), sample_listed_windows,
                             self.snippet_len)
        if not isinstance(dataset, History):
            raise TypeError(f"unimask trains on learning histories or a Minari dataset, got "
                            f"{type(dataset).__name__}")
        episodes = self.episodes(dataset, env)
        if episodes.length < self.snippet_len:
            raise UserError(f"train.seq_len={self.snippet_len}: the dataset's episodes have "
                            f"{episodes.length} steps, too few for one snippet")
        return on_device(episodes, sample_trajectory_windows, self.snippet_len)

    def episodes(self, history: History, env) -> Trajectories:
        return episodes_from_history(history, env.episode_length)

    def snippets(self, episodes: Trajectories, limit: int | None = None) -> Trajectories:
        """Every window of k real steps of every episode (validation), `(M, k, ...)`; the first
        `limit` of them if given."""
        starts = full_window_starts(np.asarray(episodes.mask), self.snippet_len)[:limit]
        if not len(starts):
            raise UserError(f"no episode can supply snippets of {self.snippet_len} steps")
        return jax.vmap(lambda r, s: jax.tree.map(
            lambda x: window_at(x, r, s, self.snippet_len), episodes))(
            jnp.asarray(starts[:, 0]), jnp.asarray(starts[:, 1]))

    # -- model ------------------------------------------------------------------------------

    def inputs(self, batch: Trajectories):
        """(state features `(B, k, Ds)`, action features `(B, k, Da)`, rtg tuple `(B, 2)`):
        one-hot factors of discrete states and actions, continuous ones as they are."""
        if self.rtg_encoding == "onehot":  # the authors' classes: rtg_low..rtg_high, no timestep
            index = jnp.round(batch.returns_to_go[:, 0]).astype(jnp.int32) - self.rtg_low
            rtg = jax.nn.one_hot(index, self.rtg_high - self.rtg_low + 1)
        else:
            rtg = jnp.stack([batch.returns_to_go[:, 0] / self.rtg_scale,
                             batch.timesteps[:, 0].astype(jnp.float32) / self.max_timestep], -1)
        if self.continuous:
            states = batch.observations.reshape(batch.observations.shape[:2] + (-1,))
            return states.astype(jnp.float32), batch.actions.astype(jnp.float32), rtg
        factors = self.split_observation(batch.observations)
        states = jnp.concatenate([jax.nn.one_hot(factors[..., f], n)
                                  for f, n in enumerate(self.state_factors)], -1)
        return states, jax.nn.one_hot(batch.actions[..., 0], self.num_actions), rtg

    def apply(self, params, batch: Trajectories, mask: Mask, deterministic: bool = True,
              key: jax.Array | None = None):
        rngs = {"dropout": key} if key is not None else {}
        state_out, action_out = self.model.apply({"params": params}, *self.inputs(batch), mask,
                                                 deterministic=deterministic, rngs=rngs)
        if self.continuous:  # actions live in [-1, 1], as DT's continuous head
            action_out = jnp.tanh(action_out)
        return state_out, action_out

    def token_errors(self, params, batch: Trajectories, mask: Mask, deterministic: bool = True,
                     key: jax.Array | None = None):
        """Per token, float32 `(B, k)`: the state error and the action error (cross entropy,
        summed over a discrete state's factors; squared error, averaged over dimensions, for
        continuous ones: the paper's L2 loss), and whether the action's argmax is right (1 -
        squared error, a progress readout, for continuous actions)."""
        state_out, action_out = self.apply(params, batch, mask, deterministic, key)
        state_out, action_out = state_out.astype(jnp.float32), action_out.astype(jnp.float32)
        states, actions, _ = self.inputs(batch)
        if self.continuous:
            action_err = ((action_out - actions) ** 2).mean(-1)
            return ((state_out - states) ** 2).mean(-1), action_err, 1.0 - action_err
        factors = self.split_observation(batch.observations)
        state_err = token_cross_entropy(state_out, factors, self.state_factors)
        targets = batch.actions[..., :1]
        action_err = token_cross_entropy(action_out, targets, (self.num_actions,))
        return state_err, action_err, jnp.argmax(action_out, -1) == targets[..., 0]

    def init(self, key: jax.Array, example: Trajectories):
        if self.pretrained is not None:
            row = jnp.asarray(self.init_from, jnp.int32)
            return jax.tree.map(lambda p: jnp.asarray(p)[row], self.pretrained)
        # Any mask gives the shapes; a fixed one avoids tracing every regime's sampler.
        mask = jax.tree.map(lambda m: jnp.broadcast_to(m, (example.actions.shape[0],) + m.shape),
                            TASKS["behaviour_cloning"].mask(0, self.snippet_len))
        return self.model.init({"params": key}, *self.inputs(example), mask)["params"]

    def losses(self, params, batch: Trajectories, mask: Mask, deterministic: bool = True,
               key: jax.Array | None = None) -> dict[str, jax.Array]:
        """Mean error of the predicted action tokens and of the predicted state tokens, each
        over the batch's predicted tokens of that kind (0 if none)."""
        state_err, action_err, correct = self.token_errors(params, batch, mask, deterministic, key)
        return dict(state_loss=masked_mean(state_err, mask.state_pred),
                    action_loss=masked_mean(action_err, mask.action_pred),
                    accuracy=masked_mean(correct, mask.action_pred))

    def loss(self, params, batch: Trajectories, key: jax.Array):
        mask_key, dropout_key = jax.random.split(key)
        mask = sample_batch_masks(self.regime, mask_key, self.snippet_len, batch.actions.shape[0],
                                  self.all_per, self.tasks)
        parts = self.losses(params, batch, mask, deterministic=False, key=dropout_key)
        loss = self.action_weight * parts["action_loss"] + self.state_weight * parts["state_loss"]
        return loss, dict(parts, loss=loss)

    def task_losses(self, params, snippets: Trajectories, tasks=tuple(TASKS)) -> jax.Array:
        """Validation loss (action + state cross entropy, unweighted) of each evaluation task,
        float32 `(len(tasks),)`: every snippet under every index of the task (the exact
        expectation over the task's uniform index)."""
        out = []
        for task in tasks:
            masks = evaluation_masks(task, self.snippet_len, self.tasks)
            per_index = jax.vmap(lambda m: self._under_mask(params, snippets, m))(masks)
            # The mean over the task's predicted tokens of each kind, pooled over the indices.
            out.append(_pooled(per_index))
        return jnp.stack(out)

    def _under_mask(self, params, snippets: Trajectories, mask: Mask):
        batch_mask = jax.tree.map(lambda m: jnp.broadcast_to(m, (snippets.actions.shape[0],)
                                                              + m.shape), mask)
        state_err, action_err, _ = self.token_errors(params, snippets, batch_mask)
        s_w = batch_mask.state_pred.astype(jnp.float32)
        a_w = batch_mask.action_pred.astype(jnp.float32)
        return (state_err * s_w).sum(), s_w.sum(), (action_err * a_w).sum(), a_w.sum()

    # -- acting -----------------------------------------------------------------------------

    #: Regimes whose training shows the return-to-go token (the others never learn to read it).
    RTG_REGIMES = ("reward_conditioned", "all", "random")

    def policies(self, params, env, config) -> dict:
        """Behaviour cloning (`model_bc`): sample a_t from the model given s_0..s_t and
        a_0..a_{t-1} of the episode's last k steps (the paper's Fig. 8 rollouts); and, per
        `eval.target_returns`, reward-conditioned policies (`model@<R>`) that also see the
        return-to-go tuple (R, 0) on the first step."""
        out = {"model_bc": ParamSource(SnippetPolicy(self), params, name="model_bc")}
        if config.eval.goal_conditioned:
            out["model_goal"] = ParamSource(SnippetPolicy(self, goal_observation=env.goal_observation),
                                            params, name="model_goal")
        targets = tuple(config.eval.target_returns)
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
    """`ParamSource.build` of a policy that fills in the next action of its episode's snippet.

    Modes:
    * behaviour cloning (default): the snippet's states so far and earlier actions;
    * reward-conditioned (`target` set): also the return-to-go tuple (R, t0) of the snippet's
      first step, R the episode's target less the rewards of the steps that have slid out. The
      target is `target`, or with `reference` = (initial observations `(N, D)`, returns `(N,)`)
      of a dataset, `target` times the return of the dataset episode whose initial observation
      is nearest the episode's own (Uni[MASK] App. H: 1.1 x R);
    * goal-conditioned (`goal`): the last slot holds `goal_observation(obs)`, the goal as a
      state, so the history keeps k - 1 steps.

    State: the last k observations, actions and rewards, the rewards that have slid out, the
    episode's target, and the count of steps taken this episode.
    """

    method: UniMask
    target: float | None = None
    reference: tuple[np.ndarray, np.ndarray] | None = None
    goal_observation: Any = None

    def __call__(self, params) -> Source:
        method, k = self.method, self.method.snippet_len
        history = k - 1 if self.goal_observation is not None else k
        conditioned = self.target is not None
        task = ("goal_conditioned" if self.goal_observation is not None else
                "reward_conditioned" if conditioned else "behaviour_cloning")
        continuous = method.continuous

        def init(key, env_params):
            obs_shape = (method.state_dim,) if continuous else ()
            return dict(obs=jnp.zeros((k,) + obs_shape, jnp.float32 if continuous else jnp.int32),
                        actions=(jnp.zeros((k, method.action_dim), jnp.float32) if continuous
                                 else jnp.zeros((k, 1), jnp.int32)),
                        rewards=jnp.zeros(k, jnp.float32), collected=jnp.float32(0.0),
                        target=jnp.float32(0.0), t=jnp.int32(0))

        def episode_target(obs):
            if self.reference is None:
                return jnp.float32(self.target)
            starts, returns = (jnp.asarray(x) for x in self.reference)
            nearest = jnp.argmin(((starts - obs.reshape(1, -1)) ** 2).sum(-1))
            return jnp.float32(self.target) * returns[nearest]

        def act(key, state, obs, env_state, env_params):
            slot = jnp.minimum(state["t"], history - 1)
            # Past `history` steps, slide left by one so that the newest step sits in the last
            # history slot.
            full = state["t"] >= history

            def slide(x):
                return jnp.where(full, jnp.roll(x, -1, axis=0), x)

            obs_buf = slide(state["obs"]).at[slot].set(obs.reshape(state["obs"].shape[1:]))
            if self.goal_observation is not None:
                obs_buf = obs_buf.at[k - 1].set(self.goal_observation(obs).reshape(
                    state["obs"].shape[1:]))
            act_buf = slide(state["actions"])
            target = jnp.where(state["t"] == 0, episode_target(obs) if conditioned else 0.0,
                               state["target"])
            # The return still to collect from the snippet's first step, and that step's time.
            collected = state["collected"] + jnp.where(full, state["rewards"][0], 0.0)
            rewards = slide(state["rewards"])
            first = jnp.maximum(state["t"] - (history - 1), 0)
            snippet = Trajectories(
                observations=obs_buf[None], actions=act_buf[None],
                rewards=jnp.zeros((1, k)), returns_to_go=jnp.full((1, k), target - collected),
                timesteps=jnp.full((1, k), first, jnp.int32), mask=jnp.ones((1, k), bool))
            mask = jax.tree.map(lambda m: m[None], TASKS[task].mask(slot, k))
            out = method.apply(params, snippet, mask)[1][0, slot]
            if continuous:
                action = out
                stored = out
            else:
                action = jax.random.categorical(key, out).astype(jnp.int32)
                stored = action[None]
            return action, dict(obs=obs_buf, actions=act_buf.at[slot].set(stored),
                                rewards=rewards, collected=collected, target=target,
                                t=state["t"] + 1)

        def update(key, state, transition, env_params):
            slot = jnp.minimum(state["t"] - 1, history - 1)  # the step just taken
            state = dict(state, rewards=state["rewards"].at[slot].set(transition.reward))
            return jax.tree.map(lambda new, reset: jnp.where(transition.done, reset, new),
                                state, init(key, env_params))

        return Source(init, act, update, name=f"model_{task}")


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
