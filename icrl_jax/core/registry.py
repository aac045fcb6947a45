"""One registry mechanism for every kind of part: envs, sources, data builders, methods, reports,
CLI commands and run hooks.

A `Registry` maps names to parts of one kind. Parts register themselves where they are defined
(`@METHODS.register` / `REGISTRY.register("name", obj)`). Looking up a name that is not there
first imports the modules that define that kind of part (`modules`, given when the registry is
made) and every paper package's `plugin` module under `icrl_jax.papers`, so the core finds the
papers without naming them: a new paper is a new package there, and nothing shared is edited.

A part may need an optional package (`register(..., needs=("vizdoom",))`): looking it up while
that package is not installed raises `MissingExtraError`, one line naming the extra that
installs it (`core/extras.py`).

This module imports nothing but the errors and extras modules, so the env layer can use it too.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from typing import Any, Callable, Iterator

from icrl_jax.core.errors import unknown_name
from icrl_jax.core.extras import require_extra

#: Packages whose every subpackage is a paper; each one's `plugin` module is imported (it
#: registers the paper's parts) the first time a registry looks a name up.
PLUGIN_ROOTS = ("icrl_jax.papers",)

#: A paper packaged outside this repository registers through an entry point of this group
#: (`[project.entry-points."icrl_jax.papers"] my_paper = "my_paper.plugin"`); its module is
#: imported with the paper packages here.
ENTRY_POINT_GROUP = "icrl_jax.papers"

_loaded = False
_loading = False


def load_plugins() -> None:
    """Import every paper package's `plugin` module once: importing it registers the paper's
    parts (a paper package's `__init__` stays light, so that configs can import its fields).

    Marked done only once every import succeeded, so a plugin that fails to import raises its own
    error at every lookup, never a later "unknown name"."""
    global _loaded, _loading
    if _loaded or _loading:  # `_loading`: a plugin's import looks a name up again
        return
    _loading = True
    try:
        for root in PLUGIN_ROOTS:
            package = importlib.import_module(root)
            for info in pkgutil.iter_modules(package.__path__):
                if info.ispkg:
                    importlib.import_module(f"{root}.{info.name}.plugin")
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            entry_point.load()
        _loaded = True
    finally:
        _loading = False


class Registry:
    """Named parts of one kind.

    `kind` names the kind in errors ("method", "environment", ...). `modules` are imported before
    the first lookup: the shared modules that define parts of this kind (a package's modules are
    all imported when it is given with a trailing ".*").
    """

    def __init__(self, kind: str, modules: tuple[str, ...] = ()):
        self.kind = kind
        self.modules = modules
        self._parts: dict[str, Any] = {}
        self._needs: dict[str, tuple[str, ...]] = {}
        self._complete = False
        self._completing = False

    def register(self, name_or_part: Any = None, part: Any = None, needs: tuple[str, ...] = ()) -> Any:
        """`register(name, part)`, or as a decorator: `@register("name")`, or `@register` on a
        class with a `name` attribute. Registering another part under a taken name is an error.
        `needs`: the optional packages (top-level modules of `core.extras.EXTRAS`) the part
        cannot work without; `get` names their extra while one is not installed."""
        if isinstance(name_or_part, str) and part is None:
            return lambda obj: self.register(name_or_part, obj, needs)
        if not isinstance(name_or_part, str):
            name_or_part, part = name_or_part.name, name_or_part
        name = name_or_part
        if name in self._parts and self._parts[name] is not part:
            raise ValueError(f"{self.kind} name {name!r} is registered twice")
        self._parts[name] = part
        if needs:
            self._needs[name] = tuple(needs)
        return part

    def needs(self, name: str) -> tuple[str, ...]:
        """The optional packages the part `name` needs (see `register`)."""
        return self._needs.get(name, ())

    def _complete_registrations(self) -> None:
        # Done only after every import succeeded (see `load_plugins`).
        if self._complete or self._completing:
            return
        self._completing = True
        try:
            for module in self.modules:
                if module.endswith(".*"):
                    package = importlib.import_module(module[:-2])
                    for info in pkgutil.iter_modules(package.__path__):
                        importlib.import_module(f"{package.__name__}.{info.name}")
                else:
                    importlib.import_module(module)
            load_plugins()
            self._complete = True
        finally:
            self._completing = False

    def get(self, name: str) -> Any:
        """The part registered as `name`; an `UnknownNameError` naming the nearest otherwise, and
        a `MissingExtraError` naming the extra to install where an optional package it needs is
        missing."""
        if name not in self._parts:
            self._complete_registrations()
        if name not in self._parts:
            raise unknown_name(self.kind, name, self._parts)
        for module in self._needs.get(name, ()):
            require_extra(module, f"{self.kind} {name!r}")
        return self._parts[name]

    def __contains__(self, name: str) -> bool:
        if name not in self._parts:
            self._complete_registrations()
        return name in self._parts

    def names(self) -> list[str]:
        self._complete_registrations()
        return sorted(self._parts)

    def items(self) -> Iterator[tuple[str, Any]]:
        self._complete_registrations()
        return iter(sorted(self._parts.items()))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


#: Run hooks: parts that take part in every run when their `applies(config)` says so (for
#: example a pretraining stage that some configs need before `train`). Each hook is an object
#: with `applies(config) -> bool` and any of `resolve(config, env)` (after the config is
#: finalised) and `before_train(config, env, dataset_fn)`.
HOOKS = Registry("run hook")

#: CLI commands: name -> `Command` (what `icrl-jax <name>` runs).
COMMANDS = Registry("command", modules=("icrl_jax.pipeline.commands", "icrl_jax.tools.sweep"))

#: Reports: `report.kind` -> `fn(config) -> {name: path}` (`icrl-jax report --config`), and
#: aggregators of finished runs under "runs:<kind>" (`icrl-jax report --runs ...`).
REPORTS = Registry("report kind", modules=("icrl_jax.reports.*",))


class Command:
    """A CLI command: `run(config)` on a resolved config (`icrl-jax <name> --config ...`);
    `aggregate(runs, out, labels)` for `--runs DIR ... --out DIR` where it has that form; `doc`
    is its line in `icrl-jax --help`. `config_section`: the section only its configs have (and
    that only it takes), e.g. a language-model config; "" = any experiment config."""

    def __init__(self, name: str, run: Callable[[Any], Any], doc: str,
                 aggregate: Callable[..., Any] | None = None, config_section: str = "",
                 checks_experiment: bool = True):
        self.name, self.run, self.doc, self.aggregate = name, run, doc, aggregate
        self.config_section = config_section
        #: Whether `resolve_config` builds the config's method and env (a language-model config
        #: has neither).
        self.checks_experiment = checks_experiment
