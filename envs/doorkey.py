"""Uni[MASK]'s 4x4 DoorKey grid (Carroll et al. 2022, App. E), JAX-native.

Layout, as in the authors' MiniGrid env (a 6x6 room whose outer walls leave a 4x4 interior);
(x, y) with x the column and y the row, both 1..4, y growing downwards:

        x=1 x=2 x=3 x=4
    y=1  .   .   D   .        D: the locked door (3, 1)
    y=2  .   .   #   .        #: wall (3, 2), (3, 3), (3, 4)
    y=3  .   .   #   .        G: the goal (4, 4)
    y=4  .   .   #   G

Cell id = (x - 1) * 4 + (y - 1) (the authors' POS_TO_IDX). Actions (the authors' `CustomActions`,
MiniGrid's direction order): 0 right, 1 down, 2 left, 3 up. A move into a wall or the outer wall
leaves the agent in place; so does a move into the door unless the agent holds the key (then
the door opens and the agent walks through, one step). Stepping onto the key's cell picks it up.

Randomisation: each episode's agent start and key cell are drawn from the left half
(x in {1, 2}, 8 cells), the key never on the agent's start (the authors' `place_agent` /
`place_obj`): 8 * 7 = 56 layouts. A task id t picks its layout by a fixed hash (tasks are
unlimited, like the bandits': ids 0..N-1 are N independent trajectories' layouts).

Observation: the cell id pair as one int id `agent * 16 + key_pos` (256 ids), where key_pos is
the agent's cell once the key is held (the paper's two one-hot 16-vectors, `split_state`).
Expert scoring (`subgoal_progress`, `expert_walls`): "authors" (the Uni[MASK] experiment's
default) is the authors' noisy-rational agent, which scores a move by the Manhattan distance to its sub-goal after
clipping the position to [0, 4] in x and y and treating only the internal walls as obstacles:
a move into the left or top outer wall (to x = 0 or y = 0) counts as moving there, one into the
right or bottom one (clipped back to 4) scores 0, and the door is passable even while the key
is still on the floor. "blocked_zero" (the env's default) scores every move that leaves the agent
in place 0 (the paper's text: the distance does not change).

Reward: the decrease of the distance to the goal along the path through the door (the authors'
`DISTS_TO_GOAL`), in {-1, 0, 1}. Reaching the goal ends the episode (`terminate_at_goal`); the
authors' datasets are instead fixed 10-step rollouts that go on past the goal
(`terminate_at_goal=False`, `episode_length=10`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from icrl_jax.core import validation
from icrl_jax.core.errors import UserError
from icrl_jax.envs.base import ICRLEnv
from icrl_jax.envs.tasks import as_task_ids

SIDE = 4
NUM_CELLS = SIDE * SIDE
ACTIONS = ("right", "down", "left", "up")
_DELTAS = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], np.int32)  # (dx, dy) per action
WALLS = ((3, 2), (3, 3), (3, 4))
DOOR = (3, 1)
GOAL = (4, 4)
#: The expert's scoring of blocked moves (`DoorKey.expert_walls`).
EXPERT_WALLS = ("authors", "blocked_zero")
LEFT_CELLS = tuple((x, y) for x in (1, 2) for y in range(1, SIDE + 1))


def cell_of(x: int, y: int) -> int:
    return (x - 1) * SIDE + (y - 1)


def xy_of(cell: int) -> tuple[int, int]:
    return cell // SIDE + 1, cell % SIDE + 1


def _tables():
    """Static tables: NEXT[cell, action, has_key] -> cell; GOAL_DIST[cell] (authors' rule)."""
    walls = {cell_of(*w) for w in WALLS}
    door = cell_of(*DOOR)
    nxt = np.zeros((NUM_CELLS, len(ACTIONS), 2), np.int32)
    for c in range(NUM_CELLS):
        x, y = xy_of(c)
        for a, (dx, dy) in enumerate(_DELTAS):
            tx, ty = x + dx, y + dy
            target = cell_of(tx, ty) if 1 <= tx <= SIDE and 1 <= ty <= SIDE else None
            for k in (0, 1):
                blocked = target is None or target in walls or (target == door and not k)
                nxt[c, a, k] = c if blocked else target
    # Distance to the goal through the door: right half Manhattan to the goal, the door one more
    # than (4, 1), left half Manhattan to (2, 1) plus one step into the door.
    dist = np.zeros(NUM_CELLS, np.int32)
    gx, gy = GOAL
    door_dist = 1 + abs(gx - (DOOR[0] + 1)) + abs(gy - DOOR[1])
    for c in range(NUM_CELLS):
        x, y = xy_of(c)
        if x > DOOR[0]:
            dist[c] = abs(gx - x) + abs(gy - y)
        elif (x, y) == DOOR:
            dist[c] = door_dist
        else:
            dist[c] = abs(x - (DOOR[0] - 1)) + abs(y - DOOR[1]) + 1 + door_dist
    return nxt, dist


NEXT_CELL, GOAL_DISTANCE = _tables()
LAYOUTS = np.array([(cell_of(*a), cell_of(*k)) for a in LEFT_CELLS for k in LEFT_CELLS if a != k],
                   np.int32)  # (56, 2): (agent start, key)


def split_state(obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Observation ids `(...)` -> (agent cell, key cell), int32 `(...)` each."""
    obs = jnp.asarray(obs, jnp.int32)
    return obs // NUM_CELLS, obs % NUM_CELLS


def join_state(agent: jax.Array, key_pos: jax.Array) -> jax.Array:
    return (jnp.asarray(agent, jnp.int32) * NUM_CELLS + key_pos).astype(jnp.int32)


def move(agent: jax.Array, key_pos: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One step of the dynamics: (agent, key cell) int32 `()` -> the next pair."""
    has_key = (agent == key_pos).astype(jnp.int32)
    new_agent = jnp.asarray(NEXT_CELL)[agent, action, has_key]
    picked = (has_key == 1) | (new_agent == key_pos)
    return new_agent, jnp.where(picked, new_agent, key_pos)


@struct.dataclass(kw_only=True)
class DoorKeyState(environment.EnvState):
    """agent, key_pos: int32 `()` cell ids (key_pos == agent once held); door_open: bool `()`
    (privileged, for the expert); time: int32."""

    agent: jax.Array
    key_pos: jax.Array
    door_open: jax.Array
    time: jax.Array


@struct.dataclass(kw_only=True)
class DoorKeyParams(environment.EnvParams):
    """start, key: int32 cell ids of the layout; action_mask: bool `(4,)`."""

    start: jax.Array
    key: jax.Array
    action_mask: jax.Array
    max_steps_in_episode: jax.Array


class DoorKey(ICRLEnv):
    """Uni[MASK]'s DoorKey (see the module docstring).

    Args:
      episode_length: time limit (the authors' trajectories: 10 steps).
      terminate_at_goal: end the episode on the goal (False: the authors' data protocol).
      expert_walls: how the expert scores moves into walls and the door ("authors" or
        "blocked_zero"; see the module docstring).
    """

    num_actions = len(ACTIONS)
    num_observations = NUM_CELLS * NUM_CELLS
    observation_shape = ()
    grid_size = None  # ids are (agent, key) pairs, not grid cells

    #: What `env.kwargs` take (checked before anything is built; core/validation.py).
    KWARGS = (validation.positive_int("episode_length", 10), validation.boolean("terminate_at_goal"),
              validation.choice("expert_walls", EXPERT_WALLS))

    def __init__(self, episode_length: int = 10, terminate_at_goal: bool = True,
                 expert_walls: str = "blocked_zero"):
        super().__init__()
        if episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        if expert_walls not in EXPERT_WALLS:
            raise UserError(f"env.kwargs.expert_walls must be one of {EXPERT_WALLS}, "
                            f"got {expert_walls!r}")
        self.expert_walls = expert_walls
        self.episode_length = int(episode_length)
        self.terminate_at_goal = bool(terminate_at_goal)

    @property
    def observation_factors(self) -> tuple[int, ...]:
        return (NUM_CELLS, NUM_CELLS)

    def split_observation(self, obs: jax.Array) -> jax.Array:
        """Ids `(...)` -> (agent cell, key cell) int32 `(..., 2)`."""
        return jnp.stack(split_state(obs), axis=-1)

    def join_observation(self, factors: jax.Array) -> jax.Array:
        return join_state(factors[..., 0], factors[..., 1])

    def next_observation(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """The id after `action` from id `obs` (both `(...)`): the dynamics are deterministic."""
        agent, key_pos = split_state(obs)
        shape = jnp.broadcast_shapes(agent.shape, jnp.shape(action))
        agent, key_pos, action = (jnp.broadcast_to(x, shape).reshape(-1)
                                  for x in (agent, key_pos, jnp.asarray(action, jnp.int32)))
        return join_state(*jax.vmap(move)(agent, key_pos, action)).reshape(shape)

    @property
    def default_params(self) -> DoorKeyParams:
        return self.task_params(0)

    def layout_params(self, start, key) -> DoorKeyParams:
        """Params of an explicit layout (cell ids; broadcast to a batch)."""
        start, key = jnp.asarray(start, jnp.int32), jnp.asarray(key, jnp.int32)
        return DoorKeyParams(start=start, key=key,
                             action_mask=jnp.ones(start.shape + (self.num_actions,), bool),
                             max_steps_in_episode=jnp.full(start.shape, self.episode_length,
                                                           jnp.int32))

    def task_params(self, task_ids) -> DoorKeyParams:
        """Task t's layout: `LAYOUTS[hash(t) % 56]`; int `()` or `(n,)` ids."""
        ids = as_task_ids(task_ids, None)
        index = jax.vmap(lambda t: jax.random.randint(
            jax.random.fold_in(jax.random.key(17), t), (), 0, len(LAYOUTS)))(ids.reshape(-1))
        layout = jnp.asarray(LAYOUTS)[index].reshape(ids.shape + (2,))
        return self.layout_params(layout[..., 0], layout[..., 1])

    def observe(self, state: DoorKeyState) -> jax.Array:
        return join_state(state.agent, state.key_pos)

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        return self.observe(state)

    def reset_env(self, key, params):
        state = DoorKeyState(agent=params.start, key_pos=params.key, door_open=jnp.bool_(False),
                             time=jnp.int32(0))
        return self.observe(state), state

    def step_env(self, key, state, action, params):
        agent, key_pos = move(state.agent, state.key_pos, action)
        dist = jnp.asarray(GOAL_DISTANCE)
        reward = (dist[state.agent] - dist[agent]).astype(jnp.float32)
        at_goal = (agent == cell_of(*GOAL)) & self.terminate_at_goal
        new = DoorKeyState(agent=agent, key_pos=key_pos,
                           door_open=state.door_open | (agent == cell_of(*DOOR)),
                           time=state.time + 1)
        return self.observe(new), new, reward, at_goal, {}

    def is_terminal(self, state, params) -> jax.Array:
        at_goal = (state.agent == cell_of(*GOAL)) & self.terminate_at_goal
        return at_goal | (state.time >= params.max_steps_in_episode)

    def subgoal_progress(self, state, params) -> jax.Array:
        """Per action, int32 `(4,)`: +1 if it brings the agent closer (Manhattan) to its current
        sub-goal, -1 if further, 0 otherwise; the sub-goal is the key, then the door while it is
        shut, then the goal (the authors' expert, `StochGoalAgent`). Blocked moves are scored as
        `expert_walls` says (module docstring)."""
        held = state.agent == state.key_pos
        target = jnp.where(~held, state.key_pos,
                           jnp.where(state.door_open, cell_of(*GOAL), cell_of(*DOOR)))
        tx, ty = target // SIDE + 1, target % SIDE + 1
        x, y = state.agent // SIDE + 1, state.agent % SIDE + 1
        deltas = jnp.asarray(_DELTAS)
        if self.expert_walls == "blocked_zero":
            ends = jax.vmap(lambda a: move(state.agent, state.key_pos, a)[0])(jnp.arange(4))
            ex, ey = ends // SIDE + 1, ends % SIDE + 1
        else:  # the authors' agent: clip to [0, SIDE], only the internal walls stop it
            ex = jnp.clip(x + deltas[:, 0], 0, SIDE)
            ey = jnp.clip(y + deltas[:, 1], 0, SIDE)
            walls = jnp.asarray(WALLS)
            blocked = ((ex[:, None] == walls[None, :, 0]) & (ey[:, None] == walls[None, :, 1])).any(1)
            ex, ey = jnp.where(blocked, x, ex), jnp.where(blocked, y, ey)
        before = jnp.abs(x - tx) + jnp.abs(y - ty)
        return jnp.sign(before - (jnp.abs(ex - tx) + jnp.abs(ey - ty))).astype(jnp.int32)

    def observation_space(self, params=None):
        return spaces.Discrete(self.num_observations)

    def action_space(self, params=None):
        return spaces.Discrete(self.num_actions)
