"""One run over one work directory: generate | train | evaluate | report | sweep.

A run is data -> method -> trainer -> rollouts -> metrics, each stage one shared piece:
`data.builders` makes and opens the dataset, the registered method (`config.method`) gives its
training view and its policies, `train.train` trains (resuming), `data.rollout.run_policies`
rolls the policies out on JAX envs or host simulators, and `metrics.summarise` scores them. No
stage names a method or an environment.

`<workdir>/` holds: `config.json` (resolved config), the dataset (`histories.npz` or a pixel
store, unless `data.path` points elsewhere; with n-gram layers on VQ codes, the store's `vq/`
holds the VQ-VAE that `train` pretrains first, `vq_pretrain.py`), `metrics.jsonl` and
`tensorboard/` (training and evaluation scalars), `checkpoints/` (orbax), `eval.json`,
`eval_rollouts.npz` (per rollout: each policy's episode returns, or regret curve, and task id)
and `in_context_curves.png`; `icrl-jax report` adds `seed_*/variants.json` and `report/`,
`icrl-jax sweep` `results.jsonl` and `emp.*`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icrl_jax import envs
from icrl_jax.core import metrics
from icrl_jax.pipeline import train as trainer
from icrl_jax.core.config import check_workdir, finalize, saved_config
from icrl_jax.core.distributed import is_main_process
from icrl_jax.core.errors import UserError
from icrl_jax.core.files import (atomic_write, make_dirs, remove_stale_temporaries, write_json,
                                 write_text)
from icrl_jax.core.logging_utils import MetricsLogger
from icrl_jax.core.plots import plot_curves
from icrl_jax.core.registry import COMMANDS, HOOKS, REPORTS
from icrl_jax.core.validation import validate
from icrl_jax.core.workdir_lock import hold, refuse_if_in_use
from icrl_jax.data.baselines import baseline_policies
from icrl_jax.data.builders import (Rows, builder_of, dataset_returns, generate, num_rows,
                                    open_dataset, reference_scores, share_dataset, task_split)
from icrl_jax.data.minari_io import normalized_score
from icrl_jax.data.rollout import run_policies
from icrl_jax.methods import build_method, method_class
from icrl_jax.methods.base import Method
from icrl_jax.pipeline.resources import sized_by


def resolve_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Validate a loaded config, fill derived fields, and write it to the work directory.

    First every declared constraint on its fields (`core.validation.validate`: one line naming
    the key, its value, the rule and an example), then those that need the built env (task
    counts) and the device count, after the method's `prepare_config`.
    The config's method (if it names one) and env are built first, so an unknown name or a bad
    env kwarg fails here, naming the nearest; the method's `prepare_config` fills fields that
    depend on other files (e.g. a pretrained model's shape); each active run hook's `resolve`
    then checks and fills the finalised config."""
    validate(config)  # every declared constraint on its own fields, before anything is built
    env = None
    if config.method:  # a config of another kind (e.g. a language model's) has no method
        method_class(config.method).prepare_config(config)
        env = build_env(config)
        validate(config, env, num_devices=_data_parallel_devices(config))
    config = finalize(config)
    check_workdir(config)
    for hook in active_hooks(config):
        hook.resolve(config, env)
    if is_main_process():  # nothing is written into a directory another run holds
        refuse_if_in_use(config.workdir)
    make_dirs(config.workdir)
    if is_main_process():
        write_text(os.path.join(config.workdir, "config.json"),
                   config.to_json_best_effort(indent=1, sort_keys=True))
    return config


def _data_parallel_devices(config) -> int | None:
    """The devices a batch must divide over: all of them with several processes (one process
    trains on the most it divides over, a sweep splits its replicas instead); None: any batch."""
    if jax.process_count() == 1 or "sweep" in config:
        return None
    return jax.device_count()


def active_hooks(config) -> list:
    """The registered run hooks (`core.registry.HOOKS`) that apply to `config`."""
    return [hook for _, hook in HOOKS.items() if hook.applies(config)]


def process_share(config, env) -> Rows | None:
    """With several processes, the rows of the dataset this process makes and trains on: its
    devices' share (`train.process_rows`), when the builder makes rows alone and they divide
    over the devices; else None."""
    total = num_rows(config, env) if jax.process_count() > 1 else None
    indices = None if total is None else trainer.process_rows(total)
    if indices is None:
        return None
    contiguous = len(indices) == indices[-1] - indices[0] + 1
    label = (f"{indices[0]}-{indices[-1] + 1}-of-{total}" if contiguous
             else f"process-{jax.process_index()}-of-{jax.process_count()}")
    return Rows([int(i) for i in indices], label, total)


def dataset_of(config, env, rows: Rows | None = None):
    """The run's dataset (only `rows` of it, if given), made first if missing. With several
    processes and no `rows`, process 0 makes it while the others wait, then all read the same
    file (the data is deterministic)."""
    if rows is not None:  # every process makes its own rows
        return open_dataset(config, env, rows)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        if is_main_process():
            generate(config, env)
        multihost_utils.sync_global_devices("icrl_jax: dataset ready")
    return open_dataset(config, env)


def build_env(config, **overrides):
    """The config's environment (`overrides` replace some of its kwargs: a variant)."""
    return envs.make(config.env.name, **dict(config.env.kwargs.to_dict(), **overrides))


def one_run_per_workdir(fn):
    """Run `fn(config, ...)` holding `config.workdir`'s lock (`core/workdir_lock.py`): another
    process on the same directory is refused in one line. Temporary files a killed run left
    there (and beside the dataset) are removed first."""
    @functools.wraps(fn)
    def holding(config, *args, **kwargs):
        with hold(config.workdir, fn.__name__, is_main_process()):
            if is_main_process():
                for folder in {config.workdir, os.path.join(config.workdir, "evals"),
                               os.path.join(config.workdir, "eval_rollouts"),
                               os.path.dirname(config.data.path) or config.workdir}:
                    remove_stale_temporaries(folder)
            return fn(config, *args, **kwargs)
    return holding


@one_run_per_workdir
def train(config):
    """Generate (if needed), run the active hooks' stages (e.g. a pretraining the model needs),
    train (resuming), then evaluate unless `run.evaluate` is off."""
    env = build_env(config)
    for hook in active_hooks(config):  # stages some configs need first (e.g. pretraining)
        hook.before_train(config, env, lambda: dataset_of(config, env))
    method = build_method(config, env)
    with sized_by("data generation", config):
        data = training_data_of(config, env, method)
    programs = {}  # one compile of the steps for all the segments between evaluations

    @sized_by("training", config)
    def fit(stop_at=None):
        return trainer.train(method, data, config.train, config.workdir,
                       method.signature(config, env), seed=config.seed,
                       show_progress=config.run.progress, stop_at=stop_at, log=config.log,
                       programs=programs)

    every = int(config.eval.every) if config.run.evaluate else 0
    if every % int(config.train.steps_per_call) or every < 0:
        raise UserError(f"eval.every={every} must be a multiple of train.steps_per_call="
                        f"{config.train.steps_per_call} (a training call ends only there)")
    for step in range(every, int(config.train.num_steps), every) if every > 0 else ():
        # Evaluations during training (the M-SAT paper's after each epoch): each at its own
        # checkpoint, kept in evals/; a resumed run skips those done, and those it is past.
        done = os.path.exists(_eval_path(config, step))
        if done or (trainer.latest_checkpoint_step(config.workdir) or 0) > step:
            continue
        state = fit(stop_at=step)
        evaluate(config, params=jax.tree.map(jnp.asarray, state.params), step=step)
    state = fit()
    if config.run.evaluate:
        return evaluate(config, params=jax.tree.map(jnp.asarray, state.params))
    return None


def _eval_path(config, step: int) -> str:
    """Where the evaluation at training step `step` goes: `eval.json` at the end of training,
    `evals/step_<step>.json` during it (so a run stopped mid-way never looks finished)."""
    if step >= int(config.train.num_steps):
        return os.path.join(config.workdir, "eval.json")
    return os.path.join(config.workdir, "evals", f"step_{step:08d}.json")


def training_data_of(config, env, method):
    """The method's training data. With several processes, each makes and holds only its share
    of the rows when it can (`process_share`); the whole dataset in every process otherwise, or
    when the shares' shapes differ (e.g. early-ending episodes subsampled: each share is
    padded to its own longest row)."""
    import dataclasses

    rows = process_share(config, env)
    if rows is not None:
        data = method.training_data(dataset_of(config, env, rows), config, env)
        if _same_shapes_across_processes(data.arrays):
            return dataclasses.replace(data, num_rows=rows.total)
    return method.training_data(dataset_of(config, env), config, env)


def _same_shapes_across_processes(tree) -> bool:
    from jax.experimental import multihost_utils

    shapes = np.concatenate([[np.ndim(x), *np.shape(x)] for x in jax.tree.leaves(tree)]
                            ).astype(np.int64)
    gathered = multihost_utils.process_allgather(shapes)
    return bool((gathered == gathered[0]).all())


def load_params(config, env, method, data=None):
    """The latest checkpoint's parameters (a clear error if there is none or it is unreadable)."""
    data = data or method.training_data(open_dataset(config, env), config, env)
    return trainer.restore_params(method, data, config.train, config.workdir,
                            method.signature(config, env))


def eval_task_ids(env, config, which: str = "", same_count=False) -> np.ndarray:
    """The task id (JAX env) or task row (host simulator) of each evaluation rollout, in order:
    `(N,)` or `(N, ...)`, N = tasks x `eval.num_envs_per_task` (`eval_tasks` has the rest)."""
    which = which or config.eval.tasks
    if which not in ("test", "train"):
        raise UserError(f"eval.tasks must be 'test' or 'train', got {which!r}")
    train_ids, test_ids = task_split(env, config)
    ids = test_ids if which == "test" else (train_ids[: len(test_ids)] if same_count
                                            else train_ids)
    return np.repeat(ids, config.eval.num_envs_per_task, axis=0)


def eval_tasks(env, config, which: str = "", actions: str | None = None, same_count=False):
    """The evaluation tasks (`eval.num_envs_per_task` rollouts of each): batched EnvParams of
    a JAX env (with the action set `actions`, if given) or task rows of a host simulator.
    `same_count`: train-task evaluation uses as many tasks as the held-out one."""
    ids = eval_task_ids(env, config, which, same_count)
    if env.host:
        return ids
    return env.task_params(ids, actions=actions) if actions else env.task_params(ids)


def rollout_and_score(config, env, method, params, tasks, key, model_key=None, recorded=None):
    """Roll out the method's policies and the baselines on `tasks` with one key; returns
    (results, curves, rollouts). `model_key` draws per-evaluation parameters (`eval_params`).
    `recorded`: baselines' rollouts on these tasks made with the dataset
    (`Builder.recorded_rollouts`), scored as they are instead of rolled out."""
    recorded = recorded or {}
    if model_key is not None:
        params = method.eval_params(params, model_key, env)
    policies = dict(method.policies(params, env, config),
                    **baseline_policies(config, env, skip=recorded))
    num_steps = int(config.eval.num_steps)
    rollouts = run_policies(env, policies, tasks, num_steps, key, seed=10_000 + config.eval.seed,
                            chunk_size=config.eval.chunk_size or None,
                            show_progress=config.run.progress,
                            # final policy states only for a method whose analysis reads them
                            keep_state=type(method).write_analysis is not Method.write_analysis)
    rollouts.update(recorded)
    results, curves = metrics.summarise(env.scoring, rollouts, num_steps, int(config.eval.final_window),
                                    env.goal_terminates)
    for name, rollout in rollouts.items():
        results.update({f"{name}_{k}": v for k, v in env.rollout_metrics(rollout, num_steps).items()}
                       if env.host else {})
    return results, curves, rollouts


@one_run_per_workdir
def evaluate(config, params=None, step: int | None = None) -> dict[str, Any]:
    """Roll out the trained model on the evaluation tasks next to the baselines; writes
    `eval.json` and `eval_rollouts.npz` (`evals/step_<step>.json` and
    `eval_rollouts/step_<step>.npz` for `params` of an earlier training `step`),
    `in_context_curves.png` and, for the final parameters only, the method's analysis (e.g.
    attention maps). Without `params`, the newest checkpoint is evaluated and `eval.json`
    records its step (`checkpoint_step`), with a note when it is not `train.num_steps`."""
    if params is None and trainer.latest_checkpoint_step(config.workdir) is None:
        # Before the dataset is made: evaluating a run never trained needs nothing generated.
        raise trainer.MissingCheckpointError(
            f"no checkpoint to evaluate in {os.path.join(config.workdir, 'checkpoints')}; train "
            f"first (icrl-jax train with the same --config)")
    env = build_env(config)
    method = build_method(config, env)
    rows = process_share(config, env)
    dataset = dataset_of(config, env, rows)
    checkpoint_step = int(config.train.num_steps) if step is None else int(step)
    if params is None:
        params = load_params(config, env, method, method.training_data(dataset, config, env))
        checkpoint_step = trainer.latest_checkpoint_step(config.workdir)
    tasks = eval_tasks(env, config)
    start = time.perf_counter()
    recorded = {k: v for k, v in builder_of(config).recorded_rollouts(config, env).items()
                if k in config.eval.baselines}
    with sized_by("evaluation", config):
        results, curves, rollouts = rollout_and_score(config, env, method, params, tasks,
                                                      jax.random.PRNGKey(config.eval.seed),
                                                      recorded=recorded)
    results["checkpoint_step"] = checkpoint_step
    if step is None and checkpoint_step != int(config.train.num_steps):
        results["note"] = (f"evaluated the newest checkpoint, step {checkpoint_step}, not "
                           f"train.num_steps={config.train.num_steps}: its training did not end")
        print(f"icrl-jax: {results['note']}", file=sys.stderr)
    refs = reference_scores(dataset)
    if refs is not None:  # datasets with reference returns: D4RL-normalised scores
        results.update({f"{name}_d4rl_score": float(normalized_score(
            results[f"{name}_first_episode_return"], *refs)) for name in rollouts})
        if step is None:
            results.update(best_of_evaluations(config, results, [f"{n}_d4rl_score" for n in rollouts]))
    returns = dataset_returns(dataset)
    if returns is not None:
        results.update(_return_stats(returns, across_processes=rows is not None))
    results.update(num_envs=int(len(rollouts["random" if "random" in rollouts else
                                             next(iter(rollouts))]["rewards"])),
                   num_steps=int(config.eval.num_steps), tasks=config.eval.tasks,
                   eval_seconds=time.perf_counter() - start)
    results["curves"] = {n: metrics.mean_curve(c) for n, c in curves.items()}
    if not is_main_process():  # every process rolls out on its own devices; one writes
        return results
    # Per rollout, for analyses the means hide (e.g. how often the return is 0, 1 or 2).
    regret = env.scoring == envs.REGRET
    per_rollout = {
        f"{name}_regret" if regret else f"{name}_returns": (
            np.asarray(curves[name], np.float32) if regret
            else metrics.rollout_episode_returns(rollout, config.eval.num_steps))
        for name, rollout in rollouts.items()}
    per_rollout["task_ids"] = eval_task_ids(env, config)
    if step is None:  # its files are not per step: a mid-training one would be overwritten
        results.update(method.write_analysis(params, {n: r.get("policy_state")
                                                      for n, r in rollouts.items()}, config, env))
    results["plot"] = plot_curves(
        curves,
        os.path.join(config.workdir, "in_context_curves.png"),
        xlabel="step" if regret else "in-context episode",
        ylabel="cumulative regret" if regret else "return",
        title=f"{config.experiment}: {config.eval.tasks} tasks")
    return write_eval_results(config, results, step, per_rollout)


def best_of_evaluations(config, final: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """`<key>_best` and `<key>_best_step`: the best of each score over the evaluations during
    training (`evals/`, `eval.every`) and the final one (`final`, whose own `<key>` is the last
    evaluation's). The best is an optimistic selection over checkpoints; the last is what D4RL
    and CORL tables report."""
    scores = {int(config.train.num_steps): final}
    folder = os.path.join(config.workdir, "evals")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if name.startswith("step_") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                scores[int(name[5:-5])] = json.load(f)
    out = {}
    for key in keys:
        steps = [s for s in sorted(scores) if key in scores[s]]
        best = max(steps, key=lambda s: scores[s][key])
        out.update({f"{key}_best": float(scores[best][key]), f"{key}_best_step": int(best)})
    return out


def _return_stats(returns: np.ndarray, across_processes: bool) -> dict[str, float]:
    """Mean and max of the dataset's episode returns; `across_processes`: of all processes'
    shares together (each holds some rows of the dataset)."""
    stats = np.array([returns.sum(), len(returns), returns.max(initial=-np.inf)], np.float64)
    if across_processes:
        from jax.experimental import multihost_utils
        parts = np.asarray(multihost_utils.process_allgather(stats.astype(np.float32)), np.float64)
        stats = np.array([parts[:, 0].sum(), parts[:, 1].sum(), parts[:, 2].max()])
    if not stats[1]:
        return {}
    return dict(dataset_return_mean=float(stats[0] / stats[1]), dataset_return_max=float(stats[2]))


def write_eval_results(config, results: dict[str, Any], step: int | None = None,
                       per_rollout: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Store an evaluation of the parameters at training `step` (default: the final one):
    `eval.json` (`evals/step_<step>.json` before the end), `per_rollout`'s arrays
    (`eval_rollouts.npz`; `eval_rollouts/step_<step>.npz` before the end), its float metrics in
    the run's metric logs at that step, and a printout of its scalars. Returns `results`."""
    step = int(config.train.num_steps) if step is None else int(step)
    path = _eval_path(config, step)
    if per_rollout:  # outside evals/, which holds one JSON file per evaluation
        final = step >= int(config.train.num_steps)
        arrays = os.path.join(config.workdir, "eval_rollouts.npz" if final else
                              os.path.join("eval_rollouts", f"step_{step:08d}.npz"))
        with atomic_write(arrays, "wb") as f:
            np.savez_compressed(f, **per_rollout)
    # Last: a run that finds eval.json has its rollouts too (both are written whole or not at all).
    # `step` is the checkpoint's, which a run stopped early has below train.num_steps.
    evaluated = int(results.get("checkpoint_step", step))
    write_json(path, dict(results, step=evaluated), indent=1)
    logger = MetricsLogger(config.workdir, "eval")
    logger.write(evaluated, {k: v for k, v in results.items() if isinstance(v, float)})
    logger.close()
    print(json.dumps({k: v for k, v in results.items() if not isinstance(v, (list, dict))},
                     indent=1))
    return results


def seed_config(config, seed: int):
    """The config of training seed `seed`: its own work directory, the shared dataset."""
    seeded = ml_collections.ConfigDict(config.to_dict())
    seeded.seed = config.seed + seed
    seeded.workdir = os.path.join(config.workdir, f"seed_{seed}")
    share_dataset(config, build_env(config), seeded)
    seeded.run.evaluate = False
    seeded.lock()
    return seeded


def train_seeds(config, evaluate_seed=None, evaluated=None) -> list[str]:
    """Train `config.report.num_seeds` seeds (resuming; the dataset is made once and shared), each
    in `<workdir>/seed_<i>`; `evaluate_seed(seeded)` evaluates a seed after training (default:
    `evaluate`) unless `evaluated(workdir, num_steps)` says it is done. Returns the seeds' work
    directories."""
    generate(config, build_env(config))
    workdirs = []
    for seed in range(int(config.report.num_seeds)):
        seeded = seed_config(config, seed)
        os.makedirs(seeded.workdir, exist_ok=True)
        # Each seed's directory is a finished run of its own: `report --runs` reads its config.
        write_text(os.path.join(seeded.workdir, "config.json"),
                   seeded.to_json_best_effort(indent=1, sort_keys=True))
        done = (evaluated or evaluated_at)(seeded.workdir, int(config.train.num_steps))
        if not done:
            train(seeded)  # resumes; a no-op when the checkpoint is already at num_steps
            (evaluate_seed or evaluate)(seeded)
        workdirs.append(seeded.workdir)
    return workdirs


def evaluated_at(workdir: str, num_steps: int, file: str = "eval.json", key: str = "step") -> bool:
    """Whether `workdir/<file>` holds the evaluation of the checkpoint at `num_steps` (its
    `key`), so that raising `train.num_steps` resumes training and evaluates again."""
    path = os.path.join(workdir, file)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return json.load(f).get(key) == num_steps


def report(config) -> dict[str, str]:
    """`icrl-jax report --config`: the report registered as `config.report.kind` (`REPORTS`)."""
    return REPORTS.get(config.report.kind)(config)


def aggregate_runs(paths: list[str], out: str) -> dict[str, str]:
    """`icrl-jax report --runs DIR ... --out DIR`: combine finished runs with the aggregator of
    their `report.kind` (read from each run's `config.json`; all runs must share it)."""
    kinds = {}
    for path in paths:
        workdir = os.path.dirname(path) if path.endswith(".json") else path
        config_path = os.path.join(workdir, "config.json")
        if not os.path.isfile(config_path):
            raise UserError(f"report --runs {path}: no config.json there; give work directories "
                            f"of finished runs")
        kinds.setdefault(saved_config(workdir).report.kind, []).append(path)
    if len(kinds) != 1:
        listing = "; ".join(f"{kind}: {', '.join(p)}" for kind, p in sorted(kinds.items()))
        raise UserError(f"report --runs: runs of different report kinds cannot share a table "
                        f"({listing})")
    (kind, _), = kinds.items()
    return REPORTS.get(f"runs:{kind}")(paths, out)


def run(config, command: str):
    """The CLI's `icrl-jax <command> --config ...` on a resolved config."""
    for other in COMMANDS.names():  # a command's own kind of config goes to it alone
        section = COMMANDS.get(other).config_section
        if section and (command == other) != (section in config):
            raise UserError(f"{other} takes a config with an `{section}` section, and only it "
                            f"takes one (a config of another kind)")
    with hold(config.workdir, command, is_main_process()), sized_by("the run", config):
        return COMMANDS.get(command).run(config)
