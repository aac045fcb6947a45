"""Data builders: how a run's training dataset is made and opened, registered by name.

`config.data.builder` names one (default "histories"). A builder makes the dataset once (skipped
when it exists, unless forced) and opens it as what a method's `training_data` reads: a `History`
(arrays, `histories.npz`), a `PixelStore` (pixel learning histories on disk) or a
`PixelTrajectoryStore` (pixel episodes on disk).

* "histories": learning histories of `data.source` on the training tasks: on device for JAX envs
  (`histories.npz`), through the bridge into a pixel store for host simulators.
* "minari": offline episodes in a Minari dataset (`Minari`): generated from `data.source` on
  device, or an existing dataset opened by `data.dataset_id` under `data.minari_root`.
* "locomotion": D4RL-style `medium`, `medium-replay` and `medium-expert` Minari datasets of a
  brax locomotion env, made from one on-device PPO run (`LocomotionData`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
import zipfile
import zlib

import jax
import numpy as np

from icrl_jax.core import metrics
from icrl_jax.core import validation
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.history import CorruptHistoryError, load_history, save_history
from icrl_jax.data.pixel_store import PixelStore, PixelStoreWriter
from icrl_jax.data.rollout import run_policies
from icrl_jax.data.sources import build_source
from icrl_jax.core.errors import UserError
from icrl_jax.core.files import write_json
from icrl_jax.core.registry import Registry
from icrl_jax.envs import split_tasks
from icrl_jax.data.sources import Source
from icrl_jax.data.minari_io import (DatasetNotFoundError, DatasetSpaceError, MinariEpisodes, dataset_dir,
                                      locate_minari, read_minari, spaces_of, write_minari)
from icrl_jax.data.pixel_trajectories import PixelTrajectoryStore


def task_split(env, config) -> tuple[np.ndarray, np.ndarray]:
    """Train and held-out tasks: the config's builder's (`Builder.task_split`; most builders
    take `default_task_split`)."""
    return builder_of(config).task_split(config, env)


def default_task_split(env, config) -> tuple[np.ndarray, np.ndarray]:
    """Train and held-out tasks: task ids of a JAX env (a seeded split of a finite task set, or
    disjoint id ranges for unlimited tasks such as bandits), or task rows of a host simulator."""
    data = config.data
    if env.host:
        return env.task_split(data.num_train_tasks, data.num_test_tasks, data.split_seed)
    if env.num_tasks is None:
        train = np.arange(data.num_train_tasks, dtype=np.int32)
        return train, np.arange(data.num_train_tasks, data.num_train_tasks + data.num_test_tasks,
                                dtype=np.int32)
    if data.num_train_tasks + data.num_test_tasks > env.num_tasks:
        raise UserError(f"{config.env.name} has {env.num_tasks} tasks, fewer than "
                        f"num_train_tasks + num_test_tasks = "
                        f"{data.num_train_tasks + data.num_test_tasks}")
    return split_tasks(env.num_tasks, data.num_train_tasks, data.split_seed, data.num_test_tasks)


class DatasetShapeError(UserError):
    """A dataset on disk made for another config (other task counts or history lengths)."""


class Builder:
    """What every builder has: `path(config, env)`, `exists(path, env)`,
    `build(config, env, path)`, `open(config, env, path)`; one whose rows can be made in parts
    overrides `num_rows`, and its `path`, `exists` and `build` take `rows` too. `check` raises
    a `DatasetShapeError` for an opened dataset that does not fit the config."""

    def num_rows(self, config, env) -> int | None:
        del config, env
        return None

    def check(self, config, env, dataset, path: str, rows=None) -> None:
        del config, env, dataset, path, rows

    def task_split(self, config, env) -> tuple[np.ndarray, np.ndarray]:
        """Train and held-out tasks (a builder that reads a given dataset takes its tasks)."""
        return default_task_split(env, config)

    def recorded_rollouts(self, config, env) -> dict:
        """Rollouts of baseline policies on the evaluation tasks recorded when the dataset was
        made, which `evaluate` scores beside the live ones: name -> `(N, eval.num_steps)` arrays
        `rewards`, `dones`, `actions` (and `terminated`), in `eval_task_ids` order. For a source
        no per-history `Source` expresses (one PPO agent over many envs of a task)."""
        del config, env
        return {}


class Histories(Builder):
    """Learning histories of `data.source` on every training task (`histories_per_task` each).

    Row r of the dataset is task `repeat(train_ids, histories_per_task)[r]` with key
    `split(PRNGKey(seed), R)[r]`, so any subset of rows (`rows`: a process's share in a
    multi-process run) is made alone: exactly as in the whole dataset when the source draws
    each history from its key alone; Thompson sampling's exact Beta sampler pools its
    rejection retries over the batch, so its rows are then other draws of the same law."""

    def num_rows(self, config, env) -> int | None:
        """R, the rows that can be made in parts (None: host simulators record one store)."""
        return None if env.host else len(task_split(env, config)[0]) * int(
            config.data.histories_per_task)

    def path(self, config, env, rows=None) -> str:
        path = config.data.path or os.path.join(
            config.workdir, "pixel_store" if env.host else "histories.npz")
        if rows is None:
            return path
        root, ext = os.path.splitext(path)
        return f"{root}.rows-{rows.label}{ext}"

    def exists(self, path: str, env, rows=None) -> bool:
        if rows is not None:  # a part of the rows another layout made is made again
            if not os.path.exists(path):
                return False
            try:
                with np.load(path) as f:
                    return json.loads(str(f["metadata"])).get("rows") == rows.indices
            except (zipfile.BadZipFile, zlib.error, OSError, ValueError, KeyError, EOFError) as e:
                raise CorruptHistoryError(f"dataset {path} is unreadable ({type(e).__name__}: "
                                          f"{str(e)[:160]})") from e
        return os.path.exists(os.path.join(path, "meta.json") if env.host else path)

    def build(self, config, env, path: str, rows=None) -> None:
        train_ids, _ = task_split(env, config)
        tasks = np.repeat(train_ids, config.data.histories_per_task, axis=0)
        keys = jax.random.split(jax.random.PRNGKey(config.seed), len(tasks))
        num_steps = int(config.data.num_steps)
        source = build_source(config.data.source, env, num_steps,
                              config.data.source_kwargs.to_dict())
        start = time.perf_counter()
        if env.host:
            self._record(config, env, path, tasks, source, num_steps)
            return
        if rows is not None:
            tasks, keys = tasks[np.asarray(rows.indices)], keys[np.asarray(rows.indices)]
        history = jax.block_until_ready(generate_histories(
            env, source, env.task_params(tasks), num_steps, keys, task_ids=tasks))
        seconds = time.perf_counter() - start
        save_history(path, history, metadata=dict(
            env=config.env.name, env_kwargs=config.env.kwargs.to_dict(),
            source=config.data.source, source_kwargs=config.data.source_kwargs.to_dict(),
            seed=config.seed, generation_seconds=seconds,
            rows=None if rows is None else rows.indices))
        print(f"generated {history.num_histories} histories x {history.length} steps of "
              f"{config.data.source} in {seconds:.1f}s -> {path}")

    def _record(self, config, env, path, tasks, source, num_steps) -> None:
        """Host simulators: the source through the bridge, pool by pool, into a pixel store."""
        if os.path.exists(path):
            shutil.rmtree(path)  # an incomplete or forced-over store
        start = time.perf_counter()
        out = run_policies(env, {"source": source}, tasks, num_steps,
                           jax.random.PRNGKey(config.seed), seed=int(config.seed),
                           show_progress=config.run.progress, keep_observations=True)["source"]
        with PixelStoreWriter(path, tuple(env.observation_shape), (),
                              chunk_steps=config.data.chunk_steps) as writer:
            for i in range(len(tasks)):
                writer.add_history(out["observations"][i], out["actions"][i], out["rewards"][i],
                                   out["dones"][i])
        seconds = time.perf_counter() - start
        returns = metrics.episode_returns_ragged(out["rewards"], out["dones"])
        frames = len(tasks) * num_steps
        stats = dict(env=config.env.name, histories=int(len(tasks)), steps_per_history=num_steps,
                     frames=int(frames), generation_seconds=seconds,
                     frames_per_second=frames / seconds,
                     bytes_on_disk=sum(os.path.getsize(os.path.join(path, f))
                                       for f in os.listdir(path)),
                     first_episode_return=float(np.mean([r[0] for r in returns if len(r)])),
                     last_episode_return=float(np.mean([r[-1] for r in returns if len(r)])))
        write_json(os.path.join(path, "dataset.json"), stats, indent=1)
        print(f"recorded {len(tasks)} histories x {num_steps} steps ({frames} frames) in "
              f"{seconds:.1f}s -> {path}; source return first episode "
              f"{stats['first_episode_return']:.2f}, last {stats['last_episode_return']:.2f}")

    def open(self, config, env, path: str):
        if env.host:
            return PixelStore(path)
        return load_history(path)[0]

    def check(self, config, env, dataset, path: str, rows=None) -> None:
        """The histories' count, length and provenance (env, its kwargs, source and its kwargs)
        are what the config makes: a dataset made for another config would train on data the
        config does not describe. The seed may differ (other draws of the same law: several
        training seeds may share one dataset)."""
        if env.host:
            return
        with np.load(path) as f:
            made = json.loads(str(f["metadata"])) if "metadata" in f.files else {}
        asked = {"env.name": config.env.name, "env.kwargs": config.env.kwargs.to_dict(),
                 "data.source": config.data.source,
                 "data.source_kwargs": config.data.source_kwargs.to_dict()}
        stored = {"env.name": made.get("env"), "env.kwargs": made.get("env_kwargs"),
                  "data.source": made.get("source"),
                  "data.source_kwargs": made.get("source_kwargs")}
        # json round trip: tuples in the config are lists in the file
        asked = json.loads(json.dumps(asked, default=str))
        differ = [k for k in asked if stored[k] is not None and stored[k] != asked[k]]
        if differ:
            key = differ[0]
            raise DatasetShapeError(
                f"dataset {path} was made with {key}={stored[key]!r}, but the config asks for "
                f"{asked[key]!r}; delete it, or pass another --config.data.path or "
                f"--config.workdir")
        want = (len(rows.indices) if rows is not None else self.num_rows(config, env),
                int(config.data.num_steps))
        have = (int(dataset.num_histories), int(dataset.length))
        if have != want:
            data = config.data
            raise DatasetShapeError(
                f"dataset {path} holds {have[0]} histories x {have[1]} steps, but the config "
                f"makes {want[0]} x {want[1]} (data.num_train_tasks={data.num_train_tasks} x "
                f"data.histories_per_task={data.histories_per_task}, data.num_steps="
                f"{data.num_steps}); it was made for another config: delete it, or pass "
                f"another --config.data.path or --config.workdir")


class Minari(Builder):
    """Offline episodes in a Minari dataset (`data/minari_io.py`): `<root>/<data.dataset_id>`,
    root `data.minari_root` (default `<workdir>/minari`), or, with `data.minari_id`, a dataset
    the user has (a path, or an id under Minari's own root such as the hosted
    "mujoco/hopper/medium-v0"), which is only read: nothing is generated or downloaded.

    `build` rolls `data.source` (e.g. "waypoint", D4RL maze2d's noisy controller) out on device
    on every training task (random start and, with `task="random_goal"`, random goal per task;
    `histories_per_task` streams of `num_steps` steps each), cuts the streams into complete
    episodes (a trailing unfinished one is dropped) and writes them with reference scores: the
    mean episode returns of a uniform random policy and of the env's noiseless expert on the same
    tasks. An existing dataset (any Minari dataset with the env's spaces) is opened as it is.
    """

    @staticmethod
    def root(config) -> str:
        if not config.data.dataset_id:
            raise UserError("data.builder='minari' needs data.dataset_id")
        return config.data.minari_root or os.path.join(config.workdir, "minari")

    def path(self, config, env) -> str:
        if config.data.minari_id:
            return locate_minari(config.data.minari_id)
        return dataset_dir(self.root(config), config.data.dataset_id)

    def exists(self, path: str, env) -> bool:
        return any(os.path.isfile(os.path.join(path, *sub, "metadata.json"))
                   for sub in (("data",), ()))

    def build(self, config, env, path: str) -> None:
        if config.data.minari_id:
            raise DatasetNotFoundError(
                f"no Minari dataset data.minari_id={config.data.minari_id!r} at {path}: download "
                f"it first (minari download {config.data.minari_id}), or set "
                f"MINARI_DATASETS_PATH to the folder that holds it")
        if not config.data.source:  # a config that points at an existing dataset
            raise DatasetNotFoundError(f"no Minari dataset at {path} (and no data.source to "
                                       f"generate one)")
        train_ids, _ = task_split(env, config)
        tasks = np.repeat(train_ids, config.data.histories_per_task, axis=0)
        num_steps = int(config.data.num_steps)
        source = build_source(config.data.source, env, num_steps,
                              config.data.source_kwargs.to_dict())
        params = env.task_params(tasks)
        key = jax.random.PRNGKey(config.seed)
        start = time.perf_counter()
        history, info = jax.block_until_ready(generate_histories(
            env, source, params, num_steps, key, task_ids=tasks, with_info=True))
        seconds = time.perf_counter() - start
        episodes = cut_episodes(jax.device_get(history), jax.device_get(info))
        if not episodes:
            raise UserError(f"no episode of {config.data.source} ends within data.num_steps="
                            f"{num_steps} steps")
        refs = {}
        if env.has_oracle:  # reference returns on the same tasks, one episode length each
            length = int(env.episode_length)
            experts = {"ref_min_score": build_source("uniform_random", env, length, {}),
                       "ref_max_score": _expert_source(env)}
            for name, policy in experts.items():
                h = generate_histories(env, policy, params, length, jax.random.fold_in(key, 1))
                returns = metrics.episode_returns_ragged(np.asarray(h.rewards), np.asarray(h.dones))
                refs[name] = float(np.mean([r[0] for r in returns if len(r)]))
        obs_space, act_space = spaces_of(env)
        write_minari(self.root(config), config.data.dataset_id, episodes, obs_space, act_space, config.env.name,
                     metadata=dict(env_kwargs=config.env.kwargs.to_dict(),
                                   source=config.data.source,
                                   source_kwargs=config.data.source_kwargs.to_dict(),
                                   seed=int(config.seed), generation_seconds=seconds),
                     overwrite=True, algorithm_name=config.data.source, env_spec=env.gymnasium_id, **refs)
        steps = sum(len(e["rewards"]) for e in episodes)
        print(f"generated {len(episodes)} episodes ({steps} steps) of {config.data.source} in "
              f"{seconds:.1f}s -> {path}" + "".join(f"; {k} {v:.2f}" for k, v in refs.items()))

    def open(self, config, env, path: str):
        dataset = read_minari(path, env=env)
        check_recorded_env(dataset, env)
        return dataset


def _expert_source(env):
    """The env's noiseless privileged expert as a source."""
    return Source(lambda key, p: (), lambda key, s, obs, st, p: (env.expert_action(st, p), s),
                  lambda key, s, tr, p: s, name="expert")


def cut_episodes(history, info) -> list[dict]:
    """Complete episodes of N streams (host numpy): each ends at a done, its T + 1 observations
    the T acted on plus the final observation (before the auto-reset)."""
    episodes = []
    obs, final = np.asarray(history.observations), np.asarray(info["final_observations"])
    terminated = np.asarray(info["terminated"])
    for n in range(obs.shape[0]):
        ends = np.flatnonzero(np.asarray(history.dones[n]))
        for begin, end in zip(np.concatenate([[0], ends[:-1] + 1]), ends):
            sl = slice(begin, end + 1)
            episodes.append(dict(
                observations=np.concatenate([obs[n, sl], final[n, end][None]]),
                actions=np.asarray(history.actions[n, sl]),
                rewards=np.asarray(history.rewards[n, sl]),
                terminations=terminated[n, sl], truncations=~terminated[n, sl] & (
                    np.arange(begin, end + 1) == end)))
    return episodes


#: `data.builder` name -> `Builder`. A paper's own builders register here from its package.
BUILDERS = Registry("data builder", modules=("icrl_jax.data.locomotion_data",
                                             "icrl_jax.data.xland_hdf5"))
BUILDERS.register("histories", Histories())
BUILDERS.register("minari", Minari(), needs=("minari",))

#: Data settings a builder ignores, named when a user sets them (core/validation.py).
BUILDER_CONSTRAINTS = validation.declare("builders", (
    validation.no_effect("data.histories_per_task", 1, (("data.builder", "locomotion"),),
                "with data.builder='locomotion' (one PPO run, data.num_train_tasks streams)"),
    validation.no_effect("data.source", "ppo", (("data.builder", "locomotion"),),
                "with data.builder='locomotion' (it always trains PPO; data.source_kwargs are "
                "PPO's)"),
    *(validation.no_effect(key, default, lambda minari_id: bool(minari_id),
                  "with data.minari_id set (that dataset is read as it is)",
                  needs=("data.minari_id",))
      for key, default in (("data.source", ""), ("data.histories_per_task", 1))),
))


def check_recorded_env(dataset: MinariEpisodes, env) -> None:
    """Refuse a dataset recorded on a gymnasium env that `env` does not simulate (e.g. Minari's
    D4RL hopper, recorded on `Hopper-v5`, with brax's hopper: same spaces, other dynamics)."""
    from icrl_jax.envs.continuous.mjx_locomotion import ENV_OF_GYMNASIUM_ID
    recorded = dataset.env_spec_id
    if recorded is None or recorded == env.gymnasium_id:
        return
    if env.gymnasium_id is not None or recorded in ENV_OF_GYMNASIUM_ID:
        ours = ENV_OF_GYMNASIUM_ID.get(recorded)
        hint = f": use env.name={ours!r}" if ours else ""
        raise DatasetSpaceError(f"dataset {dataset.dataset_id} was recorded on gymnasium's "
                                f"{recorded}, which env {env.name!r} does not simulate{hint}")


def builder_of(config):
    return BUILDERS.get(config.data.builder)


def dataset_path(config, env) -> str:
    return builder_of(config).path(config, env)


def share_dataset(config, env, derived) -> None:
    """Point `derived` (a copy of `config` with its own work directory: a training seed, a
    table column) at `config`'s dataset, so that it is built once and every copy reads it."""
    builder = builder_of(config)
    if config.data.minari_id:  # the user's dataset: every copy reads it where it is
        return
    if isinstance(builder, Minari):  # located by its root and id, not by data.path
        derived.data.minari_root = builder.root(config)
    else:
        derived.data.path = builder.path(config, env)


@dataclasses.dataclass(frozen=True)
class Rows:
    """Some rows of a dataset of `total` rows that can be made in parts (`num_rows`): `indices`
    in increasing order, `label` naming the part in its file name (e.g. "0-32-of-64")."""

    indices: list[int]
    label: str
    total: int


def num_rows(config, env) -> int | None:
    """How many rows the run's dataset has when its builder can make any subset of them alone
    (each process of a multi-process run makes its own share); None when it cannot."""
    return builder_of(config).num_rows(config, env)


def _args(rows) -> tuple:
    return () if rows is None else (rows,)


def generate(config, env, force: bool = False, rows: Rows | None = None) -> str:
    """Make the run's dataset (only `rows` of it, if given) unless it exists (or `force`);
    returns its path."""
    builder = builder_of(config)
    path = builder.path(config, env, *_args(rows))
    try:
        present = builder.exists(path, env, *_args(rows))
    except CorruptHistoryError as e:
        set_aside(path, e)
        present = False
    if force or not present:
        builder.build(config, env, path, *_args(rows))
    return path


def set_aside(path: str, error: Exception) -> str:
    """Move an unreadable dataset file to `<path>.corrupt-<n>` (the first n free), saying so on
    stderr, so that it is made again and the damaged bytes stay for a look. Returns the new path."""
    n = 1
    while os.path.exists(f"{path}.corrupt-{n}"):
        n += 1
    aside = f"{path}.corrupt-{n}"
    os.replace(path, aside)
    print(f"icrl-jax: {error}; moved it to {aside} and making it again", file=sys.stderr)
    return aside


def open_dataset(config, env, rows: Rows | None = None):
    """The run's dataset (only `rows` of it, if given), made first when missing (unless
    `run.generate` is off)."""
    builder = builder_of(config)
    path = builder.path(config, env, *_args(rows))
    if not config.run.generate and not builder.exists(path, env, *_args(rows)):
        raise UserError(f"no dataset at {path} and run.generate=False")
    path = generate(config, env, rows=rows)
    try:
        dataset = builder.open(config, env, path)
    except CorruptHistoryError as e:  # damaged bytes (a copy cut short, a failing disk)
        if not config.run.generate:
            raise UserError(f"{e}; not made again since run.generate=False") from None
        set_aside(path, e)
        dataset = builder.open(config, env, generate(config, env, rows=rows))
    builder.check(config, env, dataset, path, *_args(rows))
    return dataset


def dataset_returns(dataset) -> np.ndarray | None:
    """Returns of the dataset's complete episodes, float `(E,)` (None for pixel learning
    histories, whose rewards are not kept in memory)."""
    if isinstance(dataset, MinariEpisodes):
        return dataset.returns
    if isinstance(dataset, PixelTrajectoryStore):
        return np.asarray(dataset.episode_returns)
    if isinstance(dataset, PixelStore):
        return None
    return np.concatenate(metrics.episode_returns_ragged(dataset.rewards, dataset.dones))


def reference_scores(dataset) -> tuple[float, float] | None:
    """The (random, expert) reference returns a dataset carries for D4RL-normalised scores (a
    Minari dataset's `ref_min_score` / `ref_max_score`), None when it has none."""
    if isinstance(dataset, MinariEpisodes) and None not in (dataset.ref_min_score,
                                                            dataset.ref_max_score):
        return float(dataset.ref_min_score), float(dataset.ref_max_score)
    return None
