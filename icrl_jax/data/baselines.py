"""Baseline policies that evaluations roll out next to a trained model (`eval.baselines`).

Each is registered by name in `BASELINES` as `build(config, env) -> policy or None` (None: this
env has no such policy, e.g. no privileged expert); the evaluation asks for those the config
names and never names one itself. A paper registers its own from its plugin. The normalised
score (`core/metrics.py`) reads two of them: "random" (0) and "source" (1).
"""

from __future__ import annotations

from typing import Any

from icrl_jax.core import validation
from icrl_jax.core.registry import Registry
from icrl_jax.data.sources import build_source, noisy_oracle, uniform_random

#: name -> `build(config, env) -> policy or None`.
BASELINES = Registry("baseline policy")


def source_policy(config, env) -> Any:
    """The data's source, run for the evaluation's length."""
    return build_source(config.data.source, env, config.eval.num_steps,
                        config.data.source_kwargs.to_dict())


def random_policy(config, env) -> Any:
    """Uniformly random actions over each task's action set."""
    del config
    return uniform_random(env.action_dim if env.continuous_actions else 0)


def expert_policy(config, env) -> Any:
    """The env's privileged expert, noiseless (None where a JAX env has none; a host simulator's
    oracle is its source already)."""
    if not env.has_oracle or env.host:
        return None
    return noisy_oracle(env, config.eval.num_steps, 0.0, 0.0)


#: The shared baselines, by name.
SHARED = {"source": source_policy, "random": random_policy, "expert": expert_policy}
for _name, _build in SHARED.items():
    BASELINES.register(_name, _build)


def baseline_policies(config, env, skip=()) -> dict[str, Any]:
    """{name: policy} of `eval.baselines` (those this env has), less the names in `skip`."""
    policies = {}
    for name in config.eval.baselines:
        if name in skip:
            continue
        policy = BASELINES.get(name)(config, env)
        if policy is not None:
            policies[name] = policy
    return policies


#: What `eval.baselines` takes (core/validation.py): the shared baselines above.
BASELINE_CONSTRAINTS = validation.declare("baselines", (
    validation.subset("eval.baselines", tuple(SHARED), "\"('source', 'random')\""),
))
