"""A flax module whose `init` and `apply`, called outside any JAX transformation, run as one
compiled program each.

Called eagerly, a flax module dispatches (and so compiles) every primitive of its forward pass
on its own: a small transformer's `init` compiles a few hundred programs, which costs far more
than compiling the whole function once. `Compiled(module)` jits such calls; inside a trace (a
training step, a rollout) it calls the module directly, so compiled code is unchanged.

Array leaves of the arguments are traced; every other leaf (Python numbers, strings, flags such
as `deterministic`, the `method=` function, `mutable=` names) is a static argument, exactly as
the eager call would see it.
"""

from __future__ import annotations

import functools

import jax
import numpy as np


def _is_array(leaf) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def compile_eager_calls(fn):
    """`fn(*args, **kwargs)`, jitted when called on concrete values (see the module docstring)."""

    @functools.partial(jax.jit, static_argnums=(1, 2, 3))
    def compiled(arrays, treedef, is_array, statics):
        arrays, statics = iter(arrays), iter(statics)
        leaves = [next(arrays) if a else next(statics) for a in is_array]
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        return fn(*args, **kwargs)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        leaves, treedef = jax.tree.flatten((args, kwargs))
        if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            return fn(*args, **kwargs)  # already traced: no nested program
        is_array = tuple(_is_array(leaf) for leaf in leaves)
        return compiled([x for x, a in zip(leaves, is_array) if a], treedef, is_array,
                        tuple(x for x, a in zip(leaves, is_array) if not a))

    call.compiled = compiled  # the jitted program (its cache says how often it compiled)
    return call


class Compiled:
    """`module` with `init` and `apply` compiled when called eagerly; every other attribute is
    the module's."""

    def __init__(self, module):
        self.module = module
        self.init = compile_eager_calls(module.init)
        self.apply = compile_eager_calls(module.apply)

    def __getattr__(self, name):
        return getattr(self.__dict__["module"], name)
