"""Methods: tokens + model + loss + policy, registered by name (`config.method`).

A method is a `methods.base.Method` subclass decorated with `@register`. The shared methods (AD,
DT) live in this package; a paper's own methods live in its package under `icrl_jax.papers` and
register there. `method_class(name)` finds both (`core.registry`), so no shared module names a
method.
"""

from __future__ import annotations

from icrl_jax.core.registry import Registry

METHODS = Registry("method", modules=("icrl_jax.methods.*",))
register = METHODS.register


def method_names() -> list[str]:
    return METHODS.names()


def method_class(name: str) -> type:
    """The registered method class `name` (an `UnknownNameError` naming the nearest otherwise)."""
    return METHODS.get(name)


def build_method(config, env, model_config=None):
    """`config.method`'s method for `env` (`model_config` replaces `config.model`, e.g. with
    traced hyperparameters in a vmapped sweep)."""
    cls = method_class(config.method)
    return cls.from_config(config, env, config.model if model_config is None else model_config)
