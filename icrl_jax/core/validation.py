"""Declared constraints on config fields, checked once before anything is built.

Every section declares beside its defaults what its fields take: a type, a range, a set of
choices, or a relation between fields (`model.d_model` divisible by `model.num_heads`). The
core's sections declare theirs in `core/config.py`, the shared methods' in `methods/fields.py`,
each paper's in its `fields.py`; each module registers its constraints as one named group in
`CONSTRAINTS` (a `core.registry.Registry`, so the papers' groups are found as their other parts
are). A constraint applies to a config that has all its keys; a config without them (another
method's fields) is not checked by it.

`validate(config)` checks them all and raises `ConfigValueError` (a `UserError`: one line and
exit status 2 on the command line) for the first one broken, naming the key, its value, the
rule and a valid example: ``config train.batch_size=-4 must be a positive integer; e.g.
--config.train.batch_size=64``. Single fields are checked before relations between them, so a
relation sees values of the right types; constraints that need the built environment (more
held-out tasks than the env has) or the device count run when those are given.
`core.run.resolve_config` calls it right after the command-line overrides are applied.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any, Callable, Iterable, Sequence

from icrl_jax.core.errors import UserError
from icrl_jax.core.registry import Registry


class ConfigValueError(UserError):
    """A config value that breaks a declared constraint."""


#: name -> tuple of `Constraint`s: the groups declared beside the fields (`declare`).
CONSTRAINTS = Registry("config constraint group",
                       modules=("icrl_jax.core.config", "icrl_jax.models.fields",
                                "icrl_jax.methods.fields"))

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Constraint:
    """`check(*values)` must hold for the values of `keys` (dotted).

    `rule` says what it asks ("must be a positive integer"; or `rule(*args)` gives it);
    `example` is a valid value of the
    key (or `example(value)` gives one), or, for a relation, `example(*values) -> "key=value"`:
    a setting that satisfies it. `needs`: "" (the config alone), "env" (`check(env, *values)`: the built environment) or
    "devices" (`check(num_devices, *values)`)."""

    keys: tuple[str, ...]
    rule: Any
    check: Callable[..., bool]
    example: Any
    needs: str = ""

    def values(self, config) -> tuple | None:
        """The values of `keys` in `config`; None when it lacks one of them."""
        out = []
        for dotted in self.keys:
            node = config
            for part in dotted.split("."):
                try:
                    node = node[part] if part in node else _MISSING
                except TypeError:  # a value where a section was expected
                    node = _MISSING
                if node is _MISSING:
                    return None
            out.append(node)
        return tuple(out)

    def violation(self, config, context: Any = None) -> str | None:
        """The error message if `config` breaks this constraint, else None."""
        values = self.values(config)
        if values is None:
            return None
        args = (context, *values) if self.needs else values
        try:
            ok = bool(self.check(*args))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError):
            ok = False
        if ok:
            return None
        rule = self.rule(*args) if callable(self.rule) else self.rule
        if len(self.keys) == 1 and not self.needs:
            example = self.example(*values) if callable(self.example) else self.example
            return (f"config {self.keys[0]}={_show(values[0])} {rule}; e.g. "
                    f"--config.{self.keys[0]}={example}")
        shown = ", ".join(f"{k}={_show(v)}" for k, v in zip(self.keys, values))
        example = self.example(*args) if callable(self.example) else \
            f"{self.keys[0]}={self.example}"
        return f"config {shown}: {rule}; e.g. --config.{example}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def declare(name: str, constraints: Iterable[Constraint]) -> tuple[Constraint, ...]:
    """Register `constraints` as the group `name` (once per module: beside its fields)."""
    group = tuple(constraints)
    if name in CONSTRAINTS._parts:  # a module imported again (reload) declares it anew
        CONSTRAINTS._parts[name] = group
    return CONSTRAINTS.register(name, group)


def validate(config, env: Any = None, *, num_devices: int | None = None) -> None:
    """Check `config` against every declared constraint; `ConfigValueError` for the first
    broken one (single fields first, then relations, then those needing `env` or
    `num_devices`, which are skipped when not given)."""
    constraints = [c for _, group in CONSTRAINTS.items() for c in group]
    order = {"": 0, "devices": 1, "env": 2}
    constraints.sort(key=lambda c: (order[c.needs], len(c.keys) > 1))  # stable
    contexts = {"": None, "env": env, "devices": num_devices}
    for constraint in constraints:
        context = contexts[constraint.needs]
        if constraint.needs and context is None:
            continue
        message = constraint.violation(config, context)
        if message is not None:
            raise ConfigValueError(message)


def constrained_keys() -> list[str]:
    """Every dotted key some declared constraint reads."""
    return sorted({k for _, group in CONSTRAINTS.items() for c in group for k in c.keys})


# --- the kinds of constraint --------------------------------------------------------------------

def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def integer(key: str, example: Any = 0, minimum: int | None = None,
            maximum: int | None = None) -> Constraint:
    """An integer (not a bool), at least `minimum` and at most `maximum` where given."""
    if minimum == 1 and maximum is None:
        rule = "must be a positive integer"
    elif minimum is not None and maximum is not None:
        rule = f"must be an integer in [{minimum}, {maximum}]"
    elif minimum is not None:
        rule = f"must be an integer >= {minimum}"
    else:
        rule = "must be an integer"
    return Constraint((key,), rule, lambda v: is_int(v) and (minimum is None or v >= minimum)
                      and (maximum is None or v <= maximum), example)


def positive_int(key: str, example: Any) -> Constraint:
    return integer(key, example, minimum=1)


def non_negative_int(key: str, example: Any = 0) -> Constraint:
    return integer(key, example, minimum=0)


def number(key: str, example: Any, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False) -> Constraint:
    """A finite number (int or float, not a bool) in the interval given by its ends."""
    if low is not None and high is not None:
        rule = (f"must be a number in {'(' if low_open else '['}{low:g}, {high:g}"
                f"{')' if high_open else ']'}")
    elif low is not None:
        rule = f"must be a number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        rule = f"must be a number {'<' if high_open else '<='} {high:g}"
    else:
        rule = "must be a finite number"

    def check(v):
        if not is_number(v):
            return False
        if low is not None and (v <= low if low_open else v < low):
            return False
        return not (high is not None and (v >= high if high_open else v > high))

    return Constraint((key,), rule, check, example)


def positive(key: str, example: Any) -> Constraint:
    """A number > 0."""
    return number(key, example, low=0, low_open=True)


def non_negative(key: str, example: Any = 0.0) -> Constraint:
    return number(key, example, low=0)


def fraction(key: str, example: Any = 0.1) -> Constraint:
    """A probability or rate in [0, 1) (dropout, label smoothing)."""
    return number(key, example, low=0, high=1, high_open=True)


def boolean(key: str) -> Constraint:
    return Constraint((key,), "must be True or False", lambda v: isinstance(v, bool), "True")


def string(key: str, example: Any = "''") -> Constraint:
    return Constraint((key,), "must be a string", lambda v: isinstance(v, str), example)


def choice(key: str, choices: Sequence[Any]) -> Constraint:
    """One of `choices` (the example is the nearest one to a misspelt string)."""
    choices = tuple(choices)

    def example_for(value: Any) -> str:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        return close[0] if close else str(choices[0])

    return Constraint((key,), f"must be one of {', '.join(map(str, choices))}",
                      lambda v: isinstance(v, type(choices[0])) and v in choices, example_for)


def subset(key: str, choices: Sequence[str], example: str) -> Constraint:
    """A tuple of distinct entries of `choices` (e.g. `eval.baselines`)."""
    choices = tuple(choices)
    return Constraint(
        (key,), f"must be a tuple of distinct entries of ({', '.join(choices)})",
        lambda v: isinstance(v, (tuple, list)) and len(set(v)) == len(v)
        and all(isinstance(x, str) and x in choices for x in v), example)


def int_tuple(key: str, example: str, minimum: int = 1, nonempty: bool = False) -> Constraint:
    """A tuple of integers >= `minimum` (non-empty if asked)."""
    what = "a non-empty tuple" if nonempty else "a tuple"
    return Constraint(
        (key,), f"must be {what} of integers >= {minimum}",
        lambda v: isinstance(v, (tuple, list)) and (len(v) > 0 or not nonempty)
        and all(is_int(x) and x >= minimum for x in v), example)


def relation(keys: Sequence[str], rule: Any, check: Callable[..., bool],
             example: Callable[..., str], needs: str = "") -> Constraint:
    """`check(*values)` over several keys (or `check(env_or_devices, *values)` with `needs`);
    `example(...)` (same arguments) gives a "key=value" setting that satisfies it."""
    return Constraint(tuple(keys), rule, check, example, needs)


__all__ = ["CONSTRAINTS", "ConfigValueError", "Constraint", "boolean", "choice",
           "constrained_keys", "declare", "fraction", "int_tuple", "integer", "is_int",
           "is_number", "non_negative", "non_negative_int", "number", "positive",
           "positive_int", "relation", "string", "subset", "validate"]
