"""Orbax checkpoints of a training state, tagged with the signature of the model that wrote them.

A checkpoint of another model is a `CheckpointMismatchError` naming the differing fields; a
truncated or corrupted one is a `CorruptCheckpointError` naming it, never a silent
re-initialisation. Resuming takes the newest intact checkpoint and says which it skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from icrl_jax.errors import UserError


class CheckpointMismatchError(UserError):
    """A checkpoint written by a different model or run configuration."""


class CorruptCheckpointError(UserError):
    """A checkpoint whose files cannot be read (truncated, overwritten, missing)."""


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def _unreadable(error: Exception) -> bool:
    """Whether an orbax restore error means damaged files rather than another model."""
    text = str(error).lower()
    return any(word in text for word in ("corrupt", "truncat", "not found", "no such file",
                                         "unexpected end", "checksum", "invalid", "decode",
                                         "failed to read", "does not exist", "error reading"))


class Checkpointer:
    """Orbax checkpoints of a `TrainState`, tagged with a signature of the model that wrote them."""

    def __init__(self, directory: str, signature: dict[str, Any], keep: int = 2):
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.signature = json.loads(json.dumps(signature, sort_keys=True, default=str))
        self.signature_path = os.path.join(self.directory, "signature.json")
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def _full_signature(self, state: TrainState) -> dict[str, Any]:
        shapes = {jax.tree_util.keystr(path): list(np.shape(leaf))
                  for path, leaf in jax.tree_util.tree_leaves_with_path(state.params)}
        return {**self.signature, "parameter_shapes": shapes}

    def save(self, state: TrainState) -> None:
        with open(self.signature_path, "w") as f:
            json.dump(self._full_signature(state), f, indent=1, sort_keys=True)
        self.manager.save(int(state.step), args=ocp.args.StandardSave(state))
        self.manager.wait_until_finished()

    def restore(self, like: TrainState, step: int | None = None) -> TrainState:
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        if os.path.exists(self.signature_path):
            with open(self.signature_path) as f:
                saved = json.load(f)
            now = self._full_signature(like)
            saved_shapes, now_shapes = saved.pop("parameter_shapes", {}), now.pop("parameter_shapes")
            diff = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
            diff += sorted(f"parameter {k}" for k in set(saved_shapes) | set(now_shapes)
                           if saved_shapes.get(k) != now_shapes.get(k))[:5]
            if diff:
                def value(sig, shapes, k):
                    return shapes.get(k[len("parameter "):], "absent") if k.startswith(
                        "parameter ") else sig.get(k)
                raise CheckpointMismatchError(
                    f"checkpoint in {self.directory} was written by a different model; "
                    f"differing fields: " + ", ".join(
                        f"{k}: {value(saved, saved_shapes, k)!r} (checkpoint) vs "
                        f"{value(now, now_shapes, k)!r} (now)" for k in diff))
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        try:
            return self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        except (ValueError, KeyError, TypeError) as e:
            if _unreadable(e):
                raise CorruptCheckpointError(f"checkpoint {self.directory}/{step} is unreadable "
                                             f"({_first_line(e)})") from e
            raise CheckpointMismatchError(
                f"checkpoint {self.directory}/{step} does not match this model's parameters: {e}"
            ) from e
        except Exception as e:  # tensorstore and orbax raise many kinds for damaged files
            raise CorruptCheckpointError(f"checkpoint {self.directory}/{step} is unreadable "
                                         f"({_first_line(e)})") from e

    def restore_latest_intact(self, like):
        """Restore the newest readable checkpoint: `(state, step, skipped)`, skipping (and
        naming) unreadable ones; `(None, None, [])` without any checkpoint. A checkpoint of
        another model is an error, not skipped; so is having no readable checkpoint at all."""
        skipped = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                state = self.restore(like, step)
            except CorruptCheckpointError as e:
                print(f"{e}; skipping it", file=sys.stderr)
                skipped.append((step, str(e)))
                continue
            for bad, _ in skipped:  # later saves must not collide with the damaged steps
                shutil.rmtree(os.path.join(self.directory, str(bad)), ignore_errors=True)
            if skipped:
                self.manager.reload()
                print(f"resuming from checkpoint {self.directory}/{step}", file=sys.stderr)
            return state, step, skipped
        if skipped:
            raise CorruptCheckpointError(f"no readable checkpoint in {self.directory}: "
                                         + "; ".join(reason for _, reason in skipped))
        return None, None, []

    def close(self):
        self.manager.close()
