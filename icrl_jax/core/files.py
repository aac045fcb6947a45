"""Result files written whole or not at all.

`atomic_write(path)` opens a temporary file in `path`'s directory and, once the `with` block
ends without an error, flushes it to disk and renames it over `path` (`os.replace`, atomic on
POSIX and Windows within one file system). A run killed at any point leaves either the old file
or the new one, never half of one; an interrupted temporary file is removed when the block
fails and, if the process was killed, is a `.<name>.tmp-<pid>` file readers never look at.

Every result file of a run (`config.json`, `histories.npz`, `eval.json`, `eval_rollouts.npz`,
reports, summaries) goes through it. A write the file system refuses (no space left, read-only,
permission denied) is a `WriteError`: one line naming the path and the cause, not a traceback;
`remove_stale_temporaries` clears the temporary files of a killed process at the next start.
This module imports nothing of the project but its errors, so any layer may use it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
from typing import IO, Any, Iterator

from icrl_jax.core.errors import UserError

_counter = itertools.count()

#: What the file system said, for the errors a user can do something about.
WRITE_CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted (an immutable file or directory?)",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.EISDIR: "it is a directory",
    errno.EFBIG: "file too large for the file system",
    errno.ENAMETOOLONG: "file name too long",
}

#: Temporary files of `atomic_write`: `.<name>.tmp-<pid>-<n>`.
_TEMPORARY = re.compile(r"^\..+\.tmp-(\d+)-\d+$")


class WriteError(UserError):
    """A file or directory the file system would not let us write (see `WRITE_CAUSES`);
    `errno` and `path` say which and why."""

    def __init__(self, message: str, path: str = "", errno_: int | None = None):
        super().__init__(message)
        self.path, self.errno = path, errno_

    @classmethod
    def of(cls, path: str, error: OSError) -> "WriteError":
        """The error for writing `path` (the file or directory we were writing) that failed
        with `error`; its own file name is named too when it is another one."""
        cause = WRITE_CAUSES.get(error.errno, error.strerror or str(error))
        other = error.filename if error.filename and os.path.abspath(
            os.fspath(error.filename)) != os.path.abspath(os.fspath(path)) else None
        where = f" ({other})" if other and not _TEMPORARY.match(os.path.basename(
            os.fspath(other))) else ""
        return cls(f"cannot write {path}{where}: {cause}", os.fspath(path), error.errno)


#: How libraries that wrap the OS error in their own (tensorstore, under orbax) say it.
_ERRNO_IN_TEXT = re.compile(r"os_error_code='?(\d+)'?")
_STRERROR_IN_TEXT = {os.strerror(code): code for code in WRITE_CAUSES}


def write_failure(error: BaseException) -> OSError | None:
    """The write failure (an `OSError` whose errno is in `WRITE_CAUSES`) that `error` is or was
    raised from, else None. Errors that only state it in their text (tensorstore's
    "... No space left on device [os_error_code='28']") give an `OSError` made from the text."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in WRITE_CAUSES:
            return error
        text = str(error)
        match = _ERRNO_IN_TEXT.search(text)
        code = int(match.group(1)) if match else next(
            (c for s, c in _STRERROR_IN_TEXT.items() if s in text), None)
        if code in WRITE_CAUSES:
            return OSError(code, os.strerror(code))
        error = error.__cause__ or error.__context__
    return None


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """Turn a write failure of the `with` block (`WRITE_CAUSES`) into a `WriteError` naming
    `path`; other errors pass unchanged."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        if e.errno not in WRITE_CAUSES:
            raise
        raise WriteError.of(os.fspath(path), e) from None


def make_dirs(path: str) -> None:
    """`os.makedirs(path, exist_ok=True)`, with a refused write as a `WriteError`."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise WriteError(f"cannot make the directory {path}: a file of that name is there", path,
                         errno.ENOTDIR)
    with writing(path):
        os.makedirs(path, exist_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temporaries(directory: str, recursive: bool = False) -> list[str]:
    """Remove the temporary files `atomic_write` leaves when its process is killed
    (`.<name>.tmp-<pid>-<n>` of a pid that no longer runs here) from `directory` (and its
    subdirectories with `recursive`); returns their paths."""
    removed = []
    if not os.path.isdir(directory):
        return removed
    for root, dirs, names in os.walk(directory):
        for name in names:
            match = _TEMPORARY.match(name)
            if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(root, name))
                    removed.append(os.path.join(root, name))
        if not recursive:
            break
        dirs[:] = [d for d in dirs if d not in ("checkpoints", "tensorboard", "wandb")]
    return removed


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w") -> Iterator[IO]:
    """`with atomic_write(path) as f:` write `f`; `path` is replaced only when the block ends.

    `mode`: "w" (text) or "wb" (binary: `np.savez(f, ...)` takes the file object). The parent
    directory is made if missing. On an exception the temporary file is removed and `path` is
    left as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    make_dirs(directory)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}-{next(_counter)}")
    try:
        with writing(path):
            with open(tmp, mode) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_json(path: str, obj: Any, **dump_kwargs: Any) -> None:
    """`json.dump(obj)` to `path` atomically (`dump_kwargs`: indent, sort_keys, default, ...)."""
    with atomic_write(path) as f:
        json.dump(obj, f, **dump_kwargs)


def write_text(path: str, text: str) -> None:
    """`text` to `path` atomically."""
    with atomic_write(path) as f:
        f.write(text)


__all__ = ["WRITE_CAUSES", "WriteError", "atomic_write", "make_dirs", "remove_stale_temporaries",
           "write_failure", "write_json", "write_text", "writing"]
