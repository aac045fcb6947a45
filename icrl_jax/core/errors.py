"""Errors that mean "the input is wrong", not "the code is wrong".

The CLI prints a `UserError` as one line and exits with status 2; anything else is a bug and keeps
its traceback. Lower layers raise these (or subclasses) when a user-supplied name, file or value
is bad, with a message that names the problem and, where it helps, the nearest valid choice.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class UserError(ValueError):
    """Bad input from the user (config, dataset, checkpoint, command line)."""


class UnknownNameError(UserError):
    """A name (method, env, source, data builder, config key, preset) that is not registered."""


def did_you_mean(name: str, available: Iterable[str]) -> str:
    """"; did you mean 'x'?" for the entry of `available` nearest to `name`, or "" if none is close."""
    close = difflib.get_close_matches(str(name), [str(a) for a in available], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_name(kind: str, name: str, available: Iterable[str]) -> UnknownNameError:
    """`UnknownNameError` for `name`, listing `available` and suggesting the nearest one."""
    available = sorted(str(a) for a in available)
    hint = did_you_mean(name, available)
    return UnknownNameError(f"unknown {kind} {name!r}{hint} (available: {', '.join(available)})")
