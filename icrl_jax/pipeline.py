"""The three stages of a run (generate, train, evaluate) over one work directory.

`<workdir>/` holds: `config.json` (resolved config), `histories.npz` (dataset), `metrics.jsonl`
and `tensorboard/` (training and evaluation scalars), `checkpoints/` (orbax), `eval.json`
(evaluation results) and `in_context_curves.png`.
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

import envs
from icrl_jax import metrics as M
from icrl_jax.config import finalize
from icrl_jax.data import sources as S
from icrl_jax.data.dataset import check_dataset, subsample_episodes, to_step_windows
from icrl_jax.data.histories import generate_histories
from icrl_jax.data.history import History, load_history, save_history
from icrl_jax.logging_utils import MetricsLogger, progress
from icrl_jax.plots import plot_curves

METHODS = ("ad", "headless_ad", "ad_permuted", "dt", "msat", "mat")  # dt*: see train_dt


def resolve_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Validate a loaded config, fill derived fields, and write it to the work directory."""
    if config.method not in METHODS:
        raise ValueError(f"unknown method {config.method!r}; available: {METHODS}")
    config = finalize(config)
    os.makedirs(config.workdir, exist_ok=True)
    with open(os.path.join(config.workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=1, sort_keys=True))
    return config


def build_env(config) -> envs.ICRLEnv:
    return envs.make(config.env.name, **config.env.kwargs.to_dict())


def task_split(env, config) -> tuple[np.ndarray, np.ndarray]:
    """Train and held-out task ids: a seeded split of a finite task set, or disjoint id ranges
    for environments with unlimited tasks (bandits draw each task from its id)."""
    data = config.data
    if env.num_tasks is None:
        train = np.arange(data.num_train_tasks, dtype=np.int32)
        test = np.arange(data.num_train_tasks, data.num_train_tasks + data.num_test_tasks,
                         dtype=np.int32)
        return train, test
    if data.num_train_tasks + data.num_test_tasks > env.num_tasks:
        raise ValueError(f"{config.env.name} has {env.num_tasks} tasks, fewer than "
                         f"num_train_tasks + num_test_tasks = "
                         f"{data.num_train_tasks + data.num_test_tasks}")
    train, test = envs.split_tasks(env.num_tasks, data.num_train_tasks, data.split_seed)
    return train, test[: data.num_test_tasks]


SOURCES = {
    "thompson_sampling": lambda env, num_steps, kw: S.thompson_sampling(**kw),
    "linucb": lambda env, num_steps, kw: S.linucb(**kw),
    "q_learning": lambda env, num_steps, kw: S.q_learning(
        env, num_episodes=num_steps // env.episode_length, **kw),
    "noisy_oracle": lambda env, num_steps, kw: S.noisy_oracle(env, num_steps=num_steps, **kw),
    "episode_replay": lambda env, num_steps, kw: S.episode_replay(env, num_steps=num_steps, **kw),
    "uniform_random": lambda env, num_steps, kw: S.uniform_random(**kw),
}


def build_source(name: str, env, num_steps: int, kwargs: dict[str, Any]) -> S.Source:
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r}; available: {sorted(SOURCES)}")
    try:
        return SOURCES[name](env, num_steps, dict(kwargs))
    except TypeError as e:
        raise ValueError(f"bad arguments for source {name!r}: {e}") from e


def dataset_path(config) -> str:
    return config.data.path or os.path.join(config.workdir, "histories.npz")


def generate(config, force: bool = False) -> History:
    """Learning histories of the configured source on the training tasks (saved to disk)."""
    path = dataset_path(config)
    if os.path.exists(path) and not force:
        return load_history(path)[0]
    env = build_env(config)
    train_ids, _ = task_split(env, config)
    task_ids = np.repeat(train_ids, config.data.histories_per_task)
    source = build_source(config.data.source, env, config.data.num_steps,
                          config.data.source_kwargs.to_dict())
    start = time.perf_counter()
    history = generate_histories(env, source, env.task_params(task_ids), config.data.num_steps,
                                 jax.random.PRNGKey(config.seed), task_ids=task_ids)
    history = jax.block_until_ready(history)
    seconds = time.perf_counter() - start
    save_history(path, history, metadata=dict(
        env=config.env.name, env_kwargs=config.env.kwargs.to_dict(), source=config.data.source,
        source_kwargs=config.data.source_kwargs.to_dict(), seed=config.seed,
        generation_seconds=seconds))
    print(f"generated {history.num_histories} histories x {history.length} steps of "
          f"{config.data.source} in {seconds:.1f}s -> {path}")
    return history


def build_method(config, env):
    from icrl_jax.methods.ad import AD
    from icrl_jax.methods.headless_ad import HeadlessAD, PermutedAD
    grid_observations = config.model.get("grid_observations", False)
    grid_size = getattr(env, "size", None) if grid_observations else None
    if grid_observations and grid_size is None:
        raise ValueError(f"model.grid_observations needs a grid-world env; {config.env.name} "
                         "has no grid size")
    if config.method == "headless_ad":
        return HeadlessAD(config.model, env.num_observations, grid_size)
    if config.method == "ad_permuted":
        return PermutedAD(config.model, env.num_actions, env.num_observations, grid_size)
    return AD(config.model, env.num_actions, env.num_observations, grid_size)


def model_signature(config, env) -> dict[str, Any]:
    """What a checkpoint must agree on to be restored into this run's model."""
    # Headless-AD's parameters do not depend on the action count.
    num_actions = None if config.method == "headless_ad" else env.num_actions
    # The parameter shapes are compared by the Checkpointer itself; config keys that do not shape
    # parameters (dropouts, label smoothing, keys added later with defaults) may differ.
    return dict(method=config.method, env=config.env.name, num_actions=num_actions,
                num_observations=env.num_observations)


def train(config):
    """Generate (if needed), train (resuming), then evaluate unless `run.evaluate` is off."""
    from icrl_jax import train as T

    env = build_env(config)
    if not os.path.exists(dataset_path(config)):
        if not config.run.generate:
            raise FileNotFoundError(f"no dataset at {dataset_path(config)} and run.generate=False")
        generate(config)
    history, _ = load_history(dataset_path(config))
    history, lengths = subsample_episodes(history, config.data.subsample)
    check_dataset(history, num_actions=env.num_actions, num_observations=env.num_observations,
                  observation_shape=env.observation_shape, window=config.train.seq_len,
                  lengths=lengths)
    method = build_method(config, env)
    state = T.train(method, to_step_windows(history, lengths), config.train, config.workdir,
                    model_signature(config, env), seed=config.seed,
                    show_progress=config.run.progress)
    if config.run.evaluate:
        return evaluate(config, params=jax.tree.map(jnp.asarray, state.params))
    return None


def open_checkpointer(config, env):
    """The run's checkpoint directory, guarded by the model signature of `config`."""
    from icrl_jax import train as T

    return T.Checkpointer(os.path.join(config.workdir, "checkpoints"), model_signature(config, env))


def load_params(config, env, method, example=None, sample_fn=None):
    """The latest checkpoint's parameters. `example` is a small dataset of the kind the method
    trains on (default: the first AD history) and `sample_fn` its window sampler, which together
    give the shapes to restore into."""
    from icrl_jax import train as T

    checkpointer = open_checkpointer(config, env)
    if checkpointer.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint in {config.workdir}/checkpoints; train first")
    if example is None:
        history, _ = load_history(dataset_path(config))
        example = to_step_windows(jax.tree.map(lambda x: x[:1], history))
    like = T.init_train_state(method, T.make_optimizer(config.train), example,
                              jax.random.key(0), config.train.seq_len, T.data_mesh(),
                              sample_fn or T.sample_windows)
    state = checkpointer.restore(like)
    checkpointer.close()
    return state.params


def evaluate(config, params=None) -> dict[str, Any]:
    """Roll out the model in context on held-out tasks, next to the source and a random policy."""
    from icrl_jax.evaluate import in_context_source

    env = build_env(config)
    method = build_method(config, env)
    if params is None:
        params = load_params(config, env, method)
    train_ids, test_ids = task_split(env, config)
    ids = test_ids if config.eval.tasks == "test" else train_ids
    ids = np.repeat(ids, config.eval.num_envs_per_task)
    task_params = env.task_params(ids)
    num_steps = config.eval.num_steps
    key = jax.random.PRNGKey(config.eval.seed)
    policies = {
        "model": in_context_source(method, params, env, config.train.seq_len, config.eval.greedy,
                                   max_steps=config.eval.num_steps,
                                   temperature=config.eval.temperature),
        f"source ({config.data.source})": build_source(config.data.source, env, num_steps,
                                                       config.data.source_kwargs.to_dict()),
        "random": S.uniform_random(),
    }
    start = time.perf_counter()
    rollouts = {}
    bar = progress(total=len(policies), desc=f"evaluate {len(ids)} envs x {num_steps} steps",
                   disable=not config.run.progress)
    for name, policy in policies.items():
        bar.set_postfix_str(name)
        # Same key for every policy: the same environment randomness where actions agree.
        rollouts[name] = jax.device_get(generate_histories(
            env, policy, task_params, num_steps, key, task_ids=ids,
            chunk_size=config.eval.chunk_size or None, with_info=True))
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - start
    results = summarise(env, rollouts, config)
    results.update(num_envs=int(len(ids)), num_steps=num_steps, eval_seconds=seconds,
                   tasks=config.eval.tasks)
    return write_eval_results(config, results)


def write_eval_results(config, results: dict[str, Any]) -> dict[str, Any]:
    """Store an evaluation: `eval.json`, its float metrics in the run's metric logs (at the
    final training step), and a printout of its scalars. Returns `results`."""
    with open(os.path.join(config.workdir, "eval.json"), "w") as f:
        json.dump(results, f, indent=1)
    logger = MetricsLogger(config.workdir, "eval")
    logger.write(int(config.train.num_steps), {k: v for k, v in results.items()
                                               if isinstance(v, float)})
    logger.close()
    print(json.dumps({k: v for k, v in results.items() if not isinstance(v, (list, dict))},
                     indent=1))
    return results


def run_stage(command: str, stages: dict[str, Any], what: str):
    """The CLI's `generate | train | evaluate` for a pipeline: call `stages[command]()`."""
    if command not in stages:
        raise ValueError(f"command {command!r} is not available for {what} "
                         f"({' | '.join(stages)})")
    return stages[command]()


def summarise(env, rollouts: dict[str, tuple[History, dict]], config) -> dict[str, Any]:
    """Metrics and the in-context curves PNG from the rollouts of each policy.

    Bandits (envs with `expected_rewards`) are scored by cumulative expected regret after the
    last step, episodic tasks by the return of the last complete episode; either way the
    normalised score puts random at 0 and the source algorithm at 1.
    """
    bandit = hasattr(env, "expected_rewards")
    curves, results = {}, {}
    for name, (history, info) in rollouts.items():
        short = name.split(" ")[0]
        if bandit:
            curve = np.asarray(M.cumulative_regret(info["optimal_expected_reward"],
                                                   info["expected_reward"]))
            results[f"{short}_final_regret"] = float(curve[:, -1].mean())
        else:
            returns = np.asarray(M.episode_returns(history.rewards, history.dones,
                                                   config.eval.num_steps))
            # Episodes that end early (Key-to-Door) give each history its own episode count:
            # score each history's own last episode, and plot episode indices that at least
            # half of the histories reached.
            results[f"{short}_first_episode_return"] = float(np.nanmean(returns[:, 0]))
            results[f"{short}_last_episode_return"] = float(np.nanmean(
                M.last_episodes(returns, 1)))
            curve = returns[:, (~np.isnan(returns)).mean(0) >= 0.5]
        curves[name] = curve
    score_key = "final_regret" if bandit else "last_episode_return"
    results["normalised_score"] = float(M.normalised_score(
        results[f"model_{score_key}"], results[f"random_{score_key}"],
        results[f"source_{score_key}"]))
    results["curves"] = {n: np.nanmean(c, 0).tolist() for n, c in curves.items()}
    plot_curves(curves, os.path.join(config.workdir, "in_context_curves.png"),
                xlabel="step" if bandit else "in-context episode",
                ylabel="cumulative regret" if bandit else "return",
                title=f"{config.experiment}: held-out tasks")
    return results


# ---------------------------------------------------------------------------------------------
# Evaluation over several environment variants (action sets, arm counts, reward distributions)
# and over training seeds: what the Headless-AD paper's tables and figures are made of.
# An experiment opts in with `config.variants` (name -> dict(env=<env kwargs overrides>,
# actions=<action set name or "">, tasks="test"|"train")) and `config.report`
# (label=<row name in tables>, num_seeds=<training seeds>).


def variant_env(config, variant) -> envs.ICRLEnv:
    kwargs = dict(config.env.kwargs.to_dict(), **dict(variant.get("env", {})))
    return envs.make(config.env.name, **kwargs)


def actions_used(actions: np.ndarray, action_mask: np.ndarray) -> np.ndarray:
    """Distinct actions tried in each rollout: actions int `(N, T)`, mask `(N, A)` -> `(N,)`."""
    tried = jax.nn.one_hot(jnp.asarray(actions), action_mask.shape[-1], dtype=jnp.bool_).any(1)
    return np.asarray(tried.sum(-1))


def evaluate_variant(config, method, params, variant, key) -> dict[str, Any]:
    """In-context rollouts of the model, the source and a random policy on one variant.

    Returns per-variant scalars (`score`: normalised score for bandits, last-episode success for
    grids; `arms_used`) and mean curves per policy (cumulative regret, or return per episode).
    """
    from icrl_jax.evaluate import in_context_source

    env = variant_env(config, variant)
    if config.method != "headless_ad" and env.num_actions != build_env(config).num_actions:
        return dict(applicable=False)
    train_ids, test_ids = task_split(build_env(config), config)
    # Train-task evaluation uses as many tasks as the held-out one, so both cost the same.
    ids = test_ids if variant.get("tasks", "test") == "test" else train_ids[: len(test_ids)]
    ids = np.repeat(ids, config.eval.num_envs_per_task)
    actions = variant.get("actions") or None
    task_params = env.task_params(ids, actions=actions) if actions else env.task_params(ids)
    model_key, rollout_key = jax.random.split(key)
    if config.method == "headless_ad":  # one embedding map for the whole run
        params = method.eval_params(params, model_key, env.num_actions)
    num_steps = config.eval.num_steps
    model = in_context_source(method, params, env, config.train.seq_len, config.eval.greedy,
                              max_steps=num_steps, temperature=config.eval.temperature)
    if isinstance(model, S.ParamSource):  # one variant = one compile anyway: a plain Source
        model = model.build(model.params)
    policies = {
        "model": model,
        "source": build_source(config.data.source, env, num_steps,
                               config.data.source_kwargs.to_dict()),
        "random": S.uniform_random(),
    }
    bandit = hasattr(env, "expected_rewards")
    result: dict[str, Any] = dict(applicable=True, num_envs=int(len(ids)),
                                  num_actions=int(np.asarray(task_params.action_mask).sum(-1).mean()))
    curves = {}
    for name, policy in policies.items():
        out = jax.device_get(generate_histories(
            env, policy, task_params, num_steps, rollout_key, task_ids=ids,
            chunk_size=config.eval.chunk_size or None, with_info=bandit))
        history, info = out if bandit else (out, None)
        result[f"{name}_arms_used"] = float(actions_used(history.actions,
                                                         history.action_mask).mean())
        if bandit:
            step_regret = np.asarray(info["optimal_expected_reward"] - info["expected_reward"])
            regret = np.cumsum(step_regret, axis=1)
            result[f"{name}_final_regret"] = float(regret[:, -1].mean())
            result[f"{name}_final_step_regret"] = float(
                step_regret[:, -int(config.eval.final_window):].mean())
            curves[name] = regret.mean(0)
        else:
            returns = np.asarray(M.episode_returns(history.rewards, history.dones, num_steps))
            returns = returns[:, ~np.isnan(returns).all(0)]
            result[f"{name}_success"] = float(np.nanmean(
                M.last_episodes(returns, int(config.eval.final_window))))
            curves[name] = np.nanmean(returns, 0)
    if bandit:
        # The paper's score (its `norm_regret`): the expected regret of the last step(s), i.e.
        # how good the policy is once it has learned in context; the cumulative-regret version,
        # which also charges for exploration, is kept next to it.
        result["score"] = float(M.normalised_score(
            result["model_final_step_regret"], result["random_final_step_regret"],
            result["source_final_step_regret"]))
        result["cumulative_score"] = float(M.normalised_score(
            result["model_final_regret"], result["random_final_regret"],
            result["source_final_regret"]))
    else:
        result["score"] = result["model_success"]
    result["arms_used"] = result["model_arms_used"]
    result["curves"] = {n: c.tolist() for n, c in curves.items()}
    return result


def evaluate_variants(config, params=None) -> dict[str, Any]:
    """Evaluate the latest checkpoint on every `config.variants` entry -> `variants.json`."""
    from icrl_jax.report import run_label

    env = build_env(config)
    method = build_method(config, env)
    checkpoint_step = None
    if params is None:
        params = load_params(config, env, method)
        checkpoint_step = latest_checkpoint_step(config, env)
    results = {}
    for i, (name, variant) in enumerate(sorted(config.variants.to_dict().items())):
        start = time.perf_counter()
        key = jax.random.fold_in(jax.random.PRNGKey(config.eval.seed), i)
        results[name] = evaluate_variant(config, method, params, variant, key)
        if results[name]["applicable"]:
            print(f"{config.experiment} seed {config.seed} {name}: score "
                  f"{results[name]['score']:.3f}, arms used {results[name]['arms_used']:.1f} "
                  f"({time.perf_counter() - start:.0f}s)")
    summary = dict(experiment=config.experiment, method=config.method, env=config.env.name,
                   label=run_label(config), seed=config.seed, checkpoint_step=checkpoint_step,
                   variants=results)
    with open(os.path.join(config.workdir, "variants.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def latest_checkpoint_step(config, env) -> int | None:
    """The step of the run's newest checkpoint (None without one)."""
    checkpointer = open_checkpointer(config, env)
    step = checkpointer.latest_step()
    checkpointer.close()
    return step


def evaluated_at(workdir: str, num_steps: int) -> bool:
    """Whether `workdir/variants.json` holds an evaluation of the checkpoint at `num_steps`
    (so raising `train.num_steps` resumes training and re-evaluates instead of reusing it)."""
    path = os.path.join(workdir, "variants.json")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return json.load(f).get("checkpoint_step") == num_steps


def seed_config(config, seed: int):
    """The config of training seed `seed`: its own work directory, the shared dataset."""
    seeded = ml_collections.ConfigDict(config.to_dict())
    seeded.seed = config.seed + seed
    seeded.workdir = os.path.join(config.workdir, f"seed_{seed}")
    seeded.data.path = dataset_path(config)
    seeded.run.evaluate = False
    seeded.lock()
    return seeded


def run_seeds(config) -> list[str]:
    """Train `config.report.num_seeds` seeds (resuming; the dataset is generated once, shared)
    and evaluate each on all variants unless done; returns the seeds' work directories."""
    if not os.path.exists(dataset_path(config)):
        generate(config)
    workdirs = []
    for seed in range(int(config.report.num_seeds)):
        seeded = seed_config(config, seed)
        os.makedirs(seeded.workdir, exist_ok=True)
        if not evaluated_at(seeded.workdir, int(config.train.num_steps)):
            train(seeded)  # resumes; a no-op when the checkpoint is already at num_steps
            evaluate_variants(seeded)
        workdirs.append(seeded.workdir)
    return workdirs


# Variant sets of the Headless-AD paper (used by experiments/headless_ad/*).

#: Bandit arm counts of the paper's "more arms" evaluation (Figure 5, Table 1).
EVAL_ARMS = (20, 25, 30, 40, 50)
#: The darkroom action sets of Figure 1 / Figure 7, and their widths.
ACTION_SETS = {"train": 50, "permuted_train": 50, "sliced_test": 50, "test": 75, "all": 125}


def add_report_fields(config: ml_collections.ConfigDict, label: str) -> None:
    config.report = ml_collections.ConfigDict(dict(label=label, num_seeds=1))


def bernoulli_variants(arms: tuple[int, ...] | None = EVAL_ARMS,
                       distributions: bool = True) -> ml_collections.ConfigDict:
    """Reward-distribution shifts on 4-20 arms (Figure 4) and fixed larger arm counts with
    uniform rewards (Figure 5), all on held-out bandits."""
    variants = {}
    if distributions:
        for dist in ("train", "inverse", "uniform"):
            variants[f"dist_{dist}"] = dict(env=dict(distribution=dist), tasks="test")
    for n in arms or ():
        variants[f"arms_{n}"] = dict(env=dict(arms=n, max_arms=n, distribution="uniform"),
                                     tasks="test")
    return ml_collections.ConfigDict(variants)


def contextual_variants(arms: tuple[int, ...] | None = EVAL_ARMS,
                        held_out: bool = True) -> ml_collections.ConfigDict:
    variants = {}
    if held_out:
        variants["heldout_4_20"] = dict(env=dict(), tasks="test")
    for n in arms or ():
        variants[f"arms_{n}"] = dict(env=dict(arms=n, max_arms=n), tasks="test")
    return ml_collections.ConfigDict(variants)


def darkroom_variants(max_actions: int) -> ml_collections.ConfigDict:
    """The five action sets x {train, test} goals; sets wider than `max_actions` are left out
    (AD's output layer has a fixed width)."""
    variants = {}
    for name, width in ACTION_SETS.items():
        if width > max_actions:
            continue
        for tasks in ("train", "test"):
            variants[f"{name}__{tasks}_goals"] = dict(env=dict(max_actions=max_actions),
                                                      actions=name, tasks=tasks)
    return ml_collections.ConfigDict(variants)


# ---------------------------------------------------------------------------------------------
# Decision Transformer stage (methods dt, msat, mat): offline episodes of a noisy expert, training
# on padded trajectory windows, return-conditioned evaluation and attention maps. The dataset is
# generated by `generate` above (source `noisy_expert`).

DT_METHOD_NAMES = ("dt", "msat", "mat")
HOST_DT_ENVS = ("vizdoom",)  # DT stages in methods/dt_host.py (pixel store, bridge rollouts)
SOURCES["noisy_expert"] = lambda env, num_steps, kw: _noisy_expert(env, num_steps=num_steps, **kw)


def _noisy_expert(env, **kwargs):
    from icrl_jax.data.trajectories import noisy_expert
    if not hasattr(env, "expert_action"):
        raise ValueError(f"source noisy_expert needs an env with expert_action; "
                         f"{type(env).__name__} has none")
    return noisy_expert(env, **kwargs)


def dt_action_dims(env) -> tuple[int, ...]:
    """Components of the env's action: its `action_dims`, else one component of num_actions."""
    return tuple(getattr(env, "action_dims", (env.num_actions,)))


def build_dt_method(config, env):
    from icrl_jax.methods.msat import DT_METHODS
    return DT_METHODS[config.method](config.model, dt_action_dims(env), config.train.seq_len,
                                     env.num_observations)


def dt_episodes(config, env):
    """The dataset as `Trajectories` of whole episodes (generated first if missing)."""
    from icrl_jax.data.trajectories import episodes_from_history
    if not os.path.exists(dataset_path(config)):
        if not config.run.generate:
            raise FileNotFoundError(f"no dataset at {dataset_path(config)} and run.generate=False")
        generate(config)
    history, _ = load_history(dataset_path(config))
    return episodes_from_history(history, env.episode_length, getattr(env, "split_action", None))


def train_dt(config):
    """Generate (if needed), train a DT / M-SAT / MAT (resuming), then evaluate."""
    from icrl_jax import train as T
    from icrl_jax.data.trajectories import pad_for_windows, sample_trajectory_windows

    env = build_env(config)
    data = pad_for_windows(dt_episodes(config, env), config.train.seq_len)
    method = build_dt_method(config, env)
    state = T.train(method, data, config.train, config.workdir, model_signature(config, env),
                    seed=config.seed, show_progress=config.run.progress,
                    sample_fn=sample_trajectory_windows)
    if config.run.evaluate:
        return evaluate_dt(config, params=jax.tree.map(jnp.asarray, state.params))
    return None


def load_dt_params(config, env, method):
    from icrl_jax.data.trajectories import pad_for_windows, sample_trajectory_windows

    example = pad_for_windows(jax.tree.map(lambda x: x[:1], dt_episodes(config, env)),
                              config.train.seq_len)
    return load_params(config, env, method, example, sample_trajectory_windows)


def evaluate_dt(config, params=None) -> dict[str, Any]:
    """Return-conditioned rollouts for each `eval.target_returns`, next to the dataset's returns,
    the expert's and a random policy's; writes eval.json and attention maps (HTML + PNG)."""
    from icrl_jax.analysis.attention_maps import rollout_attention, write_attention
    from icrl_jax.data.trajectories import noisy_expert
    from icrl_jax.methods.dt_rollout import episode_returns, make_rollout

    env = build_env(config)
    method = build_dt_method(config, env)
    if params is None:
        params = load_dt_params(config, env, method)
    train_ids, test_ids = task_split(env, config)
    ids = np.repeat(test_ids if config.eval.tasks == "test" else train_ids,
                    config.eval.num_envs_per_task)
    task_params = env.task_params(ids)
    num_steps = config.eval.num_steps
    key = jax.random.PRNGKey(config.eval.seed)
    start = time.perf_counter()
    rollout = make_rollout(method, env, config.train.seq_len, num_steps, config.eval.greedy)
    results: dict[str, Any] = {}
    for target in config.eval.target_returns:
        out = jax.device_get(rollout(params, task_params, float(target), key))
        returns = np.asarray(episode_returns(out["rewards"], env.episode_length))
        results[f"model_return@{target:g}"] = float(returns.mean())
    for name, eps in (("expert", 0.0), ("random", 1.0)):
        history = generate_histories(env, noisy_expert(env, num_steps, eps, eps), task_params,
                                     num_steps, key)
        returns = episode_returns(jnp.asarray(history.rewards), env.episode_length)
        results[f"{name}_return"] = float(returns.mean())
    dataset = np.asarray(dt_episodes(config, env).rewards.sum(-1))
    results.update(dataset_return_mean=float(dataset.mean()),
                   dataset_return_max=float(dataset.max()), num_envs=int(len(ids)),
                   num_steps=num_steps, tasks=config.eval.tasks,
                   eval_seconds=time.perf_counter() - start)
    # Attention of one greedy rollout on the first evaluation task, at the highest target.
    maps, labels = rollout_attention(method, params, env, env.task_params(int(ids[0])),
                                     float(max(config.eval.target_returns)), key)
    results.update(write_attention(config.workdir, maps, labels,
                                   f"{config.experiment} ({config.method}) task {int(ids[0])}"))
    return write_eval_results(config, results)


def run_dt(config, command: str):
    """The CLI's generate | train | evaluate for the Decision Transformer methods."""
    if config.env.name in HOST_DT_ENVS:  # pixel datasets from a host simulator
        from icrl_jax.methods import dt_host
        return dt_host.run(config, command)
    return run_stage(command, {"generate": lambda: generate(config, force=True),
                               "train": lambda: train_dt(config),
                               "evaluate": lambda: evaluate_dt(config)},
                     f"method {config.method!r}")
