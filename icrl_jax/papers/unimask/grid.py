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

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icrl_jax.core.files import atomic_write, write_json, write_text
from icrl_jax.core.plots import save_figure
from icrl_jax.pipeline import run as R
from icrl_jax.pipeline import train as T
from icrl_jax.data.builders import task_split
from icrl_jax.data.histories import generate_histories
from icrl_jax.data.sources import build_source
from icrl_jax.core.errors import UserError
from icrl_jax.core.logging_utils import progress
from icrl_jax.core.metrics import seed_mean_sem
from icrl_jax.core.registry import REPORTS
from icrl_jax.methods import method_class
from icrl_jax.papers.unimask.masks import TASKS, regime_index
from icrl_jax.methods.fields import dt_model_config
from icrl_jax.core import metrics as M
from icrl_jax.data.sources import ParamSource
from icrl_jax.papers.unimask.method import SnippetPolicy
from icrl_jax.envs.doorkey import cell_of, split_state
from icrl_jax.papers.unimask.method import sample_past

#: Replica hyperparameters of a grid beyond the trainer's own (`REPLICA_HYPERPARAMETERS`).
PER_REPLICA = ("model.regime", "model.action_weight", "model.state_weight", "model.init_from")
FINETUNED = "random+finetune"


def _group_configs(config) -> list[tuple[str, ml_collections.ConfigDict, list[str]]]:
    """[(group name, its config, its regimes)]: regimes whose shape overrides and training
    budget (`grid.regime_epoch_trajectories`: epochs x trajectories per regime, so that the
    epochs follow the data size) agree share one."""
    groups: dict[str, tuple[ml_collections.ConfigDict, list[str]]] = {}
    budgets = dict(config.grid.regime_epoch_trajectories)
    n = int(config.data.num_train_tasks)
    for regime in config.grid.regimes:
        regime_index(regime)  # an unknown regime fails here, naming the nearest
        shape = {k: v for k, v in regime_overrides(config, regime).items()
                 if k not in ("model.action_weight", "model.state_weight")}
        budget = int(budgets[regime] if regime in budgets else config.grid.epoch_trajectories)
        name = "transformer" + "".join(f"_{k.split('.')[-1]}{v}" for k, v in sorted(shape.items()))
        if regime in budgets:
            name += f"_ep{max(budget // n, 1)}"
        if name not in groups:
            cfg = ml_collections.ConfigDict(config.to_dict())
            for dotted, value in shape.items():
                section, key = dotted.split(".")
                cfg[section][key] = value
            cfg.grid.epoch_trajectories = budget
            _epochs_to_steps(cfg)
            groups[name] = (cfg, [])
        groups[name][1].append(regime)
    return [(name, cfg, regimes) for name, (cfg, regimes) in groups.items()]


def steps_per_epoch(num_trajectories: int, batch_size: int) -> int:
    """The authors' epoch: max(N // B, 1) batches of B snippets (one snippet per trajectory)."""
    return max(int(num_trajectories) // int(batch_size), 1)


def _epochs_to_steps(cfg) -> None:
    """`grid.epochs` > 0: train.num_steps = epochs * steps_per_epoch (the paper counts epochs;
    Table 2's batch sizes differ per regime); `grid.epoch_trajectories` > 0 sets the epochs to
    max(it // N, 1). `grid.eval_every_epochs` > 0: validation every that many epochs
    (`grid.eval_every` in steps; `train.steps_per_call` shrinks to divide it)."""
    budget = int(cfg.grid.epoch_trajectories)
    if budget > 0:
        cfg.grid.epochs = max(budget // int(cfg.data.num_train_tasks), 1)
    per_epoch = steps_per_epoch(cfg.data.num_train_tasks, cfg.train.batch_size)
    every_epochs = int(cfg.grid.eval_every_epochs)
    if every_epochs > 0:
        cfg.grid.eval_every = every_epochs * per_epoch
        cfg.train.steps_per_call = int(np.gcd(int(cfg.train.steps_per_call),
                                              int(cfg.grid.eval_every)))
    if cfg.grid.epochs > 0:
        per_call = int(cfg.train.steps_per_call)
        steps = int(cfg.grid.epochs) * per_epoch
        cfg.train.num_steps = -(-steps // per_call) * per_call


def _mlp_config(config) -> ml_collections.ConfigDict:
    """The MLP baseline's config: `model.backbone="mlp"`, `grid.mlp_overrides`, and
    `grid.epochs` counted at its own batch size, as every other group."""
    mlp_config = ml_collections.ConfigDict(config.to_dict())
    mlp_config.model.backbone = "mlp"
    for key, value in _dotted(config.grid.mlp_overrides).items():
        section, field = key.split(".")
        mlp_config[section][field] = value
    _epochs_to_steps(mlp_config)
    return mlp_config


def _dotted(sections) -> dict[str, Any]:
    """{section: {field: value}} -> {"section.field": value}."""
    return {f"{section}.{field}": value for section, fields in dict(sections).items()
            for field, value in dict(fields).items()}


def regime_overrides(config, regime: str) -> dict[str, Any]:
    """`grid.overrides` of `regime` as {"section.field": value} (none for most regimes)."""
    overrides = config.grid.overrides
    return _dotted(overrides[regime]) if regime in overrides else {}


def regime_weights(config, regime: str) -> tuple[float, float]:
    """`regime`'s (action, state) loss weights: its `grid.overrides`, else the model's."""
    weights = dict(action_weight=config.model.action_weight,
                   state_weight=config.model.state_weight)
    weights.update({k.split(".")[1]: v for k, v in regime_overrides(config, regime).items()
                    if k in ("model.action_weight", "model.state_weight")})
    return float(weights["action_weight"]), float(weights["state_weight"])


def validation_episodes(config, env, method):
    """Held-out trajectories of the data's source (the test tasks), as episodes. With
    `grid.validation_first_task` >= 0 the held-out tasks are the `data.num_test_tasks` ids from
    there (the authors' protocol: the same held-out set for every data size)."""
    first = int(config.grid.validation_first_task)
    if first >= 0:
        if first < int(config.data.num_train_tasks):
            raise UserError(f"grid.validation_first_task={first} overlaps the "
                            f"{config.data.num_train_tasks} training trajectories (ids from 0)")
        test_ids = np.arange(first, first + int(config.data.num_test_tasks), dtype=np.int32)
    else:
        _, test_ids = task_split(env, config)
    num_steps = int(config.data.num_steps)
    source = build_source(config.data.source, env, num_steps, config.data.source_kwargs.to_dict())
    history = generate_histories(env, source, env.task_params(test_ids), num_steps,
                                 jax.random.PRNGKey(int(config.seed) + 1_000_003),
                                 task_ids=test_ids)
    return method.snippets(method.episodes(history, env))


class _Group:
    """One vmapped program of replicas of one model shape, trained with early stopping.

    Args:
      replicas: per replica, its hyperparameters beyond the config's (dotted keys: the
        trainer's `REPLICA_HYPERPARAMETERS` and the method's traced model fields).
      make_method: `make_method(model_config) -> method` (the config's fields may be traced).
      evaluate: stacked params `(K, ...)` -> validation losses `(K, 8)` (NaN: not evaluated).
      watch: bool `(K, 8)`, the tasks each replica's early stopping watches.
    """

    def __init__(self, name, config, data, replicas, seeds, make_method, evaluate, watch,
                 signature, num_steps=None):
        self.name, self.data, self.seeds = name, data, list(seeds)
        self.workdir = os.path.join(config.workdir, "grid", name)
        os.makedirs(self.workdir, exist_ok=True)
        self.build, self.evaluate, self.watch = make_method, jax.jit(evaluate), np.asarray(watch)
        self.hyper = T.replica_hyperparameters(config, replicas)
        extra = sorted({k for r in replicas for k in r} - set(self.hyper))
        self.hyper.update({k: jnp.asarray([r[k] for r in replicas], jnp.float32) for k in extra})
        self.config = ml_collections.ConfigDict(config.to_dict())
        if num_steps is not None:
            self.config.train.num_steps = int(num_steps)
        self.signature = dict(signature, group=name, seeds=self.seeds)
        self.programs = {}  # one compile for all the segments between early-stopping evaluations

    def run(self, eval_every: int, show_progress: bool) -> dict[str, np.ndarray]:
        """Train (resuming) with early stopping; returns the best parameters (`params/...`),
        their `losses` `(K, 8)`, `score` and `step`, also saved to `best.npz`."""
        per_call = int(self.config.train.steps_per_call)
        if eval_every % per_call:
            raise UserError(f"grid evaluations every {eval_every} steps: not a multiple of "
                            f"train.steps_per_call={per_call}")
        path = os.path.join(self.workdir, "best.npz")
        best = dict(np.load(path)) if os.path.exists(path) else None
        num_steps = int(self.config.train.num_steps)
        done = T.latest_checkpoint_step(self.workdir) or 0
        stops = [min(s, num_steps) for s in range(eval_every, num_steps + eval_every, eval_every)
                 if s > done]
        bar = progress(total=num_steps, initial=done, desc=f"grid {self.name}",
                       disable=not show_progress)
        try:
            for stop in stops:
                state, _ = T.train_replicas(self.build, self.config, self.data, self.workdir,
                                            self.signature, self.seeds, self.hyper,
                                            programs=self.programs, stop_at=stop)
                losses = np.asarray(self.evaluate(state.params))
                score = np.where(self.watch, losses, 0.0).sum(1) / self.watch.sum(1)
                params = _flatten(state.params)
                if best is None:
                    best = dict(score=score, losses=losses, step=np.full(len(score), stop),
                                **params)
                else:
                    better = score < best["score"]
                    best["score"] = np.where(better, score, best["score"])
                    best["losses"] = np.where(better[:, None], losses, best["losses"])
                    best["step"] = np.where(better, stop, best["step"])
                    for key, value in params.items():
                        pick = better.reshape((-1,) + (1,) * (value.ndim - 1))
                        best[key] = np.where(pick, value, best[key])
                with atomic_write(path, "wb") as out:
                    np.savez(out, **best)
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


#: The tasks early stopping of ALL and random masking watches (`grid.stop_on`): "authors" (the
#: authors' trainer: the six tasks other than the two dynamics ones, whose losses keep falling
#: as the others overfit) or "all" (the eight).
DYNAMICS = ("forward_dynamics", "inverse_dynamics")


def watched_tasks(regime: str, stop_on: str = "authors") -> list[bool]:
    """Per evaluation task, whether a replica of `regime` stops early on its loss."""
    if regime in ("all", "random"):
        return [stop_on == "all" or t not in DYNAMICS for t in TASKS]
    return [t == regime for t in TASKS]


def _unimask_group(name, config, env, data, validation, regimes, seeds, pretrained=None,
                   init_from=None, learning_rate=None, num_steps=None,
                   state_weight=None) -> _Group:
    """Uni[MASK] replicas: regime `regimes[i]` from seed `seeds[i]` (`learning_rate` and
    `state_weight`: one value, or one per replica)."""
    cls = method_class(config.method)
    k = int(config.train.seq_len)
    method = cls(config.model, env, k)  # concrete: evaluation
    replicas = []
    for i, regime in enumerate(regimes):
        action_weight, own_state_weight = regime_weights(config, regime)
        replicas.append({
            "model.regime": regime_index(regime),
            "model.action_weight": action_weight,
            "model.state_weight": (own_state_weight if state_weight is None
                                   else _at(state_weight, i)),
            **({} if init_from is None else {"model.init_from": init_from[i]}),
            **({} if learning_rate is None else {"train.learning_rate": _at(learning_rate, i)}),
        })
    stop_on = str(config.grid.stop_on)
    watch = [watched_tasks(r, stop_on) for r in regimes]
    return _Group(name, config, data, replicas, seeds,
                  lambda model: cls(model, env, k, pretrained=pretrained),
                  jax.vmap(lambda p: method.task_losses(p, validation)), watch,
                  dict(method.signature(config, env), regimes=list(regimes)), num_steps)


def _at(value, i):
    return float(value[i]) if isinstance(value, (list, tuple, np.ndarray)) else float(value)


def _dt_group(config, env, dataset, validation, seeds) -> _Group:
    """The Decision Transformer baseline (causal, one return-to-go token per step): "(DT)
    behaviour_cloning" trained without return-to-go, "(DT) reward_conditioned" with it. Their
    validation loss is the mean action cross entropy over every step of the held-out episodes
    (Uni[MASK]'s behaviour-cloning loss averaged over the index is the same quantity): the
    behaviour-cloning column without the return-to-go, the reward-conditioned one with it."""
    cls = method_class("dt")
    dt_config = ml_collections.ConfigDict(config.to_dict())
    model = ml_collections.ConfigDict(dict(config.model.to_dict(), causal=True))
    model.update(dt_model_config())
    model.rtg_scale = float(config.model.rtg_scale)
    model.max_timestep = int(config.data.num_steps)
    model.return_conditioned = 1.0
    dt_config.model = model
    for key, value in _dotted(config.grid.dt_overrides).items():
        section, field = key.split(".")
        dt_config[section][field] = value
    _epochs_to_steps(dt_config)
    data = cls.from_config(dt_config, env, dt_config.model).training_data(dataset, dt_config, env)
    regimes = list(config.grid.dt_regimes)
    unknown = set(regimes) - {"behaviour_cloning", "reward_conditioned"}
    if unknown:
        raise UserError(f"grid.dt_regimes: the DT baseline trains behaviour_cloning and "
                        f"reward_conditioned, not {sorted(unknown)}")
    conditioned = {r: float(r == "reward_conditioned") for r in regimes}
    evaluators = {}
    for flag in (0.0, 1.0):
        model_eval = ml_collections.ConfigDict(dict(dt_config.model.to_dict(),
                                                    return_conditioned=flag))
        evaluators[flag] = cls.from_config(dt_config, env, model_eval)
    episodes = validation.replace(mask=jnp.ones_like(validation.mask))
    bc, rc = list(TASKS).index("behaviour_cloning"), list(TASKS).index("reward_conditioned")

    def evaluate(params):
        out = jnp.full((len(TASKS),), jnp.nan)
        out = out.at[bc].set(evaluators[0.0].loss(params, episodes, None, True)[0])
        return out.at[rc].set(evaluators[1.0].loss(params, episodes, None, True)[0])

    all_regimes = np.repeat(regimes, len(seeds))
    watch = [[t == r for t in TASKS] for r in all_regimes]
    return _Group("dt", dt_config, data,
                  [{"model.return_conditioned": conditioned[r]} for r in all_regimes],
                  list(seeds) * len(regimes),
                  lambda m: cls.from_config(dt_config, env, m), jax.vmap(evaluate), watch,
                  dict(evaluators[1.0].signature(dt_config, env), regimes=regimes))


def _finetune_groups(config):
    """[(group name, config, tasks, per-task budget)] of "random mask + finetune": every task
    from the random-mask model (its shape), at `grid.finetune_learning_rate` for
    `grid.finetune_steps` (one group), or with `grid.finetune_overrides` {task:
    {epoch_trajectories, learning_rate, batch_size, state_weight}} the authors' per-task budgets (a group per
    batch size and budget; the learning rate and state weight are per replica)."""
    grid = config.grid
    overrides = {t: dict(v) for t, v in dict(grid.finetune_overrides).items()}
    unknown = set(overrides) - set(TASKS)
    if unknown:
        raise UserError(f"grid.finetune_overrides: unknown tasks {sorted(unknown)}")
    base = ml_collections.ConfigDict(config.to_dict())
    for dotted, value in regime_overrides(config, "random").items():
        if dotted not in ("model.action_weight", "model.state_weight"):
            section, key = dotted.split(".")
            base[section][key] = value
    # A task's budget: the fine-tuning's own, the random regime's state weight and batch size
    # (epoch_trajectories 0: grid.finetune_steps), less what its override gives.
    defaults = dict(learning_rate=grid.finetune_learning_rate,
                    state_weight=regime_weights(config, "random")[1],
                    batch_size=base.train.batch_size, epoch_trajectories=0)
    budget, groups = {}, {}
    for task in TASKS:
        own = overrides[task] if task in overrides else {}
        if set(own) - set(defaults):
            raise UserError(f"grid.finetune_overrides.{task}: unknown fields "
                            f"{sorted(set(own) - set(defaults))} (fields: {', '.join(defaults)})")
        o = dict(defaults, **own)
        budget[task] = dict(learning_rate=float(o["learning_rate"]),
                            state_weight=float(o["state_weight"]))
        batch = int(o["batch_size"])
        groups.setdefault((batch, int(o["epoch_trajectories"]) or None), []).append(task)
    out = []
    for (batch, budget_et), tasks in groups.items():
        cfg = ml_collections.ConfigDict(base.to_dict())
        cfg.train.batch_size = batch
        if budget_et is None:
            cfg.grid.epochs = 0
            cfg.grid.eval_every = int(grid.finetune_eval_every)
            cfg.grid.eval_every_epochs = 0
            cfg.train.num_steps = int(grid.finetune_steps)
            name = "finetune"
        else:
            cfg.grid.epoch_trajectories = budget_et
            cfg.grid.eval_every_epochs = int(grid.eval_every_epochs)
            if cfg.grid.eval_every_epochs <= 0:
                cfg.grid.eval_every = int(grid.finetune_eval_every)
            _epochs_to_steps(cfg)
            name = f"finetune_batch{batch}_ep{cfg.grid.epochs}"
        out.append((name, cfg, tasks, budget))
    # Cheapest first (steps x batch x tasks), so that a run cut short has the most tasks.
    return sorted(out, key=lambda g: int(g[1].train.num_steps) * int(g[1].train.batch_size)
                  * len(g[2]))


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

    for name, cfg, regimes in _group_configs(config):
        group = _unimask_group(name, cfg, env, data, validation, np.repeat(regimes, num_seeds),
                               seeds * len(regimes))
        best = group.run(int(cfg.grid.eval_every), show)
        record(best, regimes)
        best_by_regime.update({r: (best, i) for i, r in enumerate(regimes)})
    if grid.finetune:
        if "random" not in best_by_regime:
            raise UserError("grid.finetune needs the 'random' regime in grid.regimes")
        best, i = best_by_regime["random"]
        pretrained = jax.tree.map(lambda x: x[i * num_seeds:(i + 1) * num_seeds],
                                  _Group.params_of(best))
        finetuned = {}
        for name, cfg, tasks, budget in _finetune_groups(config):
            reps = np.repeat(tasks, tuned)
            from_seed = list(range(tuned)) if from_own else [0] * tuned
            group = _unimask_group(name, cfg, env, data, validation, reps, tuned_seeds * len(tasks),
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
        mlp_config = _mlp_config(config)
        regimes = list(grid.mlp_regimes)
        mlp_data = cls(mlp_config.model, env, k).training_data(dataset, mlp_config, env)
        group = _unimask_group("mlp", mlp_config, env, mlp_data, validation,
                               np.repeat(regimes, num_seeds), seeds * len(regimes))
        record(group.run(int(group.config.grid.eval_every), show), regimes, "(MLP) ")
    if len(grid.dt_regimes):
        group = _dt_group(config, env, dataset, validation, seeds)
        record(group.run(int(group.config.grid.eval_every), show), list(grid.dt_regimes), "(DT) ")
    result = summarise(rows, time.perf_counter() - start, config)
    if "random" in best_by_regime:
        best, i = best_by_regime["random"]
        params = jax.tree.map(lambda x: jnp.asarray(x[i * num_seeds]), _Group.params_of(best))
        result["rollouts"] = rollout_distributions(config, env, base, params)
        result["backward_inference"] = backward_inference(env, base, params, validation,
                                                          int(config.seed))
    write_heatmaps(result, config.workdir)
    return result


#: (label, regime trained, how it acts) of the returns table (Uni[MASK] App. H, Table 1).
RETURN_ROWS = (("random-mask, BC", "random", "bc"), ("random-mask, RC", "random", "rc"),
               ("random-mask, goal", "random", "goal"), ("single-task BC", "behaviour_cloning", "bc"),
               ("single-task RC", "reward_conditioned", "rc"),
               ("single-task goal", "goal_conditioned", "goal"))


def run_returns(config, dataset, env) -> dict[str, Any]:
    """Uni[MASK]'s Maze2D table: the random-mask model used for behaviour cloning,
    reward-conditioned (return-to-go 1.1 x the return of the dataset episode whose initial
    state is nearest) and goal-conditioned control, against single-task models, by their
    returns on held-out start/goal pairs (`data.num_test_tasks`, one episode each), over
    `grid.num_seeds` seeds. The last `grid.validation_episodes` dataset episodes are held out
    for early stopping. Writes `returns.json` and `returns.png`."""
    from dataclasses import replace


    grid = config.grid
    cls = method_class(config.method)
    k = int(config.train.seq_len)
    base = cls(config.model, env, k)
    held = int(grid.validation_episodes)
    if not 0 < held < dataset.num_episodes:
        raise UserError(f"grid.validation_episodes={held} must be in (0, "
                        f"{dataset.num_episodes}) episodes of the dataset")
    split = dataset.num_episodes - held
    cut = lambda sl: replace(dataset, **{f: getattr(dataset, f)[sl] for f in (  # noqa: E731
        "observations", "actions", "rewards", "terminations", "truncations", "mask",
        "final_observations", "lengths")})
    train_set, held_out = cut(slice(0, split)), cut(slice(split, None))
    data = base.training_data(train_set, config, env)
    validation = base.snippets(held_out.to_trajectories(), limit=2000)
    num_seeds = int(grid.num_seeds)
    seeds = [int(config.seed) + s for s in range(num_seeds)]
    regimes = list(dict.fromkeys(r for _, r, _ in RETURN_ROWS))
    start = time.perf_counter()
    group = _unimask_group("maze", config, env, data, validation,
                           np.repeat(regimes, num_seeds), seeds * len(regimes))
    best = group.run(int(grid.eval_every), bool(config.run.progress))
    params = _Group.params_of(best)
    reference = (np.asarray(train_set.observations[:, 0]).reshape(train_set.num_episodes, -1),
                 train_set.returns)
    _, test_ids = task_split(env, config)
    tasks = env.task_params(test_ids)
    steps = int(env.episode_length)
    results: dict[str, list[dict[str, float]]] = {}
    for label, regime, mode in RETURN_ROWS:
        policy = SnippetPolicy(
            base, target=float(grid.rtg_factor) if mode == "rc" else None,
            reference=reference if mode == "rc" else None,
            goal_observation=env.goal_observation if mode == "goal" else None)
        results[label] = []
        for s in range(num_seeds):
            row = regimes.index(regime) * num_seeds + s
            one = jax.tree.map(lambda x: jnp.asarray(x[row]), params)
            history, info = generate_histories(env, ParamSource(policy, one, name=label), tasks,
                                               steps, jax.random.PRNGKey(int(config.seed) + s),
                                               with_info=True)
            returns = M.episode_returns_ragged(np.asarray(history.rewards),
                                               np.asarray(history.dones))
            terminated = np.asarray(info["terminated"])
            results[label].append(dict(
                seed=seeds[s], mean_return=float(np.mean([r[0] for r in returns])),
                success=float(terminated.any(1).mean()),
                steps_to_goal=float(np.mean(np.where(terminated.any(1),
                                                     terminated.argmax(1) + 1, steps)))))
    data_returns = float(np.mean(train_set.returns))
    table = {label: {m: [float(np.mean([r[m] for r in rows])),
                         float(np.std([r[m] for r in rows], ddof=1) / np.sqrt(len(rows)))
                         if len(rows) > 1 else 0.0]
                     for m in ("mean_return", "success", "steps_to_goal")}
             for label, rows in results.items()}
    out = dict(seeds=num_seeds, test_tasks=int(len(test_ids)), episode_length=steps,
               dataset_episodes=int(split), dataset_mean_return=data_returns,
               rtg_factor=float(grid.rtg_factor), wall_seconds=round(time.perf_counter() - start, 1),
               validation_losses={r: best["losses"][i * num_seeds:(i + 1) * num_seeds].tolist()
                                  for i, r in enumerate(regimes)},
               table=table, per_seed=results)
    write_json(os.path.join(config.workdir, "returns.json"), out, indent=1)
    _plot_returns(table, data_returns, os.path.join(config.workdir, "returns.png"))
    return out


def _plot_returns(table, data_return, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, metric, title in ((axes[0], "mean_return", "return (distance covered to the goal)"),
                              (axes[1], "success", "success rate")):
        means = [table[l][metric][0] for l in labels]
        errs = [table[l][metric][1] for l in labels]
        ax.bar(range(len(labels)), means, yerr=errs, capsize=3,
               color=["C0"] * 3 + ["C1"] * (len(labels) - 3))
        ax.set_xticks(range(len(labels)), [l.replace(", ", "\n") for l in labels], fontsize=7)
        ax.set_title(title, fontsize=9)
    axes[0].axhline(data_return, color="k", ls="--", lw=1, label="dataset mean")
    axes[0].legend(fontsize=7)
    save_figure(fig, path, dpi=110)


#: Fig. 8's conditioning: agent at (1, 4), key at (2, 2) (cell ids of `envs/doorkey.py`).
FIG8_LAYOUT = ((1, 4), (2, 2))


def rollout_distributions(config, env, method, params, num_episodes: int = 1000):
    """Fig. 8's analogue: (agent cell, action) frequencies of `num_episodes` behaviour-cloning
    rollouts of the model from one initial state, next to as many episodes of the data's source
    (held-out data) and of a uniform random policy; total-variation distances to the data.
    Writes `rollouts.png`."""
    (ax, ay), (kx, ky) = FIG8_LAYOUT
    layout = env.layout_params(jnp.full(num_episodes, cell_of(ax, ay)),
                               jnp.full(num_episodes, cell_of(kx, ky)))
    steps = int(config.data.num_steps)
    key = jax.random.PRNGKey(int(config.seed) + 7)
    policies = {
        "data": build_source(config.data.source, env, steps, config.data.source_kwargs.to_dict()),
        "model": method.policies(params, env, config)["model_bc"],
        "random": build_source("uniform_random", env, steps, {}),
    }
    freq = {}
    for name, policy in policies.items():
        history = generate_histories(env, policy, layout, steps, key)
        agent, _ = split_state(history.observations)
        joint = np.zeros((16, env.num_actions))
        np.add.at(joint, (np.asarray(agent).ravel(), np.asarray(history.actions).ravel()), 1)
        freq[name] = joint / joint.sum()
    tv = {name: 0.5 * float(np.abs(freq[name] - freq["data"]).sum()) for name in ("model",
                                                                                  "random")}
    _plot_rollouts(freq, tv, os.path.join(config.workdir, "rollouts.png"))
    return dict(layout=dict(agent=FIG8_LAYOUT[0], key=FIG8_LAYOUT[1]), episodes=num_episodes,
                policy="random-mask model, seed 0, behaviour cloning",
                total_variation_to_data=tv,
                frequencies={k: v.round(5).tolist() for k, v in freq.items()})


def backward_inference(env, method, params, validation, seed: int, start: int = 5):
    """Past inference by sampling from step `start` backwards with rejection of
    dynamics-inconsistent draws: how much model mass rejection removes, and a check that every
    sampled transition is then consistent."""
    sampled, rejected = sample_past(method, params, validation, start,
                                    jax.random.PRNGKey(seed + 11), env.next_observation)
    nxt = env.next_observation(sampled.observations[:, :start], sampled.actions[:, :start, 0])
    consistent = np.asarray(nxt == sampled.observations[:, 1:start + 1]).mean()
    return dict(start=start, snippets=int(validation.actions.shape[0]),
                model_mass_on_inconsistent_pairs=round(float(rejected), 4),
                consistent_after_rejection=float(consistent))


def _plot_rollouts(freq, tv, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
    for ax, name in zip(axes, ("data", "model", "random")):
        cells = freq[name].sum(1).reshape(4, 4).T  # rows y, columns x as in the env docstring
        ax.imshow(cells, cmap="Blues", vmin=0)
        for (y, x), v in np.ndenumerate(cells):
            ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(4), [1, 2, 3, 4])
        ax.set_yticks(range(4), [1, 2, 3, 4])
        label = "held-out data" if name == "data" else f"{name} (TV to data {tv[name]:.3f})"
        ax.set_title(f"agent cell visits: {label}", fontsize=8)
    width = 0.27
    for j, name in enumerate(("data", "model", "random")):
        axes[3].bar(np.arange(4) + (j - 1) * width, freq[name].sum(0), width, label=name)
    axes[3].set_xticks(range(4), ["right", "down", "left", "up"])
    axes[3].set_title("action frequencies", fontsize=8)
    axes[3].legend(fontsize=7)
    save_figure(fig, path, dpi=110)


def summarise(rows: dict[str, np.ndarray], seconds: float, config) -> dict[str, Any]:
    """Means, standard errors, normalised values and the paper's claims of a grid's losses."""
    tasks = list(TASKS)
    stats = {r: seed_mean_sem(v) for r, v in rows.items()}
    mean = {r: s[0] for r, s in stats.items()}
    sem = {r: s[1] for r, s in stats.items()}
    result: dict[str, Any] = dict(
        tasks=tasks, rows=list(rows), seeds=int(config.grid.num_seeds),
        num_train_trajectories=int(config.data.num_train_tasks),
        num_validation_trajectories=int(config.data.num_test_tasks),
        wall_seconds=round(seconds, 1),
        losses={r: _listed(v) for r, v in rows.items()},
        mean={r: _listed(v) for r, v in mean.items()},
        sem={r: _listed(v) for r, v in sem.items()})
    if FINETUNED in mean:
        ref = mean[FINETUNED]
        result["normalised"] = {r: _listed(v / ref) for r, v in mean.items()}
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
                # The paper's own ratios (Fig. 10, 500 trajectories): 1.6x and 1.55x on the
                # inference tasks, 34x and 4.9x on the dynamics tasks.
                paper_ratio_per_task=dict(zip(hard, (1.59, 1.55, 34.4, 4.92))),
                holds=bool((bc_ratio >= 2.0).all()),
                holds_on_dynamics=bool((bc_ratio[2:] >= 2.0).all()))
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


#: The appendix's raw validation losses (Figs. 10, 12, 14), by data size and row, in `TASKS`'
#: column order.
APPENDIX_RAW = {
    500: {
        "behaviour_cloning": (1.08, 1.08, 1.1, 1.12, 7.25, 6.9, 5.64, 5.66),
        "reward_conditioned": (1.12, 1.07, 1.14, 1.17, 7.19, 6.94, 5.59, 5.63),
        "goal_conditioned": (1.26, 1.27, 1, 1.07, 7.47, 7.39, 5.98, 5.99),
        "waypoint_conditioned": (1.36, 1.36, 1.08, 0.871, 7.61, 7.67, 6.02, 6.08),
        "past_inference": (1.53, 1.53, 1.49, 1.48, 4.8, 7.36, 4.44, 3.64),
        "future_inference": (1.1, 1.1, 1.12, 1.15, 8.19, 4.58, 3.33, 4.67),
        "forward_dynamics": (1.54, 1.55, 1.54, 1.55, 19, 17.4, 0.000794, 9.51),
        "inverse_dynamics": (1.51, 1.5, 1.53, 1.53, 11.9, 9.38, 4.43, 1.05),
        "all": (1.09, 1.08, 1.02, 0.999, 4.98, 4.69, 0.638, 1.49),
        "random": (1.17, 1.09, 0.944, 0.727, 4.55, 4.44, 0.164, 1.15),
        FINETUNED: (1.11, 1.04, 0.909, 0.697, 4.52, 4.38, 0.000304, 1),
    },
    50: {
        "behaviour_cloning": (1.17, 1.17, 1.18, 1.2, 7.24, 6.97, 5.66, 5.7),
        "reward_conditioned": (1.19, 1.19, 1.19, 1.21, 7.24, 6.96, 5.65, 5.69),
        "goal_conditioned": (1.2, 1.21, 1.21, 1.21, 7.39, 7.28, 5.93, 5.94),
        "waypoint_conditioned": (1.2, 1.2, 1.2, 1.19, 7.4, 7.3, 5.97, 6),
        "past_inference": (1.46, 1.47, 1.42, 1.41, 5.57, 6.57, 4.58, 4.37),
        "future_inference": (1.23, 1.24, 1.24, 1.25, 6.92, 5.73, 4.54, 4.96),
        "forward_dynamics": (1.53, 1.54, 1.53, 1.54, 14.7, 13.1, 0.444, 7.46),
        "inverse_dynamics": (1.5, 1.5, 1.51, 1.51, 10, 9.13, 4.56, 1.9),
        "all": (1.2, 1.2, 1.19, 1.19, 5.66, 5.77, 3.8, 3.95),
        "random": (1.2, 1.2, 1.17, 1.15, 5.32, 5.44, 2.41, 2.93),
        FINETUNED: (1.2, 1.19, 1.16, 1.14, 5.19, 5.33, 0.461, 1.86),
    },
    1000: {
        "behaviour_cloning": (1.08, 1.08, 1.1, 1.13, 7.26, 6.89, 5.62, 5.66),
        "reward_conditioned": (1.1, 1.03, 1.14, 1.16, 7.16, 6.9, 5.58, 5.63),
        "goal_conditioned": (1.34, 1.34, 0.92, 1.1, 7.5, 7.36, 5.98, 5.98),
        "waypoint_conditioned": (1.27, 1.27, 0.999, 0.704, 7.48, 7.63, 6.04, 6.06),
        "past_inference": (1.55, 1.54, 1.51, 1.49, 4.77, 7.38, 4.41, 3.62),
        "future_inference": (1.09, 1.09, 1.11, 1.14, 8.59, 4.43, 3.1, 4.45),
        "forward_dynamics": (1.54, 1.53, 1.54, 1.54, 19.1, 17.5, 0.000454, 9.64),
        "inverse_dynamics": (1.5, 1.5, 1.54, 1.52, 12.3, 9.99, 4.51, 1.04),
        "all": (1.08, 1.06, 0.995, 0.978, 4.97, 4.66, 0.583, 1.43),
        "random": (1.11, 1.01, 0.899, 0.658, 4.49, 4.32, 0.0693, 1.05),
        FINETUNED: (1.08, 0.987, 0.868, 0.63, 4.48, 4.3, 8.26e-05, 0.972),
    },
}
#: Rows whose models never predict states: their state columns (past / future inference,
#: both dynamics) are the untrained state head's initial scale, in both codes.
ACTION_ONLY_ROWS = ("behaviour_cloning", "reward_conditioned", "goal_conditioned",
                    "waypoint_conditioned")
STATE_COLUMNS = ("past_inference", "future_inference", "forward_dynamics", "inverse_dynamics")


def appendix_comparison(mean: dict, sem: dict, size: int, seeds: int) -> str:
    """Markdown: per row and task, the appendix's raw loss, ours (mean ± s.e.m.) and ours /
    theirs; cells of `ACTION_ONLY_ROWS` x `STATE_COLUMNS` are marked (untrained head) and left
    out of the count of cells within 15%."""
    paper = APPENDIX_RAW.get(int(size))
    if paper is None:
        raise UserError(f"the appendix has raw losses at 50, 500 and 1000 trajectories, not {size}")
    tasks = list(TASKS)
    lines = [f"Uni[MASK] DoorKey, {size} trajectories, {seeds} seeds: appendix value / ours ± "
             f"s.e.m. / ratio (ours / appendix). *u*: untrained state head (excluded).", "",
             "| Row | " + " | ".join(t.replace("_", " ") for t in tasks) + " |",
             "|---|" + "---|" * len(tasks)]
    within = total = 0
    for row, theirs in paper.items():
        if row not in mean:
            lines.append(f"| {row} | " + " | ".join(f"{v:.3g} / - / -" for v in theirs) + " |")
            continue
        cells = []
        for j, task in enumerate(tasks):
            ours, err = mean[row][j], sem[row][j]
            if ours is None or not np.isfinite(ours):
                cells.append(f"{theirs[j]:.3g} / - / -")
                continue
            ratio = ours / theirs[j]
            untrained = row in ACTION_ONLY_ROWS and task in STATE_COLUMNS
            if not untrained:
                total += 1
                within += bool(abs(ratio - 1) <= 0.15)
            cells.append(f"{theirs[j]:.3g} / {ours:.3g} ± {err:.2g} / {ratio:.2f}"
                         + (" *u*" if untrained else ""))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines += ["", f"Cells within 15% of the appendix: {within} of {total} compared "
              f"(untrained-head cells excluded)."]
    return "\n".join(lines) + "\n"


def best_normalised(mean: dict) -> dict:
    """The paper's normalised heatmap (Figs. 9, 11, 13): each column over its best (lowest)
    value across the rows."""
    rows = list(mean)
    grid = np.array([_array(mean[r]) for r in rows])
    best = np.nanmin(grid, axis=0)
    return {r: _listed(grid[i] / best) for i, r in enumerate(rows)}


def _listed(values: np.ndarray) -> list:
    """Nested lists with None for NaN (cells a row is not evaluated on), valid JSON."""
    return np.where(np.isnan(values), None, np.asarray(values, object)).tolist()


def _array(values) -> np.ndarray:
    return np.array(values, dtype=float)  # None -> nan


def write_heatmaps(result: dict[str, Any], workdir: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result["normalised_best"] = best_normalised(result["mean"])
    write_json(os.path.join(workdir, "heatmap.json"), result, indent=1)
    if int(result["num_train_trajectories"]) in APPENDIX_RAW:
        write_text(os.path.join(workdir, "appendix_comparison.md"),
                   appendix_comparison(result["mean"], result["sem"],
                                       result["num_train_trajectories"], result["seeds"]))
    tasks, rows = result["tasks"], result["rows"]
    for kind, values, fname in (("normalised", result.get("normalised"), "heatmap.png"),
                                ("best", result["normalised_best"], "heatmap_best.png"),
                                ("raw", result["mean"], "heatmap_raw.png")):
        if values is None:
            continue
        grid = np.array([_array(values[r]) for r in rows])
        fig, ax = plt.subplots(figsize=(1.3 * len(tasks) + 3, 0.55 * len(rows) + 2))
        shown = np.log(np.clip(grid, 1e-6, None)) if kind == "raw" else np.clip(grid, 0, 2)
        if kind == "best":  # the paper's colour scale: log of the ratio, clipped at 1.5
            shown = np.log(np.clip(grid, 1.0, 1.5))
        ax.imshow(shown, cmap="viridis_r", aspect="auto")
        for i, r in enumerate(rows):
            for j in range(len(tasks)):
                if np.isnan(grid[i, j]):
                    continue
                scale = {"normalised": lambda: _array(result["mean"][FINETUNED])[j],
                         "best": lambda: np.nanmin([_array(result["mean"][q])[j] for q in rows]),
                         "raw": lambda: 1.0}[kind]()
                sem = _array(result["sem"][r])[j] / scale
                ax.text(j, i, f"{grid[i, j]:.3g}\n±{sem:.2g}", ha="center", va="center",
                        fontsize=7, color="w" if shown[i, j] > np.nanmedian(shown) else "k")
        ax.set_xticks(range(len(tasks)), [t.replace("_", "\n") for t in tasks], fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_xlabel("evaluation task")
        ax.set_ylabel("training regime")
        title = {"normalised": "validation loss / random mask + finetune",
                 "best": "validation loss / the column's best (the paper's form)",
                 "raw": "validation loss (raw)"}[kind]
        ax.set_title(f"{title}; mean ± s.e.m. over {result['seeds']} seeds, "
                     f"{result['num_train_trajectories']} trajectories", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(workdir, fname), dpi=120)
        plt.close(fig)


#: Rows of the data-size figure (Figs. 11-14 across data sizes): (label, heatmap row); the
#: single-task row of a column is that column's own task.
SIZE_ROWS = (("single-task (own task)", None), ("BC model", "behaviour_cloning"),
             ("ALL", "all"), ("random mask", "random"), ("random + finetune", FINETUNED),
             ("(MLP) random", "(MLP) random"))


def load_heatmaps(paths: list[str]) -> list[dict[str, Any]]:
    """The `heatmap.json` of each run directory (or the files themselves), by data size."""
    results = []
    for path in paths:
        file = path if path.endswith(".json") else os.path.join(path, "heatmap.json")
        if not os.path.isfile(file):
            raise UserError(f"no heatmap.json in {path}; run `icrl-jax report --config "
                            f"experiments/unimask/doorkey.py[:quick]` there first")
        with open(file) as f:
            results.append(dict(json.load(f), path=file))
    sizes = [r["num_train_trajectories"] for r in results]
    if len(set(sizes)) != len(sizes):
        raise UserError(f"the runs {[r['path'] for r in results]} repeat a data size ({sizes}); "
                        f"give one run per number of training trajectories")
    return sorted(results, key=lambda r: r["num_train_trajectories"])


def data_size_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per `SIZE_ROWS` label and task: the mean and s.e.m. of the validation loss at each data
    size (None where a run lacks the row or cell), and each run's checked claims."""
    tasks = results[0]["tasks"]
    rows = {}
    for label, row in SIZE_ROWS:
        per_task = {}
        for j, task in enumerate(tasks):
            name = task if row is None else row
            mean = [r["mean"].get(name, [None] * len(tasks))[j] for r in results]
            sem = [r["sem"].get(name, [None] * len(tasks))[j] for r in results]
            per_task[task] = dict(mean=mean, sem=sem)
        rows[label] = per_task
    return dict(tasks=tasks, sizes=[r["num_train_trajectories"] for r in results],
                seeds=[r["seeds"] for r in results], rows=rows,
                claims={str(r["num_train_trajectories"]): r["claims"] for r in results})


def data_size_report(paths: list[str], out: str) -> dict[str, str]:
    """`icrl-jax report --runs DIR ... --out DIR` on Uni[MASK] grids of different data sizes:
    `data_sizes.png` (validation loss against the number of training trajectories, one panel
    per evaluation task, mean ± s.e.m. over seeds), `data_sizes.json` and `data_sizes.md`
    (the paper's three claims per size). Returns the written paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    table = data_size_table(load_heatmaps(paths))
    os.makedirs(out, exist_ok=True)
    written = dict(json=os.path.join(out, "data_sizes.json"),
                   figure=os.path.join(out, "data_sizes.png"),
                   table=os.path.join(out, "data_sizes.md"))
    write_json(written["json"], table, indent=1)
    tasks, sizes = table["tasks"], np.asarray(table["sizes"], float)
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), squeeze=False)
    for ax, task in zip(axes.ravel(), tasks):
        for i, (label, row) in enumerate(SIZE_ROWS):
            if row == "behaviour_cloning" and task == "behaviour_cloning":
                continue  # the BC model is this column's single-task model
            cell = table["rows"][label][task]
            mean, sem = _array(cell["mean"]), _array(cell["sem"])
            if np.isnan(mean).all():
                continue
            ax.errorbar(sizes * (1 + 0.03 * (i - 2.5)), mean, yerr=sem, marker="o", ms=3,
                        capsize=2, label=label, color=f"C{i}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xticks(sizes, [str(int(s)) for s in sizes])
        ax.set_title(task.replace("_", " "), fontsize=9)
        ax.set_xlabel("training trajectories", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("validation loss")
    axes[1, 0].set_ylabel("validation loss")
    axes[0, 1].legend(fontsize=7)  # the behaviour-cloning panel has no separate BC model
    fig.suptitle(f"Uni[MASK] DoorKey: validation loss vs data size (mean ± s.e.m. over "
                 f"{'/'.join(map(str, table['seeds']))} seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(written["figure"], dpi=110)
    plt.close(fig)
    text = _data_size_markdown(table)
    write_text(written["table"], text)
    print(text)
    return written


def _data_size_markdown(table: dict[str, Any]) -> str:
    tasks, sizes = table["tasks"], table["sizes"]

    def cells(label):
        out = []
        for task in tasks:
            c = table["rows"][label][task]
            out.append(" / ".join("-" if m is None else f"{m:.3g} ± {s:.1g}"
                                  for m, s in zip(c["mean"], c["sem"])))
        return out

    lines = [f"# Uni[MASK] DoorKey across data sizes ({' / '.join(map(str, sizes))} "
             f"trajectories)\n", "Validation loss, mean ± s.e.m. over seeds, per data size:\n",
             "| Row | " + " | ".join(tasks) + " |", "|" + "---|" * (len(tasks) + 1)]
    lines += [f"| {label} | " + " | ".join(cells(label)) + " |" for label, _ in SIZE_ROWS]
    lines += ["", "Claims (ratios per task; `holds` as checked in each heatmap.json):", ""]
    for size, claims in table["claims"].items():
        for name, claim in claims.items():
            ratios = claim.get("ratio_per_task") or claim.get("finetune_vs_single")
            shown = ", ".join(f"{task} " + (" vs ".join(f"{v:.3g}" for v in value)
                                            if isinstance(value, list) else f"{value:.3g}")
                              for task, value in ratios.items())
            lines.append(f"- {size} trajectories, {name}: holds={claim['holds']}; {shown}")
    return "\n".join(lines) + "\n"


def report_grid(config) -> dict[str, Any]:
    """`icrl-jax report --config` with `report.kind="grid"`: the grid on the run's dataset."""
    env = R.build_env(config)
    return run_grid(config, R.dataset_of(config, env), env)


REPORTS.register("grid", report_grid)
REPORTS.register("runs:grid", data_size_report)
