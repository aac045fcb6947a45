"""`History`: learning histories as arrays, and their on-disk format.

A history is one uninterrupted stream of interaction of a source algorithm with one task, across
many episodes (environments auto-reset but keep the task). Step t of history n is
`(observations[n, t], actions[n, t], rewards[n, t], dones[n, t])`: the observation seen before
acting, the action taken, the reward received, and whether the episode ended with that step.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
import zlib
from typing import Any

import flax.struct
import jax
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.files import atomic_write

FORMAT_VERSION = 1


class HistoryFormatError(UserError):
    """A dataset on disk or in memory whose arrays do not form a valid `History`."""


class CorruptHistoryError(HistoryFormatError):
    """A dataset file that cannot be read at all (truncated, overwritten): not a valid .npz."""


#: What numpy and zipfile raise for a damaged .npz: no zip directory (truncated), a bad CRC or
#: deflate stream (overwritten), an array header or size that does not match its bytes.
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, KeyError, OSError)


@flax.struct.dataclass
class History:
    """A batch of N learning histories of T steps.

    Attributes:
      observations: int32 `(N, T)` discrete ids, or float32 `(N, T, *obs_shape)`.
      actions: int32 `(N, T)` indices into the task's action list.
      rewards: float32 `(N, T)`.
      dones: bool `(N, T)`, True where the episode ended with that step.
      task_ids: int32 `(N,)` the task (environment params) each history was collected on.
      action_mask: bool `(N, A)` the actions available in each history's task.
    """

    observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    dones: jax.Array
    task_ids: jax.Array
    action_mask: jax.Array

    @property
    def num_histories(self) -> int:
        return self.actions.shape[0]

    @property
    def length(self) -> int:
        return self.actions.shape[1]

    @property
    def num_actions(self) -> int:
        return self.action_mask.shape[-1]

    def validate(self) -> "History":
        """Raise `HistoryFormatError` naming the first inconsistent array."""
        n, t = np.shape(self.actions)[:2] if np.ndim(self.actions) == 2 else (None, None)
        if n is None:
            raise HistoryFormatError(
                f"actions must have shape (N, T), got {np.shape(self.actions)}")
        expected = {
            "rewards": (n, t),
            "dones": (n, t),
            "task_ids": (n,),
            "observations": (n, t),  # prefix
            "action_mask": (n,),  # prefix
        }
        for name, prefix in expected.items():
            shape = np.shape(getattr(self, name))
            if tuple(shape[: len(prefix)]) != prefix or (
                    name in ("rewards", "dones", "task_ids") and len(shape) != len(prefix)):
                raise HistoryFormatError(
                    f"{name} has shape {shape}; expected {prefix}"
                    f"{' + ...' if name in ('observations', 'action_mask') else ''} "
                    f"to match actions {np.shape(self.actions)}")
        if np.ndim(self.action_mask) != 2:
            raise HistoryFormatError(
                f"action_mask must have shape (N, A), got {np.shape(self.action_mask)}")
        for name, kinds in (("actions", "iu"), ("task_ids", "iu"), ("dones", "b"),
                            ("action_mask", "b"), ("rewards", "fiu")):
            value = getattr(self, name)
            dtype = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
            if np.dtype(dtype).kind not in kinds:
                raise HistoryFormatError(f"{name} has dtype {dtype}, expected kind {kinds!r}")
        return self

    def to_numpy(self) -> "History":
        return jax.tree.map(np.asarray, self)


def save_history(path: str, history: History, metadata: dict[str, Any] | None = None) -> None:
    """Write `history` to `path` (.npz) with JSON metadata (env name, config, ...)."""
    history = history.validate().to_numpy()
    meta = {"format_version": FORMAT_VERSION, **(metadata or {})}
    with atomic_write(path, "wb") as out:  # a killed run never leaves half a dataset behind
        np.savez(out, metadata=np.array(json.dumps(meta)),
                 **{f.name: getattr(history, f.name) for f in _fields()})


def load_history(path: str) -> tuple[History, dict[str, Any]]:
    """Read a dataset written by `save_history`; raises `HistoryFormatError` on a bad file
    (`CorruptHistoryError` when its bytes are damaged: truncated, overwritten)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no history dataset at {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [f.name for f in _fields() if f.name not in data]
            if missing:
                raise HistoryFormatError(f"{path} is missing arrays {missing}; found "
                                         f"{sorted(data.files)}")
            history = History(**{f.name: np.asarray(data[f.name]) for f in _fields()})
            meta = json.loads(str(data["metadata"])) if "metadata" in data else {}
    except HistoryFormatError:
        raise
    except _DAMAGE as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise CorruptHistoryError(f"dataset {path} is unreadable ({type(e).__name__}: "
                                  f"{str(e)[:160]})") from e
    try:
        history.validate()
    except HistoryFormatError as e:
        raise HistoryFormatError(f"{path}: {e}") from None
    return history, meta


def _fields():
    return dataclasses.fields(History)
