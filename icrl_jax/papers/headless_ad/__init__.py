"""Headless-AD (Sinii et al.): in-context RL on action sets of any size, its ablations and the
permuted-action AD baseline; the variant evaluation and Table 1 (`report.kind="variants"`).

This `__init__` imports nothing, so experiment files can import `fields` cheaply; the registry
imports `plugin`, which registers the paper's parts.
"""
