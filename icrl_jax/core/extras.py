"""Optional packages: the simulators, dataset formats and loggers that `pip install icrl-jax`
leaves out, and the one error that says which extra installs them.

The core (JAX envs, the methods on them, the CLI) imports none of them. A part that needs one
looks it up here first, by its top-level module: `require_extra` where only its presence must be
known (before a simulator is built, without importing it: importing one may open a display),
`import_extra` where the module is used; a registered part declares them instead
(`Registry.register(..., needs=(module,))`). A missing one raises `MissingExtraError`, a
`UserError`, so the CLI prints one line and exits with status 2, e.g.

    icrl-jax: environment 'hopper' needs the optional extra: pip install 'icrl-jax[continuous]'
    (no Python module 'brax')

The extra is read from the installed distribution's metadata (`pyproject.toml`'s
`[project.optional-dependencies]`), so that table is the one list: the smallest extra that names
the module's distribution. A module no extra names (a plugin's own dependency) gets
`pip install '<module>'`.

This module imports nothing but the errors module, so the registry and the env layer can use it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import re
import sys
from types import ModuleType

from icrl_jax.core.errors import UserError

DISTRIBUTION = "icrl-jax"


class MissingExtraError(UserError):
    """An optional package that a part needs is not installed."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=None)
def extras() -> dict[str, tuple[str, ...]]:
    """Extra -> the (normalised) distributions it lists itself, from the installed metadata;
    references to other extras (`icrl-jax[a,b]`) are left out. Empty without metadata."""
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    found: dict[str, list[str]] = {}
    for requirement in requirements:
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", requirement)
        name = _normalise(re.match(r"\s*([A-Za-z0-9._-]+)", requirement).group(1))
        if extra and name != DISTRIBUTION:
            found.setdefault(extra.group(1), []).append(name)
    return {extra: tuple(names) for extra, names in found.items()}


def extra_of(module: str) -> str | None:
    """The smallest extra that lists the distribution of `module` (a dotted name counts by its
    top-level package, whose distribution has its name), None if none does."""
    name = _normalise(module.split(".")[0])
    listing = [(len(names), extra) for extra, names in extras().items() if name in names]
    return min(listing)[1] if listing else None


def missing_extra(module: str, what: str, missing: str | None = None) -> MissingExtraError:
    """The error saying that `what` needs `module`'s extra; `missing`: the module that could not
    be imported, where it is another one (a package that `module` imports)."""
    extra = extra_of(module)
    install = f"the optional extra: pip install '{DISTRIBUTION}[{extra}]'" if extra else \
        f"the Python package {module.split('.')[0]!r}: pip install '{module.split('.')[0]}'"
    return MissingExtraError(f"{what} needs {install} (no Python module {missing or module!r})")


def require_extra(module: str, what: str) -> None:
    """`MissingExtraError` unless `module` is installed; looked up, not imported."""
    # A package blocked in sys.modules (None) hides its submodules even when they were imported
    # before, which find_spec of the dotted name alone would not see.
    parts = module.split(".")
    for i in range(1, len(parts)):
        if ".".join(parts[:i]) in sys.modules and sys.modules[".".join(parts[:i])] is None:
            raise missing_extra(module, what, ".".join(parts[:i]))
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError as e:  # a dotted name whose parent package is missing
        raise missing_extra(module, what, e.name) from None
    if not found:
        raise missing_extra(module, what)


def import_extra(module: str, what: str) -> ModuleType:
    """`import module`, or `MissingExtraError` naming its extra where it (or a package it
    imports) is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise missing_extra(module, what, e.name) from e



class _DeferredModule(ModuleType):
    """Stands in for a module in `sys.modules` until one of its attributes is read; then the real
    module is imported (and replaces the stand-in there) and the stand-in forwards to it."""

    def __getattr__(self, attr: str):  # called only for attributes the stand-in lacks
        real = self.__dict__.get("_deferred_real")
        if real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
            self.__dict__["_deferred_real"] = real
        return getattr(real, attr)


def defer_import(name: str) -> None:
    """Make `import name` bind a stand-in that imports the real module on its first attribute
    read, unless `name` is imported already or not installed.

    For a dependency's dependency imported at module level but used only on a path we rarely take:
    every process (each CLI run, each test subprocess) then skips loading it, and whoever uses it
    gets the real module's attributes on first use. (`importlib.util.LazyLoader` does not help
    here: the import statement itself reads the module's `__spec__`, which loads it.)"""
    if name in sys.modules:
        return
    try:
        if importlib.util.find_spec(name) is None:
            return
    except (ImportError, ValueError):
        return
    sys.modules[name] = _DeferredModule(name)
