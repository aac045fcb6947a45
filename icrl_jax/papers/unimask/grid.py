"""A grid of masked-model trainings and its heatmap: Uni[MASK]'s Figs. 9-14.

Every training regime (`grid.regimes`: each single task, ALL, random masking) is trained from
`grid.num_seeds` seeds; regimes that share the model's shapes (`grid.overrides`: Table 2 gives
some regimes other widths, depths or batch sizes) train side by side as replicas of one vmapped
program (`train.train_replicas`), the regime, loss weights and seed being per-replica values.
Then:

* "random mask + finetune": the random-mask model of each seed, trained further on each
  evaluation task with `grid.finetune_learning_rate` for `grid.finetune_steps`;
* the MLP baseline (`model.backbone="mlp"`) on `grid.mlp_regimes`;
* the Decision Transformer baseline (`methods/dt.py`, causal) on `grid.dt_regimes`: trained
  without (behaviour cloning) or with (reward-conditioned) return-to-go.

Early stopping (the paper's): every `grid.eval_every` steps each replica's validation loss is
measured on held-out trajectories (`data.num_test_tasks` of them, made by the same source), and
the replica keeps its best parameters; the loss is that of its own task, or the mean over the
eight tasks for ALL and random masking. The best parameters' losses on every evaluation task
make the heatmap (rows: regimes, columns: tasks), normalised per column by "random mask +
finetune" = 1 (`heatmap.png`) and raw (`heatmap_raw.png`); `heatmap.json` holds every seed's
losses, the means, standard errors and the paper's three claims checked on them.

Progress is saved per group (`<workdir>/grid/<group>/`: checkpoints and `best.npz`), so an
interrupted report resumes.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.registry import REPORTS
from icrl_jax.methods import method_class
from icrl_jax.papers.unimask.appendix import FINETUNED
from icrl_jax.papers.unimask.grid_training import (ReplicaGroup, dt_group, finetune_groups,
                                                   group_configs, mlp_config, unimask_group,
                                                   validation_episodes)
from icrl_jax.papers.unimask.masks import TASKS
from icrl_jax.papers.unimask.report import data_size_report, summarise, write_heatmaps
from icrl_jax.papers.unimask.rollouts import backward_inference, rollout_distributions, run_returns
from icrl_jax.pipeline.run import build_env, dataset_of


def run_grid(config, dataset, env) -> dict[str, Any]:
    """Train the grid (resuming), write the heatmaps (or, with `grid.evaluate="returns"`, the
    returns table of `run_returns`); returns what it wrote to JSON."""
    if config.grid.evaluate == "returns":
        return run_returns(config, dataset, env)
    grid = config.grid
    cls = method_class(config.method)
    k = int(config.train.seq_len)
    base = cls(config.model, env, k)
    data = base.training_data(dataset, config, env)
    validation = validation_episodes(config, env, base)
    num_seeds = int(grid.num_seeds)
    seeds = [int(config.seed) + s for s in range(num_seeds)]
    tuned = int(grid.finetune_seeds) or num_seeds  # fine-tuned seeds per task
    tuned_seeds = [int(config.seed) + s for s in range(tuned)]
    from_own = grid.finetune_from == "own"
    if grid.finetune and from_own and tuned > num_seeds:
        raise UserError(f"grid.finetune_seeds={tuned} with grid.finetune_from='own': at most "
                        f"grid.num_seeds={num_seeds} (each seed fine-tunes its own model)")
    show = bool(config.run.progress)
    start = time.perf_counter()
    rows: dict[str, np.ndarray] = {}  # row name -> losses (num_seeds, 8)
    best_by_regime = {}

    def record(best, regimes, prefix=""):
        for i, regime in enumerate(regimes):
            rows[prefix + regime] = best["losses"][i * num_seeds:(i + 1) * num_seeds]

    for name, cfg, regimes in group_configs(config):
        group = unimask_group(name, cfg, env, data, validation, np.repeat(regimes, num_seeds),
                               seeds * len(regimes))
        best = group.run(int(cfg.grid.eval_every), show)
        record(best, regimes)
        best_by_regime.update({r: (best, i) for i, r in enumerate(regimes)})
    if grid.finetune:
        if "random" not in best_by_regime:
            raise UserError("grid.finetune needs the 'random' regime in grid.regimes")
        best, i = best_by_regime["random"]
        pretrained = jax.tree.map(lambda x: x[i * num_seeds:(i + 1) * num_seeds],
                                  ReplicaGroup.params_of(best))
        finetuned = {}
        for name, cfg, tasks, budget in finetune_groups(config):
            reps = np.repeat(tasks, tuned)
            from_seed = list(range(tuned)) if from_own else [0] * tuned
            group = unimask_group(name, cfg, env, data, validation, reps, tuned_seeds * len(tasks),
                                   pretrained=pretrained, init_from=from_seed * len(tasks),
                                   learning_rate=[budget[t]["learning_rate"] for t in reps],
                                   state_weight=[budget[t]["state_weight"] for t in reps],
                                   num_steps=int(cfg.train.num_steps))
            out = group.run(int(cfg.grid.eval_every), show)
            for j, t in enumerate(tasks):
                finetuned[t] = out["losses"][j * tuned:(j + 1) * tuned, list(TASKS).index(t)]
        # Row "random+finetune": each column from the model fine-tuned on that column's task.
        rows[FINETUNED] = np.stack([finetuned[t] for t in TASKS], axis=1)
    if len(grid.mlp_regimes):
        mlp = mlp_config(config)
        regimes = list(grid.mlp_regimes)
        mlp_data = cls(mlp.model, env, k).training_data(dataset, mlp, env)
        group = unimask_group("mlp", mlp, env, mlp_data, validation,
                               np.repeat(regimes, num_seeds), seeds * len(regimes))
        record(group.run(int(group.config.grid.eval_every), show), regimes, "(MLP) ")
    if len(grid.dt_regimes):
        group = dt_group(config, env, dataset, validation, seeds)
        record(group.run(int(group.config.grid.eval_every), show), list(grid.dt_regimes), "(DT) ")
    result = summarise(rows, config, time.perf_counter() - start)
    if "random" in best_by_regime:
        best, i = best_by_regime["random"]
        params = jax.tree.map(lambda x: jnp.asarray(x[i * num_seeds]), ReplicaGroup.params_of(best))
        result["rollouts"] = rollout_distributions(config, env, base, params)
        result["backward_inference"] = backward_inference(env, base, params, validation,
                                                          int(config.seed))
    write_heatmaps(result, config.workdir)
    return result


def report_grid(config) -> dict[str, Any]:
    """`icrl-jax report --config` with `report.kind="grid"`: the grid on the run's dataset."""
    env = build_env(config)
    return run_grid(config, dataset_of(config, env), env)


REPORTS.register("grid", report_grid)
REPORTS.register("runs:grid", data_size_report)
