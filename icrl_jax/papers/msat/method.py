"""M-SAT (Moodley et al.): Decision Transformer with multi-state-action tokens.

A multi-discrete action with n components becomes n tokens a_t^1..a_t^n, each an MLP of the
component's one-hot concatenated with that step's state embedding, so a step is
(R_t, s_t, a_t^1, ..., a_t^n). MAT is the ablation without the state embedding; the no-PE
ablation is `model.timestep_encoding = "none"`. Which token predicts which component is
`model.action_prediction` (see `methods/dt.py`): by default all from s_t, as in the paper.
"""

from __future__ import annotations

from icrl_jax.methods import register
from icrl_jax.methods.dt import DecisionTransformer


@register
class MSAT(DecisionTransformer):
    """M-SAT: one state-conditioned token per action component (see `DecisionTransformer`)."""

    name = "msat"
    multi_action_tokens = True
    state_in_action_tokens = True


@register
class MAT(DecisionTransformer):
    """MAT: one token per action component, tokenised without the state embedding."""

    name = "mat"
    multi_action_tokens = True
    state_in_action_tokens = False

