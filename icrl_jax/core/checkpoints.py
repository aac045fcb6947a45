"""Orbax checkpoints of a training state, tagged with the signature of the model that wrote them.

A checkpoint of another model is a `CheckpointMismatchError` naming the differing fields; a
truncated or corrupted one is a `CorruptCheckpointError` naming it, never a silent
re-initialisation. `Checkpointer.restore` raises on either; `Checkpointer.restore_latest_intact`
(used to resume training) skips unreadable checkpoints, newest first, says which it skipped and
moves them aside so later saves are not silently dropped by orbax.

What orbax 0.12 / tensorstore 0.1 raise for damaged files (found by overwriting, truncating and
deleting the files of a step):

* array data (`default/ocdbt.process_0/d/*`): a bare `Exception("Encountered error while reading
  array index ...")` whose cause is a `ValueError` starting with a tensorstore status code:
  `OUT_OF_RANGE` (truncated), `FAILED_PRECONDITION` (overwritten or deleted: zstd cannot
  decode), `DATA_LOSS` (checksums);
* OCDBT manifests and index (`default/manifest.ocdbt`, `default/d/*`): `ValueError("DATA_LOSS: ...")`,
  `OUT_OF_RANGE`, or `NOT_FOUND` when deleted;
* JSON metadata (`default/_METADATA`, `default/array_metadatas/*`): `UnicodeDecodeError` or
  `json.JSONDecodeError` (both `ValueError`s);
* a deleted `default/_METADATA` or an empty step directory: `ValueError`s about tree structure or
  `Composite` args that read like a model mismatch, so those are recognised before restoring.

`_CHECKPOINT_METADATA`, `commit_success.txt`, `_sharding` and the per-process OCDBT manifest are
not needed to restore; damage to them is harmless. A damaged `signature.json` is a
`CorruptSignatureError`, one line naming it.

A save the file system refuses (no space left, read-only, permission) is a `WriteError` naming
the step's directory and the cause. Orbax reports it as a tensorstore `ValueError` ("... No space
left on device [os_error_code='28']") after its background threads have each logged it with a
traceback; those records are held back while a save runs and dropped when it failed that way.
Orbax removes the unfinished `<step>.orbax-checkpoint-tmp` directory when the next run opens
the checkpoints, so a resumed run saves that step again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
from typing import Any, Iterator

import jax
import numpy as np
import orbax.checkpoint as ocp

from icrl_jax.core.errors import UserError
from icrl_jax.core.files import WRITE_CAUSES, WriteError, write_failure, write_json


class CheckpointMismatchError(UserError):
    """A checkpoint written by a different model or run configuration."""


class CorruptCheckpointError(UserError):
    """A checkpoint whose files cannot be read (truncated, overwritten, missing)."""


class CorruptSignatureError(UserError):
    """A `signature.json` that cannot be read: which model wrote the checkpoints is unknown."""


class MissingCheckpointError(UserError, FileNotFoundError):
    """No checkpoint where one is needed (evaluating a run that was never trained)."""


#: Tensorstore status codes that mean the bytes on disk are damaged or missing. Not
#: RESOURCE_EXHAUSTED, INTERNAL, ...: those say nothing about the files, so they propagate.
_DAMAGE_CODES = ("DATA_LOSS", "OUT_OF_RANGE", "NOT_FOUND", "FAILED_PRECONDITION")


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _damage(error: Exception, step_dir: str) -> str | None:
    """A short reason when `error` (or what caused it) shows damaged files, else None."""
    for e in _chain(error):
        if isinstance(e, (UnicodeDecodeError, json.JSONDecodeError)):
            return f"undecodable metadata: {type(e).__name__}: {e}"[:200]
        if isinstance(e, OSError):
            return f"{type(e).__name__}: {e}"[:200]
        text = str(e)
        if text.split(":", 1)[0] in _DAMAGE_CODES:
            # Tensorstore messages repeat the driver stack and end in a JSON spec: keep the code,
            # the array key and the innermost cause.
            text = text.split(" [tensorstore_spec", 1)[0]
            text = re.sub(r'Error opening "\w+" driver: ', "", text)
            text = re.sub(r' in OCDBT database at local file "[^"]*"', "", text)
            return text.replace(step_dir + os.sep, "")[:240]
    return None


def _structural_damage(step_dir: str) -> str | None:
    """Why a step directory cannot hold a restorable item, or None if it looks complete.

    Orbax reports these two cases as tree-structure `ValueError`s, indistinguishable from a
    model mismatch, so they are checked before restoring."""
    entries = os.listdir(step_dir)
    if not entries:
        return "its directory is empty"
    if not any(os.path.isfile(os.path.join(step_dir, name, "_METADATA")) for name in entries):
        return "its _METADATA file is missing"
    return None


def _quiet_aborted_reads(unraisable) -> None:
    """`sys.unraisablehook` that drops the echoes of an aborted orbax read, forwards the rest.

    When one array of a restore fails, orbax's event loop closes while the other reads are in
    flight; each then prints a TensorStore spec dump ("Exception ignored in ...
    _read_array_index_and_device_put", "Event loop is closed"), possibly after restore returned,
    burying the one-line error in hundreds of lines."""
    text = str(unraisable.exc_value)
    if text.startswith("Encountered error while reading array index") or (
            isinstance(unraisable.exc_value, RuntimeError) and text == "Event loop is closed"):
        return
    _quiet_aborted_reads.previous(unraisable)


class _HeldBack(logging.Filter):
    """Keeps the ERROR records logged through absl (orbax's background threads) while a save runs."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            self.records.append(record)
            return False
        return True


def _install_quiet_hook() -> None:
    if sys.unraisablehook is not _quiet_aborted_reads:
        _quiet_aborted_reads.previous = sys.unraisablehook
        sys.unraisablehook = _quiet_aborted_reads


class Checkpointer:
    """Orbax checkpoints of a state pytree (a `TrainState`: step, params, opt_state), tagged
    with a signature of the model that wrote them.

    `directory/<step>/` holds each checkpoint (the newest `keep`), `directory/signature.json`
    the signature plus parameter shapes of the last save, and `directory/corrupt/<step>/` the
    unreadable checkpoints that `restore_latest_intact` moved aside."""

    def __init__(self, directory: str, signature: dict[str, Any], keep: int = 2):
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.signature = json.loads(json.dumps(signature, sort_keys=True, default=str))
        self.signature_path = os.path.join(self.directory, "signature.json")
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

    def latest_step(self) -> int | None:
        """The newest step on disk (readable or not), None without any."""
        return self.manager.latest_step()

    def _full_signature(self, state) -> dict[str, Any]:
        params = getattr(state, "params", state)
        shapes = {jax.tree_util.keystr(path): list(np.shape(leaf))
                  for path, leaf in jax.tree_util.tree_leaves_with_path(params)}
        return {**self.signature, "parameter_shapes": shapes}

    def save(self, state) -> None:
        """Write `state` as checkpoint `max(state.step)` (replicas share one step) and wait.

        Raises RuntimeError if orbax declines: it silently skips any step not newer than its
        newest, which would otherwise lose the rest of a run without a word."""
        step = int(np.max(np.asarray(state.step)))
        if jax.process_index() == 0:  # orbax itself coordinates the processes' array writes
            write_json(self.signature_path, self._full_signature(state), indent=1,
                       sort_keys=True)
        _install_quiet_hook()  # a failed write closes orbax's event loop under other writes
        held, absl_logger = _HeldBack(), logging.getLogger("absl")
        absl_logger.addFilter(held)
        failed = None
        try:
            saved = self.manager.save(step, args=ocp.args.StandardSave(state))
            self.manager.wait_until_finished()
        except Exception as e:
            failed = write_failure(e)
            if failed is None:
                raise
        finally:
            absl_logger.removeFilter(held)
            for record in held.records if failed is None else ():
                absl_logger.handle(record)
        if failed is not None:
            raise WriteError(f"cannot write checkpoint {self.directory}/{step}: "
                             f"{WRITE_CAUSES[failed.errno]}", self.directory, failed.errno)
        if not saved:
            raise RuntimeError(f"orbax did not save checkpoint {self.directory}/{step}: steps up "
                               f"to {self.latest_step()} are already there")

    def _check_signature(self, like) -> None:
        if not os.path.exists(self.signature_path):
            return
        try:
            with open(self.signature_path, "rb") as f:
                saved = json.loads(f.read().decode())
            if not isinstance(saved, dict):
                raise ValueError(f"a JSON {type(saved).__name__}, not an object")
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError included
            reason = f"{type(e).__name__}: {e}"[:160]
            raise CorruptSignatureError(
                f"checkpoint signature {self.signature_path} is unreadable ({reason}); it says "
                f"which model wrote the checkpoints: delete it to resume without that check, or "
                f"delete {self.directory} to train from scratch") from None
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

    def restore(self, like, step: int | None = None):
        """Checkpoint `step` (default: the newest) restored into the structure, shapes, dtypes
        and shardings of `like`.

        Raises MissingCheckpointError (a FileNotFoundError) without that checkpoint,
        CheckpointMismatchError when another model wrote it, CorruptCheckpointError (naming
        `directory/step`) when its files are damaged; other errors (out of memory, ...) propagate unchanged."""
        steps = self.manager.all_steps()
        step = self.latest_step() if step is None else int(step)
        if step is None:
            raise MissingCheckpointError(f"no checkpoint in {self.directory}")
        if step not in steps:
            raise MissingCheckpointError(f"no checkpoint {self.directory}/{step} (steps there: "
                                         f"{sorted(steps)})")
        self._check_signature(like)
        step_dir = os.path.join(self.directory, str(step))
        reason = _structural_damage(step_dir)
        if reason is None:
            abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
            try:
                return self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
            except Exception as e:
                reason = _damage(e, step_dir)
                if reason is not None:
                    _install_quiet_hook()
                    raise CorruptCheckpointError(
                        f"checkpoint {step_dir} is unreadable ({reason})") from e
                if isinstance(e, (ValueError, KeyError, TypeError)):
                    raise CheckpointMismatchError(
                        f"checkpoint {step_dir} does not match this model's state: "
                        f"{str(e)[:500]}") from e
                raise
        raise CorruptCheckpointError(f"checkpoint {step_dir} is unreadable ({reason})")

    def restore_latest_intact(self, like) -> tuple[Any, int | None, list[tuple[int, str]]]:
        """Restore the newest readable checkpoint: `(state, step, skipped)`.

        `skipped` lists `(step, reason)` for the newer, unreadable checkpoints passed over;
        each is named on stderr and moved to `directory/corrupt/<step>` (replacing an older
        copy there), so the resumed run can save those steps again and orbax's `keep` counts
        only intact checkpoints. `(None, None, [])` without any checkpoint. A checkpoint of
        another model raises CheckpointMismatchError (it is not skipped); no readable
        checkpoint at all raises CorruptCheckpointError, moving nothing."""
        skipped: list[tuple[int, str]] = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                state = self.restore(like, step)
            except CorruptCheckpointError as e:
                skipped.append((step, str(e)))
                continue
            if skipped:
                aside = os.path.join(self.directory, "corrupt")
                os.makedirs(aside, exist_ok=True)
                for bad, reason in skipped:
                    target = os.path.join(aside, str(bad))
                    shutil.rmtree(target, ignore_errors=True)
                    shutil.move(os.path.join(self.directory, str(bad)), target)
                    print(f"{reason}; resuming from {step} (moved it to {target})",
                          file=sys.stderr)
                self.manager.reload()
            return state, step, skipped
        if skipped:
            raise CorruptCheckpointError(
                f"no readable checkpoint in {self.directory}: "
                + "; ".join(reason for _, reason in skipped)
                + ". Delete it (or use another workdir) to train from scratch")
        return None, None, []

    def close(self) -> None:
        self.manager.close()


__all__ = ["Checkpointer", "CheckpointMismatchError", "CorruptCheckpointError",
           "CorruptSignatureError", "MissingCheckpointError"]
