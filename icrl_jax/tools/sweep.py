"""Random hyperparameter search, replicas trained side by side with `vmap`, and EMP.

A sweep samples `sweep.num_assignments` assignments from `sweep.space` (a nested mirror of the
config: `space.train.learning_rate = dict(log_uniform=(1e-4, 1e-2))`, `dict(uniform=(lo, hi))` or
`dict(choice=[...])`), trains each on one shared dataset and evaluates it in context on the
held-out tasks. Assignment i is drawn from its own generator `(sweep.seed, i)` and trained from its
own seed, so its result does not depend on which other assignments ran next to it.

Hyperparameters that leave every array shape alone (`VMAPPED`: learning rate, weight decay,
dropouts, label smoothing) enter the program as traced values: assignments that agree on all the
others form a group, and up to `sweep.max_replicas` of a group train in one jitted program,
`vmap` over their parameters and optimiser states. Assignments that change shapes or control
flow (context length, norms, n-gram layers) are separate groups, hence separate programs.
`data.subsample` (the paper's `subsample`: train on every k-th episode of each history) changes
the dataset, so it also makes its own groups; each value's dataset is built once per sweep.

Every finished assignment is appended to `<workdir>/results.jsonl`; a rerun skips the indices
already there (and refuses a file written by a different search space). `emp.json`/`emp.png`
hold the Expected Maximum Performance curve (`metrics.expected_max_performance`);
`compare_sweeps` plots several sweeps (methods) together; a method's repeated searches (other
seeds) can be pooled into one curve (`pooled_workdirs`).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icrl_jax.core.files import write_json
from icrl_jax.core.plots import save_figure
from icrl_jax import envs
from icrl_jax.core import metrics as core_metrics
from icrl_jax.pipeline import train as trainer
from icrl_jax.core.config import finalize, set_dotted
from icrl_jax.data.builders import open_dataset, task_split
from icrl_jax.data.rollout import run_policies
from icrl_jax.data.baselines import BASELINES
from icrl_jax.data.train_data import TrainData
from icrl_jax.core.errors import UserError
from icrl_jax.core.registry import COMMANDS, Command
from icrl_jax.methods import build_method
from icrl_jax.tools.search_space import (DISTRIBUTIONS, VMAPPED, add_sweep_fields,  # noqa: F401
                                         flatten_space, nested_space, unflatten, vmappable_space)

def sample_assignment(space: dict[str, dict], seed: int, index: int) -> dict[str, Any]:
    """Assignment `index`: one value per key, from its own generator `(seed, index)`."""
    rng = np.random.default_rng([seed, index])
    out = {}
    for dotted in sorted(space):
        (kind, arg), = space[dotted].items()
        if kind == "uniform":
            out[dotted] = float(rng.uniform(arg[0], arg[1]))
        elif kind == "log_uniform":
            out[dotted] = float(math.exp(rng.uniform(math.log(arg[0]), math.log(arg[1]))))
        else:
            choice = list(arg)[int(rng.integers(len(arg)))]
            out[dotted] = list(choice) if isinstance(choice, (list, tuple)) else choice
    return out


def group_key(assignment: dict[str, Any]) -> str:
    """Assignments with equal keys share array shapes, hence one program."""
    return json.dumps({k: v for k, v in sorted(assignment.items()) if k not in VMAPPED})


def _dotted_value(config, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def assignment_config(config: ml_collections.ConfigDict, assignment: dict[str, Any],
                      ) -> ml_collections.ConfigDict:
    """The base config with `assignment` applied (locked, derived fields filled)."""
    out = ml_collections.ConfigDict(config.to_dict())
    for dotted, value in assignment.items():
        if isinstance(_dotted_value(out, dotted), tuple):  # JSON choices come back as lists
            value = tuple(value)
        set_dotted(out, dotted, value)
    out.lock()
    return finalize(out)


def train_assignments(config, env, data: TrainData, assignments: Sequence[dict[str, Any]],
                      seeds: Sequence[int], workdir: str, vmapped: bool = True,
                      programs: dict | None = None):
    """Train assignments of one group through the main trainer (`train.train_replicas`): side
    by side in one vmapped program (`vmapped`), or one by one (K = 1 each). `programs`: a dict
    kept across the calls of one sweep (one env), in which the compiled programs are reused.

    Returns `(params, metrics)`: params stacked over the K assignments, and the final
    `{loss, accuracy}` of each `(K,)` from the last logged step.
    """
    hypers = trainer.replica_hyperparameters(config, assignments)
    # A group trains for minutes to hours: a progress bar per program, as `train` has.
    show_progress = bool(config.run.progress)
    signature = dict(sweep_group=group_key(assignments[0]), method=config.method,
                     env=config.env.name)

    def run(indices, directory):
        hyper = {k: v[np.asarray(indices)] for k, v in hypers.items()}
        state, metrics = trainer.train_replicas(lambda model: build_method(config, env, model), config,
                                          data, directory, signature,
                                          [seeds[i] for i in indices], hyper,
                                          show_progress=show_progress, programs=programs)
        if metrics is None:  # already trained (a resumed sweep): no call was left to run
            metrics = {k: np.full(len(indices), np.nan) for k in ("loss", "accuracy")}
        return state.params, metrics

    if vmapped:
        params, metrics = run(list(range(len(assignments))), workdir)
        return params, {k: np.asarray(v) for k, v in metrics.items()}
    outs = [run([i], os.path.join(workdir, f"replica_{i}")) for i in range(len(assignments))]
    params = jax.tree.map(lambda *x: np.concatenate(x), *[p for p, _ in outs])
    return params, {k: np.concatenate([np.asarray(m[k]) for _, m in outs])
                    for k in ("loss", "accuracy")}


def group_data(dataset, env, group_config, cache: dict | None = None) -> TrainData:
    """The training data of one group's config (its `data.subsample` and context length),
    checked; `cache` lets the groups of one sweep share each dataset."""
    cache = {} if cache is None else cache
    key = (int(group_config.data.subsample), int(group_config.train.seq_len))
    if key not in cache:
        cache[key] = build_method(group_config, env).training_data(dataset, group_config, env)
    return cache[key]


def assignment_seed(config, index: int) -> int:
    return int(config.seed) * 100_003 + int(index)


def _results_path(config) -> str:
    return os.path.join(config.workdir, "results.jsonl")


def read_results(workdir: str) -> list[dict[str, Any]]:
    path = os.path.join(workdir, "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _check_fingerprint(config) -> None:
    """Refuse to extend results written under a different config (anything but the number of
    assignments, the replicas per program, and run/workdir bookkeeping changes results)."""
    ignored = ("sweep.num_assignments", "sweep.max_replicas", "workdir", "preset", "data.path",
               "env.num_workers")  # a field of earlier configs, which changed no result
    # Config keys added after sweeps were written: absent from an old file = their default.
    added = {"data.subsample": 1, "train.compute_dtype": "auto", "model.norm_epsilon": 1e-6,
             "model.activation": "gelu_tanh", "train.prefetch": 2}
    current = {k: v for k, v in _flat(json.loads(config.to_json(sort_keys=True))).items()
               if not k.startswith(("run.", "log.", "dist.")) and k not in ignored}
    path = os.path.join(config.workdir, "sweep_config.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        saved = {**{k: v for k, v in added.items() if k in current}, **saved}
        diff = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        if diff:
            raise ValueError(f"{config.workdir} holds a sweep with a different config; use a new "
                             "workdir. Differing keys: " + ", ".join(
                                 f"{k}: {saved.get(k)!r} (saved) vs {current.get(k)!r}"
                                 for k in diff))
    else:
        write_json(path, current, indent=1, sort_keys=True)


def _rollout_scores(config, env, policies, test_ids) -> dict[str, float]:
    """The unified metrics (`metrics.summarise`) of `policies` on the held-out tasks."""
    rollouts = run_policies(env, policies, env.task_params(test_ids), int(config.eval.num_steps),
                            jax.random.PRNGKey(config.eval.seed),
                            chunk_size=config.eval.chunk_size or None)
    results, curves = core_metrics.summarise(env.scoring, rollouts, int(config.eval.num_steps),
                                  int(config.eval.final_window), env.goal_terminates)
    return dict(results, **{f"{name}_curve": core_metrics.mean_curve(c) for name, c in curves.items()})


def _baselines(config, env, test_ids) -> dict[str, float]:
    """Source and random scores on the held-out tasks (computed once, cached)."""
    path = os.path.join(config.workdir, "baselines.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if saved.get("metric_version") == METRIC_VERSION:
            return saved
    # The two policies the normalised score is anchored to (core/metrics.py).
    policies = {name: BASELINES.get(name)(config, env) for name in ("source", "random")}
    out = {k: v for k, v in _rollout_scores(config, env, policies, test_ids).items()
           if not k.endswith("_curve")}
    out["metric_version"] = METRIC_VERSION
    write_json(path, out, indent=1)
    return out


#: Bumped when a metric's definition changes, so cached baselines are recomputed (2: each
#: rollout's own last complete episode, not the last episode column).
METRIC_VERSION = 2


def evaluate_params(config, env, method, params, test_ids, baselines) -> dict[str, float]:
    """In-context scores of one assignment's parameters on the held-out tasks."""
    results = _rollout_scores(config, env, method.policies(params, env, config), test_ids)
    model = {k: v for k, v in results.items() if k.startswith("model_")}
    key = "final_regret" if env.scoring == envs.REGRET else "last_episode_return"
    with np.errstate(invalid="ignore", divide="ignore"):  # source == random: NaN, not a warning
        model["normalised_score"] = float(core_metrics.normalised_score(
            model[f"model_{key}"], baselines[f"random_{key}"], baselines[f"source_{key}"]))
    model["curve"] = model.pop("model_curve")
    return model


def run_sweep(config, vmapped: bool = True) -> list[dict[str, Any]]:
    """Run (or resume) the sweep of `config` in `config.workdir`; returns all results."""
    if "sweep" not in config:
        raise UserError(f"sweep needs a config with a `sweep` section (its search space), and "
                        f"{config.experiment!r} has none; e.g. --config "
                        f"experiments/ngram/darkroom.py:quick")
    space = flatten_space(config.sweep.space)
    for dotted in space:
        section, _, key = dotted.partition(".")
        if section not in config or key not in config[section]:
            raise UserError(f"sweep.space names {dotted!r}, which is not a config key")
    os.makedirs(config.workdir, exist_ok=True)
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    assignments = [sample_assignment(space, config.sweep.seed, i)
                   for i in range(config.sweep.num_assignments)]
    results = read_results(config.workdir)
    for r in results:
        if r["index"] < len(assignments) and r["assignment"] != json.loads(json.dumps(
                assignments[r["index"]])):
            raise UserError(f"{_results_path(config)} holds assignment {r['index']} = "
                             f"{r['assignment']}, but this search space samples "
                             f"{assignments[r['index']]}; use a new workdir or the old space")
    _check_fingerprint(config)
    done = {r["index"] for r in results}
    pending = [i for i in range(len(assignments)) if i not in done]
    if not pending:
        write_emp(config.workdir, config.sweep.score)
        return results

    dataset = open_dataset(config, env)
    data_cache: dict[int, TrainData] = {}
    programs: dict = {}  # compiled once per group config and replica count, for every chunk
    groups: dict[str, list[int]] = {}
    for i in pending:
        groups.setdefault(group_key(assignments[i]), []).append(i)
    group_configs = {key: assignment_config(config, {k: v for k, v in assignments[ids[0]].items()
                                                     if k not in VMAPPED})
                     for key, ids in groups.items()}
    for group_config in group_configs.values():  # every group's data, checked before training
        group_data(dataset, env, group_config, data_cache)
    _, test_ids = task_split(env, config)
    test_ids = np.repeat(test_ids, config.eval.num_envs_per_task)
    baselines = _baselines(config, env, test_ids)

    with open(_results_path(config), "a") as out:
        for key, indices in groups.items():
            group_config = group_configs[key]
            data = group_data(dataset, env, group_config, data_cache)
            eval_method = build_method(group_config, env)
            size = max(1, int(config.sweep.max_replicas)) if vmapped else 1
            for start in range(0, len(indices), size):
                chunk = indices[start:start + size]
                tic = time.perf_counter()
                directory = os.path.join(config.workdir, "replicas",
                                         "_".join(str(i) for i in chunk))
                params, train_metrics = train_assignments(
                    group_config, env, data, [assignments[i] for i in chunk],
                    [assignment_seed(config, i) for i in chunk], directory, vmapped=vmapped,
                    programs=programs)
                train_seconds = time.perf_counter() - tic
                for k, index in enumerate(chunk):
                    tic = time.perf_counter()
                    replica = jax.tree.map(lambda x: jnp.asarray(x[k]), params)
                    result = evaluate_params(group_config, env, eval_method, replica, test_ids,
                                             baselines)
                    result.update(
                        index=index, assignment=assignments[index],
                        group=group_key(assignments[index]),
                        loss=float(train_metrics["loss"][k]),
                        accuracy=float(train_metrics["accuracy"][k]),
                        train_seconds=train_seconds / len(chunk), replicas=len(chunk),
                        eval_seconds=time.perf_counter() - tic,
                        **{k2: v for k2, v in baselines.items() if k2 != "metric_version"})
                    out.write(json.dumps(result) + "\n")
                    out.flush()
                    results.append(result)
                    print(f"assignment {index}: {config.sweep.score}="
                          f"{result[config.sweep.score]:.3f} loss={result['loss']:.3f} "
                          f"({result['train_seconds']:.0f}s train/assignment, K={len(chunk)})")
    write_emp(config.workdir, config.sweep.score)
    return results


def optimal_return_of(workdir: str) -> float | None:
    """Mean best achievable episode return over a sweep's held-out tasks, from its
    `sweep_config.json` (None where the env defines no optimal return)."""
    path = os.path.join(workdir, "sweep_config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        nested = unflatten(json.load(f))
    config = ml_collections.ConfigDict(nested)
    # The flat file has no key for an empty dict: no env.kwargs when the env takes none.
    env = envs.make(config.env.name, **nested["env"].get("kwargs", {}))
    if env.host or not env.has_optimal_return:
        return None
    _, test_ids = task_split(env, config)
    params = env.task_params(jnp.asarray(test_ids))
    return float(np.mean(np.asarray(jax.vmap(env.optimal_return)(params))))


#: Keys in which repeated searches of one method may differ and still be pooled (`emp_of`).
POOLED_SEEDS = ("seed", "sweep.seed")


def pooled_workdirs(workdirs: str) -> list[str]:
    """A sweep's workdir, or several joined by commas: repeated searches of one method (other
    histories and assignments, the same config otherwise), whose assignments `emp_of` pools.
    Raises a `UserError` naming the keys in which they differ beyond `POOLED_SEEDS`."""
    dirs = [w for w in workdirs.split(",") if w]
    if len(dirs) == 1:
        return dirs
    configs = []
    for w in dirs:
        path = os.path.join(w, "sweep_config.json")
        if not os.path.exists(path):
            raise UserError(f"{w} holds no sweep (no sweep_config.json)")
        with open(path) as f:
            configs.append({k: v for k, v in json.load(f).items() if k not in POOLED_SEEDS})
    for w, config in zip(dirs[1:], configs[1:]):
        diff = sorted(k for k in set(config) | set(configs[0])
                      if config.get(k) != configs[0].get(k))
        if diff:
            raise UserError(f"cannot pool {w} with {dirs[0]}: their sweeps differ in "
                            f"{', '.join(diff)} (only {', '.join(POOLED_SEEDS)} may)")
    return dirs


def emp_of(workdir: str, score: str = "model_last_episode_return") -> dict[str, Any]:
    """EMP of one sweep's assignments; `workdir` may join several repeated searches of one
    method with commas (`pooled_workdirs`): their assignments are pooled, and the source's
    final return is the mean of theirs."""
    dirs = pooled_workdirs(workdir)
    per_sweep = [sorted(read_results(w), key=lambda r: r["index"]) for w in dirs]
    results = [r for rs in per_sweep for r in rs]
    scores = np.asarray([r[score] for r in results], np.float64)
    mean, std = core_metrics.expected_max_performance(scores)
    sources = [rs[0].get("source_last_episode_return") for rs in per_sweep if rs]
    source = float(np.mean(sources)) if sources and None not in sources else None
    optimal = optimal_return_of(dirs[0]) if score == "model_last_episode_return" else None
    return dict(score=score, num_assignments=len(scores), scores=scores.tolist(),
                emp_mean=mean.tolist(), emp_std=std.tolist(), best=float(scores.max()),
                source_last_episode_return=source, optimal_last_episode_return=optimal,
                **({"pooled": dirs} if len(dirs) > 1 else {}))


def write_emp(workdir: str, score: str = "model_last_episode_return") -> dict[str, Any]:
    """`emp.json` and `emp.png` of one sweep."""
    emp = emp_of(workdir, score)
    write_json(os.path.join(workdir, "emp.json"), emp, indent=1)
    plot_emp({os.path.basename(os.path.normpath(workdir)): emp}, os.path.join(workdir, "emp.png"),
             _references(emp))
    return emp


def _references(emp: dict[str, Any]) -> dict[str, float]:
    """The horizontal lines of an EMP plot of episode returns: the source's final episode and
    the optimal return, where known."""
    labels = {"source_last_episode_return": "source (final episode)",
              "optimal_last_episode_return": "optimal"}
    out = {label: emp[key] for key, label in labels.items() if emp.get(key) is not None}
    if "optimal" in out:  # the n-gram paper's (Fig. 6) and issue 19's near-optimal line
        out["80% of optimal"] = 0.8 * out["optimal"]
    return out


def plot_emp(curves: dict[str, dict[str, Any]], path: str,
             references: dict[str, float] | None = None):
    """EMP mean +- std against the number of assignments, one line per method; `references`:
    label -> value of a horizontal dashed line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, emp in curves.items():
        mean, std = np.asarray(emp["emp_mean"]), np.asarray(emp["emp_std"])
        n = np.arange(1, len(mean) + 1)
        ax.plot(n, mean, label=label)
        ax.fill_between(n, mean - std, mean + std, alpha=0.2)
    for (label, value), (colour, style) in zip((references or {}).items(),
                                               (("k", "--"), ("tab:gray", "--"), ("tab:gray", ":"))):
        ax.axhline(value, color=colour, ls=style, lw=1, label=label)
    ax.set_xscale("log")
    longest = max(len(emp["emp_mean"]) for emp in curves.values())
    ax.set_xticks([n for n in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if n <= longest])
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("hyperparameter assignments")
    ax.set_ylabel(f"expected max {next(iter(curves.values()))['score']}")
    ax.legend(fontsize=8)
    save_figure(fig, path, dpi=120)


def _label(workdir: str) -> str:
    """A sweep's default legend label: its directory's name (the first of pooled searches)."""
    dirs = pooled_workdirs(workdir)
    name = os.path.basename(os.path.normpath(dirs[0]))
    return name if len(dirs) == 1 else f"{name} ({len(dirs)} searches pooled)"


def compare_sweeps(workdirs: Sequence[str], out: str, labels: Sequence[str] | None = None,
                   score: str = "model_last_episode_return",
                   near_optimal: float = 0.9,
                   fractions: Sequence[float] = (0.25, 0.5, 0.75)) -> dict[str, Any]:
    """EMP of several sweeps in one plot (`emp_compare.png`) and `emp_compare.json`, with the
    number of assignments each needs for an EMP of `near_optimal` x the source's final return
    (and of each of `fractions` x it, in `assignments_to_fraction_of_source`, and x the optimal
    return where the env defines one, in `assignments_to_fraction_of_optimal`; None: never).
    A workdir may join a method's repeated searches with commas, pooled into one curve
    (`emp_of`)."""
    os.makedirs(out, exist_ok=True)
    labels = list(labels or [_label(w) for w in workdirs])
    curves = {label: emp_of(w, score) for label, w in zip(labels, workdirs)}
    source = next((c["source_last_episode_return"] for c in curves.values()
                   if c["source_last_episode_return"] is not None), None)
    optimal = next((c["optimal_last_episode_return"] for c in curves.values()
                    if c["optimal_last_episode_return"] is not None), None)
    summary: dict[str, Any] = dict(score=score, source_last_episode_return=source,
                                   optimal_last_episode_return=optimal, methods={})
    for label, emp in curves.items():
        entry = dict(num_assignments=emp["num_assignments"], best=emp["best"],
                     emp_at_1=emp["emp_mean"][0], emp_at_n=emp["emp_mean"][-1],
                     emp_std_at_n=emp["emp_std"][-1])
        if source is not None:
            entry[f"assignments_to_{near_optimal:g}_source"] = core_metrics.assignments_to_reach(
                emp["scores"], near_optimal * source)
            entry["assignments_to_fraction_of_source"] = {
                f"{f:g}": core_metrics.assignments_to_reach(emp["scores"], f * source) for f in fractions}
        if optimal is not None:
            entry["assignments_to_fraction_of_optimal"] = {
                f"{f:g}": core_metrics.assignments_to_reach(emp["scores"], f * optimal)
                for f in sorted({*fractions, 0.8, near_optimal})}
        summary["methods"][label] = entry
    references = _references(dict(source_last_episode_return=source,
                                  optimal_last_episode_return=optimal))
    plot_emp(curves, os.path.join(out, "emp_compare.png"),
             references if score == "model_last_episode_return" else None)
    write_json(os.path.join(out, "emp_compare.json"), dict(summary, curves=curves), indent=1)
    return summary


def aggregate_sweeps(runs: list[str], out: str, labels: list[str]) -> None:
    """`icrl-jax sweep --runs DIR ... --out DIR`: the EMP of finished sweeps together."""
    print(json.dumps(compare_sweeps(runs, out, labels or None), indent=1))


COMMANDS.register("sweep", Command(
    "sweep", run_sweep, "the random hyperparameter search of `config.sweep` (resuming), "
    "results and EMP; with --runs DIR ... --out DIR, the EMP of finished sweeps together",
    aggregate=aggregate_sweeps))
