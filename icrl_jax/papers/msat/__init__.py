"""M-SAT (Moodley et al.): Decision Transformers with multi-state-action tokens on ViZDoom; the
expert recordings they train on (the `vizdoom_expert` data builder).

This `__init__` imports nothing; the registry imports `plugin`, which registers the paper's
parts.
"""
