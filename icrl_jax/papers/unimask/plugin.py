"""Registers Uni[MASK]'s parts: its method and the `grid` report."""

from icrl_jax.papers.unimask import fields, grid, method  # noqa: F401
