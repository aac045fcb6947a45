"""icrl-jax: in-context RL and decision transformers end to end on an accelerator, in JAX/Flax.

Importing the package imports nothing else: the parts live in its subpackages (`icrl_jax.core`,
`icrl_jax.envs`, `icrl_jax.methods`, ...), and the optional simulators only where a part needs
them (`icrl_jax.core.extras`).
"""

#: The package version; `pyproject.toml` reads it from here.
__version__ = "0.1.0"
