"""Offline datasets in the Minari format (HDF5), written and read by the `minari` package.

A dataset lives at `<root>/<dataset_id>/data/` (`main_data.hdf5` + `metadata.json`), which is
where `minari.load_dataset(dataset_id)` finds it with `MINARI_DATASETS_PATH=<root>`; ids follow
Minari's `(namespace/)(env_name/)name(-vN)` syntax, e.g. "point_maze/umaze-noisy-v0".

API (stable; other modules write their datasets through it):

* `write_minari(root, dataset_id, episodes, observation_space, action_space, env_name,
  metadata=None, ref_min_score=None, ref_max_score=None, overwrite=False) -> path`
  `episodes`: a list of dicts, one per episode of T steps, with numpy-convertible
  `observations` `(T + 1, *obs_shape)` (the last is the observation after the final step),
  `actions` `(T, *act_shape)`, `rewards` `(T,)`, `terminations` and `truncations` bool `(T,)`.
  `episodes_from_batch` makes that list from fixed-length `(N, T, ...)` arrays.
  Spaces are gymnasium spaces, or an `EnvSpec` env via `spaces_of(env)`.
  `ref_min_score` / `ref_max_score` (mean returns of a random and an expert policy) go into
  Minari's own metadata keys, so `minari.get_normalized_score` and `normalized_score` work.
  `env_name` and `metadata` (JSON-serialisable dict) are stored as `icrl_env` / `icrl_metadata`.
* `read_minari(dataset_id_or_path, root=None, env=None) -> MinariEpisodes`: padded numpy arrays
  (E episodes, T = the longest) + `mask` and `lengths`, the reference scores and the metadata.
  With `env`, the stored spaces must match the env's (`DatasetSpaceError` otherwise).
  `MinariEpisodes.to_trajectories()` gives the Decision Transformer `Trajectories`.
* `normalized_score(returns, ref_min, ref_max)`: D4RL's 100 * (R - random) / (expert - random).

Errors (`UserError` subclasses, one line): `DatasetNotFoundError` for a path or id with no
dataset, `DatasetSpaceError` for spaces that do not match the env, `DatasetExistsError` when
writing over a dataset without `overwrite`, `UserError` for malformed episodes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.extras import import_extra
from icrl_jax.data.trajectories import Trajectories, returns_to_go


class DatasetNotFoundError(UserError):
    """No Minari dataset at the given path or id."""


class DatasetSpaceError(UserError):
    """A dataset's observation or action space does not match the env's."""


class DatasetExistsError(UserError):
    """Writing a dataset id that exists (without `overwrite=True`)."""


@dataclass
class MinariEpisodes:
    """E episodes read from a Minari dataset, right-padded to the longest, T steps.

    Attributes:
      observations: `(E, T, *obs_shape)` s_t (float32 for Box spaces).
      actions: float32 `(E, T, d)` for Box actions, int32 `(E, T)` for Discrete ones.
      rewards: float32 `(E, T)`; terminations, truncations, mask: bool `(E, T)` (mask: real step).
      final_observations: `(E, *obs_shape)` the observation after each episode's last step.
      lengths: int32 `(E,)`.
      ref_min_score, ref_max_score: reference mean returns (random, expert) or None.
      env_name: the `icrl_env` it was written for; metadata: `icrl_metadata` (dict).
      env_spec_id: the id of the gymnasium env it was recorded on (Minari's `env_spec`; e.g.
        "Hopper-v5" for the hosted D4RL datasets), None when it stores none.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    mask: np.ndarray
    final_observations: np.ndarray
    lengths: np.ndarray
    observation_space: Any
    action_space: Any
    dataset_id: str
    env_name: str | None = None
    ref_min_score: float | None = None
    ref_max_score: float | None = None
    metadata: dict = field(default_factory=dict)
    env_spec_id: str | None = None

    @property
    def num_episodes(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def returns(self) -> np.ndarray:
        """Episode returns, float32 `(E,)`."""
        return np.where(self.mask, self.rewards, 0.0).sum(1).astype(np.float32)

    def to_trajectories(self):
        """The DT `Trajectories` (returns-to-go of each episode, padding masked; Discrete actions
        become one-component `(E, T, 1)` int32 actions)."""
        import jax.numpy as jnp

        rewards = np.where(self.mask, self.rewards, 0.0).astype(np.float32)
        actions = self.actions if self.actions.ndim == 3 else self.actions[..., None]
        t = self.mask.shape[1]
        return Trajectories(
            observations=jnp.asarray(self.observations), actions=jnp.asarray(actions),
            rewards=jnp.asarray(rewards), returns_to_go=returns_to_go(jnp.asarray(rewards)),
            timesteps=jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), rewards.shape),
            mask=jnp.asarray(self.mask))


def spaces_of(env) -> tuple[Any, Any]:
    """gymnasium (observation_space, action_space) of an `EnvSpec` env, from its typed attributes:
    Box(-inf, inf, observation_shape) or Discrete(num_observations); Box(-1, 1, (action_dim,))
    for continuous actions, else Discrete(num_actions)."""
    from gymnasium import spaces
    if env.discrete_observations:
        obs = spaces.Discrete(int(env.num_observations))
    else:
        dtype = np.uint8 if env.pixels else np.float32
        low, high = (0, 255) if env.pixels else (-np.inf, np.inf)
        obs = spaces.Box(low, high, tuple(env.observation_shape), dtype)
    if env.continuous_actions:
        act = spaces.Box(-1.0, 1.0, (int(env.action_dim),), np.float32)
    else:
        act = spaces.Discrete(int(env.num_actions))
    return obs, act


def _gym_space(space):
    """A gymnasium space from a gymnasium or gymnax Box/Discrete."""
    from gymnasium import spaces
    if isinstance(space, spaces.Space):
        return space
    name = type(space).__name__
    if name == "Box":
        return spaces.Box(np.asarray(space.low, np.float32), np.asarray(space.high, np.float32),
                          tuple(space.shape), np.dtype(space.dtype))
    if name == "Discrete":
        return spaces.Discrete(int(space.n))
    raise UserError(f"unsupported space {space!r}: use a gymnasium Box or Discrete")


def _space_str(space) -> str:
    from gymnasium import spaces
    if isinstance(space, spaces.Box):
        return f"Box{tuple(space.shape)}"
    if isinstance(space, spaces.Discrete):
        return f"Discrete({int(space.n)})"
    return repr(space)


def dataset_dir(root: str | os.PathLike, dataset_id: str) -> str:
    """`<root>/<dataset_id>`: the dataset's directory (its files are under `data/`)."""
    return os.path.join(os.fspath(root), dataset_id)


@contextlib.contextmanager
def _datasets_root(root: str):
    # Minari places new datasets under MINARI_DATASETS_PATH; point it at `root` while writing.
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = os.path.abspath(root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def episodes_from_batch(observations, actions, rewards, terminations, truncations,
                        final_observations) -> list[dict]:
    """Episodes from fixed-length batched arrays: observations `(N, T, *obs)`, actions
    `(N, T, ...)`, rewards / terminations / truncations `(N, T)`, final_observations `(N, *obs)`
    (the observation after step T-1) -> N episode dicts for `write_minari`."""
    observations = np.asarray(observations)
    final = np.asarray(final_observations)
    return [dict(observations=np.concatenate([observations[i], final[i][None]], 0),
                 actions=np.asarray(actions[i]), rewards=np.asarray(rewards[i]),
                 terminations=np.asarray(terminations[i], bool),
                 truncations=np.asarray(truncations[i], bool))
            for i in range(observations.shape[0])]


def _check_episode(i: int, ep: dict, obs_space, act_space) -> dict:
    missing = {"observations", "actions", "rewards", "terminations", "truncations"} - set(ep)
    if missing:
        raise UserError(f"episode {i} lacks {sorted(missing)}")
    obs = np.asarray(ep["observations"])
    t = len(np.asarray(ep["rewards"]))
    out = dict(observations=obs.astype(obs_space.dtype),
               actions=np.asarray(ep["actions"]).astype(act_space.dtype),
               rewards=np.asarray(ep["rewards"], np.float32),
               terminations=np.asarray(ep["terminations"], bool),
               truncations=np.asarray(ep["truncations"], bool))
    if t == 0 or obs.shape[0] != t + 1:
        raise UserError(f"episode {i}: {t} rewards need {t + 1} observations (the last is the one "
                        f"after the final step), got {obs.shape[0]}")
    if obs.shape[1:] != tuple(obs_space.shape):
        raise DatasetSpaceError(f"episode {i}: observations of shape {obs.shape[1:]} do not "
                                f"match the observation space {_space_str(obs_space)}")
    if out["actions"].shape != (t, *act_space.shape):
        raise DatasetSpaceError(f"episode {i}: actions of shape {out['actions'].shape} do not "
                                f"match {t} steps of {_space_str(act_space)}")
    if out["terminations"].shape != (t,) or out["truncations"].shape != (t,):
        raise UserError(f"episode {i}: terminations and truncations must have shape ({t},)")
    return out


def write_minari(root, dataset_id: str, episodes: Sequence[dict], observation_space,
                 action_space, env_name: str, metadata: dict | None = None,
                 ref_min_score: float | None = None, ref_max_score: float | None = None,
                 overwrite: bool = False, algorithm_name: str | None = None,
                 description: str | None = None, env_spec: str | None = None) -> str:
    """Write `episodes` as the Minari dataset `<root>/<dataset_id>`; returns that directory.

    See the module docstring for the episode format. Observations and actions are stored in the
    spaces' dtypes (float32 Box, int64 Discrete); rewards as float32. `env_spec`: the id of the
    gymnasium env the episodes are of (an env with `gymnasium_id`), stored as Minari's
    `env_spec`, as the hosted datasets do.
    """
    minari = import_extra("minari", "writing a Minari dataset")
    from minari.data_collector import EpisodeBuffer
    obs_space, act_space = _gym_space(observation_space), _gym_space(action_space)
    if not len(episodes):
        raise UserError(f"no episodes to write to {dataset_id!r}")
    buffers = [EpisodeBuffer(id=i, **_check_episode(i, ep, obs_space, act_space))
               for i, ep in enumerate(episodes)]
    path = dataset_dir(root, dataset_id)
    if os.path.exists(path):
        if not overwrite:
            raise DatasetExistsError(f"a dataset exists at {path} (pass overwrite=True)")
        shutil.rmtree(path)
    os.makedirs(os.fspath(root), exist_ok=True)
    with _datasets_root(os.fspath(root)), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # minari warns about every optional metadata field
        dataset = minari.create_dataset_from_buffers(
            dataset_id, buffers, env=env_spec, observation_space=obs_space, action_space=act_space,
            algorithm_name=algorithm_name or env_name, description=description or env_name,
            jpeg_encoding=False)
    extra = {"icrl_env": env_name, "icrl_metadata": json.dumps(metadata or {})}
    # Without a gymnasium env minari drops reference scores; store them under its own keys.
    if ref_min_score is not None:
        extra["ref_min_score"] = float(ref_min_score)
    if ref_max_score is not None:
        extra["ref_max_score"] = float(ref_max_score)
    dataset.storage.update_metadata(extra)
    return path


def _resolve(dataset, root) -> str:
    """The `data/` directory of a dataset given as a path (to the dataset or its `data/`) or as
    an id under `root` (default: minari's own datasets root)."""
    candidates = []
    if root is not None:
        candidates.append(dataset_dir(root, dataset))
    else:
        candidates.append(os.fspath(dataset))
        from minari.storage.datasets_root_dir import get_dataset_path
        candidates.append(os.fspath(get_dataset_path(str(dataset))))
    for c in candidates:
        for d in (os.path.join(c, "data"), c):
            if os.path.isfile(os.path.join(d, "metadata.json")):
                return d
    where = candidates[0] if root is not None else " or ".join(candidates)
    raise DatasetNotFoundError(f"no Minari dataset at {where}")


def locate_minari(dataset) -> str:
    """The `data/` directory of a dataset given as a path or as an id under Minari's own root
    (`MINARI_DATASETS_PATH`, default `~/.minari/datasets`: where `minari download <id>` puts it),
    or, when there is none yet, the directory the id would have there."""
    try:
        return _resolve(dataset, None)
    except DatasetNotFoundError:
        if os.path.isdir(os.fspath(dataset)):
            return os.fspath(dataset)
        from minari.storage.datasets_root_dir import get_dataset_path
        return os.path.join(os.fspath(get_dataset_path(str(dataset))), "data")


def check_spaces(observation_space, action_space, env, what: str = "dataset") -> None:
    """Raise `DatasetSpaceError` unless the spaces are the env's (`spaces_of(env)`): shapes and
    discrete sizes must agree, and continuous actions must be Box ones of `action_dim`."""
    want_obs, want_act = spaces_of(env)
    obs, act = _gym_space(observation_space), _gym_space(action_space)
    for kind, got, want in (("observation", obs, want_obs), ("action", act, want_act)):
        same = type(got) is type(want) and (
            got.n == want.n if hasattr(want, "n") else tuple(got.shape) == tuple(want.shape))
        if not same:
            raise DatasetSpaceError(f"{what}'s {kind} space {_space_str(got)} does not match "
                                    f"env {env.name!r}'s {_space_str(want)}")


def read_minari(dataset, root=None, env=None) -> MinariEpisodes:
    """Read a Minari dataset (a path, or an id under `root`) into padded arrays.

    With `env` (an `EnvSpec`), raises `DatasetSpaceError` unless the dataset's spaces match it.
    """
    minari = import_extra("minari", "reading a Minari dataset")
    path = _resolve(dataset, root)
    ds = minari.MinariDataset(path)
    meta = ds.storage.metadata
    obs_space, act_space = ds.observation_space, ds.action_space
    if env is not None:
        check_spaces(obs_space, act_space, env, f"dataset {meta.get('dataset_id', path)}")
    episodes = list(ds.iterate_episodes())
    if not episodes:
        raise UserError(f"dataset at {path} has no episodes")
    lengths = np.array([len(e.rewards) for e in episodes], np.int32)
    n, t = len(episodes), int(lengths.max())

    def padded(name, dtype, tail):
        out = np.zeros((n, t) + tail, dtype)
        for i, e in enumerate(episodes):
            out[i, : lengths[i]] = np.asarray(getattr(e, name))[: lengths[i]]
        return out

    obs_dtype = np.float32 if obs_space.dtype.kind == "f" else obs_space.dtype
    act_dtype = np.float32 if act_space.dtype.kind == "f" else np.int32
    obs_shape, act_shape = tuple(obs_space.shape), tuple(act_space.shape)
    return MinariEpisodes(
        observations=padded("observations", obs_dtype, obs_shape),
        actions=padded("actions", act_dtype, act_shape),
        rewards=padded("rewards", np.float32, ()),
        terminations=padded("terminations", bool, ()),
        truncations=padded("truncations", bool, ()),
        mask=np.arange(t)[None, :] < lengths[:, None],
        final_observations=np.stack([np.asarray(e.observations)[lengths[i]]
                                     for i, e in enumerate(episodes)]).astype(obs_dtype),
        lengths=lengths, observation_space=obs_space, action_space=act_space,
        dataset_id=str(meta.get("dataset_id")), env_name=meta.get("icrl_env"),
        ref_min_score=meta.get("ref_min_score"), ref_max_score=meta.get("ref_max_score"),
        metadata=json.loads(meta.get("icrl_metadata") or "{}"),
        env_spec_id=ds.env_spec.id if ds.env_spec is not None else None)


def normalized_score(returns, ref_min_score: float, ref_max_score: float):
    """D4RL's normalised score: 100 * (returns - random) / (expert - random)."""
    if ref_max_score == ref_min_score:
        raise UserError(f"reference scores are equal ({ref_min_score}): cannot normalise")
    return 100.0 * (np.asarray(returns, np.float32) - ref_min_score) / (ref_max_score
                                                                         - ref_min_score)
