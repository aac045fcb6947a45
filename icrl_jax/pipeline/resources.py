"""Out of memory as one line naming the settings that sized the allocation.

XLA reports an allocation it cannot make as a `RESOURCE_EXHAUSTED` runtime error ("Out of memory
allocating 4000000000000 bytes" on the CPU, "Out of memory while trying to allocate ..." on
GPUs; on the CPU, while dispatching a computation, as an `INTERNAL` one with the same text),
with a stack of C++ and Python frames that says nothing about the config. `sized_by(stage,
config)` wraps one stage of a run (data generation, training, evaluation) and turns that error
into an `OutOfMemoryError` (a `UserError`: one line, exit status 2) naming the memory asked for
and the stage's settings that size its arrays, so the user knows what to lower.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

from icrl_jax.core.errors import UserError


class OutOfMemoryError(UserError):
    """An allocation the device (or host) could not make."""


#: The settings that size each stage's arrays, in the order worth lowering.
STAGE_SIZES = {
    "data generation": ("data.num_train_tasks", "data.histories_per_task", "data.num_steps",
                        "env.kwargs"),
    "training": ("train.batch_size", "train.seq_len", "model.d_model", "model.num_layers",
                 "model.num_heads", "model.mlp_ratio", "train.steps_per_call"),
    "evaluation": ("data.num_test_tasks", "eval.num_envs_per_task", "eval.chunk_size",
                   "eval.num_steps", "model.d_model"),
}

_BYTES = re.compile(r"allocat\w*\s+(\d+)\s*bytes", re.IGNORECASE)
_SIZE = re.compile(r"allocat\w*\s+([\d.]+)\s*([KMGTP]i?B)", re.IGNORECASE)


def _chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def out_of_memory(error: BaseException) -> str | None:
    """XLA's out-of-memory message in `error` (or what caused it), None if it is not one."""
    for e in _chain(error):
        text = str(e)
        lower = text.lower()
        # On the CPU an allocation made while dispatching says INTERNAL, not RESOURCE_EXHAUSTED.
        if "out of memory" in lower or ("RESOURCE_EXHAUSTED" in text and "memory" in lower):
            return text
    return None


def asked_for(message: str) -> str:
    """The size of the failed allocation in `message` ("3.6 TiB"), or "" if it names none."""
    match = _BYTES.search(message)
    if match:
        size, unit = float(match.group(1)), "bytes"
        for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
            if size < 1024 or unit == "PiB":
                break
            size /= 1024
        return f"{size:.1f} {unit}" if unit != "bytes" else f"{int(size)} bytes"
    match = _SIZE.search(message)
    return f"{match.group(1)} {match.group(2)}" if match else ""


def _setting(config, dotted: str) -> str | None:
    node = config
    for part in dotted.split("."):
        try:
            node = node[part]
        except (KeyError, TypeError, AttributeError):
            return None
    if dotted.endswith("kwargs"):
        node = dict(node.to_dict() if hasattr(node, "to_dict") else node)
        return f"{dotted}={node}" if node else None
    return f"{dotted}={node}"


def describe(stage: str, config, message: str) -> str:
    """The one line for an out-of-memory `message` raised while running `stage` of `config`."""
    size = asked_for(message)
    settings = [s for s in (_setting(config, k) for k in STAGE_SIZES.get(stage, ())) if s]
    if not settings:
        settings = [s for keys in STAGE_SIZES.values() for s in (_setting(config, k) for k in keys)
                    if s]
    asked = f"an allocation of {size}" if size else "an allocation"
    return (f"out of memory in {stage}: the device could not make {asked}, sized by "
            f"{', '.join(dict.fromkeys(settings))}; lower one of them")


@contextlib.contextmanager
def sized_by(stage: str, config) -> Iterator[None]:
    """Turn XLA's out-of-memory error inside the block into an `OutOfMemoryError` naming
    `stage`'s settings (`STAGE_SIZES`) in `config`."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:
        message = out_of_memory(e)
        if message is None:
            raise
        raise OutOfMemoryError(describe(stage, config, message)) from None


__all__ = ["OutOfMemoryError", "STAGE_SIZES", "asked_for", "describe", "out_of_memory",
           "sized_by"]
