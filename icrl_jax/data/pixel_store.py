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
"""

from __future__ import annotations

import json
import os
import queue
import threading

import jax
import numpy as np

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
        tmp = os.path.join(self.dir, "meta.json.tmp")
        with open(tmp, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, os.path.join(self.dir, "meta.json"))  # the store exists once complete

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
        self._starts: dict[int, list[np.ndarray]] = {}

    def _valid_starts(self, seq_len: int) -> list[np.ndarray]:
        """Per chunk, start indices whose window stays in one history, int64 `(S_k,)`."""
        if seq_len not in self._starts:
            starts = []
            for c in self.chunks:
                h = np.asarray(c["history"])
                if len(h) < seq_len:
                    starts.append(np.zeros(0, np.int64))
                    continue
                starts.append(np.flatnonzero(h[:len(h) - seq_len + 1] == h[seq_len - 1:]))
            if not sum(len(s) for s in starts):
                raise ValueError(f"no history in the store is {seq_len} steps long")
            self._starts[seq_len] = starts
        return self._starts[seq_len]

    def sample(self, rng: np.random.Generator, batch: int, seq_len: int) -> dict[str, np.ndarray]:
        starts = self._valid_starts(seq_len)
        sizes = np.array([len(s) for s in starts], np.float64)
        chunk_ids = rng.choice(len(starts), size=batch, p=sizes / sizes.sum())
        out = {f: [] for f in ("obs", "actions", "rewards", "dones")}
        for k in chunk_ids:
            s = int(starts[k][rng.integers(len(starts[k]))])
            for f in out:
                out[f].append(np.asarray(self.chunks[k][f][s:s + seq_len]))
        return {f: np.stack(v) for f, v in out.items()}


class PrefetchLoader:
    """Iterator of device batches sampled from a `PixelStore` by a background thread.

    The thread reads the memory-mapped windows and `jax.device_put`s them (optionally with a
    sharding) `prefetch` batches ahead, so disk reads overlap the training step. Batches are
    reproducible: one seeded numpy Generator draws all windows, in order.
    """

    def __init__(self, store: PixelStore, batch_size: int, seq_len: int, seed: int = 0,
                 prefetch: int = 2, sharding=None):
        self.store, self.batch_size, self.seq_len = store, batch_size, seq_len
        self.rng = np.random.default_rng(seed)
        self.sharding = sharding
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True, name="pixel-prefetch")
        self._thread.start()

    def _produce(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.store.sample(self.rng, self.batch_size, self.seq_len)
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
