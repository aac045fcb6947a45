"""XLand-100B's HDF5 layout, read and written with h5py, and the data builders on it.

The layout (XLand-100B and XLand-Trivial-20B, `dunnolab/xland-minigrid-datasets`): one group
per task, named "0", "1", ..., each holding H learning histories of T steps:

| dataset          | dtype   | shape          |
| ---------------- | ------- | -------------- |
| `states`         | uint8   | `(H, T, 5, 5)` |
| `actions`        | uint8   | `(H, T)`       |
| `rewards`        | float16 | `(H, T)`       |
| `dones`          | bool    | `(H, T)`       |
| `expert_actions` | uint8   | `(H, T)`       |

and the group's `.attrs` "env-id", "benchmark-id" and "ruleset-id". A state is the `(5, 5, 2)`
(tile, colour) observation compressed to `tile * NUM_COLORS + colour`. Step t of a history is
the observation acted on, the action, the reward it got, whether the episode ended with it, and
the action the agent's final policy takes there (the expert label DPT-style methods read).

Builders (`data.builder`):

* "xland_hdf5": train on a file the user has (`data.path`), e.g. XLand-Trivial-20B. It reads
  the first `data.num_train_tasks` groups, the first `data.histories_per_task` histories of
  each and their first `data.num_steps` steps into memory (decompressed); the training tasks are
  those groups' rulesets, the held-out ones a seeded sample of the env's other rulesets.
* "xland_ppo": make such a file with the recurrent PPO source on device
  (`data/sources/xland_ppo.py`), then train on it as above. The same program trains PPO on the
  held-out rulesets too; their learning histories (`<file>.heldout.hdf5`) are the "source"
  curve that evaluation shows beside the model's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.extras import import_extra
from icrl_jax.core.files import write_json
from icrl_jax.data.builders import BUILDERS, Builder, DatasetShapeError, default_task_split
from icrl_jax.data.history import History

#: xminigrid's colour count: a state is `tile * NUM_COLORS + colour`.
NUM_COLORS = 12
#: What each group holds, and its dtype.
FIELDS = {"states": np.uint8, "actions": np.uint8, "rewards": np.float16, "dones": np.bool_,
          "expert_actions": np.uint8}
#: Where the published datasets are (their README).
DOWNLOADS = {"XLand-Trivial-20B": "https://tinyurl.com/trivial-10k",
             "XLand-100B": "https://tinyurl.com/medium-30k"}


def compress_obs(obs: np.ndarray) -> np.ndarray:
    """uint8 `(..., 5, 5, 2)` (tile, colour) -> uint8 `(..., 5, 5)` `tile * NUM_COLORS + colour`."""
    obs = np.asarray(obs)
    return (obs[..., 0].astype(np.uint16) * NUM_COLORS + obs[..., 1]).astype(np.uint8)


def decompress_obs(states: np.ndarray) -> np.ndarray:
    """The inverse of `compress_obs`: uint8 `(..., 5, 5)` -> uint8 `(..., 5, 5, 2)`."""
    tile, colour = np.divmod(np.asarray(states, np.uint8), NUM_COLORS)
    return np.stack([tile, colour], axis=-1).astype(np.uint8)


@dataclasses.dataclass
class TaskHistories:
    """The learning histories of one task, in the file's dtypes.

    observations: uint8 `(H, T, 5, 5, 2)` (decompressed); actions, expert_actions: uint8
    `(H, T)`; rewards: float16 `(H, T)`; dones: bool `(H, T)`; env_id, benchmark_id,
    ruleset_id: the group's `.attrs`.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    expert_actions: np.ndarray
    env_id: str
    benchmark_id: str
    ruleset_id: int


def _h5py():
    return import_extra("h5py", "XLand-100B's HDF5 datasets")


def write_xland_hdf5(path: str, tasks: list[TaskHistories], chunk_steps: int = 4096) -> None:
    """Write `tasks` in XLand-100B's layout (groups "0", "1", ... in order; gzip-compressed
    chunks of one history x `chunk_steps` steps, as the published files). Written to a temporary
    file and renamed, so a killed run leaves no half file."""
    h5py = _h5py()
    tmp = f"{path}.tmp-{os.getpid()}"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        with h5py.File(tmp, "w") as f:
            for i, task in enumerate(tasks):
                group = f.create_group(str(i))
                group.attrs["env-id"] = task.env_id
                group.attrs["benchmark-id"] = task.benchmark_id
                group.attrs["ruleset-id"] = int(task.ruleset_id)
                arrays = dict(states=compress_obs(task.observations), actions=task.actions,
                              rewards=task.rewards, dones=task.dones,
                              expert_actions=task.expert_actions)
                for name, dtype in FIELDS.items():
                    data = np.asarray(arrays[name]).astype(dtype)
                    chunks = (1, min(chunk_steps, data.shape[1])) + data.shape[2:]
                    group.create_dataset(name, data=data, chunks=chunks, compression="gzip",
                                         compression_opts=6)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def missing_file_error(path: str) -> UserError:
    listing = "; ".join(f"{name}: curl -L -o {path} {url}" for name, url in DOWNLOADS.items())
    return UserError(f"no XLand-100B-layout HDF5 file at {path}: download one ({listing}), or make "
                     f"one with data.builder='xland_ppo'")


@dataclasses.dataclass
class FileInfo:
    """What a file holds: its groups' count, histories per group and steps per history, and
    each group's `.attrs`."""

    num_tasks: int
    histories_per_task: int
    num_steps: int
    env_ids: list[str]
    benchmark_ids: list[str]
    ruleset_ids: np.ndarray


def file_info(path: str) -> FileInfo:
    """The shapes and `.attrs` of an XLand-100B-layout file (reads no arrays); a `UserError`
    naming the first problem for a file that is missing or not in the layout."""
    if not os.path.isfile(path):
        raise missing_file_error(path)
    h5py = _h5py()
    try:
        with h5py.File(path, "r") as f:
            names = sorted(f.keys(), key=lambda k: int(k) if k.isdigit() else -1)
            if not names or not all(k.isdigit() for k in names):
                raise UserError(f"{path}: groups must be named 0, 1, ... (XLand-100B's layout), "
                                f"found {names[:5]}")
            first = f[names[0]]
            missing = [k for k in FIELDS if k not in first]
            if missing:
                raise UserError(f"{path}: group '0' lacks {missing} (XLand-100B's layout holds "
                                f"{list(FIELDS)})")
            for name, dtype in FIELDS.items():
                if first[name].dtype != np.dtype(dtype):
                    raise UserError(f"{path}: {name} has dtype {first[name].dtype}, expected "
                                    f"{np.dtype(dtype)}")
            h, t = first["actions"].shape
            if first["states"].shape != (h, t, 5, 5):
                raise UserError(f"{path}: states has shape {first['states'].shape}, expected "
                                f"{(h, t, 5, 5)}")
            attrs = [f[k].attrs for k in names]
            for key in ("env-id", "benchmark-id", "ruleset-id"):
                if key not in attrs[0]:
                    raise UserError(f"{path}: group '0' has no .attrs[{key!r}]")
            return FileInfo(len(names), int(h), int(t), [str(a["env-id"]) for a in attrs],
                            [str(a["benchmark-id"]) for a in attrs],
                            np.array([int(a["ruleset-id"]) for a in attrs], np.int64))
    except OSError as e:
        raise UserError(f"{path} is not a readable HDF5 file ({e})") from None


def read_xland_hdf5(path: str, num_tasks: int | None = None, histories: int | None = None,
                    num_steps: int | None = None, groups: list[int] | None = None
                    ) -> list[TaskHistories]:
    """The first `num_tasks` groups (or the groups `groups`), the first `histories` histories of
    each and their first `num_steps` steps (None: all), observations decompressed."""
    info = file_info(path)
    groups = list(range(info.num_tasks if num_tasks is None else int(num_tasks))) if groups is None \
        else [int(g) for g in groups]
    h = info.histories_per_task if histories is None else int(histories)
    t = info.num_steps if num_steps is None else int(num_steps)
    if groups and max(groups) >= info.num_tasks:
        raise UserError(f"{path} holds {info.num_tasks} tasks, fewer than the {max(groups) + 1} asked for")
    if h > info.histories_per_task or t > info.num_steps:
        raise UserError(f"{path} holds {info.histories_per_task} histories x {info.num_steps} steps "
                        f"per task, fewer than the {h} x {t} asked for")
    out = []
    with _h5py().File(path, "r") as f:
        for g in groups:
            group = f[str(g)]
            arrays = {name: group[name][:h, :t] for name in FIELDS}
            out.append(TaskHistories(
                observations=decompress_obs(arrays["states"]), actions=arrays["actions"],
                rewards=arrays["rewards"], dones=arrays["dones"],
                expert_actions=arrays["expert_actions"], env_id=info.env_ids[g],
                benchmark_id=info.benchmark_ids[g], ruleset_id=int(info.ruleset_ids[g])))
    return out


def to_history(tasks: list[TaskHistories], num_actions: int) -> History:
    """Tasks' histories as one `History` (rows task-major; `task_ids` = ruleset ids)."""
    if not tasks:
        raise UserError("no XLand tasks to train on")
    cat = lambda name: np.concatenate([getattr(t, name) for t in tasks])  # noqa: E731
    task_ids = np.concatenate([np.full(len(t.actions), t.ruleset_id, np.int32) for t in tasks])
    return History(observations=cat("observations"), actions=cat("actions").astype(np.int32),
                   rewards=cat("rewards").astype(np.float32), dones=cat("dones").astype(bool),
                   task_ids=task_ids, action_mask=np.ones((len(task_ids), num_actions), bool))


class XLandHDF5(Builder):
    """Learning histories in XLand-100B's layout from `data.path` (see the module docstring)."""

    def path(self, config, env) -> str:
        if not config.data.path:
            raise UserError("data.builder='xland_hdf5' needs data.path, the XLand-100B-layout "
                            "HDF5 file to train on")
        return config.data.path

    def exists(self, path: str, env) -> bool:
        return os.path.isfile(path)

    def build(self, config, env, path: str) -> None:
        raise missing_file_error(path)

    def open(self, config, env, path: str) -> History:
        data = config.data
        tasks = read_xland_hdf5(path, int(data.num_train_tasks), int(data.histories_per_task),
                                int(data.num_steps))
        return to_history(tasks, env.num_actions)

    def check(self, config, env, dataset, path: str, rows=None) -> None:
        """The file was recorded on the config's env, with the env's observation shape."""
        info = file_info(path)
        if info.env_ids[0] != config.env.name:
            raise DatasetShapeError(f"{path} was recorded on {info.env_ids[0]!r}, but env.name is "
                                    f"{config.env.name!r}; set env.name={info.env_ids[0]!r}")
        if tuple(env.observation_shape) != (5, 5, 2):
            raise DatasetShapeError(f"{path} holds (5, 5, 2) observations; env {config.env.name!r} "
                                    f"observes {tuple(env.observation_shape)}")
        if info.benchmark_ids[0] != env.benchmark_id:  # held-out rulesets come from the benchmark
            raise DatasetShapeError(f"{path} was made on benchmark {info.benchmark_ids[0]!r}, but the "
                                    f"env's rulesets are {env.benchmark_id!r}; set env.kwargs.benchmark "
                                    f"to that benchmark's file")

    def task_split(self, config, env) -> tuple[np.ndarray, np.ndarray]:
        """Train: the rulesets of the file's first `data.num_train_tasks` groups. Held out:
        `data.num_test_tasks` of the env's other rulesets, a seeded sample (`data.split_seed`)."""
        data = config.data
        info = file_info(self.path(config, env))
        if int(data.num_train_tasks) > info.num_tasks:
            raise UserError(f"data.num_train_tasks={data.num_train_tasks} exceeds the "
                            f"{info.num_tasks} tasks of {self.path(config, env)}")
        train = info.ruleset_ids[: int(data.num_train_tasks)].astype(np.int32)
        if env.num_tasks is not None and train.size and train.max() >= env.num_tasks:
            raise UserError(f"{self.path(config, env)} holds ruleset {int(train.max())}, beyond the "
                            f"{env.num_tasks} rulesets of env.kwargs.benchmark: give the benchmark "
                            f"the file was made on ({info.benchmark_ids[0]!r})")
        others = np.setdiff1d(np.arange(env.num_tasks, dtype=np.int32), info.ruleset_ids)
        if int(data.num_test_tasks) > len(others):
            raise UserError(f"data.num_test_tasks={data.num_test_tasks} exceeds the {len(others)} "
                            f"rulesets the file does not train on")
        picked = np.random.default_rng(int(data.split_seed)).permutation(len(others))
        return train, np.sort(others[picked[: int(data.num_test_tasks)]]).astype(np.int32)


class XLandPPO(XLandHDF5):
    """Learning histories of the recurrent PPO source, made on device and written in
    XLand-100B's layout (`<workdir>/histories.hdf5` unless `data.path`); the held-out
    rulesets' histories go to `<file>.heldout.hdf5`, read back as the "source" rollouts."""

    def path(self, config, env) -> str:
        return config.data.path or os.path.join(config.workdir, "histories.hdf5")

    @staticmethod
    def heldout_path(path: str) -> str:
        root, ext = os.path.splitext(path)
        return f"{root}.heldout{ext}"

    @staticmethod
    def report_path(path: str) -> str:
        return f"{os.path.splitext(path)[0]}.ppo.json"

    @staticmethod
    def provenance(config) -> dict[str, Any]:
        """What the files depend on: a config that asks for other data must not read them (the
        seed may differ: training seeds of a report share one dataset)."""
        data = config.data
        return json.loads(json.dumps({
            "env.name": config.env.name, "env.kwargs": config.env.kwargs.to_dict(),
            "data.source_kwargs": data.source_kwargs.to_dict(),
            "data.split_seed": int(data.split_seed), "data.num_train_tasks": int(data.num_train_tasks),
            "data.num_test_tasks": int(data.num_test_tasks)}, default=str))

    def exists(self, path: str, env) -> bool:
        return all(os.path.isfile(p) for p in (path, self.heldout_path(path), self.report_path(path)))

    def check(self, config, env, dataset, path: str, rows=None) -> None:
        """The files were made by this config's PPO, env and tasks (not only the same layout)."""
        super().check(config, env, dataset, path, rows)
        with open(self.report_path(path)) as f:
            made = json.load(f).get("made_with", {})
        asked = self.provenance(config)
        differ = [k for k in asked if k in made and made[k] != asked[k]]
        if differ:
            raise DatasetShapeError(f"{path} was made with {differ[0]}={made[differ[0]]!r}, but the "
                                    f"config asks for {asked[differ[0]]!r}; delete it, or pass another "
                                    f"--config.data.path or --config.workdir")

    def task_split(self, config, env) -> tuple[np.ndarray, np.ndarray]:
        return default_task_split(env, config)

    def build(self, config, env, path: str) -> None:
        from icrl_jax.data.sources import xland_ppo

        if not getattr(env, "xland", False):
            raise UserError(f"data.builder='xland_ppo' needs an XLand-MiniGrid env, got "
                            f"{config.env.name!r}")
        data, evaluation = config.data, config.eval
        train_ids, test_ids = default_task_split(env, config)
        try:
            ppo_config = xland_ppo.XLandPPOConfig(**data.source_kwargs.to_dict())
        except TypeError as e:
            raise UserError(f"bad data.source_kwargs for xland_ppo: {e}") from None
        ruleset_ids = np.concatenate([train_ids, test_ids]).astype(np.int32)
        recorded = max(int(data.histories_per_task), int(evaluation.num_envs_per_task))
        num_steps = max(int(data.num_steps), int(evaluation.num_steps))
        start = time.perf_counter()
        out = xland_ppo.train_on_rulesets(env, env.task_params(ruleset_ids), ppo_config, num_steps,
                                          recorded, seed=int(config.seed), show_progress=config.run.progress)
        seconds = time.perf_counter() - start
        parts = {"train": (path, np.arange(len(train_ids)), int(data.histories_per_task), int(data.num_steps)),
                 "heldout": (self.heldout_path(path), len(train_ids) + np.arange(len(test_ids)),
                             int(evaluation.num_envs_per_task), int(evaluation.num_steps))}
        for _, (file, rows, histories, steps) in parts.items():
            write_xland_hdf5(file, [TaskHistories(
                observations=out.observations[r, :histories, :steps], actions=out.actions[r, :histories, :steps],
                rewards=out.rewards[r, :histories, :steps], dones=out.dones[r, :histories, :steps],
                expert_actions=out.expert_actions[r, :histories, :steps], env_id=env.name,
                benchmark_id=env.benchmark_id, ruleset_id=int(ruleset_ids[r])) for r in rows])
        by_episode = out.return_by_episode()
        write_json(self.report_path(path), dict(
            made_with=self.provenance(config), seconds=seconds, env_steps=int(out.env_steps),
            steps_per_second=out.env_steps / seconds, ppo=dataclasses.asdict(ppo_config),
            rulesets=len(ruleset_ids), return_by_episode=np.round(by_episode, 4).tolist(),
            return_per_update=np.round(out.learning_curve, 4).tolist()), indent=1)
        returns = (f"return {np.mean(by_episode[:5]):.3f} (first 5 episodes) -> "
                   f"{np.mean(by_episode[-5:]):.3f} (last 5 of {len(by_episode)})" if len(by_episode)
                   else "no episode ended within the recorded steps")
        print(f"xland_ppo: {len(ruleset_ids)} agents x {ppo_config.num_envs} envs, {out.env_steps:,} env "
              f"steps in {seconds:.0f}s ({out.env_steps / seconds:,.0f}/s); recorded histories' "
              f"{returns} -> {path}")

    def recorded_rollouts(self, config, env) -> dict[str, dict[str, Any]]:
        """The source's learning histories on the evaluation tasks, as a rollout of `eval.num_steps`
        steps per task x `eval.num_envs_per_task` (the held-out file's, or the training file's
        for `eval.tasks='train'`)."""
        path = self.path(config, env)
        evaluation = config.eval
        if evaluation.tasks == "test":
            file, groups = self.heldout_path(path), None
        else:
            file, groups = path, list(range(int(config.data.num_train_tasks)))
        tasks = read_xland_hdf5(file, None, int(evaluation.num_envs_per_task), int(evaluation.num_steps),
                                groups=groups)
        rewards = np.concatenate([t.rewards for t in tasks]).astype(np.float32)
        dones = np.concatenate([t.dones for t in tasks]).astype(bool)
        return {"source": dict(rewards=rewards, dones=dones,
                               actions=np.concatenate([t.actions for t in tasks]).astype(np.int32),
                               terminated=dones & (rewards > 0))}


BUILDERS.register("xland_hdf5", XLandHDF5(), needs=("h5py",))
BUILDERS.register("xland_ppo", XLandPPO(), needs=("h5py", "xminigrid"))
