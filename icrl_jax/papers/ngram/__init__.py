"""N-gram induction heads for in-context RL: its random-search space (Table 2), and the VQ-VAE
whose codes the n-gram layers match on pixels (`icrl-jax pretrain-vq`, and a stage of `train`).
The n-gram layers themselves are an option of the shared transformer (`models/ngram.py`).

This `__init__` imports nothing, so experiment files can import `fields` cheaply; the registry
imports `plugin`, which registers the paper's parts.
"""
