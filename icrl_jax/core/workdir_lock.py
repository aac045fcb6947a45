"""One run per work directory: an advisory file lock with the holder's pid and host.

`hold(workdir, command)` takes `<workdir>/.icrl-jax.lock` with `fcntl.flock` for as long as
the `with` block runs and writes the holder's pid, host and command into it. A second process
asking for the same directory gets `WorkdirInUseError` (a `UserError`: one line, exit status 2)
naming that holder. The kernel drops a flock when its process dies, however it dies, so a lock
file still naming a process that no longer holds the lock is stale: it is taken over, with a
one-line notice on stderr. A clean exit empties the file, so the next run says nothing.

Holding is re-entrant within a process (`train` evaluates while it holds the lock). With
several processes of one run (`jax.distributed`), only the main process takes it: they share
the directory by design.

This module imports nothing of the project but its errors, so any layer may use it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from typing import Iterator

from icrl_jax.core.errors import UserError
from icrl_jax.core.files import WriteError

LOCK_NAME = ".icrl-jax.lock"


class WorkdirInUseError(UserError):
    """Another live process holds the work directory."""


#: Absolute work directory -> (open lock file, depth) of the locks this process holds.
_held: dict[str, tuple[object, int]] = {}


def _describe(holder: dict) -> str:
    if not holder:
        return "another process"
    since = holder.get("since")
    started = f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if since \
        else ""
    command = f"icrl-jax {holder['command']}" if holder.get("command") else "a run"
    return f"{command} (pid {holder.get('pid')} on {holder.get('host')}{started})"


def _read_holder(f) -> dict:
    """The holder a lock file names, {} when it names none (empty, or not ours)."""
    f.seek(0)
    try:
        holder = json.loads(f.read() or "{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _open(path: str):
    try:
        return open(path, "a+")
    except OSError as e:
        raise WriteError.of(path, e) from None


def holder_of(workdir: str) -> dict | None:
    """The holder of `workdir`'s lock ({"pid", "host", "command", "since"}) while a live process
    holds it; None when it is free (or this process holds it)."""
    path = os.path.join(os.path.abspath(workdir), LOCK_NAME)
    if os.path.abspath(workdir) in _held or not os.path.isfile(path):
        return None
    with open(path, "r") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            return _read_holder(f) or {"pid": None, "host": None}
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def refuse_if_in_use(workdir: str) -> None:
    """`WorkdirInUseError` when another live process holds `workdir` (a check before anything is
    written there; `hold` takes the lock itself)."""
    holder = holder_of(workdir)
    if holder is not None:
        raise WorkdirInUseError(_in_use_message(workdir, holder))


def _in_use_message(workdir: str, holder: dict) -> str:
    return (f"work directory {workdir!r} is in use by {_describe(holder)}; wait for it to end, or "
            f"pass another --config.workdir=DIR")


@contextlib.contextmanager
def hold(workdir: str, command: str = "", main_process: bool = True) -> Iterator[None]:
    """Hold `workdir`'s lock for the `with` block (see the module docstring); `main_process`
    False (another process of a multi-process run) holds nothing."""
    if not main_process:
        yield
        return
    key = os.path.abspath(workdir)
    if key in _held:
        f, depth = _held[key]
        _held[key] = (f, depth + 1)
        try:
            yield
        finally:
            f, depth = _held[key]
            _held[key] = (f, depth - 1)
        return
    os.makedirs(key, exist_ok=True)
    path = os.path.join(key, LOCK_NAME)
    f = _open(path)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _read_holder(f)
        f.close()
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise WorkdirInUseError(_in_use_message(workdir, holder)) from None
        raise
    previous = _read_holder(f)
    if previous and previous.get("pid") is not None:
        print(f"icrl-jax: taking over the work directory lock of {_describe(previous)}, which "
              f"no longer runs (it ended without releasing it)", file=sys.stderr)
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                        "since": round(time.time())}))
    f.flush()
    _held[key] = (f, 1)
    try:
        yield
    finally:
        f, depth = _held.pop(key)
        try:
            f.seek(0)
            f.truncate()  # released cleanly: the next run has nothing to take over
        except OSError:
            pass
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


__all__ = ["LOCK_NAME", "WorkdirInUseError", "hold", "holder_of", "refuse_if_in_use"]
