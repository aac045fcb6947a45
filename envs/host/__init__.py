"""Non-JAX simulators (Miniworld, ViZDoom) as gymnasium vector envs behind batched JAX callbacks.

See `envs.host.bridge`. Simulator modules are imported explicitly (they pull in heavy native
dependencies), e.g. `from icrl_jax.envs.host import miniworld`.
"""
