"""Pixel learning histories on disk in uint8 chunks, sampled into device batches by a prefetcher.

500k 64x64 RGB frames are 6 GB: they are written once in chunks of `.npy` files that are opened
memory-mapped, so only the sampled windows are read.

Layout of a store directory (version 1):
  meta.json                {"format": "icrl-jax-pixel-store", "version": 1, "obs_shape": [H, W, C],
                            "action_shape": [...], "chunks": [num_steps of chunk 0, ...]}
  chunk_{k:05d}.obs.npy     uint8 (T_k, H, W, C)
  chunk_{k:05d}.actions.npy int32 (T_k, *action_shape)
  chunk_{k:05d}.rewards.npy float32 (T_k,)
  chunk_{k:05d}.dones.npy   bool (T_k,)
  chunk_{k:05d}.history.npy int32 (T_k,)  id of the learning history each step belongs to
A sampled window never crosses a chunk or a history boundary.

`StepWindowsLoader` turns sampled windows into AD `StepWindows` (with each window's previous
action and reward) for `icrl_jax.pipeline.train.train(loader_fn=...)`.
"""

from __future__ import annotations

import json
import os
import queue
import threading

import jax
import numpy as np
from icrl_jax.core.files import write_json
from icrl_jax.data.windows import StepWindows

FORMAT = "icrl-jax-pixel-store"
FIELDS = ("obs", "actions", "rewards", "dones", "history")


class PixelStoreWriter:
    """Append histories; flush every `chunk_steps` steps. Use as a context manager or `close()`.

    `add_history(obs uint8 (T, H, W, C), actions int (T, ...), rewards (T,), dones (T,))`: one
    learning history (a history longer than a chunk is split; windows stay within the parts).
    """

    def __init__(self, directory: str, obs_shape, action_shape=(), chunk_steps: int = 10_000):
        self.dir, self.chunk_steps = directory, int(chunk_steps)
        self.obs_shape, self.action_shape = tuple(obs_shape), tuple(action_shape)
        os.makedirs(directory, exist_ok=True)
        self.chunks: list[int] = []
        self._buf: dict[str, list[np.ndarray]] = {f: [] for f in FIELDS}
        self._buffered = 0
        self._next_history = 0

    def add_history(self, obs, actions, rewards, dones) -> None:
        obs = np.asarray(obs)
        t = obs.shape[0]
        if obs.dtype != np.uint8 or obs.shape[1:] != self.obs_shape:
            raise ValueError(f"obs must be uint8 (T, {self.obs_shape}), got {obs.dtype}{obs.shape}")
        actions = np.asarray(actions, np.int32)
        if actions.shape != (t, *self.action_shape):
            raise ValueError(f"actions must be ({t}, {self.action_shape}), got {actions.shape}")
        arrays = {"obs": obs, "actions": actions, "rewards": np.asarray(rewards, np.float32),
                  "dones": np.asarray(dones, bool),
                  "history": np.full(t, self._next_history, np.int32)}
        for name in ("rewards", "dones"):
            if arrays[name].shape != (t,):
                raise ValueError(f"{name} must be ({t},), got {arrays[name].shape}")
        self._next_history += 1
        start = 0
        while start < t:
            take = min(t - start, self.chunk_steps - self._buffered)
            for f in FIELDS:
                self._buf[f].append(arrays[f][start:start + take])
            self._buffered += take
            start += take
            if self._buffered == self.chunk_steps:
                self._flush()

    def _flush(self) -> None:
        if not self._buffered:
            return
        k = len(self.chunks)
        for f in FIELDS:
            np.save(os.path.join(self.dir, f"chunk_{k:05d}.{f}.npy"), np.concatenate(self._buf[f]))
            self._buf[f] = []
        self.chunks.append(self._buffered)
        self._buffered = 0

    def close(self) -> None:
        self._flush()
        meta = {"format": FORMAT, "version": 1, "obs_shape": list(self.obs_shape),
                "action_shape": list(self.action_shape), "chunks": self.chunks}
        write_json(os.path.join(self.dir, "meta.json"), meta)  # the store exists once complete

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PixelStore:
    """A store opened memory-mapped. `sample(rng, batch, seq_len)` -> dict of host arrays:
    obs uint8 `(B, L, H, W, C)`, actions int32 `(B, L, ...)`, rewards float32 `(B, L)`,
    dones bool `(B, L)`."""

    def __init__(self, directory: str):
        path = os.path.join(directory, "meta.json")
        if not os.path.exists(path):
            raise FileNotFoundError(f"no pixel store at {directory} (meta.json missing: "
                                    f"was the writer closed?)")
        with open(path) as f:
            self.meta = json.load(f)
        if self.meta.get("format") != FORMAT or self.meta.get("version") != 1:
            raise ValueError(f"{directory} is not a version-1 {FORMAT}: {self.meta}")
        self.chunks = [{f: np.load(os.path.join(directory, f"chunk_{k:05d}.{f}.npy"), mmap_mode="r")
                        for f in FIELDS} for k in range(len(self.meta["chunks"]))]
        self.num_steps = int(sum(self.meta["chunks"]))
        self._starts: dict[tuple, list[np.ndarray]] = {}

    def _valid_starts(self, seq_len: int, shard: tuple[int, int] = (0, 1)
                      ) -> list[np.ndarray]:
        """Per chunk, start indices whose window stays in one history, int64 `(S_k,)`; with
        `shard = (index, count)`, only in histories h with h % count == index."""
        key = (seq_len, tuple(shard))
        if key not in self._starts:
            index, count = shard
            starts = []
            for c in self.chunks:
                h = np.asarray(c["history"])
                if len(h) < seq_len:
                    starts.append(np.zeros(0, np.int64))
                    continue
                ok = h[:len(h) - seq_len + 1] == h[seq_len - 1:]
                starts.append(np.flatnonzero(ok & (h[:len(h) - seq_len + 1] % count == index)))
            if not sum(len(s) for s in starts):
                part = f" of part {index} of {count} (histories h % {count} == {index})" \
                    if count > 1 else ""
                raise ValueError(f"no history{part} in the store is {seq_len} steps long")
            self._starts[key] = starts
        return self._starts[key]

    def sample(self, rng: np.random.Generator, batch: int, seq_len: int,
               previous_fill: int | None = None, shard: tuple[int, int] = (0, 1)
               ) -> dict[str, np.ndarray]:
        """`batch` windows of `seq_len` steps, each inside one history (with `shard =
        (index, count)`, one of the histories h with h % count == index: a process's part).

        With `previous_fill` (AD's "no previous action" id), also prev_actions int32
        `(B, L, ...)` = a_{t-1} and prev_rewards float32 `(B, L)` = r_{t-1}, taken from the step
        before the window when it belongs to the same history (also across a chunk boundary),
        else `previous_fill` and 0 (the history's first step).
        """
        starts = self._valid_starts(seq_len, shard)
        sizes = np.array([len(s) for s in starts], np.float64)
        chunk_ids = rng.choice(len(starts), size=batch, p=sizes / sizes.sum())
        out = {f: [] for f in ("obs", "actions", "rewards", "dones")}
        prev_a, prev_r = [], []
        for k in chunk_ids:
            s = int(starts[k][rng.integers(len(starts[k]))])
            for f in out:
                out[f].append(np.asarray(self.chunks[k][f][s:s + seq_len]))
            if previous_fill is not None:
                a0, r0 = self._step_before(int(k), s, previous_fill)
                prev_a.append(np.concatenate([a0[None], out["actions"][-1][:-1]]))
                prev_r.append(np.concatenate([[r0], out["rewards"][-1][:-1]]).astype(np.float32))
        out = {f: np.stack(v) for f, v in out.items()}
        if previous_fill is not None:
            out["prev_actions"] = np.stack(prev_a).astype(np.int32)
            out["prev_rewards"] = np.stack(prev_r)
        return out

    def _step_before(self, k: int, s: int, fill: int) -> tuple[np.ndarray, float]:
        """(action, reward) of the step before step s of chunk k if it is in the same history."""
        c = self.chunks[k]
        if s > 0:
            prev_chunk, i = c, s - 1
        elif k > 0 and len(self.chunks[k - 1]["history"]):
            prev_chunk, i = self.chunks[k - 1], len(self.chunks[k - 1]["history"]) - 1
        else:
            prev_chunk = None
        if prev_chunk is None or int(prev_chunk["history"][i]) != int(c["history"][s]):
            shape = tuple(self.meta["action_shape"])
            return np.full(shape, fill, np.int32), 0.0
        return np.asarray(prev_chunk["actions"][i], np.int32), float(prev_chunk["rewards"][i])


class PrefetchLoader:
    """Iterator of device batches sampled from a `PixelStore` by a background thread.

    The thread reads the memory-mapped windows and `jax.device_put`s them (optionally with a
    sharding) `prefetch` batches ahead, so disk reads overlap the training step. Batches are
    reproducible: by default one seeded numpy Generator draws all windows, in order; with
    `start_batch` set, batch i is drawn by its own Generator seeded with (seed, i), starting at
    i = start_batch, so a resumed training run gets the batches an uninterrupted run would have.
    `sample_kwargs` go to `PixelStore.sample` (e.g. previous_fill); `device_put=False` yields
    host numpy arrays (for a consumer that is itself a host callback). `shard = (index, count)`:
    windows of the store's part `index` of `count` only (`PixelStore.sample`), from a stream of
    its own; a multi-process run gives each process one part.
    """

    def __init__(self, store: PixelStore, batch_size: int, seq_len: int, seed: int = 0,
                 prefetch: int = 2, sharding=None, start_batch: int | None = None,
                 sample_kwargs: dict | None = None, device_put: bool = True,
                 shard: tuple[int, int] = (0, 1)):
        self.store, self.batch_size, self.seq_len = store, batch_size, seq_len
        # One process's stream is the one-process stream; more get one stream per part.
        self.seed = seed if shard[1] == 1 else (seed, *shard)
        self.rng = np.random.default_rng(self.seed)
        self.next_batch = start_batch
        self.sample_kwargs = dict(sample_kwargs or {}, shard=tuple(shard))
        self.sharding, self.device_put = sharding, device_put
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True, name="pixel-prefetch")
        self._thread.start()

    def _rng(self) -> np.random.Generator:
        if self.next_batch is None:
            return self.rng
        rng = np.random.default_rng((*np.atleast_1d(self.seed), self.next_batch))
        self.next_batch += 1
        return rng

    def _produce(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.store.sample(self._rng(), self.batch_size, self.seq_len,
                                          **self.sample_kwargs)
                if self.device_put:
                    batch = jax.device_put(batch, self.sharding)
                while not self._stop.is_set():
                    try:
                        self._queue.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except Exception as exc:  # surface loader errors in the consumer
            self._queue.put(exc)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, jax.Array]:
        item = self._queue.get()
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _as_step_windows(batch: dict, num_actions: int, xp=np):

    n = batch["actions"].shape[0]
    return StepWindows(observations=batch["obs"], prev_actions=batch["prev_actions"],
                       prev_rewards=batch["prev_rewards"], actions=batch["actions"],
                       action_mask=xp.ones((n, num_actions), bool))


def example_step_windows(store: PixelStore, num_actions: int, seq_len: int, batch: int = 1,
                         shard: tuple[int, int] = (0, 1)):
    """A few AD `StepWindows` from the store (host arrays, of its part `shard`), e.g. to shape
    a model's parameters: observations uint8 `(B, L, H, W, C)`, all-true action mask
    `(B, num_actions)`."""
    if tuple(store.meta["action_shape"]):
        raise ValueError(f"AD windows need scalar actions; the store has action shape "
                         f"{store.meta['action_shape']}")
    sample = store.sample(np.random.default_rng(0), batch, seq_len, previous_fill=num_actions,
                          shard=tuple(shard))
    return _as_step_windows(sample, num_actions)


def _per_call_loader(store: PixelStore, batch_size: int, seq_len: int, steps_per_call: int,
                     start_step: int, seed: int, prefetch: int, shard: tuple[int, int],
                     sharding=None, sample_kwargs: dict | None = None) -> PrefetchLoader:
    """A `PrefetchLoader` of one jitted call's `steps_per_call * batch_size` windows per item,
    item i drawn from (seed, i) and the first item the one of train step `start_step`."""
    if start_step % steps_per_call:
        raise ValueError(f"start step {start_step} is not a multiple of steps_per_call "
                         f"{steps_per_call}")
    return PrefetchLoader(store, steps_per_call * batch_size, seq_len, seed=seed,
                          prefetch=prefetch, sharding=sharding,
                          start_batch=start_step // steps_per_call, sample_kwargs=sample_kwargs,
                          device_put=shard[1] == 1, shard=shard)


class StepWindowsLoader:
    """AD `StepWindows` for `icrl_jax.pipeline.train.train(loader_fn=...)`: each item holds the windows
    of one jitted call, `steps_per_call * batch_size` rows, prefetched to the device.

    Item i is drawn from (seed, i) (`PrefetchLoader(start_batch=...)`), and a run resumed at
    train step s starts at item s // steps_per_call, so it sees the batches an uninterrupted run
    would have. `shard`: see `PrefetchLoader` (`batch_size` is then this part's share).
    """

    def __init__(self, store: PixelStore, num_actions: int, batch_size: int, seq_len: int,
                 steps_per_call: int, start_step: int = 0, seed: int = 0, prefetch: int = 2,
                 sharding=None, shard: tuple[int, int] = (0, 1)):
        example_step_windows(store, num_actions, seq_len, shard=shard)  # checks the windows
        self.num_actions = num_actions
        self.loader = _per_call_loader(store, batch_size, seq_len, steps_per_call, start_step,
                                       seed, prefetch, shard, sharding,
                                       {"previous_fill": num_actions})

    def __iter__(self):
        return self

    def __next__(self):
        import jax.numpy as jnp
        return _as_step_windows(next(self.loader), self.num_actions,
                                jnp if self.loader.device_put else np)

    def close(self) -> None:
        self.loader.close()


class FramesLoader:
    """Single frames for `icrl_jax.pipeline.train.train(loader_fn=...)` (e.g. pretraining a VQ-VAE):
    each item is uint8 `(steps_per_call * batch_size, H, W, C)`, frames drawn uniformly over
    the store's steps (its part `shard`), item i from (seed, i) as in `StepWindowsLoader`, so a
    run resumed at step s sees the frames an uninterrupted run would."""

    def __init__(self, store: PixelStore, batch_size: int, steps_per_call: int,
                 start_step: int = 0, seed: int = 0, prefetch: int = 2,
                 shard: tuple[int, int] = (0, 1)):
        self.loader = _per_call_loader(store, batch_size, 1, steps_per_call, start_step, seed,
                                       prefetch, shard)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.loader)["obs"][:, 0]

    def close(self) -> None:
        self.loader.close()
