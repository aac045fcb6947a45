"""A grid of masked-model trainings and its heatmap: Uni[MASK]'s Figs. 9-14.

Every training regime (`grid.regimes`: each single task, ALL, random masking) is trained from
`grid.num_seeds` seeds; regimes that share the model's shapes (`grid.overrides`: Table 2 gives
some regimes other widths, depths or batch sizes) train side by side as replicas of one vmapped
program (`train.train_replicas`), the regime, loss weights and seed being per-replica values.
Then:

* "random mask + finetune": the random-mask model of each seed, trained further on each
  evaluation task with `grid.finetune_learning_rate` for `grid.finetune_steps`;
* the MLP baseline (`model.backbone="mlp"`) on `grid.mlp_regimes`.

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

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icrl_jax import train as T
from icrl_jax.data.builders import task_split
from icrl_jax.data.histories import generate_histories
from icrl_jax.data.sources import build_source
from icrl_jax.errors import UserError
from icrl_jax.logging_utils import progress
from icrl_jax.methods import method_class
from icrl_jax.methods.unimask_masks import REGIMES, TASKS, regime_index

#: Replica hyperparameters of a grid beyond the trainer's own (`REPLICA_HYPERPARAMETERS`).
PER_REPLICA = ("model.regime", "model.action_weight", "model.state_weight", "model.init_from")
FINETUNED = "random+finetune"


def _group_configs(config) -> list[tuple[str, ml_collections.ConfigDict, list[str]]]:
    """[(group name, its config, its regimes)]: regimes whose shape overrides agree share one."""
    groups: dict[str, tuple[ml_collections.ConfigDict, list[str]]] = {}
    for regime in config.grid.regimes:
        regime_index(regime)  # an unknown regime fails here, naming the nearest
        shape = {k: v for k, v in _dotted(config.grid.overrides.get(regime, {})).items()
                 if k not in ("model.action_weight", "model.state_weight")}
        name = "transformer" + "".join(f"_{k.split('.')[-1]}{v}" for k, v in sorted(shape.items()))
        if name not in groups:
            cfg = ml_collections.ConfigDict(config.to_dict())
            for dotted, value in shape.items():
                section, key = dotted.split(".")
                cfg[section][key] = value
            if config.grid.epochs > 0:  # the paper counts epochs over the training snippets
                cfg.train.num_steps = -(-int(config.grid.epochs) * int(
                    config.data.num_train_tasks) // int(cfg.train.batch_size))
            groups[name] = (cfg, [])
        groups[name][1].append(regime)
    return [(name, cfg, regimes) for name, (cfg, regimes) in groups.items()]


def _dotted(sections) -> dict[str, Any]:
    """{section: {field: value}} -> {"section.field": value}."""
    return {f"{section}.{field}": value for section, fields in dict(sections).items()
            for field, value in dict(fields).items()}


def validation_episodes(config, env, method):
    """Held-out trajectories of the data's source (the test tasks), as episodes."""
    _, test_ids = task_split(env, config)
    num_steps = int(config.data.num_steps)
    source = build_source(config.data.source, env, num_steps, config.data.source_kwargs.to_dict())
    history = generate_histories(env, source, env.task_params(test_ids), num_steps,
                                 jax.random.PRNGKey(int(config.seed) + 1_000_003),
                                 task_ids=test_ids)
    return method.snippets(method.episodes(history, env))


class _Group:
    """One vmapped program of replicas: (regime, seed) pairs of one model shape."""

    def __init__(self, name, config, env, data, regimes, seeds, pretrained=None,
                 init_from=None, learning_rate=None, num_steps=None):
        self.name, self.config, self.env, self.data = name, config, env, data
        self.regimes, self.seeds = list(regimes), list(seeds)
        self.workdir = os.path.join(config.workdir, "grid", name)
        os.makedirs(self.workdir, exist_ok=True)
        cls = method_class(config.method)
        k = int(config.train.seq_len)
        self.build = lambda model: cls(model, env, k, pretrained=pretrained)
        self.method = cls(config.model, env, k)  # concrete: evaluation
        overrides = config.grid.overrides
        rows = []
        for i, (regime, seed) in enumerate(zip(self.regimes, self.seeds)):
            weights = _dotted(overrides.get(regime, {}))
            rows.append({
                "model.regime": regime_index(regime),
                "model.action_weight": weights.get("model.action_weight",
                                                   config.model.action_weight),
                "model.state_weight": weights.get("model.state_weight", config.model.state_weight),
                "model.init_from": 0 if init_from is None else init_from[i],
                **({} if learning_rate is None else {"train.learning_rate": learning_rate}),
            })
        self.hyper = T.replica_hyperparameters(config, rows)
        self.hyper.update({k: jnp.asarray([r[k] for r in rows], jnp.float32) for k in PER_REPLICA})
        self.train_config = ml_collections.ConfigDict(config.to_dict())
        if num_steps is not None:
            self.train_config.train.num_steps = int(num_steps)
        self.signature = dict(self.method.signature(config, env), group=name,
                              regimes=self.regimes, seeds=self.seeds)

    def own_tasks(self) -> np.ndarray:
        """Per replica, the evaluation tasks its early stopping watches, bool `(K, 8)`."""
        names = list(TASKS)
        return np.array([[r == t or r in ("all", "random") for t in names]
                         for r in self.regimes])

    def run(self, validation, eval_every: int, show_progress: bool):
        """Train with early stopping; returns the best parameters' task losses `(K, 8)`."""
        per_call = int(self.train_config.train.steps_per_call)
        if eval_every % per_call:
            raise UserError(f"grid evaluations every {eval_every} steps: not a multiple of "
                            f"train.steps_per_call={per_call}")
        path = os.path.join(self.workdir, "best.npz")
        best = dict(np.load(path)) if os.path.exists(path) else None
        evaluate = jax.jit(jax.vmap(lambda p: self.method.task_losses(p, validation)))
        watch = self.own_tasks()
        num_steps = int(self.train_config.train.num_steps)
        done = T.latest_checkpoint_step(self.workdir) or 0
        stops = [s for s in range(eval_every, num_steps + eval_every, eval_every) if s > done]
        bar = progress(total=num_steps, initial=done, desc=f"grid {self.name}",
                       disable=not show_progress)
        try:
            for stop in stops:
                stop = min(stop, num_steps)
                state, _ = T.train_replicas(self.build, self.train_config, self.data, self.workdir,
                                            self.signature, self.seeds, self.hyper,
                                            cache_key=(self.name, self.workdir), stop_at=stop)
                losses = np.asarray(evaluate(state.params))
                score = (losses * watch).sum(1) / watch.sum(1)
                if best is None:
                    best = dict(score=score, losses=losses, step=np.full(len(score), stop),
                                **_flatten(state.params))
                else:
                    better = score < best["score"]
                    best["score"] = np.where(better, score, best["score"])
                    best["losses"] = np.where(better[:, None], losses, best["losses"])
                    best["step"] = np.where(better, stop, best["step"])
                    for key, value in _flatten(state.params).items():
                        pick = better.reshape((-1,) + (1,) * (value.ndim - 1))
                        best[key] = np.where(pick, value, best[key])
                np.savez(path, **best)
                bar.update(stop - bar.n)
                bar.set_postfix(val=f"{float(np.mean(best['score'])):.3f}")
        finally:
            bar.close()
        if best is None:
            raise UserError(f"grid group {self.name}: no training step and no saved result")
        return best

    @staticmethod
    def params_of(best: dict[str, np.ndarray]):
        return _unflatten({k: v for k, v in best.items() if k.startswith("params/")})


def _flatten(tree, prefix: str = "params") -> dict[str, np.ndarray]:
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        out[prefix + "/" + "/".join(str(getattr(p, "key", p)) for p in path)] = np.asarray(leaf)
    return out


def _unflatten(flat: dict[str, np.ndarray]):
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        node = tree
        parts = key.split("/")[1:]
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


def run_grid(config, dataset, env) -> dict[str, Any]:
    """Train the grid (resuming), write the heatmaps; returns heatmap.json's content."""
    grid = config.grid
    cls = method_class(config.method)
    k = int(config.train.seq_len)
    base = cls(config.model, env, k)
    data = base.training_data(dataset, config, env)
    validation = validation_episodes(config, env, base)
    num_seeds = int(grid.num_seeds)
    seeds = [int(config.seed) + s for s in range(num_seeds)]
    show = bool(config.run.progress)
    start = time.perf_counter()
    rows: dict[str, np.ndarray] = {}  # row name -> losses (num_seeds, 8)
    best_by_regime = {}
    for name, cfg, regimes in _group_configs(config):
        group = _Group(name, cfg, env, data, np.repeat(regimes, num_seeds),
                       seeds * len(regimes))
        best = group.run(validation, int(grid.eval_every), show)
        for i, regime in enumerate(regimes):
            rows[regime] = best["losses"][i * num_seeds:(i + 1) * num_seeds]
        best_by_regime.update({r: (best, i) for i, r in enumerate(regimes)})
    if grid.finetune:
        if "random" not in best_by_regime:
            raise UserError("grid.finetune needs the 'random' regime in grid.regimes")
        best, i = best_by_regime["random"]
        pretrained = jax.tree.map(lambda x: x[i * num_seeds:(i + 1) * num_seeds],
                                  _Group.params_of(best))
        tasks = list(TASKS)
        group = _Group("finetune", config, env, data, np.repeat(tasks, num_seeds),
                       seeds * len(tasks), pretrained=pretrained,
                       init_from=list(range(num_seeds)) * len(tasks),
                       learning_rate=float(grid.finetune_learning_rate),
                       num_steps=int(grid.finetune_steps))
        best = group.run(validation, int(grid.finetune_eval_every), show)
        # Row "random+finetune": each column from the model fine-tuned on that column's task.
        rows[FINETUNED] = np.stack([best["losses"][j * num_seeds:(j + 1) * num_seeds, j]
                                    for j in range(len(tasks))], axis=1)
    if len(grid.mlp_regimes):
        mlp_config = ml_collections.ConfigDict(config.to_dict())
        mlp_config.model.backbone = "mlp"
        for key, value in _dotted(grid.mlp_overrides).items():
            section, field = key.split(".")
            mlp_config[section][field] = value
        regimes = list(grid.mlp_regimes)
        mlp_data = cls(mlp_config.model, env, k).training_data(dataset, mlp_config, env)
        group = _Group("mlp", mlp_config, env, mlp_data, np.repeat(regimes, num_seeds),
                       seeds * len(regimes))
        best = group.run(validation, int(grid.eval_every), show)
        for i, regime in enumerate(regimes):
            rows[f"(MLP) {regime}"] = best["losses"][i * num_seeds:(i + 1) * num_seeds]
    result = summarise(rows, time.perf_counter() - start, config)
    write_heatmaps(result, config.workdir)
    return result


def summarise(rows: dict[str, np.ndarray], seconds: float, config) -> dict[str, Any]:
    """Means, standard errors, normalised values and the paper's claims of a grid's losses."""
    tasks = list(TASKS)
    mean = {r: v.mean(0) for r, v in rows.items()}
    sem = {r: v.std(0, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else np.zeros(len(tasks))
           for r, v in rows.items()}
    result: dict[str, Any] = dict(
        tasks=tasks, rows=list(rows), seeds=int(config.grid.num_seeds),
        num_train_trajectories=int(config.data.num_train_tasks),
        num_validation_trajectories=int(config.data.num_test_tasks),
        wall_seconds=round(seconds, 1),
        losses={r: v.tolist() for r, v in rows.items()},
        mean={r: v.tolist() for r, v in mean.items()},
        sem={r: v.tolist() for r, v in sem.items()})
    if FINETUNED in mean:
        ref = mean[FINETUNED]
        result["normalised"] = {r: (v / ref).tolist() for r, v in mean.items()}
    single = [t for t in tasks if t in mean]
    claims = {}
    if "random" in mean and single:
        best_single = np.min([mean[t] for t in single], axis=0)
        ratio = mean["random"] / best_single
        claims["random_within_15pct_of_best_single_task"] = dict(
            ratio_per_task=dict(zip(tasks, np.round(ratio, 3).tolist())),
            holds=bool((ratio <= 1.15).all()))
        if "behaviour_cloning" in mean:
            hard = ["past_inference", "future_inference", "forward_dynamics", "inverse_dynamics"]
            idx = [tasks.index(t) for t in hard]
            bc_ratio = mean["behaviour_cloning"][idx] / mean["random"][idx]
            claims["bc_several_times_worse_than_random_on_dynamics_and_inference"] = dict(
                ratio_per_task=dict(zip(hard, np.round(bc_ratio, 2).tolist())),
                holds=bool((bc_ratio >= 2.0).all()))
    if FINETUNED in mean and single:
        own = {t: (mean[FINETUNED][j], mean[t][j]) for j, t in enumerate(tasks) if t in mean}
        claims["finetune_at_least_as_good_as_single_task"] = dict(
            finetune_vs_single={t: [round(float(a), 4), round(float(b), 4)]
                                for t, (a, b) in own.items()},
            # "at least as good": not worse by more than two standard errors
            holds=bool(all(a <= b + 2 * max(float(sem[FINETUNED][tasks.index(t)]),
                                            float(sem[t][tasks.index(t)]))
                           for t, (a, b) in own.items())))
    result["claims"] = claims
    return result


def write_heatmaps(result: dict[str, Any], workdir: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(os.path.join(workdir, "heatmap.json"), "w") as f:
        json.dump(result, f, indent=1)
    tasks, rows = result["tasks"], result["rows"]
    for kind, values, fname in (("normalised", result.get("normalised"), "heatmap.png"),
                                ("raw", result["mean"], "heatmap_raw.png")):
        if values is None:
            continue
        grid = np.array([values[r] for r in rows])
        fig, ax = plt.subplots(figsize=(1.3 * len(tasks) + 3, 0.55 * len(rows) + 2))
        shown = np.log(np.clip(grid, 1e-6, None)) if kind == "raw" else np.clip(grid, 0, 2)
        ax.imshow(shown, cmap="viridis_r", aspect="auto")
        for i, r in enumerate(rows):
            for j in range(len(tasks)):
                sem = result["sem"][r][j] / (result["mean"][FINETUNED][j]
                                             if kind == "normalised" else 1.0)
                ax.text(j, i, f"{grid[i, j]:.3g}\n±{sem:.2g}", ha="center", va="center",
                        fontsize=7, color="w" if shown[i, j] > np.median(shown) else "k")
        ax.set_xticks(range(len(tasks)), [t.replace("_", "\n") for t in tasks], fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_xlabel("evaluation task")
        ax.set_ylabel("training regime")
        title = ("validation loss / random mask + finetune" if kind == "normalised"
                 else "validation loss (raw)")
        ax.set_title(f"{title}; mean ± s.e.m. over {result['seeds']} seeds, "
                     f"{result['num_train_trajectories']} trajectories", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(workdir, fname), dpi=120)
        plt.close(fig)
