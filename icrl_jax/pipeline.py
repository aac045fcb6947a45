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
from icrl_jax.data.dataset import check_dataset, to_step_windows
from icrl_jax.data.histories import generate_histories
from icrl_jax.data.history import History, load_history, save_history
from icrl_jax.logging_utils import MetricsLogger
from icrl_jax.plots import plot_curves

METHODS = ("ad",)


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
    "thompson_sampling": lambda env, num_steps, kw: S.thompson_sampling(env, **kw),
    "linucb": lambda env, num_steps, kw: S.linucb(env, **kw),
    "q_learning": lambda env, num_steps, kw: S.q_learning(
        env, num_episodes=num_steps // env.episode_length, **kw),
    "noisy_oracle": lambda env, num_steps, kw: S.noisy_oracle(env, num_steps=num_steps, **kw),
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
    return AD(config.model, env.num_actions, env.num_observations)


def model_signature(config, env) -> dict[str, Any]:
    """What a checkpoint must agree on to be restored into this run's model."""
    return dict(method=config.method, env=config.env.name, num_actions=env.num_actions,
                num_observations=env.num_observations, model=config.model.to_dict())


def train(config):
    """Generate (if needed), train (resuming), then evaluate unless `run.evaluate` is off."""
    from icrl_jax import train as T

    env = build_env(config)
    if not os.path.exists(dataset_path(config)):
        if not config.run.generate:
            raise FileNotFoundError(f"no dataset at {dataset_path(config)} and run.generate=False")
        generate(config)
    history, _ = load_history(dataset_path(config))
    check_dataset(history, num_actions=env.num_actions, num_observations=env.num_observations,
                  observation_shape=env.observation_shape, window=config.train.seq_len)
    method = build_method(config, env)
    state = T.train(method, to_step_windows(history), config.train, config.workdir,
                    model_signature(config, env), seed=config.seed,
                    show_progress=config.run.progress)
    if config.run.evaluate:
        return evaluate(config, params=state.params)
    return None


def load_params(config, env, method):
    from icrl_jax import train as T

    checkpointer = T.Checkpointer(os.path.join(config.workdir, "checkpoints"),
                                  model_signature(config, env))
    if checkpointer.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint in {config.workdir}/checkpoints; train first")
    history, _ = load_history(dataset_path(config))
    data = to_step_windows(jax.tree.map(lambda x: x[:1], history))
    optimizer = T.make_optimizer(config.train)
    like = T.init_train_state(method, optimizer, data, jax.random.key(0), config.train.seq_len,
                              T.data_mesh())
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
        "model": in_context_source(method, params, env, config.train.seq_len, config.eval.greedy),
        f"source ({config.data.source})": build_source(config.data.source, env, num_steps,
                                                       config.data.source_kwargs.to_dict()),
        "random": S.uniform_random(),
    }
    start = time.perf_counter()
    rollouts = {}
    for name, policy in policies.items():
        # Same key for every policy: the same environment randomness where actions agree.
        rollouts[name] = jax.device_get(generate_histories(
            env, policy, task_params, num_steps, key, task_ids=ids,
            chunk_size=config.eval.chunk_size or None, with_info=True))
    seconds = time.perf_counter() - start
    results = summarise(env, rollouts, config)
    results.update(num_envs=int(len(ids)), num_steps=num_steps, eval_seconds=seconds,
                   tasks=config.eval.tasks)
    with open(os.path.join(config.workdir, "eval.json"), "w") as f:
        json.dump(results, f, indent=1)
    logger = MetricsLogger(config.workdir, "eval")
    logger.write(int(config.train.num_steps), {k: v for k, v in results.items()
                                               if isinstance(v, float)})
    logger.close()
    print(json.dumps({k: v for k, v in results.items() if not isinstance(v, (list, dict))},
                     indent=1))
    return results


def summarise(env, rollouts: dict[str, tuple[History, dict]], config) -> dict[str, Any]:
    """Metrics and the in-context curves PNG from the rollouts of each policy."""
    names = list(rollouts)
    results: dict[str, Any] = {}
    if hasattr(env, "expected_rewards"):  # bandits: regret against the best arm's mean
        curves = {}
        for name, (history, info) in rollouts.items():
            regret = np.asarray(M.cumulative_regret(info["optimal_expected_reward"],
                                                 info["expected_reward"]))
            curves[name] = regret
            results[f"{name.split(' ')[0]}_final_regret"] = float(regret[:, -1].mean())
        results["normalised_score"] = float(M.normalised_score(
            results["model_final_regret"], results["random_final_regret"],
            results["source_final_regret"]))
        results["curves"] = {n: np.nanmean(c, 0).tolist() for n, c in curves.items()}
        plot_curves(curves, os.path.join(config.workdir, "in_context_curves.png"),
                    xlabel="step", ylabel="cumulative regret",
                    title=f"{config.experiment}: held-out tasks")
        return results
    max_episodes = config.eval.num_steps  # upper bound; trimmed below
    curves = {}
    for name, (history, _) in rollouts.items():
        returns = np.asarray(M.episode_returns(history.rewards, history.dones, max_episodes))
        complete = ~np.isnan(returns).all(0)
        curves[name] = returns[:, complete]
    for name, returns in curves.items():
        short = name.split(" ")[0]
        results[f"{short}_first_episode_return"] = float(np.nanmean(returns[:, 0]))
        results[f"{short}_last_episode_return"] = float(np.nanmean(returns[:, -1]))
    results["normalised_score"] = float(M.normalised_score(
        results["model_last_episode_return"], results["random_last_episode_return"],
        results["source_last_episode_return"]))
    results["curves"] = {n: np.nanmean(c, 0).tolist() for n, c in curves.items()}
    plot_curves(curves, os.path.join(config.workdir, "in_context_curves.png"),
                xlabel="in-context episode", ylabel="return",
                title=f"{config.experiment}: held-out tasks")
    del names
    return results
