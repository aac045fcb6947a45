"""JAX-native in-context RL environments and their registry.

`make(name, **kwargs)` builds an environment by name; the kwargs go to its constructor.
"""

from __future__ import annotations

from envs.bandits import BernoulliBandit, ContextualBandit
from envs.core import ICRLEnv, InvalidActionError, check_actions, stack_params
from envs.darkroom import (CompositeDarkRoom, DarkRoom, KeyToDoor, composite_actions,
                           headless_ad_action_sets, split_actions)
from envs.multidiscrete import ButtonRoom
from envs.tasks import split_tasks

REGISTRY: dict[str, type[ICRLEnv]] = {
    "bernoulli_bandit": BernoulliBandit,
    "contextual_bandit": ContextualBandit,
    "darkroom": DarkRoom,
    "darkroom_composite": CompositeDarkRoom,
    "key_to_door": KeyToDoor,
    "button_room": ButtonRoom,  # multi-discrete (move, press) actions: envs/multidiscrete.py
}


def make(name: str, **kwargs) -> ICRLEnv:
    """Build the environment registered as `name` with constructor kwargs."""
    if name not in REGISTRY:
        raise ValueError(f"unknown environment {name!r}; valid names: {sorted(REGISTRY)}")
    return REGISTRY[name](**kwargs)


__all__ = [
    "REGISTRY", "make", "ICRLEnv", "InvalidActionError", "check_actions", "stack_params",
    "BernoulliBandit", "ContextualBandit", "DarkRoom", "CompositeDarkRoom", "KeyToDoor",
    "ButtonRoom", "composite_actions", "split_actions", "headless_ad_action_sets", "split_tasks",
]
