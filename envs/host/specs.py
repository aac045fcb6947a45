"""Host simulators as environments of the one core: typed `EnvSpec`s with a task set, a bridge
factory and a privileged oracle.

A `HostEnv` is what `envs.make(name)` returns for a simulator behind the bridge (`host = True`):
shared code reads its attributes as it reads a JAX env's, and runs policies on it through
`make_bridge(tasks)` (one simulator process per row of `tasks`, built by `env_fns(tasks)`). The simulator modules are
imported only when a bridge or an oracle is built (they pull in heavy native dependencies).
"""

from __future__ import annotations

import abc
from typing import Any

import jax.numpy as jnp
import numpy as np

from icrl_jax.core import validation
from icrl_jax.core.errors import UserError
from icrl_jax.core.extras import MissingExtraError, require_extra
from icrl_jax.envs.base import EnvSpec

#: A host simulator whose Python package is not installed (its message names the extra).
MissingSimulatorError = MissingExtraError


class HostEnv(EnvSpec, abc.ABC):
    """A host simulator (pixels, episodic) behind the bridge.

    Subclasses set `num_actions`, `observation_shape`, and define `tasks`, `make_bridge` and
    `oracle`; `rollout_metrics` may add simulator-specific metrics to an evaluation.
    """

    host = True
    pixels = True
    has_oracle = True
    #: Shape of one action as the simulator takes it (() for an index).
    action_shape: tuple[int, ...] = ()
    #: Simulator processes per pool (`env.kwargs.num_workers`; 0: one per task row rolled out).
    num_workers: int = 0
    #: The `data.source` a config names for the oracle (data is always the oracle's: another
    #: name would silently not run, so validation refuses it), and what the oracle's arguments
    #: (`data.source_kwargs`, those of `oracle` after `num_steps`) take (core/validation.py).
    ORACLE_SOURCE: str = ""
    ORACLE_KWARGS: tuple = ()

    def action_mask(self, params: Any) -> jnp.ndarray:
        del params  # every action is available in every task
        return jnp.ones(self.num_actions, bool)

    @abc.abstractmethod
    def tasks(self) -> np.ndarray:
        """Every task, one row each (a single-task simulator has one row)."""

    def task_split(self, num_train: int, num_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Seeded disjoint train / held-out task rows (a single-task simulator uses its one
        task for both)."""
        tasks = self.tasks()
        if len(tasks) == 1:
            return tasks, tasks
        if num_train + num_test > len(tasks):
            raise UserError(f"data.num_train_tasks + data.num_test_tasks = {num_train} + "
                            f"{num_test} tasks requested but only {len(tasks)} exist")
        order = np.random.default_rng(seed).permutation(len(tasks))
        return tasks[order[:num_train]], tasks[order[num_train:num_train + num_test]]

    @abc.abstractmethod
    def env_fns(self, tasks: np.ndarray) -> list:
        """Picklable constructors of one simulator per row of `tasks`."""

    def make_bridge(self, tasks: np.ndarray):
        """A `HostVectorEnv` with one simulator per row of `tasks` (`set_envs(env_fns(rows))`
        gives its workers other rows without new processes)."""
        from icrl_jax.envs.host.bridge import HostVectorEnv
        return HostVectorEnv(self.env_fns(tasks), record=False)

    @abc.abstractmethod
    def oracle(self, num_steps: int, **kwargs):
        """The privileged source as a bridge `HostPolicy` (what the data distils), for histories
        of `num_steps` steps; `kwargs` are `data.source_kwargs`, as `ORACLE_KWARGS` declares."""

    def rollout_metrics(self, out: dict[str, np.ndarray], num_steps: int) -> dict[str, Any]:
        """Simulator-specific metrics of one policy's rollout (default: none)."""
        del out, num_steps
        return {}


class MiniworldRoom(HostEnv):
    """Miniworld dark room (`goal` tasks) or key-to-door (`(key, door)` tasks), 64x64 RGB
    frames, 3 actions (forward, turn left, turn right); see `envs/host/miniworld.py`."""

    num_actions = 3
    observation_shape = (64, 64, 3)

    #: What `env.kwargs` take (core/validation.py).
    KWARGS = (validation.choice("layout", ("darkroom", "key_to_door")),
              validation.positive_int("episode_length", 50), validation.non_negative_int("num_workers", 8))
    #: The noisy oracle (`miniworld.NoisyOracle`): the arguments of the JAX envs' `noisy_oracle`
    #: source, whose declaration checks them.
    ORACLE_SOURCE = "noisy_oracle"
    ORACLE_KWARGS = (validation.number("eps_start", 1.0, low=0, high=1),
                     validation.number("eps_end", 0.0, low=0, high=1),
                     validation.non_negative("decay_fraction", 0.9))

    def __init__(self, layout: str = "darkroom", episode_length: int = 50, num_workers: int = 0):
        if layout not in ("darkroom", "key_to_door"):
            raise UserError(f"env.kwargs.layout must be 'darkroom' or 'key_to_door' (Miniworld), "
                            f"got {layout!r}")
        require_extra("miniworld", "the Miniworld simulator")
        self.layout, self.episode_length = layout, int(episode_length)
        self.num_workers = int(num_workers)

    def tasks(self) -> np.ndarray:
        from icrl_jax.envs.host import miniworld as mw
        return mw.darkroom_goals() if self.layout == "darkroom" else mw.key_door_pairs()

    @property
    def num_tasks(self) -> int:
        return len(self.tasks())

    def env_fns(self, tasks: np.ndarray) -> list:
        from icrl_jax.envs.host import miniworld as mw
        make = mw.darkroom_env_fns if self.layout == "darkroom" else mw.key_to_door_env_fns
        return make(tasks, self.episode_length)

    def oracle(self, num_steps: int, eps_start: float = 1.0, eps_end: float = 0.0,
               decay_fraction: float = 0.9):
        from icrl_jax.envs.host import miniworld as mw
        return mw.NoisyOracle(num_steps, eps_start, eps_end, decay_fraction)


class ViZDoom(HostEnv):
    """A ViZDoom scenario (one task; envs are seeded apart), 72x128 RGB frames, multi-discrete
    actions given to the bridge as components; see `envs/host/vizdoom.py`."""

    num_tasks = 1

    #: What `env.kwargs` take (core/validation.py; the scenarios of envs/host/vizdoom.py).
    KWARGS = (validation.choice("scenario", ("deadly_corridor", "my_way_home")),
              validation.non_negative_int("num_workers", 8))
    #: The privileged expert (`vizdoom.DoomExpert`) with one action-noise probability.
    ORACLE_SOURCE = "doom_expert"
    ORACLE_KWARGS = (validation.number("noise", 0.1, low=0, high=1),)

    def __init__(self, scenario: str = "my_way_home", num_workers: int = 0):
        require_extra("vizdoom", "the ViZDoom simulator")
        from icrl_jax.envs.host import vizdoom as vd
        if scenario not in vd.SCENARIOS:
            raise UserError(f"env.kwargs.scenario must be one of {vd.SCENARIOS}, got {scenario!r}")
        self.scenario = scenario
        self.num_workers = int(num_workers)
        self.observation_shape = tuple(vd.OBS_SHAPE)
        self._action_dims = tuple(int(d) for d in vd.action_nvec(scenario))
        self.num_actions = int(np.prod(self._action_dims))

    @property
    def action_dims(self) -> tuple[int, ...]:
        return self._action_dims

    @property
    def action_shape(self) -> tuple[int, ...]:
        return (len(self._action_dims),)

    def join_action(self, components):
        return components  # the simulator takes the components themselves

    def tasks(self) -> np.ndarray:
        return np.zeros(1, np.int32)

    def env_fns(self, tasks: np.ndarray) -> list:
        from icrl_jax.envs.host import vizdoom as vd
        return vd.doom_env_fns(self.scenario, len(tasks))

    def oracle(self, num_steps: int, noise: float = 0.0):
        from icrl_jax.envs.host import vizdoom as vd
        del num_steps  # the expert acts the same at every step of a history
        return vd.DoomExpert(self.scenario, noise)

    def rollout_metrics(self, out: dict[str, np.ndarray], num_steps: int) -> dict[str, Any]:
        """Return and success over the episodes that start early enough to end within the
        rollout whatever happens (`vizdoom.episode_stats`); Deadly Corridor also in the M-SAT
        paper's units (ViZDoom's reward / 100)."""
        from icrl_jax.envs.host import vizdoom as vd
        max_start = int(num_steps) - vd.MAX_EPISODE_STEPS - 1  # 1 step of slack
        if max_start < 0:
            raise ValueError(f"eval.num_steps={num_steps} is shorter than one "
                             f"{vd.MAX_EPISODE_STEPS}-step episode time limit")
        returns, success = vd.episode_stats(out["rewards"], out["dones"], out["terminated"],
                                            self.scenario, max_start=max_start)
        found = len(returns) > 0
        metrics = dict(return_counted=float(returns.mean()) if found else None,
                       return_std=float(returns.std()) if found else None,
                       success=float(success.mean()) if found else None,
                       episodes_counted=int(len(returns)))
        if self.scenario == "deadly_corridor" and found:
            metrics["return_paper_units"] = float(returns.mean()) / 100.0
        return metrics


#: The ViZDoom expert is a source of its own name (the JAX envs have none like it).
DOOM_EXPERT_KWARGS = validation.kwargs_of("source", ViZDoom.ORACLE_SOURCE, ViZDoom.ORACLE_KWARGS)
