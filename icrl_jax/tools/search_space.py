"""Search spaces of a random hyperparameter search, as config builders (no model code imported).

`config.sweep.space` is a nested mirror of the config: `space.train.learning_rate =
dict(log_uniform=(1e-4, 1e-2))`, `dict(uniform=(lo, hi))` or `dict(choice=[...])`. The search
itself (sampling, training the replicas, EMP) is `tools/sweep.py`.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from icrl_jax.core.config import TRACED_HYPERPARAMETERS

#: Hyperparameters that never change a shape: traced, hence shared by one program and vmapped.
VMAPPED = TRACED_HYPERPARAMETERS
DISTRIBUTIONS = ("uniform", "log_uniform", "choice")


def add_sweep_fields(config: ml_collections.ConfigDict, space: dict[str, dict[str, Any]],
                     num_assignments: int = 20, max_replicas: int = 8) -> None:
    """Give `config` a `sweep` section; `space` maps dotted config keys to one distribution."""
    config.sweep = ml_collections.ConfigDict(dict(
        num_assignments=num_assignments,
        seed=0,
        max_replicas=max_replicas,  # assignments per vmapped program (memory bound)
        score="model_last_episode_return",  # the eval result EMP is computed over
        space=nested_space(space),
    ))


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """{dotted key: value} -> nested dicts (ConfigDict keys hold no dots)."""
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = nested
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def nested_space(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{dotted key: spec} -> the nested dict stored as `sweep.space`; `flatten_space` inverts
    it."""
    return unflatten({dotted: dict(spec) for dotted, spec in space.items()})


def vmappable_space(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`space` restricted to the hyperparameters that keep array shapes (`VMAPPED`), nested:
    a search whose assignments all train side by side as replicas of one program."""
    return nested_space({k: v for k, v in space.items() if k in VMAPPED})


def flatten_space(space: ml_collections.ConfigDict | dict, prefix: str = "") -> dict[str, dict]:
    """Nested space -> {dotted key: distribution spec}, checking every spec."""
    flat = {}
    for key, value in dict(space).items():
        dotted = f"{prefix}{key}"
        value = value.to_dict() if isinstance(value, ml_collections.ConfigDict) else dict(value)
        kinds = set(value) & set(DISTRIBUTIONS)
        if kinds:
            if len(value) != 1:
                raise ValueError(f"sweep.space.{dotted} must hold exactly one of {DISTRIBUTIONS}, "
                                 f"got {sorted(value)}")
            flat[dotted] = value
        else:
            flat.update(flatten_space(value, dotted + "."))
    return flat
