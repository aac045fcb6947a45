"""The trainings of a Uni[MASK] grid (`grid.py`): regimes grouped by model shape and budget,
each group one vmapped program of replicas (`ReplicaGroup`) trained with early stopping on
held-out trajectories; "random mask + finetune" groups, and the MLP and Decision Transformer
baselines' groups.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.files import atomic_write
from icrl_jax.core.logging_utils import progress
from icrl_jax.data.builders import task_split
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.sources import build_source
from icrl_jax.methods import method_class
from icrl_jax.methods.fields import dt_model_config
from icrl_jax.papers.unimask.masks import TASKS, regime_index
from icrl_jax.pipeline.train import latest_checkpoint_step, replica_hyperparameters, train_replicas


def group_configs(config) -> list[tuple[str, ml_collections.ConfigDict, list[str]]]:
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


def mlp_config(config) -> ml_collections.ConfigDict:
    """The MLP baseline's config: `model.backbone="mlp"`, `grid.mlp_overrides`, and
    `grid.epochs` counted at its own batch size, as every other group."""
    mlp_config = ml_collections.ConfigDict(config.to_dict())
    mlp_config.model.backbone = "mlp"
    for key, value in flat_overrides(config.grid.mlp_overrides).items():
        section, field = key.split(".")
        mlp_config[section][field] = value
    _epochs_to_steps(mlp_config)
    return mlp_config


def flat_overrides(sections) -> dict[str, Any]:
    """{section: {field: value}} -> {"section.field": value}."""
    return {f"{section}.{field}": value for section, fields in dict(sections).items()
            for field, value in dict(fields).items()}


def regime_overrides(config, regime: str) -> dict[str, Any]:
    """`grid.overrides` of `regime` as {"section.field": value} (none for most regimes)."""
    overrides = config.grid.overrides
    return flat_overrides(overrides[regime]) if regime in overrides else {}


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


class ReplicaGroup:
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
        self.hyper = replica_hyperparameters(config, replicas)
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
        done = latest_checkpoint_step(self.workdir) or 0
        stops = [min(s, num_steps) for s in range(eval_every, num_steps + eval_every, eval_every)
                 if s > done]
        bar = progress(total=num_steps, initial=done, desc=f"grid {self.name}",
                       disable=not show_progress)
        try:
            for stop in stops:
                state, _ = train_replicas(self.build, self.config, self.data, self.workdir,
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


#: The tasks that early stopping of ALL and random masking leaves out with `grid.stop_on`
#: "authors" (the authors' trainer: their losses keep falling as the others' overfit; "all"
#: watches the eight).
DYNAMICS = ("forward_dynamics", "inverse_dynamics")


def watched_tasks(regime: str, stop_on: str = "authors") -> list[bool]:
    """Per evaluation task, whether a replica of `regime` stops early on its loss."""
    if regime in ("all", "random"):
        return [stop_on == "all" or t not in DYNAMICS for t in TASKS]
    return [t == regime for t in TASKS]


def unimask_group(name, config, env, data, validation, regimes, seeds, pretrained=None,
                   init_from=None, learning_rate=None, num_steps=None,
                   state_weight=None) -> ReplicaGroup:
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
    return ReplicaGroup(name, config, data, replicas, seeds,
                  lambda model: cls(model, env, k, pretrained=pretrained),
                  jax.vmap(lambda p: method.task_losses(p, validation)), watch,
                  dict(method.signature(config, env), regimes=list(regimes)), num_steps)


def _at(value, i):
    return float(value[i]) if isinstance(value, (list, tuple, np.ndarray)) else float(value)


def dt_group(config, env, dataset, validation, seeds) -> ReplicaGroup:
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
    for key, value in flat_overrides(config.grid.dt_overrides).items():
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
    return ReplicaGroup("dt", dt_config, data,
                  [{"model.return_conditioned": conditioned[r]} for r in all_regimes],
                  list(seeds) * len(regimes),
                  lambda m: cls.from_config(dt_config, env, m), jax.vmap(evaluate), watch,
                  dict(evaluators[1.0].signature(dt_config, env), regimes=regimes))


def finetune_groups(config):
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
