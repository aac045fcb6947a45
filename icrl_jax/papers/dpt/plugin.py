"""Registers DPT's parts: the Gaussian bandit, its sources, the labelled-histories builder, the
method and the `dpt_claims` report."""

from icrl_jax.papers.dpt import bandits, data, fields, method, report  # noqa: F401
