"""Uni[MASK] (Carroll et al.): one bidirectional model for many masking schemes; the regime grid
and its heatmaps (`report.kind="grid"`).

This `__init__` imports nothing, so experiment files can import `fields` cheaply; the registry
imports `plugin`, which registers the paper's parts.
"""
