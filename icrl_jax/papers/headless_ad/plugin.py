"""Registers Headless-AD's parts: its methods and the `variants` report."""

from icrl_jax.papers.headless_ad import fields, method, reference_method, variants  # noqa: F401
