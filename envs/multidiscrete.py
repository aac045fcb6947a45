"""Button Room: a grid world with a multi-discrete action (move, press), for DT and M-SAT.

A `size x size` grid (default 5x5); the agent starts at the centre and a button sits on a goal
cell (every cell but the centre is a task). Each step's action is a pair

    a^1 = move in {0 up, 1 down, 2 left, 3 right, 4 noop}     (same moves as `envs.darkroom`)
    a^2 = press in {0 no, 1 yes}

applied in that order: the agent moves (clamped at the walls), then presses where it lands.
A press on the goal pays +1, a press anywhere else pays `press_cost` (-0.1), no press pays 0, so
the right press depends on the state the move leads to. Episodes are truncated after
`episode_length` steps (20); the goal does not end them.

Unlike Dark Room, the goal is visible: the observation is float32 `(2 * size**2,)`, the one-hot
agent cell followed by the one-hot goal cell, so an offline return-conditioned policy (Decision
Transformer) can solve every task without exploration.

Following `envs.base`, the env takes one int32 index per step: `move * 2 + press`
(`num_actions = 10`); `split_action`/`join_action` convert to and from the components, and
`action_dims = (5, 2)` says how many values each component has.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from icrl_jax.core import validation
from icrl_jax.envs.base import ICRLEnv
from icrl_jax.envs.darkroom import _MOVE_DELTAS, NOOP
from icrl_jax.envs.tasks import as_task_ids


@struct.dataclass(kw_only=True)
class ButtonRoomState(environment.EnvState):
    """pos: int32 `(2,)` (row, col); time: int32 steps taken this episode."""

    pos: jax.Array
    time: jax.Array


@struct.dataclass(kw_only=True)
class ButtonRoomParams(environment.EnvParams):
    """goal: int32 cell id of the button; action_mask: bool `(10,)`; max_steps_in_episode."""

    goal: jax.Array
    action_mask: jax.Array
    max_steps_in_episode: jax.Array


class ButtonRoom(ICRLEnv):
    """Grid navigation plus a press component (see the module docstring).

    Args:
      size: grid side (5).
      episode_length: steps per episode (20).
      press_cost: reward of a press off the goal (-0.1).
    Tasks: id t in [0, size**2 - 1) -> goal cell t, skipping the centre.
    """

    action_dims = (5, 2)
    has_oracle = True
    has_optimal_return = True

    #: What `env.kwargs` take (checked before anything is built; core/validation.py).
    KWARGS = (validation.integer("size", 5, minimum=2), validation.positive_int("episode_length", 20),
              validation.number("press_cost", -0.1))

    def __init__(self, size: int = 5, episode_length: int = 20, press_cost: float = -0.1):
        super().__init__()
        if size < 2:
            raise ValueError(f"grid size must be >= 2, got {size}")
        self.size = int(size)
        self.episode_length = int(episode_length)
        self.press_cost = float(press_cost)
        self.num_cells = self.size * self.size
        self.observation_shape = (2 * self.num_cells,)
        self.centre = np.array([self.size // 2, self.size // 2], np.int32)
        self.centre_cell = int(self.centre[0] * self.size + self.centre[1])
        self.num_tasks = self.num_cells - 1

    @property
    def name(self) -> str:
        return "button_room"

    @property
    def num_actions(self) -> int:
        return int(np.prod(self.action_dims))

    @property
    def default_params(self) -> ButtonRoomParams:
        return self.task_params(0)

    @staticmethod
    def split_action(action: jax.Array) -> jax.Array:
        """Flat index int `(...)` -> components int32 `(..., 2)` = (move, press)."""
        action = jnp.asarray(action, jnp.int32)
        return jnp.stack([action // 2, action % 2], axis=-1)

    @staticmethod
    def join_action(components: jax.Array) -> jax.Array:
        """Components int `(..., 2)` -> flat index int32 `(...)`."""
        components = jnp.asarray(components, jnp.int32)
        return components[..., 0] * 2 + components[..., 1]

    def cell(self, pos: jax.Array) -> jax.Array:
        return (pos[..., 0] * self.size + pos[..., 1]).astype(jnp.int32)

    def position(self, cell: jax.Array) -> jax.Array:
        cell = jnp.asarray(cell, jnp.int32)
        return jnp.stack([cell // self.size, cell % self.size], axis=-1)

    def observe(self, pos: jax.Array, params: ButtonRoomParams) -> jax.Array:
        """float32 `(2 * size**2,)`: one-hot agent cell, then one-hot goal cell."""
        return jnp.concatenate([jax.nn.one_hot(self.cell(pos), self.num_cells),
                                jax.nn.one_hot(params.goal, self.num_cells)])

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        """The observation of `state` in the task `params` (see `observe`)."""
        return self.observe(state.pos, self.default_params if params is None else params)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, self.observation_shape, jnp.float32)

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def params_for_goal(self, goal_cell) -> ButtonRoomParams:
        return ButtonRoomParams(goal=jnp.asarray(goal_cell, jnp.int32),
                                action_mask=jnp.ones(self.num_actions, bool),
                                max_steps_in_episode=jnp.int32(self.episode_length))

    def task_params(self, task_ids) -> ButtonRoomParams:
        """Params for task ids: int `()` -> one task, int `(n,)` -> params batched along n."""
        ids = as_task_ids(task_ids, self.num_tasks)
        # Goals are every cell but the start (centre): skip over the centre's id.
        goals = ids + (ids >= self.centre_cell).astype(jnp.int32)
        if ids.ndim == 0:
            return self.params_for_goal(goals)
        return jax.vmap(self.params_for_goal)(goals.reshape(-1))

    def reset_env(self, key, params):
        pos = jnp.asarray(self.centre)
        return self.observe(pos, params), ButtonRoomState(pos=pos, time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        move, press = action // 2, action % 2
        pos = jnp.clip(state.pos + jnp.asarray(_MOVE_DELTAS)[move], 0, self.size - 1)
        on_goal = self.cell(pos) == params.goal
        reward = jnp.where(press == 1, jnp.where(on_goal, 1.0, self.press_cost), 0.0)
        return (self.observe(pos, params), ButtonRoomState(pos=pos, time=state.time + 1),
                reward.astype(jnp.float32), jnp.bool_(False), {})

    def expert_action(self, state: ButtonRoomState, params: ButtonRoomParams) -> jax.Array:
        """Optimal flat action, int32 `()`: step towards the goal (rows first), press on it."""
        delta = self.position(params.goal) - state.pos
        move = jnp.where(delta[0] < 0, 0, jnp.where(delta[0] > 0, 1, jnp.where(
            delta[1] < 0, 2, jnp.where(delta[1] > 0, 3, NOOP))))
        landed = jnp.clip(state.pos + jnp.asarray(_MOVE_DELTAS)[move], 0, self.size - 1)
        press = (self.cell(landed) == params.goal).astype(jnp.int32)
        return (move * 2 + press).astype(jnp.int32)

    def optimal_return(self, params) -> jax.Array:
        """Best episode return, float32: one press per step from arrival on the goal onwards."""
        dist = jnp.abs(self.position(params.goal) - jnp.asarray(self.centre)).sum(-1)
        return jnp.maximum(params.max_steps_in_episode - dist + 1, 0).astype(jnp.float32)
