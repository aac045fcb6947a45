"""GPT-DTMA (Mixture of Attention for language-initialised Decision Transformers): the `gpt_dt`
method, its head analyses, and `icrl-jax pretrain-lm` (the small language model it starts from).

This `__init__` imports nothing, so experiment files can import `fields` cheaply; the registry
imports `plugin`, which registers the paper's parts.
"""
