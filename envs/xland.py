"""XLand-MiniGrid and the MiniGrid family, through `xminigrid` (the optional extra `xland`).

One adapter, `XLandMiniGrid`, makes each environment `xminigrid` registers (`XLAND_IDS`,
`MINIGRID_IDS`) a gymnax env of ours under the same id. It calls xminigrid's own `reset` and
`step`; nothing of the simulator is rewritten here.

* **Observation**: the agent's egocentric view, uint8 `(view, view, 2)` of (tile, colour) ids
  (`(5, 5, 2)` on XLand, `(7, 7, 2)` on MiniGrid), as xminigrid returns it.
* **Actions**: xminigrid's 6 (0 forward, 1 turn right, 2 turn left, 3 pick up, 4 put down,
  5 toggle), all available in every task.
* **Reward and episodes**: xminigrid's: `1 - 0.9 * step / max_steps` on the step that reaches the
  goal, which terminates the episode; truncation at `max_steps` (XLand: 3 x height x width,
  MiniGrid: the original's). gymnax's auto-reset keeps the task.
* **Tasks**: on XLand a task is a ruleset (goal, rules, initial objects), the `ruleset` of
  xminigrid's params; task id i is row i of the env's benchmark: rulesets generated with a seed
  (`envs/xland_rulesets.py`, "trivial" or "small") or read from a benchmark file the user has.
  The MiniGrid envs have one task each (their layout is drawn at every reset), so every task id
  gives the same params.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from icrl_jax.core import validation as V
from icrl_jax.core.errors import UserError
from icrl_jax.core.extras import import_extra
from icrl_jax.envs.base import ICRLEnv
from icrl_jax.envs.tasks import as_task_ids
from icrl_jax.envs import xland_rulesets as rulesets

#: The XLand-MiniGrid environments xminigrid (0.9) registers: rooms R1-R9 of several sizes.
XLAND_IDS = tuple(
    f"XLand-MiniGrid-{rooms}-{size}x{size}"
    for rooms, sizes in (("R1", (9, 11, 13, 15, 17)), ("R2", (9, 11, 13, 15, 17)),
                         ("R4", (9, 11, 13, 15, 17)), ("R6", (13, 17, 19)), ("R9", (16, 19, 25)))
    for size in sizes)
#: The MiniGrid environments xminigrid ports.
MINIGRID_IDS = (
    "MiniGrid-BlockedUnlockPickUp",
    *(f"MiniGrid-DoorKey-{s}x{s}" for s in (5, 6, 8, 16)),
    *(f"MiniGrid-Empty-{s}x{s}" for s in (5, 6, 8, 16)),
    *(f"MiniGrid-EmptyRandom-{s}x{s}" for s in (5, 6, 8, 16)),
    "MiniGrid-FourRooms", "MiniGrid-LockedRoom",
    *(f"MiniGrid-MemoryS{s}" for s in (8, 16, 32, 64, 128)),
    "MiniGrid-Playground", "MiniGrid-Unlock", "MiniGrid-UnlockPickUp",
)
ENV_IDS = XLAND_IDS + MINIGRID_IDS


@struct.dataclass(kw_only=True)
class XLandState(environment.EnvState):
    """timestep: xminigrid's `TimeStep` (its `State`, the last observation, reward and step
    type); time: int32 steps taken this episode (xminigrid's `step_num`)."""

    timestep: Any
    time: jax.Array


@struct.dataclass(kw_only=True)
class XLandParams(environment.EnvParams):
    """env_params: xminigrid's params (sizes and `max_steps` are static; XLand's `ruleset` is
    the task, batched along tasks); action_mask: bool `(6,)`; max_steps_in_episode: int32."""

    env_params: Any
    action_mask: jax.Array
    max_steps_in_episode: jax.Array


def _make(env_id: str, **overrides):
    """xminigrid's env and params for `env_id`."""
    xminigrid = import_extra("xminigrid", f"environment {env_id!r}")
    return xminigrid.make(env_id, **overrides)


class XLandMiniGrid(ICRLEnv):
    """The xminigrid env `env_id` as a gymnax env (see the module docstring).

    Args:
      env_id: an xminigrid id (`ENV_IDS`), e.g. "XLand-MiniGrid-R1-9x9".
      benchmark: XLand only: "trivial" or "small" (rulesets generated with `ruleset_seed`), or a
        benchmark file the user has (a path, or a hosted benchmark's name such as "trivial-21k"
        already in xminigrid's data folder; nothing is downloaded).
      num_rulesets: how many rulesets to generate (generated kinds only).
      ruleset_seed: seed of the generated rulesets.
      max_steps: steps per episode; 0 keeps xminigrid's default.
      size: the grid's side; 0 keeps the id's (a smaller room makes a CPU-sized XLand task:
        the R1 layout at 7 x 7 is one xminigrid builds but does not register).
    """

    goal_terminates = True  # termination is reaching the goal
    #: What `env.kwargs` take (core/validation.py; `env_id` is the registered name's).
    KWARGS = (V.choice("env_id", ENV_IDS), V.string("benchmark", "trivial"),
              V.positive_int("num_rulesets", 1000), V.integer("ruleset_seed", 0),
              V.non_negative_int("max_steps", 0),
              V.Constraint(("size",), "must be 0 (the id's own size) or an integer >= 5",
                           lambda v: V.is_int(v) and (v == 0 or v >= 5), 7))

    def __init__(self, env_id: str = "XLand-MiniGrid-R1-9x9", benchmark: str = "trivial",
                 num_rulesets: int = 1000, ruleset_seed: int = 0, max_steps: int = 0, size: int = 0):
        super().__init__()
        if env_id not in ENV_IDS:
            raise UserError(f"unknown xminigrid env id {env_id!r}")
        self.env_id = env_id
        self.xland = env_id in XLAND_IDS
        if int(max_steps) < 0 or int(size) < 0 or 0 < int(size) < 5:
            raise UserError(f"env.kwargs.max_steps must be >= 0 and env.kwargs.size 0 or >= 5, got "
                            f"{max_steps} and {size}")
        overrides = dict({"max_steps": int(max_steps)} if max_steps else {},
                         **({"height": int(size), "width": int(size)} if size else {}))
        self._env, self._params = _make(env_id, **overrides)
        self.benchmark = None
        #: The benchmark's name in datasets' `.attrs` ("trivial-1000-seed0" for generated
        #: rulesets, the file's name for a file).
        self.benchmark_id = ""
        if self.xland:
            self.benchmark_id = (f"{benchmark}-{int(num_rulesets)}-seed{int(ruleset_seed)}"
                                 if benchmark in rulesets.KINDS else os.path.basename(benchmark))
            self.benchmark = (rulesets.generate_benchmark(benchmark, int(num_rulesets), int(ruleset_seed))
                              if benchmark in rulesets.KINDS else rulesets.load_benchmark_file(benchmark))
            self._rulesets = {k: np.asarray(getattr(self.benchmark, k))
                              for k in ("goals", "rules", "init_tiles")}
            self.num_tasks = len(self._rulesets["goals"])
        else:
            self.num_tasks = None
        self.episode_length = int(self._params.max_steps)
        view = int(self._params.view_size)
        self.observation_shape = (view, view, 2)

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def num_actions(self) -> int:
        return int(self._env.num_actions(self._params))

    @property
    def default_params(self) -> XLandParams:
        return self.task_params(0)

    def task_params(self, task_ids) -> XLandParams:
        """Params for task ids `()` or `(n,)` (batched along n): the rulesets at those rows of the
        benchmark on XLand; the one task on MiniGrid."""
        ids = as_task_ids(task_ids, self.num_tasks)
        env_params = self._params
        if self.xland:
            rows = {k: (v[np.asarray(ids)] if not isinstance(ids, jax.core.Tracer)
                        else jnp.take(jnp.asarray(v), ids, axis=0)) for k, v in self._rulesets.items()}
            ruleset = import_extra("xminigrid", "XLand rulesets").types.RuleSet(
                goal=jnp.asarray(rows["goals"]), rules=jnp.asarray(rows["rules"]),
                init_tiles=jnp.asarray(rows["init_tiles"]))
            env_params = env_params.replace(ruleset=ruleset)
        lead = tuple(np.shape(ids))
        return XLandParams(env_params=env_params,
                           action_mask=jnp.ones(lead + (self.num_actions,), bool),
                           max_steps_in_episode=jnp.full(lead, self.episode_length, jnp.int32))

    def reset_env(self, key, params):
        timestep = self._env.reset(params.env_params, key)
        return timestep.observation, XLandState(timestep=timestep, time=timestep.state.step_num)

    def step_env(self, key, state, action, params):
        del key  # xminigrid's step is deterministic
        timestep = self._env.step(params.env_params, state.timestep, action)
        terminated = timestep.discount == 0  # xminigrid: discount 0 only when the goal is reached
        return (timestep.observation, XLandState(timestep=timestep, time=timestep.state.step_num),
                timestep.reward.astype(jnp.float32), terminated, {})

    def transition(self, key, state, action, params):
        """gymnax's step with auto-reset, drawing the new episode from the key xminigrid keeps
        in its state (split at each reset, as its `GymAutoResetWrapper` does), so `key` is
        unused: a loop need not make a key per env per step, which costs more than the step."""
        del key
        obs, stepped, reward, terminated, _ = self.step_env(None, state, action, params)
        truncated = self.is_truncated(stepped, params)
        done = terminated | truncated
        reset_obs, reset = self.reset_env(jax.random.split(stepped.timestep.state.key)[0], params)
        select = lambda a, b: jax.tree.map(lambda x, y: jax.lax.select(done, x, y), a, b)  # noqa: E731
        info = {"terminated": terminated, "truncated": truncated, "final_observation": obs}
        return select(reset_obs, obs), select(reset, stepped), reward, terminated, truncated, info

    def is_truncated(self, state, params) -> jax.Array:
        return state.time >= params.env_params.max_steps

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        """The observation of `state`, uint8 `(view, view, 2)` (kept in the state: no recompute)."""
        return state.timestep.observation

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(0, 255, self.observation_shape, jnp.uint8)

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)
