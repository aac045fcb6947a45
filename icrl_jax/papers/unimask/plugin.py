"""Registers Uni[MASK]'s parts: its method and the `grid` report."""

from icrl_jax.papers.unimask import grid, method  # noqa: F401
