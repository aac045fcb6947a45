"""Diagnostic: our DT started from CORL's initialisation instead of flax's defaults.

    python reproductions/matched_dt/ours_corl_init.py train --config reproductions/matched_dt/config.py \\
        --config.seed=0 --config.workdir=runs/matched_dt/ours_corl_init/seed_0 \\
        --config.data.minari_root=runs/matched_dt/minari --config.run.progress=False

`icrl-jax train` (same flags) with the DT's `init` redrawn after flax's: CORL's `_init_weights`
gives every `nn.Linear` and `nn.Embedding` normal(0, 0.02) weights and zero biases, and
LayerNorms (1, 0). The attention's packed input projection is no `nn.Linear` and keeps
PyTorch's xavier-uniform over (d, 3d). Ours otherwise uses lecun-normal Dense kernels and a
timestep table of std 1/sqrt(d_model)
(flax's `Embed`). The method module is patched as it is imported, after the CLI has
configured JAX.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import math
import sys


def corl_like(params, key):
    """The same tree with CORL's initial values (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    from flax.traverse_util import flatten_dict, unflatten_dict

    flat = flatten_dict(params)
    keys = jax.random.split(key, len(flat))
    out = {}
    for k, (path, value) in zip(keys, sorted(flat.items())):
        name = path[-1]
        if name == "bias":
            out[path] = jnp.zeros_like(value)
        elif name == "scale":
            out[path] = jnp.ones_like(value)
        elif name == "kernel" and "qkv" in path:  # (d, 3, heads, head_dim): xavier over (d, 3d)
            d = value.shape[0]
            bound = math.sqrt(6.0 / (d + value.size // d))
            out[path] = jax.random.uniform(k, value.shape, value.dtype, -bound, bound)
        elif name in ("kernel", "embedding"):
            out[path] = 0.02 * jax.random.normal(k, value.shape, value.dtype)
        else:
            raise ValueError(f"no CORL initialisation for parameter {'/'.join(path)}")
    return unflatten_dict(out)


def patch(module) -> None:
    import jax
    original = module.DecisionTransformer.init

    def init(self, key, example):
        return corl_like(original(self, key, example), jax.random.fold_in(key, 1))

    module.DecisionTransformer.init = init


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "icrl_jax.methods.dt":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


if __name__ == "__main__":
    sys.meta_path.insert(0, _PatchOnImport())
    from icrl_jax.pipeline.cli import main
    main()
