"""Result files written whole or not at all.

`atomic_write(path)` opens a temporary file in `path`'s directory and, once the `with` block
ends without an error, flushes it to disk and renames it over `path` (`os.replace`, atomic on
POSIX and Windows within one file system). A run killed at any point leaves either the old file
or the new one, never half of one; an interrupted temporary file is removed when the block
fails and, if the process was killed, is a `.<name>.tmp-<pid>` file readers never look at.

Every result file of a run (`config.json`, `histories.npz`, `eval.json`, `eval_rollouts.npz`,
reports, summaries) goes through it. This module imports nothing of the project, so any layer
may use it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from typing import IO, Any, Iterator

_counter = itertools.count()


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
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}-{next(_counter)}")
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
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


__all__ = ["atomic_write", "write_json", "write_text"]
