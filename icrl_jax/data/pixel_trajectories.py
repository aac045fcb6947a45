"""Decision Transformer windows from a pixel store of whole episodes.

A `PixelStore` (`data/pixel_store.py`) written with one history per episode (every history ends
with `done`) holds a DT dataset: its small per-step arrays (rewards, history ids) are read once
to give every step its return-to-go and episode timestep, and windows are cut like
`data.trajectories.sample_trajectory_windows` does on device: the window ends at a uniformly
chosen step and reaches back at most K steps into the same episode, the missing steps before the
episode start being masked left padding (the layout of an evaluation rollout's sliding context).
Only the frames of the sampled windows are read from the memory-mapped chunks.

`PixelTrajectoryStore.sample` returns a `Trajectories`, so `PrefetchLoader` prefetches it to the
device unchanged.
"""

from __future__ import annotations

import numpy as np

from icrl_jax.data.pixel_store import PixelStore
from icrl_jax.data.trajectories import Trajectories


class PixelTrajectoryStore(PixelStore):
    """A pixel store of whole episodes, sampled as DT windows (see module docstring).

    Attributes (over all S steps of the store, in order):
      returns_to_go float32 `(S,)`, timesteps int32 `(S,)` (step within its episode),
      episode_start int64 `(S,)` (global index of the episode's first step),
      episode_returns float32 `(E,)`, episode_lengths int64 `(E,)`.
    """

    def __init__(self, directory: str):
        super().__init__(directory)
        if not self.chunks:
            raise ValueError(f"{directory}: the pixel store holds no steps")
        history = np.concatenate([np.asarray(c["history"]) for c in self.chunks])
        rewards = np.concatenate([np.asarray(c["rewards"]) for c in self.chunks]).astype(np.float64)
        dones = np.concatenate([np.asarray(c["dones"]) for c in self.chunks])
        starts = np.flatnonzero(np.r_[True, history[1:] != history[:-1]])
        ends = np.r_[starts[1:], len(history)] - 1
        if not dones[ends].all():
            bad = int(history[ends[~dones[ends]][0]])
            raise ValueError(f"{directory}: history {bad} does not end with done; a DT store needs "
                             f"one history per complete episode")
        lengths = ends - starts + 1
        episode = np.repeat(np.arange(len(starts)), lengths)
        self.episode_start = starts[episode]
        self.timesteps = (np.arange(len(history)) - self.episode_start).astype(np.int32)
        # Suffix sums within each episode: total of the episode minus the rewards before t.
        before = np.cumsum(rewards) - rewards
        totals = np.add.reduceat(rewards, starts)
        self.returns_to_go = (totals[episode]
                              - (before - before[starts][episode])).astype(np.float32)
        self.episode_returns = totals.astype(np.float32)
        self.episode_lengths = lengths
        self._chunk_offsets = np.r_[0, np.cumsum(self.meta["chunks"])]
        self._actions = np.concatenate([np.asarray(c["actions"]) for c in self.chunks])
        self._rewards = rewards.astype(np.float32)

    @property
    def num_episodes(self) -> int:
        return len(self.episode_lengths)

    def _frames(self, start: int, stop: int) -> np.ndarray:
        """uint8 frames of global steps [start, stop), across chunk boundaries if need be."""
        parts = []
        k = int(np.searchsorted(self._chunk_offsets, start, side="right") - 1)
        while start < stop:
            local = start - self._chunk_offsets[k]
            take = min(stop, self._chunk_offsets[k + 1]) - start
            parts.append(np.asarray(self.chunks[k]["obs"][local:local + take]))
            start += take
            k += 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def window(self, end: int, seq_len: int) -> Trajectories:
        """The window of `seq_len` steps ending at global step `end` (fields `(K, ...)`)."""
        first = max(int(self.episode_start[end]), end - seq_len + 1)
        n, pad = end + 1 - first, seq_len - (end + 1 - first)

        def left_pad(x):
            return np.concatenate([np.zeros((pad,) + x.shape[1:], x.dtype), x]) if pad else x

        steps = slice(first, end + 1)
        return Trajectories(
            observations=left_pad(self._frames(first, end + 1)),
            actions=left_pad(self._actions[steps].astype(np.int32)),
            rewards=left_pad(self._rewards[steps]),
            returns_to_go=left_pad(self.returns_to_go[steps]),
            timesteps=left_pad(self.timesteps[steps]),
            mask=left_pad(np.ones(n, bool)))

    def sample(self, rng: np.random.Generator, batch: int, seq_len: int,
               shard: tuple[int, int] = (0, 1), **kwargs) -> Trajectories:
        """`batch` windows ending at uniformly drawn steps -> `Trajectories` of `(B, K, ...)`
        host arrays (observations uint8 `(B, K, H, W, C)`, actions int32 `(B, K, n)`).
        `shard = (index, count)`: steps of episodes e with e % count == index only."""
        if kwargs:
            raise TypeError(f"PixelTrajectoryStore.sample takes no {sorted(kwargs)}")
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        index, count = shard
        if count == 1:
            ends = rng.integers(0, self.num_steps, size=batch)
        else:
            if count > self.num_episodes:
                raise ValueError(f"{self.num_episodes} episodes cannot be split into {count} "
                                 f"parts")
            episodes = np.arange(index, self.num_episodes, count)
            # a uniform step of the part: an episode by its length, then a step in it
            lengths = self.episode_lengths[episodes]
            chosen = rng.choice(len(episodes), size=batch, p=lengths / lengths.sum())
            starts = np.r_[0, np.cumsum(self.episode_lengths)][episodes[chosen]]
            ends = starts + rng.integers(0, lengths[chosen])
        windows = [self.window(int(e), seq_len) for e in ends]
        return Trajectories(*(np.stack(f) for f in zip(*(
            (w.observations, w.actions, w.rewards, w.returns_to_go, w.timesteps, w.mask)
            for w in windows))))
