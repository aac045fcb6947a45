"""Registers DPT's parts: the Gaussian bandit, its sources, the labelled-histories builders (XLand's too), the
method and the `dpt_claims` report."""

from icrl_jax.papers.dpt import bandits, data, fields, method, report, xland  # noqa: F401
