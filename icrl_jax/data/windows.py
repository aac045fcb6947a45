"""Training windows sampled on device from learning histories.

`subsample_episodes` implements the n-gram paper's `subsample` hyperparameter (Table 2): each
learning history keeps only every k-th episode (episodes 0, k, 2k, ...), so a window of a few
episodes spans k times more of the source's learning, i.e. shows k times faster improvement.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.data.history import History, HistoryFormatError
from icrl_jax.data.train_data import window_at


def shift_right(x: jax.Array, fill) -> jax.Array:
    """`(N, T, ...)` -> the same with x[:, t] moved to t + 1 and `fill` at t = 0."""
    pad = jnp.full_like(x[:, :1], fill)
    return jnp.concatenate([pad, x[:, :-1]], axis=1)


@flax.struct.dataclass
class StepWindows:
    """B windows of L consecutive steps, in the AD step format.

    Attributes:
      observations: int `(B, L)` or float `(B, L, *obs_shape)`: o_t.
      prev_actions: int32 `(B, L)`: a_{t-1} (`num_actions` = none at a history's first step).
      prev_rewards: float32 `(B, L)`: r_{t-1} (0 at a history's first step).
      actions: int32 `(B, L)`: a_t, the prediction targets.
      action_mask: bool `(B, A)`: the available actions of each window's task.
      lengths: int32 `(N,)` or None: the valid steps of each row (rows padded at the end to a
        common length; only `subsample_episodes` of histories with early-ending episodes
        makes ragged rows). None: every row is valid to its end. Sampled windows carry None.
      episode_starts: bool `(B, L)` or None: o_t is the first observation of an episode (a
        history's first step, and every step after a `done`): the reset every agent is told
        of, which the other fields show only indirectly. None where the data does not say
        (pixel stores); models read it only with `model.episode_starts`.
      episode_returns: float32 `(B, L)` or None: the reward collected in o_t's episode before
        o_t (0 on an episode's first step): Key-to-Door's key flag, which its observation
        hides but the context shows. None where the data does not say (pixel stores); read by
        the n-gram ids that ask for it (`ngram_match="observation_return"`).
    """

    observations: jax.Array
    prev_actions: jax.Array
    prev_rewards: jax.Array
    actions: jax.Array
    action_mask: jax.Array
    lengths: jax.Array | None = None
    episode_starts: jax.Array | None = None
    episode_returns: jax.Array | None = None


def episode_returns_before(prev_rewards: jax.Array, episode_starts: jax.Array) -> jax.Array:
    """The reward collected in each step's episode before the step: float32 `(B, T)` from
    r_{t-1} `(B, T)` and the steps that start episodes, bool `(B, T)` (a scan, so sums are
    exact in the order the rewards came)."""
    def accumulate(total, step):
        prev_reward, starts = step
        total = jnp.where(starts, 0.0, total + prev_reward)
        return total, total

    _, totals = jax.lax.scan(accumulate, jnp.zeros(prev_rewards.shape[0], jnp.float32),
                             (prev_rewards.T.astype(jnp.float32), episode_starts.T))
    return totals.T


def to_step_windows(history: History, lengths: np.ndarray | None = None) -> StepWindows:
    """Whole histories as N windows of length T (what `sample_windows` slices from).

    `lengths` (N,): the valid prefix of each history (from `subsample_episodes`), or None.
    """
    actions = jnp.asarray(history.actions, jnp.int32)
    prev_rewards = shift_right(jnp.asarray(history.rewards, jnp.float32), 0.0)
    episode_starts = shift_right(jnp.asarray(history.dones, bool), True)
    return StepWindows(
        observations=jnp.asarray(history.observations),
        prev_actions=shift_right(actions, history.num_actions),
        prev_rewards=prev_rewards,
        actions=actions,
        action_mask=jnp.asarray(history.action_mask, bool),
        lengths=None if lengths is None else jnp.asarray(lengths, jnp.int32),
        episode_starts=episode_starts,
        episode_returns=episode_returns_before(prev_rewards, episode_starts),
    )


def subsample_episodes(history: History, every: int) -> tuple[History, np.ndarray | None]:
    """Keep episodes 0, `every`, 2 `every`, ... of each learning history (the n-gram paper's
    `subsample`), joined in order into one shorter stream per history.

    A history's last, unfinished episode (no `done` at its end) counts as an episode. The kept
    steps are contiguous in the result, so `to_step_windows` gives the first step of a kept
    episode the last action and reward of the kept episode before it, as the stream a model
    sees when it reads the subsampled history.

    Returns `(subsampled, lengths)`. When every history keeps the same number of steps (episodes
    of fixed length, e.g. Dark Room), the result is a plain `(N, T')` History and `lengths` is
    None. Otherwise (episodes that end early, e.g. Key-to-Door) rows are padded at the end to the
    longest (zeros, `done` True) and `lengths` `(N,)` gives each row's valid steps, which
    `sample_windows` respects. `every` = 1 returns `history` itself.
    """
    every = int(every)
    if every < 1:
        raise ValueError(f"subsample must be a positive number of episodes, got {every}")
    if every == 1:
        return history, None
    history = history.to_numpy()
    dones = np.asarray(history.dones, bool)
    episode = np.cumsum(dones, axis=1) - dones  # the ending step belongs to its episode
    keep = episode % every == 0
    lengths = keep.sum(1)
    longest = int(lengths.max())
    # Stable order of kept steps first: row n's kept steps, in time order, then the rest.
    order = np.argsort(~keep, axis=1, kind="stable")[:, :longest]
    valid = np.arange(longest)[None, :] < lengths[:, None]

    def take(x, fill):
        x = np.asarray(x)
        rows = np.take_along_axis(x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1)
        mask = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
        return np.where(mask, rows, np.asarray(fill, x.dtype))

    subsampled = History(observations=take(history.observations, 0),
                         actions=take(history.actions, 0),
                         rewards=take(history.rewards, 0),
                         dones=take(dones, True),
                         task_ids=np.asarray(history.task_ids),
                         action_mask=np.asarray(history.action_mask))
    ragged = bool((lengths != longest).any())
    return subsampled, (lengths.astype(np.int32) if ragged else None)


def check_dataset(history: History, *, num_actions: int, num_observations: int | None,
                  observation_shape: tuple[int, ...], window: int,
                  lengths: np.ndarray | None = None) -> None:
    """Raise `HistoryFormatError` when a dataset does not fit the model it is meant to train.

    `lengths`: the valid steps of each (ragged, subsampled) history, see `subsample_episodes`.
    """
    history.validate()
    if history.num_actions != num_actions:
        raise HistoryFormatError(
            f"dataset has {history.num_actions} actions per task but the model expects {num_actions}")
    obs = np.asarray(history.observations)
    if num_observations is not None:
        if obs.ndim != 2:
            raise HistoryFormatError(
                f"observations must be discrete ids of shape (N, T), got {obs.shape}")
        if obs.min() < 0 or obs.max() >= num_observations:
            raise HistoryFormatError(
                f"observation ids span [{obs.min()}, {obs.max()}] but the model embeds "
                f"{num_observations} ids")
    elif tuple(obs.shape[2:]) != tuple(observation_shape):
        raise HistoryFormatError(
            f"observations have per-step shape {obs.shape[2:]}, expected {tuple(observation_shape)}")
    if history.length < window:
        raise HistoryFormatError(
            f"histories have {history.length} steps, shorter than the training window {window}"
            " (with data.subsample > 1: fewer kept episodes than the window needs)")
    if lengths is not None and int(np.min(lengths)) < window:
        short = int((np.asarray(lengths) < window).sum())
        raise HistoryFormatError(
            f"{short} subsampled histories have fewer than {window} steps (shortest "
            f"{int(np.min(lengths))}), the training window; lower data.subsample or the window")
    actions = np.asarray(history.actions)
    if actions.min() < 0 or actions.max() >= num_actions:
        raise HistoryFormatError(f"actions span [{actions.min()}, {actions.max()}], outside "
                                 f"[0, {num_actions})")


def sample_windows(data: StepWindows, key: jax.Array, batch_size: int, window: int) -> StepWindows:
    """Uniformly sample `batch_size` windows of `window` steps (history, then offset), on device.

    With `data.lengths`, a window of row n starts in [0, lengths[n] - window].
    """
    num_histories, length = data.actions.shape
    key_history, key_start = jax.random.split(key)
    rows = jax.random.randint(key_history, (batch_size,), 0, num_histories)
    last_start = length - window if data.lengths is None else data.lengths[rows] - window
    starts = jax.random.randint(key_start, (batch_size,), 0, last_start + 1)

    def window_of(row, start):
        return StepWindows(
            observations=window_at(data.observations, row, start, window),
            prev_actions=window_at(data.prev_actions, row, start, window),
            prev_rewards=window_at(data.prev_rewards, row, start, window),
            actions=window_at(data.actions, row, start, window),
            action_mask=data.action_mask[row],
            episode_starts=(None if data.episode_starts is None
                            else window_at(data.episode_starts, row, start, window)),
            episode_returns=(None if data.episode_returns is None
                             else window_at(data.episode_returns, row, start, window)),
        )

    return jax.vmap(window_of)(rows, starts)
