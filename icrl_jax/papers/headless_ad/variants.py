"""Evaluation over environment variants (action sets, arm counts, reward distributions) and
training seeds: the Headless-AD paper's Table 1 and figures (`report.kind="variants"`).

An experiment opts in with `config.variants` (name -> the fields of `fields.variant_fields()`
it changes: env kwargs, action set, tasks, another env) and `config.report` (label=<row name in tables>,
num_seeds=<training seeds>). Each seed's evaluation goes to `seed_<i>/variants.json`.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.files import write_json
from icrl_jax import envs
from icrl_jax.core import metrics
from icrl_jax.pipeline import run as run_pipeline
from icrl_jax.pipeline import train as trainer
from icrl_jax.core.distributed import is_main_process
from icrl_jax.core.errors import UserError
from icrl_jax.core.registry import REPORTS
from icrl_jax.methods import build_method
from icrl_jax.papers.headless_ad.fields import variant_fields
from icrl_jax.papers.headless_ad.table1 import write_report


def actions_used(actions: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
    """Distinct actions tried in each rollout: actions int `(N, T)`, mask `(N, A)` -> `(N,)`."""
    tried = jax.nn.one_hot(jnp.asarray(actions), action_mask.shape[-1], dtype=jnp.bool_).any(1)
    return np.asarray(tried.sum(-1))


def variant_spec(name: str, variant: dict) -> dict[str, Any]:
    """`variant_fields()` with the entry `variants.<name>`'s own; a `UserError` names a field
    the schema does not have."""
    fields = variant_fields()
    unknown = sorted(set(variant) - set(fields))
    if unknown:
        raise UserError(f"config variants.{name} has no field {unknown[0]!r} (fields: "
                        f"{', '.join(fields)})")
    return dict(fields, **variant)


def evaluate_variant(config, method, params, variant, key) -> dict[str, Any]:
    """The model and the baselines on one variant (`variant_spec`): `score` is the model's
    final-step score (bandits) or its success (episodic), `arms_used` its distinct actions per
    rollout."""
    if variant["env_name"]:  # another environment: its own kwargs only (Figure 9)
        env = envs.make(variant["env_name"], **dict(variant["env"]))
    else:
        env = run_pipeline.build_env(config, **dict(variant["env"]))
    if not method.any_action_count and env.num_actions > run_pipeline.build_env(config).num_actions:
        return dict(applicable=False)
    tasks = run_pipeline.eval_tasks(env, config, variant["tasks"], actions=variant["actions"] or None,
                         same_count=True)
    model_key, rollout_key = jax.random.split(key)
    results, curves, rollouts = run_pipeline.rollout_and_score(config, env, method, params, tasks,
                                                  rollout_key, model_key)
    result: dict[str, Any] = dict(applicable=True, env=env.name, num_envs=int(len(rollouts["model"]["rewards"])),
                                  num_actions=float(rollouts["model"]["action_mask"].sum(-1).mean()))
    for name, rollout in rollouts.items():
        result[f"{name}_arms_used"] = float(actions_used(rollout["actions"],
                                                         rollout["action_mask"]).mean())
    result.update(results)
    if env.scoring == envs.REGRET:
        result["score"] = result["final_step_score"]
        result["cumulative_score"] = result["normalised_score"]
    else:
        result["score"] = result["model_success"]
    result["arms_used"] = result["model_arms_used"]
    result["curves"] = {n: metrics.mean_curve(c) for n, c in curves.items()}
    return result


def evaluate_variants(config, params=None) -> dict[str, Any]:
    """Evaluate the latest checkpoint on every `config.variants` entry -> `variants.json`."""
    env = run_pipeline.build_env(config)
    method = build_method(config, env)
    checkpoint_step = None
    if params is None:
        params = run_pipeline.load_params(config, env, method)
        checkpoint_step = trainer.latest_checkpoint_step(config.workdir)
    results = {}
    for i, (name, variant) in enumerate(sorted(config.variants.to_dict().items())):
        start = time.perf_counter()
        key = jax.random.fold_in(jax.random.PRNGKey(config.eval.seed), i)
        results[name] = evaluate_variant(config, method, params, variant_spec(name, variant), key)
        if results[name]["applicable"]:
            print(f"{config.experiment} seed {config.seed} {name}: score "
                  f"{results[name]['score']:.3f}, arms used {results[name]['arms_used']:.1f} "
                  f"({time.perf_counter() - start:.0f}s)")
    summary = dict(experiment=config.experiment, method=config.method, env=config.env.name,
                   label=method.label(config), seed=config.seed, checkpoint_step=checkpoint_step,
                   variants=results)
    if not is_main_process():
        return summary
    write_json(os.path.join(config.workdir, "variants.json"), summary, indent=1)
    return summary


def evaluated_at(workdir: str, num_steps: int) -> bool:
    """Whether `workdir/variants.json` holds an evaluation of the checkpoint at `num_steps`."""
    return run_pipeline.evaluated_at(workdir, num_steps, file="variants.json", key="checkpoint_step")


def report_variants(config) -> dict[str, str]:
    """Train and evaluate every seed on every variant, then write Table 1 and the figures to
    `<workdir>/report`."""
    workdirs = run_pipeline.train_seeds(config, evaluate_seed=evaluate_variants, evaluated=evaluated_at)
    return write_report([config.workdir] if workdirs else [],
                        os.path.join(config.workdir, "report"))


REPORTS.register("variants", report_variants)
REPORTS.register("runs:variants", write_report)
