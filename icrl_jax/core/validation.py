"""Declared constraints on config fields, checked once before anything is built.

Every section declares beside its defaults what its fields take: a type, a range, a set of
choices, or a relation between fields (`model.d_model` divisible by `model.num_heads`). The
core's sections declare theirs in `core/config.py`, the shared methods' in `methods/fields.py`,
each paper's in its `fields.py`; each module registers its constraints as one named group in
`CONSTRAINTS` (a `core.registry.Registry`, so the papers' groups are found as their other parts
are). A constraint applies to a config that has all its keys; a config without them (another
method's fields) is not checked by it.

The constructor arguments of registered parts are declared the same way, beside the part:
`kwargs_of("env", "darkroom", (integer("size", 9, minimum=2), ...))` checks `env.kwargs.size`
of configs whose `env.name` is "darkroom" (a constraint's `when`), and refuses an argument the
part does not take, naming those it does; `kwargs_of("source", ...)` does the same for
`data.source_kwargs`. `no_effect` names a setting that the rest of the config ignores.

`validate(config)` checks them all and raises `ConfigValueError` (a `UserError`: one line and
exit status 2 on the command line) for the first one broken, naming the key, its value, the
rule and a valid example: ``config train.batch_size=-4 must be a positive integer; e.g.
--config.train.batch_size=64``. Single fields are checked before relations between them, so a
relation sees values of the right types; constraints that need the built environment (more
held-out tasks than the env has) or the device count run when those are given.
`core.run.resolve_config` calls it right after the command-line overrides are applied.
"""

from __future__ import annotations

import copy
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
                       modules=("icrl_jax.core.config", "icrl_jax.envs", "icrl_jax.data.sources",
                                "icrl_jax.data.baselines",
                                "icrl_jax.data.builders", "icrl_jax.models.fields",
                                "icrl_jax.methods.fields"))

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Constraint:
    """`check(*values)` must hold for the values of `keys` (dotted).

    `rule` says what it asks ("must be a positive integer"; or `rule(*args)` gives it);
    `example` is a valid value of the
    key (or `example(value)` gives one), or, for a relation, `example(*values) -> "key=value"`:
    a setting that satisfies it. `needs`: "" (the config alone), "config" (`check(config,
    *values)`: the whole config, for a rule that reads what other constraints declare), "env"
    (`check(env, *values)`: the built environment) or "devices" (`check(num_devices,
    *values)`). `when`: `(key, value)` pairs the config must
    have for the constraint to apply (a part's arguments: `(("env.name", "darkroom"),)`).
    `message(*args)`, where given, is the whole error message."""

    keys: tuple[str, ...]
    rule: Any
    check: Callable[..., bool]
    example: Any
    needs: str = ""
    when: tuple[tuple[str, Any], ...] = ()
    message: Callable[..., str] | None = None

    def values(self, config) -> tuple | None:
        """The values of `keys` in `config`; None when it lacks one of them, or `when` does not
        hold."""
        for dotted, expected in self.when:
            found = _value(config, dotted)
            if found is _MISSING or found != expected:
                return None
        out = []
        for dotted in self.keys:
            node = _value(config, dotted)
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
        if self.message is not None:
            return self.message(*args)
        rule = self.rule(*args) if callable(self.rule) else self.rule
        if len(self.keys) == 1 and not self.needs:
            example = self.example(*values) if callable(self.example) else self.example
            return (f"config {self.keys[0]}={show_value(values[0])} {rule}; e.g. "
                    f"--config.{self.keys[0]}={example}")
        shown = ", ".join(f"{k}={show_value(v)}" for k, v in zip(self.keys, values))
        example = self.example(*args) if callable(self.example) else \
            f"{self.keys[0]}={self.example}"
        return f"config {shown}: {rule}; e.g. --config.{example}"


def _value(config, dotted: str) -> Any:
    """`config`'s value at `dotted`, or `_MISSING`."""
    node = config
    for part in dotted.split("."):
        try:
            node = node[part] if part in node else _MISSING
        except TypeError:  # a value where a section was expected
            node = _MISSING
        if node is _MISSING:
            return _MISSING
    return node


def show_value(value: Any) -> str:
    """`value` for a one-line message: a config section as its dict, at most 80 characters."""
    if hasattr(value, "to_dict"):  # a ConfigDict's repr spans lines
        value = value.to_dict()
    text = " ".join(repr(value).split())
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
    order = {"": 0, "config": 1, "devices": 2, "env": 3}
    constraints.sort(key=lambda c: (order[c.needs], len(c.keys) > 1))  # stable
    contexts = {"": None, "config": config, "env": env, "devices": num_devices}
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


def optional(constraint: Constraint) -> Constraint:
    """`constraint`, or None (a constructor argument whose None means "the default")."""
    inner = constraint.check
    rule = constraint.rule
    return dataclasses.replace(
        constraint, check=lambda v: v is None or inner(v),
        rule=f"{rule.replace('must be ', 'must be None or ', 1)}" if isinstance(rule, str)
        else rule)


def pair(key: str, example: str, minimum: int = 1) -> Constraint:
    """An integer >= `minimum`, or a (low, high) pair of them with low <= high (a range drawn
    per task, e.g. a bandit's arm count)."""
    def check(v):
        if is_int(v):
            return v >= minimum
        return (isinstance(v, (tuple, list)) and len(v) == 2 and all(is_int(x) for x in v)
                and minimum <= v[0] <= v[1])
    return Constraint((key,), f"must be an integer >= {minimum} or a pair (low, high) of them "
                      f"with low <= high", check, example)


#: A registered part's name and arguments in a config: (its name's key, its kwargs' key).
PARTS = {"env": ("env.name", "env.kwargs"), "source": ("data.source", "data.source_kwargs")}
_PART_NAMES = {"env": "environment", "source": "source"}


def env_requirement(rule: str, check: Callable[[Any], bool]) -> Constraint:
    """What a part needs of the environment it is used with (`kwargs_of`): `check(env)` on the
    built env; `rule` says what ("needs discrete observations")."""
    return Constraint((), rule, check, "", needs="env")


def kwargs_of(part: str, name: str, constraints: Iterable[Constraint]) -> tuple[Constraint, ...]:
    """Register what the constructor arguments of the `part` ("env" or "source") registered as
    `name` take: `constraints` are written with the argument names as keys ("size", or both
    arguments of a relation) and apply to the config's `env.kwargs.<argument>` (or
    `data.source_kwargs.<argument>`) when its `env.name` (`data.source`) is `name`; a dotted
    key ("data.num_steps") is the config's own, and `env_requirement`s say what the part needs
    of the env. An argument that none of them names is refused, naming those it takes. Returns
    the registered group."""
    name_key, kwargs_key = PARTS[part]
    when = ((name_key, name),)
    constraints = tuple(constraints)
    rebased = []
    for c in constraints:
        keys = tuple(k if "." in k else f"{kwargs_key}.{k}" for k in c.keys)
        message = c.message
        if not c.keys and message is None:
            message = (lambda rule: lambda env: f"config {name_key}={name!r} {rule}; "
                       f"{type(env).__name__} is not one")(c.rule)
        check = c.check
        if part == "source" and c.needs == "env":  # a host simulator acts with its own oracle
            check = (lambda inner: lambda env, *values: env.host or inner(env, *values))(check)
        rebased.append(dataclasses.replace(c, keys=keys, when=when, message=message, check=check,
                                           example=_rebased_example(c, kwargs_key)))
    takes = sorted({k for c in constraints for k in c.keys if "." not in k})

    def unknown_message(kwargs):
        unknown = sorted(set(kwargs) - set(takes))[0]
        close = difflib.get_close_matches(unknown, takes, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return (f"config {kwargs_key}.{unknown} is not an argument of {_PART_NAMES[part]} "
                f"{name!r}{hint} (its arguments: {', '.join(takes) or 'none'})")

    rebased.append(Constraint((kwargs_key,), "", lambda kwargs: set(kwargs) <= set(takes), "",
                              when=when, message=unknown_message))
    return declare(f"{part}:{name}", rebased)


def _rebased_example(constraint: Constraint, kwargs_key: str) -> Any:
    """A relation's example names its keys in full ("env.kwargs.max_arms=20")."""
    if (len(constraint.keys) == 1 and not constraint.needs) or not callable(constraint.example):
        return constraint.example

    def example(*args):
        text = constraint.example(*args)
        return text if "." in text.split("=", 1)[0] else f"{kwargs_key}.{text}"
    return example


def declared_kwargs(part: str, name: str) -> list[str] | None:
    """The constructor arguments declared for `part` `name` (`kwargs_of`), None if none are."""
    group = dict(CONSTRAINTS.items()).get(f"{part}:{name}")
    if group is None:
        return None
    prefix = PARTS[part][1] + "."
    return sorted({k[len(prefix):] for c in group for k in c.keys if k.startswith(prefix)})


def kwargs_violation(config, part: str, name: str, kwargs, label: str) -> str | None:
    """Why `kwargs` cannot be the constructor arguments of `part` ("source") `name` elsewhere in
    `config` (a section listing several, e.g. sources to compare), as its declared rules
    (`kwargs_of`) would say of `<part's kwargs key>`, but naming `label`; None if they pass.
    A name with no declared rules is not registered."""
    if declared_kwargs(part, name) is None:
        known = sorted(group.split(":", 1)[1] for group, _ in CONSTRAINTS.items()
                       if group.startswith(f"{part}:"))
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"config {label}: {name!r} is not a registered {_PART_NAMES[part]}{hint}"
    name_key, kwargs_key = PARTS[part]
    probe = copy.deepcopy(config)
    section, _, field = name_key.partition(".")
    probe[section][field] = name
    section, _, field = kwargs_key.partition(".")
    probe[section][field] = type(probe[section][field])(dict(kwargs))
    for constraint in dict(CONSTRAINTS.items())[f"{part}:{name}"]:
        message = None if constraint.needs else constraint.violation(probe)
        if message is not None:
            return message.replace(kwargs_key, f"{label}.{name}")
    return None


def no_effect(key: str, default: Any, when: tuple[tuple[str, Any], ...] | Callable[..., bool],
              reason: str, needs: Sequence[str] = ()) -> Constraint:
    """A setting that has no effect in some configs: refused when it is not `default` and
    `when` holds (`(key, value)` pairs, or `when(*values of needs)`), saying why (`reason`:
    "with data.builder='minari'")."""
    if callable(when):
        return Constraint((key, *needs), "", lambda value, *others: value == default or
                          not when(*others), "", message=lambda value, *others:
                          f"config {key}={show_value(value)} has no effect {reason}; leave it at "
                          f"{default!r}")
    return Constraint((key,), "", lambda value: value == default, "", when=tuple(when),
                      message=lambda value: f"config {key}={show_value(value)} has no effect {reason}; "
                      f"leave it at {default!r}")


__all__ = ["CONSTRAINTS", "ConfigValueError", "Constraint", "PARTS", "boolean", "choice",
           "constrained_keys", "declare", "declared_kwargs", "env_requirement", "fraction", "int_tuple", "integer",
           "is_int", "is_number", "kwargs_of", "kwargs_violation", "no_effect", "non_negative", "non_negative_int",
           "number", "optional", "pair", "positive", "positive_int", "relation", "string",
           "subset", "validate"]
