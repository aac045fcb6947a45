"""The throughput benchmarks: `python -m benchmarks` lists the suites, `python -m benchmarks
SUITE --help` says what one takes. benchmarks/README.md indexes them.

An installed `icrl-jax` maps the repository's top-level `envs/` and `experiments/` folders to
`icrl_jax.envs` and `icrl_jax.experiments` (pyproject.toml's package-dir). Run from a source
tree that was never installed (a bare accelerator host with the working tree copied over), or
from another checkout (`harness.run_in_tree`), that mapping is made here, on the package's own
search path, so that every benchmark measures the code of the tree it was started in.
"""

from __future__ import annotations

import importlib.util
import os


def _map_source_tree() -> None:
    spec = importlib.util.find_spec("icrl_jax")
    if spec is None or not spec.submodule_search_locations:
        return
    package_dir = list(spec.submodule_search_locations)[0]
    tree = os.path.dirname(os.path.abspath(package_dir))
    if os.path.isdir(os.path.join(package_dir, "envs")):  # a layout with envs inside the package
        return
    if not os.path.isfile(os.path.join(tree, "envs", "__init__.py")):
        return
    import icrl_jax
    if tree not in icrl_jax.__path__:
        icrl_jax.__path__.append(tree)  # icrl_jax.envs -> tree/envs, icrl_jax.experiments -> ...


_map_source_tree()
