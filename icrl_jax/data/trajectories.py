"""Offline episode data for Decision Transformers: returns-to-go, padded windows, a noisy expert.

Datasets are generated like every other dataset in the project (`generate_histories`: vmap over
tasks, scan over steps) and then cut into fixed-length episodes. A training window is K
consecutive steps of one episode ending at a real step, drawn uniformly over all real steps of all
episodes (so an episode in proportion to its length); windows that start before the episode are
left-padded with masked steps, exactly like the sliding context of an evaluation rollout, so a
step sits at the same token positions in training and at test time.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.data.history import History, HistoryFormatError
from icrl_jax.data.train_data import window_at


@flax.struct.dataclass
class Trajectories:
    """N episodes (or B windows) of T steps in the Decision Transformer format.

    Attributes:
      observations: float32 `(N, T, *obs_shape)` or int32 ids `(N, T)`: s_t.
      actions: int32 `(N, T, n)` multi-discrete components (n = 1 for a discrete action), or
        float32 `(N, T, d)` continuous actions: a_t.
      rewards: float32 `(N, T)`: r_t.
      returns_to_go: float32 `(N, T)`: R_t = r_t + ... + r_{T-1} of the episode (unscaled).
      timesteps: int32 `(N, T)`: step index within the episode.
      mask: bool `(N, T)`: False for padding steps (never attended to, not in the loss).
    """

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    returns_to_go: jax.Array
    timesteps: jax.Array
    mask: jax.Array

    @property
    def num_episodes(self) -> int:
        return self.rewards.shape[0]

    @property
    def length(self) -> int:
        return self.rewards.shape[1]


def returns_to_go(rewards: jax.Array) -> jax.Array:
    """float `(..., T)` rewards -> `(..., T)` suffix sums (reverse cumulative sum)."""
    return jnp.flip(jnp.cumsum(jnp.flip(rewards, -1), -1), -1)


def episodes_from_history(history: History, episode_length: int, split_action=None) -> Trajectories:
    """Cut N histories of E fixed-length episodes into N * E episodes.

    Args:
      history: histories whose episodes all last `episode_length` steps (truncation only).
      split_action: flat action int `(...)` -> components int32 `(..., n)`; None keeps the flat
        index as a single component (n = 1).
    """
    n, length = history.actions.shape
    if length % episode_length:
        raise HistoryFormatError(f"histories of {length} steps are not whole episodes of "
                                 f"{episode_length} steps")
    dones = np.asarray(history.dones).reshape(n, -1, episode_length)
    if not (dones[..., -1].all() and not dones[..., :-1].any()):
        raise HistoryFormatError(f"episodes do not all end after exactly {episode_length} steps")

    def episodes(x):
        return jnp.asarray(x).reshape((-1, episode_length) + x.shape[2:])

    if jnp.issubdtype(jnp.asarray(history.actions).dtype, jnp.floating):
        actions = jnp.asarray(history.actions, jnp.float32)  # continuous `(N, T, d)` as they are
    else:
        actions = jnp.asarray(history.actions, jnp.int32)
        actions = actions[..., None] if split_action is None else split_action(actions)
    rewards = episodes(jnp.asarray(history.rewards, jnp.float32))
    return Trajectories(
        observations=episodes(history.observations), actions=episodes(actions), rewards=rewards,
        returns_to_go=returns_to_go(rewards),
        timesteps=jnp.broadcast_to(jnp.arange(episode_length, dtype=jnp.int32), rewards.shape),
        mask=jnp.ones(rewards.shape, bool))


def pad_for_windows(data: Trajectories, window: int) -> Trajectories:
    """Prepend `window - 1` masked zero steps to every episode: `(N, T)` -> `(N, T + window - 1)`,
    so that `sample_trajectory_windows` can cut fixed-shape windows ending at any real step."""
    def pad(x):
        widths = [(0, 0), (window - 1, 0)] + [(0, 0)] * (x.ndim - 2)
        return jnp.pad(x, widths)
    return jax.tree.map(pad, data)


def sample_trajectory_windows(data: Trajectories, key: jax.Array, batch_size: int,
                              window: int) -> Trajectories:
    """`batch_size` windows of `window` steps whose last step is real, on device.

    Args:
      data: `Trajectories` `(N, L, ...)` whose real steps (`mask`) are one contiguous run per
        row: `pad_for_windows` episodes (left padding, then right padding for episodes shorter
        than the longest) or whole unpadded episodes; at least one row must hold a window that
        ends at a real step.
    Returns:
      `Trajectories` `(B, window, ...)`.

    A window is identified by its real end step; the end is uniform over all such steps of all
    rows, so a row is drawn in proportion to its number of them (its length, on padded data)
    and every logged step is the last target equally often. On padded data a window ending at
    step t holds steps t-K+1..t, the ones before the episode start being masked padding; on
    unpadded episodes the windows are whole real steps. Right padding is never a window's end.
    """
    num_episodes, padded = data.rewards.shape
    if padded < window:
        raise ValueError(f"episodes of {padded} steps cannot supply windows of {window} steps")
    # Start s of a row is valid when position s + window - 1 is real; valid starts are contiguous.
    ends_real = data.mask[:, window - 1:]
    counts = ends_real.sum(1).astype(jnp.int32)
    first = jnp.argmax(ends_real, 1).astype(jnp.int32)
    # One uniform draw over all valid (row, start) pairs: a cumulative sum over rows, not steps.
    cumulative = jnp.cumsum(counts)
    picks = jax.random.randint(key, (batch_size,), 0, cumulative[-1])
    rows = jnp.searchsorted(cumulative, picks, side="right").astype(jnp.int32)
    starts = first[rows] + picks - (cumulative[rows] - counts[rows])

    def window_of(row, start):
        return jax.tree.map(lambda x: window_at(x, row, start, window), data)

    return jax.vmap(window_of)(rows, starts)


def full_window_starts(mask: np.ndarray, window: int) -> np.ndarray:
    """(episode, start) of every window of `window` real steps in right-padded episodes with
    real-step `mask` bool `(N, T)`, int32 `(M, 2)`."""
    lengths = np.asarray(mask).sum(1)
    return np.array([(n, s) for n, length in enumerate(lengths)
                     for s in range(int(length) - window + 1)], np.int32).reshape(-1, 2)


def sample_listed_windows(data: tuple[Trajectories, jax.Array], key: jax.Array, batch_size: int,
                          window: int) -> Trajectories:
    """`batch_size` windows, uniform over the listed (episode, start) pairs of `data` =
    (episodes, `full_window_starts(...)`), on device: whole real steps of episodes of any
    lengths. Returns `Trajectories` with `(B, K, ...)`."""
    episodes, starts = data
    picks = starts[jax.random.randint(key, (batch_size,), 0, starts.shape[0])]

    def window_of(row, start):
        return jax.tree.map(lambda x: window_at(x, row, start, window),
                            episodes)

    return jax.vmap(window_of)(picks[:, 0], picks[:, 1])
