"""Methods: one file each, registered by name.

A method is tokens + model + loss + policy, plus the hooks shared code needs (see
`methods.base.Method`). Each module in this package defines its classes with `@register`, and
`method_class(name)` imports the package's modules on first use, so adding a method means writing
one file here (and its experiment config); no shared module names it.
"""

from __future__ import annotations

import importlib
import pkgutil

from icrl_jax.core.errors import unknown_name

_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make `cls` available as `config.method = cls.name`."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"method name {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _import_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def method_names() -> list[str]:
    _import_all()
    return sorted(_REGISTRY)


def method_class(name: str) -> type:
    """The registered method class `name` (an `UnknownNameError` naming the nearest otherwise)."""
    if name not in _REGISTRY:
        _import_all()
    if name not in _REGISTRY:
        raise unknown_name("method", name, _REGISTRY)
    return _REGISTRY[name]


def build_method(config, env, model_config=None):
    """`config.method`'s method for `env` (`model_config` replaces `config.model`, e.g. with
    traced hyperparameters in a vmapped sweep)."""
    cls = method_class(config.method)
    return cls.from_config(config, env, config.model if model_config is None else model_config)
