"""Generate, train and evaluate AD on Miniworld through the host bridge (configs: common.py).

`<workdir>/` holds: `config.json`, `pixel_store/` (uint8 chunks + `meta.json`, and
`dataset.json` with frames, bytes on disk and generation seconds), `metrics.jsonl` and
`tensorboard/`, `checkpoints/` (orbax), `eval.json` and `in_context_curves.png`.

The stages reuse the on-device pipeline's parts: `icrl_jax.train.train` (its jitted scanned step,
checkpoints and resume; windows come from the `PrefetchLoader` through one host callback per
step), `icrl_jax.methods.ad.AD` with `model.observation_encoder="cnn"`, and the in-context
policy of `icrl_jax.evaluate` run by `host_rollout` (a `lax.scan`, one batched callback per step).
Entry point: `icrl-jax generate|train|evaluate --config experiments/miniworld/<exp>.py[:quick]`
(the CLI hands configs with `runner` set to this module's `run`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from envs.host import miniworld as mw
from envs.host.bridge import RandomPolicy, host_rollout
from icrl_jax import metrics as M
from icrl_jax.data.pixel_store import (PixelStore, PixelStoreWriter, StepWindowsLoader,
                                       example_step_windows)
from icrl_jax.logging_utils import progress
from icrl_jax.pipeline import run_stage, write_eval_results
from icrl_jax.plots import plot_curves

NUM_ACTIONS = 3
OBS_SHAPE = (64, 64, 3)


# --- tasks and simulators --------------------------------------------------------------------

def task_sets(config) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint train / held-out tasks: goal cells `(n,)` or (key, door) pairs `(n, 2)`."""
    tasks = (mw.darkroom_goals() if config.env.name == "miniworld_darkroom"
             else mw.key_door_pairs())
    return mw.task_split(tasks, config.data.num_train_tasks, config.data.num_test_tasks,
                         config.data.split_seed)


def make_bridge(config, tasks: np.ndarray):
    """A worker pool with one simulator per row of `tasks`."""
    length = int(config.env.kwargs.episode_length)
    if config.env.name == "miniworld_darkroom":
        return mw.darkroom_bridge(tasks, length, record=False)
    return mw.key_to_door_bridge(tasks, length, record=False)


def oracle_source(config, num_steps: int) -> mw.NoisyOracle:
    try:
        return mw.NoisyOracle(num_steps, **config.data.source_kwargs.to_dict())
    except TypeError as e:
        raise ValueError(f"bad data.source_kwargs for the Miniworld noisy oracle: {e}") from e


def rollout_groups(config, tasks: np.ndarray, policies: dict[str, Any], num_steps: int, key,
                   seed: int, timings: dict[str, float] | None = None):
    """Yield (rows of `tasks`, {policy name: host_rollout output as numpy}) for pools of
    `env.num_workers` simulators. Every policy runs on the same pool from the same reset seed
    and key (a pool start costs seconds per worker); each pool is closed before the next starts.
    `timings` (if given) accumulates "pool_start_seconds" and "rollout_seconds".
    """
    timings = {} if timings is None else timings
    workers = int(config.env.num_workers)
    if workers < 1:
        raise ValueError(f"env.num_workers must be >= 1, got {workers}")
    for g, start in enumerate(range(0, len(tasks), workers)):
        rows = tasks[start:start + workers]
        t0 = time.perf_counter()
        bridge = make_bridge(config, rows)
        t1 = time.perf_counter()
        try:
            outs = {name: jax.device_get(host_rollout(bridge, policy, num_steps,
                                                      jax.random.fold_in(key, g),
                                                      seed=seed * 100_003 + g))
                    for name, policy in policies.items()}
        finally:
            bridge.close()
        timings["pool_start_seconds"] = timings.get("pool_start_seconds", 0.0) + t1 - t0
        timings["rollout_seconds"] = (timings.get("rollout_seconds", 0.0)
                                      + time.perf_counter() - t1)
        yield rows, outs


def store_path(config) -> str:
    return config.data.path or os.path.join(config.workdir, "pixel_store")


def _bytes_on_disk(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))


# --- stages ----------------------------------------------------------------------------------

def generate(config, force: bool = False) -> PixelStore:
    """Noise-distillation learning histories of every training task into a `PixelStore`."""
    path = store_path(config)
    if os.path.exists(os.path.join(path, "meta.json")) and not force:
        return PixelStore(path)
    if os.path.exists(path):
        shutil.rmtree(path)  # an incomplete or forced-over store
    train_tasks, _ = task_sets(config)
    tasks = np.repeat(train_tasks, config.data.histories_per_task, axis=0)
    num_steps = int(config.data.num_steps)
    source = oracle_source(config, num_steps)
    start = time.perf_counter()
    first, last = [], []
    timings: dict[str, float] = {}
    bar = progress(total=len(tasks), desc=f"generate {len(tasks)} histories x {num_steps} steps",
                   disable=not config.run.progress)
    with PixelStoreWriter(path, OBS_SHAPE, (), chunk_steps=config.data.chunk_steps) as writer:
        for rows, outs in rollout_groups(config, tasks, {"source": source}, num_steps,
                                         jax.random.PRNGKey(config.seed), config.seed, timings):
            out = outs["source"]
            for i in range(len(rows)):
                writer.add_history(out["observations"][i], out["actions"][i],
                                   out["rewards"][i], out["dones"][i])
            returns = M.episode_returns_ragged(out["rewards"], out["dones"])
            first += [r[0] for r in returns if len(r)]
            last += [r[-1] for r in returns if len(r)]
            bar.update(len(rows))
    bar.close()
    seconds = time.perf_counter() - start
    frames = len(tasks) * num_steps
    stats = dict(env=config.env.name, histories=int(len(tasks)), steps_per_history=num_steps,
                 frames=int(frames), bytes_on_disk=_bytes_on_disk(path),
                 generation_seconds=seconds, frames_per_second=frames / seconds,
                 **timings, rollout_frames_per_second=frames / timings["rollout_seconds"],
                 num_workers=int(config.env.num_workers),
                 first_episode_return=float(np.mean(first)), last_episode_return=float(np.mean(last)))
    with open(os.path.join(path, "dataset.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(f"generated {len(tasks)} histories x {num_steps} steps ({frames} frames, "
          f"{stats['bytes_on_disk'] / 2**20:.0f} MiB) in {seconds:.1f}s -> {path}; oracle "
          f"return first episode {stats['first_episode_return']:.2f}, last "
          f"{stats['last_episode_return']:.2f}")
    return PixelStore(path)


def build_method(config):
    from icrl_jax.methods.ad import AD
    if config.model.get("observation_encoder", "none") != "cnn":
        raise ValueError("Miniworld AD needs model.observation_encoder='cnn' (pixel frames)")
    return AD(config.model, NUM_ACTIONS, None)


def model_signature(config) -> dict[str, Any]:
    return dict(method=config.method, env=config.env.name, num_actions=NUM_ACTIONS,
                observation_shape=list(OBS_SHAPE), observation_encoder="cnn")


def check_store(store: PixelStore, seq_len: int) -> None:
    if tuple(store.meta["obs_shape"]) != OBS_SHAPE or store.meta["action_shape"]:
        raise ValueError(f"the store holds obs {store.meta['obs_shape']} / actions "
                         f"{store.meta['action_shape']}, expected {list(OBS_SHAPE)} / scalar")
    store._valid_starts(seq_len)  # raises when no history is as long as the window


def train(config):
    """Generate (if needed), train AD with the CNN encoder (resuming), then evaluate."""
    from icrl_jax import train as T

    if os.path.exists(os.path.join(store_path(config), "meta.json")):
        store = PixelStore(store_path(config))
    elif config.run.generate:
        store = generate(config)
    else:
        raise FileNotFoundError(f"no pixel store at {store_path(config)} and run.generate=False")
    check_store(store, config.train.seq_len)
    method = build_method(config)

    def loader_fn(start_step: int) -> StepWindowsLoader:
        return StepWindowsLoader(store, NUM_ACTIONS, config.train.batch_size, config.train.seq_len,
                                 config.train.steps_per_call, start_step, seed=config.seed,
                                 prefetch=config.train.prefetch)

    state = T.train(method, example_step_windows(store, NUM_ACTIONS, config.train.seq_len),
                    config.train, config.workdir, model_signature(config), seed=config.seed,
                    show_progress=config.run.progress, loader_fn=loader_fn)
    if config.run.evaluate:
        return evaluate(config, params=jax.tree.map(jnp.asarray, state.params))
    return None


def load_params(config, method):
    from icrl_jax import train as T

    store = PixelStore(store_path(config))
    checkpointer = T.Checkpointer(os.path.join(config.workdir, "checkpoints"),
                                  model_signature(config))
    if checkpointer.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint in {config.workdir}/checkpoints; train first")
    example = example_step_windows(store, NUM_ACTIONS, config.train.seq_len)
    like = T.init_train_state(method, T.make_optimizer(config.train), example, jax.random.key(0),
                              config.train.seq_len, T.data_mesh(), lambda data, *_: data)
    state = checkpointer.restore(like)
    checkpointer.close()
    return state.params


def evaluate(config, params=None) -> dict[str, Any]:
    """In-context rollouts on held-out tasks through the bridge: the model, the oracle source
    (its epsilon decaying over the evaluation horizon, as in the data) and a random policy."""
    from icrl_jax.evaluate_host import InContextHostPolicy

    method = build_method(config)
    if params is None:
        params = load_params(config, method)
    if config.eval.tasks not in ("test", "train"):
        raise ValueError(f"eval.tasks must be 'test' or 'train', got {config.eval.tasks!r}")
    _, test_tasks = task_sets(config)
    tasks = test_tasks if config.eval.tasks == "test" else task_sets(config)[0][:len(test_tasks)]
    tasks = np.repeat(tasks, config.eval.num_envs_per_task, axis=0)
    num_steps = int(config.eval.num_steps)
    policies = {
        "model": InContextHostPolicy(method, params, config.train.seq_len, NUM_ACTIONS, OBS_SHAPE,
                                     jnp.uint8, config.eval.greedy, config.eval.temperature),
        f"source ({config.data.source})": oracle_source(config, num_steps),
        "random": RandomPolicy(gym.spaces.Discrete(NUM_ACTIONS)),
    }
    key = jax.random.PRNGKey(config.eval.seed)
    max_episodes = num_steps  # an upper bound (key-to-door episodes can end early)
    start = time.perf_counter()
    rewards = {name: [] for name in policies}
    dones = {name: [] for name in policies}
    bar = progress(total=len(tasks), desc=f"evaluate {len(policies)} policies on {len(tasks)} "
                   f"envs x {num_steps} steps", disable=not config.run.progress)
    # Same key and simulator seeds for every policy: the same starts where actions agree.
    timings: dict[str, float] = {}
    for rows, outs in rollout_groups(config, tasks, policies, num_steps, key,
                                     10_000 + config.eval.seed, timings):
        for name, out in outs.items():
            rewards[name].append(out["rewards"])
            dones[name].append(out["dones"])
        bar.update(len(rows))
    bar.close()
    curves, results = {}, {}
    for name in policies:
        returns = np.asarray(M.episode_returns(np.concatenate(rewards[name]),
                                               np.concatenate(dones[name]), max_episodes))
        short = name.split(" ")[0]
        count = np.maximum((~np.isnan(returns)).sum(1), 1)
        results[f"{short}_first_episode_return"] = float(np.nanmean(returns[:, 0]))
        results[f"{short}_last_episode_return"] = float(np.nanmean(
            returns[np.arange(len(returns)), count - 1]))
        results[f"{short}_mean_return"] = float(np.nanmean(returns))
        curves[name] = returns[:, (~np.isnan(returns)).mean(0) >= 0.5]
    results["normalised_score"] = float(M.normalised_score(
        results["model_last_episode_return"], results["random_last_episode_return"],
        results["source_last_episode_return"]))
    results["curves"] = {n: np.nanmean(c, 0).tolist() for n, c in curves.items()}
    results.update(num_envs=int(len(tasks)), num_steps=num_steps, tasks=config.eval.tasks,
                   eval_seconds=time.perf_counter() - start, **timings,
                   plot=plot_curves(curves, os.path.join(config.workdir, "in_context_curves.png"),
                                    xlabel="in-context episode", ylabel="return",
                                    title=f"{config.experiment}: held-out tasks"))
    return write_eval_results(config, results)


def run(config, command: str):
    """The CLI's generate | train | evaluate for a Miniworld config (`config.runner`)."""
    return run_stage(command, {"generate": lambda: generate(config, force=True),
                               "train": lambda: train(config),
                               "evaluate": lambda: evaluate(config)},
                     repr(config.experiment))
