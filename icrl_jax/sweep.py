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
`compare_sweeps` plots several sweeps (methods) together.
"""

from __future__ import annotations

import json
import math
import os
import time
import types
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from icrl_jax import metrics as M
from icrl_jax.config import finalize, set_dotted
from icrl_jax.data.dataset import (StepWindows, check_dataset, sample_windows,
                                   subsample_episodes, to_step_windows)
from icrl_jax.train import TrainState, gradient_step, make_optimizer

#: Hyperparameters that never change a shape: traced, hence shared by one program and vmapped.
VMAPPED = ("train.learning_rate", "train.weight_decay", "model.embedding_dropout",
           "model.residual_dropout", "model.label_smoothing")
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


def nested_space(space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{dotted key: spec} -> the nested dict stored as `sweep.space` (ConfigDict keys hold no
    dots); `flatten_space` inverts it."""
    nested: dict[str, Any] = {}
    for dotted, spec in space.items():
        node = nested
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = dict(spec)
    return nested


def table2_space(ngram: bool) -> dict[str, dict[str, Any]]:
    """The paper's Table 2(a) (grid environments); n-gram keys only for the n-gram model.

    `subsample` k keeps every k-th episode of each learning history (`data.subsample`, see
    `dataset.subsample_episodes`); with 200-episode histories k = 50 leaves 4 episodes, 200 steps,
    the longest context.
    """
    space = {
        "data.subsample": dict(choice=[4, 8, 10, 20, 50]),
        "model.embedding_dropout": dict(uniform=(0.0, 0.9)),
        "model.residual_dropout": dict(uniform=(0.0, 0.5)),
        "model.label_smoothing": dict(uniform=(0.0, 0.8)),
        "train.learning_rate": dict(log_uniform=(1e-4, 1e-2)),
        "train.weight_decay": dict(log_uniform=(1e-7, 2e-2)),
        "train.seq_len": dict(choice=[60, 100, 160, 200]),
        "model.pre_norm": dict(choice=[True, False]),
        "model.normalize_qk": dict(choice=[True, False]),
    }
    if ngram:
        space["model.ngram_positions"] = dict(choice=[(1,), (2,), (1, 2)])
        space["model.ngram_max"] = dict(choice=[1, 2])
    return space


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


def assignment_config(config: ml_collections.ConfigDict, assignment: dict[str, Any],
                      ) -> ml_collections.ConfigDict:
    """The base config with `assignment` applied (locked, derived fields filled)."""
    out = ml_collections.ConfigDict(config.to_dict())
    for dotted, value in assignment.items():
        if dotted.endswith("ngram_positions"):
            value = tuple(value)
        set_dotted(out, dotted, value)
    out.lock()
    return finalize(out)


class _Mapping(dict):
    """A dict read by attribute too: a model config whose rates may be traced arrays."""

    __getattr__ = dict.__getitem__


def replica_method(config, env, hyper: dict[str, jax.Array]):
    """The configured method with the vmapped hyperparameters (`hyper`, traced) substituted."""
    from icrl_jax.pipeline import build_method

    model = _Mapping(config.model.to_dict())
    model.update({k.split(".", 1)[1]: v for k, v in hyper.items() if k.startswith("model.")})
    proxy = types.SimpleNamespace(method=config.method, env=config.env, model=model)
    return build_method(proxy, env)


def replica_optimizer(config, hyper: dict[str, jax.Array]) -> optax.GradientTransformation:
    """`train.make_optimizer` with a traced learning rate and weight decay.

    optax's schedules branch on the peak value in Python, so the schedule is built for a peak of
    1 and the update scaled by the learning rate afterwards: warmup and cosine decay are linear in
    the peak, so this is the same optimiser.
    """
    train = dict(config.train.to_dict(), learning_rate=1.0,
                 weight_decay=hyper["train.weight_decay"])
    return optax.chain(make_optimizer(types.SimpleNamespace(**train)),
                       optax.scale(hyper["train.learning_rate"]))


def hyper_arrays(config, assignments: Sequence[dict[str, Any]]) -> dict[str, jax.Array]:
    """float32 `(K,)` per vmapped key: the assignment's value, else the config's."""
    def value(a, dotted):
        section, key = dotted.split(".")
        return a.get(dotted, config[section][key])
    return {k: jnp.asarray([value(a, k) for a in assignments], jnp.float32) for k in VMAPPED}


def make_replica_trainer(config, env, vmapped: bool):
    """Build `(init, train_steps)` for one group's config.

    `init(hypers, keys) -> TrainState`; `train_steps(hypers, state, data, keys) -> (state,
    metrics)` runs `train.steps_per_call` steps in a `lax.scan`. With `vmapped`, `hypers` are
    `(K,)` arrays, `keys` `(K,)` and every state leaf has a leading K; otherwise one replica's
    scalars. Step t of a replica uses `fold_in(key, t)` exactly as `train.make_train_step` does.
    """
    tc = config.train

    def init_one(hyper, key, data):
        method, optimizer = replica_method(config, env, hyper), replica_optimizer(config, hyper)
        init_key = jax.random.fold_in(key, 2**31 - 1)
        params = method.init(init_key, sample_windows(data, init_key, 1, tc.seq_len))
        return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))

    def step_one(hyper, state, data, key):
        method, optimizer = replica_method(config, env, hyper), replica_optimizer(config, hyper)
        sample_key, dropout_key = jax.random.split(jax.random.fold_in(key, state.step))
        batch = sample_windows(data, sample_key, tc.batch_size, tc.seq_len)
        return gradient_step(method, optimizer, state, batch, dropout_key)

    if vmapped:
        init_one = jax.vmap(init_one, in_axes=(0, 0, None))
        step_one = jax.vmap(step_one, in_axes=(0, 0, None, 0))

    def train_steps(hypers, state, data, keys):
        def body(state, _):
            return step_one(hypers, state, data, keys)
        return jax.lax.scan(body, state, None, length=tc.steps_per_call)

    return jax.jit(init_one), jax.jit(train_steps, donate_argnums=1)


_TRAINERS: dict[tuple, tuple] = {}
# Envs and evaluation methods per config, so a resumed sweep in the same process (and every
# chunk of a group) reuses the compiled rollout: the rollout program is keyed on both objects.
_ENVS: dict[str, Any] = {}
_EVAL_METHODS: dict[str, Any] = {}


def train_assignments(config, env, data: StepWindows, assignments: Sequence[dict[str, Any]],
                      seeds: Sequence[int], vmapped: bool = True):
    """Train assignments of one group (all steps): side by side (`vmapped`) or one by one.

    Returns `(params, metrics)`: params stacked over the K assignments, metrics
    `{name: (K, steps_per_call)}` of the last call.
    """
    if config.train.num_steps % config.train.steps_per_call:
        raise ValueError(f"train.num_steps={config.train.num_steps} must be a multiple of "
                         f"train.steps_per_call={config.train.steps_per_call}")
    hypers = hyper_arrays(config, assignments)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    # One jitted trainer per group config, reused by every chunk (and every one-by-one run).
    cache_key = (config.to_json(sort_keys=True), type(env).__name__, vmapped)
    if cache_key not in _TRAINERS:
        _TRAINERS[cache_key] = make_replica_trainer(config, env, vmapped)
    init, train_steps = _TRAINERS[cache_key]
    calls = config.train.num_steps // config.train.steps_per_call

    def run(hyper, key):
        state = init(hyper, key, data)
        metrics = None
        for _ in range(calls):  # one jitted call per steps_per_call steps, not per step
            state, metrics = train_steps(hyper, state, data, key)
        return state.params, metrics

    if vmapped:  # the scan stacks metrics (steps, K): report (K, steps) as one by one does
        params, metrics = run(hypers, keys)
        return jax.device_get((params, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics)))
    outs = [run({k: v[i] for k, v in hypers.items()}, keys[i]) for i in range(len(assignments))]
    return jax.device_get(jax.tree.map(lambda *x: jnp.stack(x), *outs))


def group_data(history, env, group_config, cache: dict | None = None) -> StepWindows:
    """The training windows of one group's config: `history` with every `data.subsample`-th
    episode kept, checked against the group's context length. `cache` (subsample -> data) lets
    the groups of one sweep share each subsampled dataset."""
    cache = {} if cache is None else cache
    every = int(group_config.data.subsample)
    if every not in cache:
        kept, lengths = subsample_episodes(history, every)
        cache[every] = (kept, lengths, jax.device_put(to_step_windows(kept, lengths)))
    kept, lengths, data = cache[every]
    check_dataset(kept, num_actions=env.num_actions, num_observations=env.num_observations,
                  observation_shape=env.observation_shape,
                  window=int(group_config.train.seq_len), lengths=lengths)
    return data


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
    ignored = ("sweep.num_assignments", "sweep.max_replicas", "workdir", "preset", "data.path")
    # Config keys added after sweeps were written: absent from an old file = their default.
    added = {"data.subsample": 1}
    current = {k: v for k, v in _flat(json.loads(config.to_json(sort_keys=True))).items()
               if not k.startswith("run.") and k not in ignored}
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
        with open(path, "w") as f:
            json.dump(current, f, indent=1, sort_keys=True)


def _baselines(config, env, test_ids) -> dict[str, float]:
    """Source and random last-episode returns on the held-out tasks (computed once, cached)."""
    from icrl_jax.data import sources as S
    from icrl_jax.data.histories import generate_histories
    from icrl_jax.pipeline import build_source

    path = os.path.join(config.workdir, "baselines.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    out = {}
    policies = {"source": build_source(config.data.source, env, config.eval.num_steps,
                                       config.data.source_kwargs.to_dict()),
                "random": S.uniform_random()}
    for name, policy in policies.items():
        history = jax.device_get(generate_histories(
            env, policy, env.task_params(test_ids), config.eval.num_steps,
            jax.random.PRNGKey(config.eval.seed), task_ids=test_ids))
        returns = np.asarray(M.episode_returns(history.rewards, history.dones,
                                               config.eval.num_steps))
        returns = returns[:, ~np.isnan(returns).all(0)]
        out[f"{name}_first_episode_return"] = float(np.nanmean(returns[:, 0]))
        out[f"{name}_last_episode_return"] = float(np.nanmean(returns[:, -1]))
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return out


def evaluate_params(config, env, method, params, test_ids, baselines) -> dict[str, float]:
    """In-context returns of one assignment's parameters on the held-out tasks."""
    from icrl_jax.data.histories import generate_histories
    from icrl_jax.evaluate import in_context_source

    policy = in_context_source(method, params, env, config.train.seq_len, config.eval.greedy,
                               temperature=config.eval.temperature)
    history = jax.device_get(generate_histories(
        env, policy, env.task_params(test_ids), config.eval.num_steps,
        jax.random.PRNGKey(config.eval.seed), task_ids=test_ids,
        chunk_size=config.eval.chunk_size or None))
    returns = np.asarray(M.episode_returns(history.rewards, history.dones, config.eval.num_steps))
    returns = returns[:, ~np.isnan(returns).all(0)]
    last = float(np.nanmean(returns[:, -1]))
    with np.errstate(invalid="ignore", divide="ignore"):  # source == random: NaN, not a warning
        score = float(M.normalised_score(last, baselines["random_last_episode_return"],
                                         baselines["source_last_episode_return"]))
    return dict(model_first_episode_return=float(np.nanmean(returns[:, 0])),
                model_last_episode_return=last,
                normalised_score=score,
                curve=np.nanmean(returns, 0).round(4).tolist())


def run_sweep(config, vmapped: bool = True) -> list[dict[str, Any]]:
    """Run (or resume) the sweep of `config` in `config.workdir`; returns all results."""
    from icrl_jax import pipeline
    from icrl_jax.data.history import load_history

    space = flatten_space(config.sweep.space)
    for dotted in space:
        section, _, key = dotted.partition(".")
        if section not in config or key not in config[section]:
            raise KeyError(f"sweep.space names {dotted!r}, which is not a config key")
    os.makedirs(config.workdir, exist_ok=True)
    env_key = config.env.to_json(sort_keys=True)
    if env_key not in _ENVS:
        _ENVS[env_key] = pipeline.build_env(config)
    env = _ENVS[env_key]
    assignments = [sample_assignment(space, config.sweep.seed, i)
                   for i in range(config.sweep.num_assignments)]
    results = read_results(config.workdir)
    for r in results:
        if r["index"] < len(assignments) and r["assignment"] != json.loads(json.dumps(
                assignments[r["index"]])):
            raise ValueError(f"{_results_path(config)} holds assignment {r['index']} = "
                             f"{r['assignment']}, but this search space samples "
                             f"{assignments[r['index']]}; use a new workdir or the old space")
    _check_fingerprint(config)
    done = {r["index"] for r in results}
    pending = [i for i in range(len(assignments)) if i not in done]
    if not pending:
        write_emp(config.workdir, config.sweep.score)
        return results

    if not os.path.exists(pipeline.dataset_path(config)):
        pipeline.generate(config)
    history, _ = load_history(pipeline.dataset_path(config))
    data_cache: dict[int, tuple] = {}
    groups: dict[str, list[int]] = {}
    for i in pending:
        groups.setdefault(group_key(assignments[i]), []).append(i)
    group_configs = {key: assignment_config(config, {k: v for k, v in assignments[ids[0]].items()
                                                     if k not in VMAPPED})
                     for key, ids in groups.items()}
    for group_config in group_configs.values():  # every group's data, checked before training
        group_data(history, env, group_config, data_cache)
    _, test_ids = pipeline.task_split(env, config)
    test_ids = np.repeat(test_ids, config.eval.num_envs_per_task)
    baselines = _baselines(config, env, test_ids)

    with open(_results_path(config), "a") as out:
        for key, indices in groups.items():
            group_config = group_configs[key]
            data = group_data(history, env, group_config, data_cache)
            # What the rollout depends on (not the data: subsample groups share one program).
            method_key = json.dumps(dict(method=group_config.method, env=env_key,
                                         model=group_config.model.to_dict(),
                                         seq_len=group_config.train.seq_len,
                                         greedy=group_config.eval.greedy), sort_keys=True,
                                    default=str)
            if method_key not in _EVAL_METHODS:
                _EVAL_METHODS[method_key] = pipeline.build_method(group_config, env)
            eval_method = _EVAL_METHODS[method_key]
            size = max(1, int(config.sweep.max_replicas)) if vmapped else 1
            for start in range(0, len(indices), size):
                chunk = indices[start:start + size]
                tic = time.perf_counter()
                params, train_metrics = train_assignments(
                    group_config, env, data, [assignments[i] for i in chunk],
                    [assignment_seed(config, i) for i in chunk], vmapped=vmapped)
                train_seconds = time.perf_counter() - tic
                for k, index in enumerate(chunk):
                    tic = time.perf_counter()
                    replica = jax.tree.map(lambda x: jnp.asarray(x[k]), params)
                    result = evaluate_params(group_config, env, eval_method, replica, test_ids,
                                             baselines)
                    result.update(
                        index=index, assignment=assignments[index],
                        group=group_key(assignments[index]),
                        loss=float(np.mean(train_metrics["loss"][k])),
                        accuracy=float(np.mean(train_metrics["accuracy"][k])),
                        train_seconds=train_seconds / len(chunk), replicas=len(chunk),
                        eval_seconds=time.perf_counter() - tic, **baselines)
                    out.write(json.dumps(result) + "\n")
                    out.flush()
                    results.append(result)
                    print(f"assignment {index}: {config.sweep.score}="
                          f"{result[config.sweep.score]:.3f} loss={result['loss']:.3f} "
                          f"({result['train_seconds']:.0f}s train/assignment, K={len(chunk)})")
    write_emp(config.workdir, config.sweep.score)
    return results


def emp_of(workdir: str, score: str = "model_last_episode_return") -> dict[str, Any]:
    results = sorted(read_results(workdir), key=lambda r: r["index"])
    scores = np.asarray([r[score] for r in results], np.float64)
    mean, std = M.expected_max_performance(scores)
    source = results[0].get("source_last_episode_return") if results else None
    return dict(score=score, num_assignments=len(scores), scores=scores.tolist(),
                emp_mean=mean.tolist(), emp_std=std.tolist(), best=float(scores.max()),
                source_last_episode_return=source)


def write_emp(workdir: str, score: str = "model_last_episode_return") -> dict[str, Any]:
    """`emp.json` and `emp.png` of one sweep."""
    emp = emp_of(workdir, score)
    with open(os.path.join(workdir, "emp.json"), "w") as f:
        json.dump(emp, f, indent=1)
    plot_emp({os.path.basename(os.path.normpath(workdir)): emp}, os.path.join(workdir, "emp.png"))
    return emp


def plot_emp(curves: dict[str, dict[str, Any]], path: str, reference: float | None = None):
    """EMP mean +- std against the number of assignments, one line per method."""
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
    if reference is not None:
        ax.axhline(reference, color="k", ls="--", lw=1, label="source (final episode)")
    ax.set_xscale("log")
    longest = max(len(emp["emp_mean"]) for emp in curves.values())
    ax.set_xticks([n for n in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if n <= longest])
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("hyperparameter assignments")
    ax.set_ylabel(f"expected max {next(iter(curves.values()))['score']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare_sweeps(workdirs: Sequence[str], out: str, labels: Sequence[str] | None = None,
                   score: str = "model_last_episode_return",
                   near_optimal: float = 0.9,
                   fractions: Sequence[float] = (0.25, 0.5, 0.75)) -> dict[str, Any]:
    """EMP of several sweeps in one plot (`emp_compare.png`) and `emp_compare.json`, with the
    number of assignments each needs for an EMP of `near_optimal` x the source's final return
    (and of each of `fractions` x it, in `assignments_to_fraction_of_source`; None: never)."""
    os.makedirs(out, exist_ok=True)
    labels = list(labels or [os.path.basename(os.path.normpath(w)) for w in workdirs])
    curves = {label: emp_of(w, score) for label, w in zip(labels, workdirs)}
    source = next((c["source_last_episode_return"] for c in curves.values()
                   if c["source_last_episode_return"] is not None), None)
    summary: dict[str, Any] = dict(score=score, source_last_episode_return=source, methods={})
    for label, emp in curves.items():
        entry = dict(num_assignments=emp["num_assignments"], best=emp["best"],
                     emp_at_1=emp["emp_mean"][0], emp_at_n=emp["emp_mean"][-1],
                     emp_std_at_n=emp["emp_std"][-1])
        if source is not None:
            entry[f"assignments_to_{near_optimal:g}_source"] = M.assignments_to_reach(
                emp["scores"], near_optimal * source)
            entry["assignments_to_fraction_of_source"] = {
                f"{f:g}": M.assignments_to_reach(emp["scores"], f * source) for f in fractions}
        summary["methods"][label] = entry
    plot_emp(curves, os.path.join(out, "emp_compare.png"),
             reference=None if score != "model_last_episode_return" else source)
    with open(os.path.join(out, "emp_compare.json"), "w") as f:
        json.dump(dict(summary, curves=curves), f, indent=1)
    return summary
