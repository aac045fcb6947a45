"""The application on top of the ground floor: resolve a config, train, evaluate, report, and the CLI.

Every other layer (envs, data, models, methods, reports, tools, papers) sits between `icrl_jax.core`
and this package; nothing below imports it.
"""
