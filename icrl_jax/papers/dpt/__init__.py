"""DPT, the Decision-Pretrained Transformer (Lee et al., 2023): predict the optimal action for a
query state from an in-context dataset of transitions of the same task; online and offline
in-context policies, the paper's Gaussian bandits and comparison algorithms, and its claims
table (`report.kind="dpt_claims"`).

This `__init__` imports nothing, so experiment files can import `fields` cheaply; the registry
imports `plugin`, which registers the paper's parts.
"""
