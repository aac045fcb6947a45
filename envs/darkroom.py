"""Dark Room grid worlds: Dark Room, Dark Room with composite actions, Dark Key-to-Door.

All three live on a `size x size` grid (default 9x9). Cells are numbered `row * size + col`; that
cell id (int32) is the whole observation, so the goal/key/door can only be found by exploring and
remembering. Atomic moves are, in this order (also their action ids in `DarkRoom`):

    0 up (row - 1), 1 down (row + 1), 2 left (col - 1), 3 right (col + 1), 4 noop

Moves into a wall leave the agent where it is. Episodes end by truncation after
`max_steps_in_episode` steps (gymnax's `time >= max_steps_in_episode`) or, where stated, by
termination; gymnax's step then auto-resets the agent but keeps the task (params).

* `DarkRoom` (n-gram paper, App. B): start at the centre; reward 1 on every step that ends on the
  goal (the episode does not end there); 50 steps; 80 tasks = every cell but the centre.
* `CompositeDarkRoom` (Headless-AD 4.3): an action is a sequence of k atomic moves; params carry the
  available sequences, so subsets and permutations of the 5**k actions are just params. Reward 1
  and termination as soon as any sub-step lands on the goal; 20 steps.
* `KeyToDoor` (n-gram paper, App. B): random start cell each episode; +1 the first time the key
  cell is reached, then +1 and termination at the door; the door before the key pays nothing;
  50 steps; 81 * 80 = 6480 tasks (key != door). The key flag is in the state, not the observation.

`optimal_return(params)` gives each env's best achievable (expected) episode return, for
normalised scores.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from icrl_jax.core import validation
from icrl_jax.envs.base import ICRLEnv
from icrl_jax.envs.tasks import as_task_ids

#: (row, col) displacement of each atomic move (up, down, left, right, no-op), int32 `(5, 2)`.
_MOVE_DELTAS = np.array([[-1, 0], [1, 0], [0, -1], [0, 1], [0, 0]], dtype=np.int32)
NOOP = 4


@struct.dataclass(kw_only=True)
class GridState(environment.EnvState):
    """pos: int32 `(2,)` (row, col) of the agent; time: int32 steps taken this episode."""

    pos: jax.Array
    time: jax.Array


@struct.dataclass(kw_only=True)
class KeyToDoorState(environment.EnvState):
    """pos: int32 `(2,)`; has_key: bool `()` (privileged: not in the observation); time: int32."""

    pos: jax.Array
    has_key: jax.Array
    time: jax.Array


@struct.dataclass(kw_only=True)
class DarkRoomParams(environment.EnvParams):
    """goal: int32 cell id; action_mask: bool `(5,)`; max_steps_in_episode: int32."""

    goal: jax.Array
    action_mask: jax.Array
    max_steps_in_episode: jax.Array


@struct.dataclass(kw_only=True)
class CompositeDarkRoomParams(environment.EnvParams):
    """One composite Dark Room task with its action set.

    goal: int32 cell id.
    action_set: int32 `(max_actions, k)`, row i = atomic moves of action index i (padding: noops).
    action_ids: int32 `(max_actions,)`, canonical composite id of each row (-1 for padding).
    action_mask: bool `(max_actions,)`, True for the real rows.
    max_steps_in_episode: int32.
    """

    goal: jax.Array
    action_set: jax.Array
    action_ids: jax.Array
    action_mask: jax.Array
    max_steps_in_episode: jax.Array


@struct.dataclass(kw_only=True)
class KeyToDoorParams(environment.EnvParams):
    """key, door: int32 cell ids (different); action_mask: bool `(5,)`; max_steps_in_episode."""

    key: jax.Array
    door: jax.Array
    action_mask: jax.Array
    max_steps_in_episode: jax.Array


class _Grid(ICRLEnv):
    """Grid geometry shared by the three rooms."""

    observation_shape = ()
    has_optimal_return = True

    def __init__(self, size: int, episode_length: int):
        super().__init__()
        if size < 2:
            raise ValueError(f"grid size must be >= 2, got {size}")
        self.size = int(size)
        self.grid_size = self.size
        self.episode_length = int(episode_length)
        self.num_observations = self.size * self.size
        self.centre = np.array([self.size // 2, self.size // 2], np.int32)
        self.centre_cell = int(self.centre[0] * self.size + self.centre[1])

    def cell(self, pos: jax.Array) -> jax.Array:
        """Cell id, int32 `(...)`, of positions int32 `(..., 2)`."""
        return (pos[..., 0] * self.size + pos[..., 1]).astype(jnp.int32)

    def position(self, cell: jax.Array) -> jax.Array:
        """(row, col), int32 `(..., 2)`, of cell ids `(...)`."""
        cell = jnp.asarray(cell, jnp.int32)
        return jnp.stack([cell // self.size, cell % self.size], axis=-1)

    def move(self, pos: jax.Array, atomic: jax.Array) -> jax.Array:
        """Apply one atomic move (int32 `()`) to pos `(2,)`, clamped at the walls."""
        return jnp.clip(pos + jnp.asarray(_MOVE_DELTAS)[atomic], 0, self.size - 1)

    def _steps(self) -> jax.Array:
        return jnp.int32(self.episode_length)

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        """The observation of `state`: the agent's cell id, int32 `()`."""
        return self.cell(state.pos)

    def observation_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_observations)

    def action_space(self, params=None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def task_params(self, task_ids, **kwargs):
        """Params for task ids: int `()` -> one task, int `(n,)` -> params batched along n.

        Deterministic and traceable (vmappable/jittable); concrete ids are range-checked.
        """
        ids = as_task_ids(task_ids, self.num_tasks)
        if ids.ndim == 0:
            return self._task_params_one(ids, **kwargs)
        return jax.vmap(lambda i: self._task_params_one(i, **kwargs))(ids.reshape(-1))

    def _goal_from_task(self, task_id: jax.Array) -> jax.Array:
        # Goals are every cell but the start (centre): skip over the centre's id.
        return task_id + (task_id >= self.centre_cell).astype(jnp.int32)


class DarkRoom(_Grid):
    """Dark Room: 5 atomic actions, start at the centre, reward 1 on every step on the goal.

    Args:
      size: grid side (9).
      episode_length: steps per episode, ended by truncation (50).
      pixels: observe a uint8 RGB image `(size*cell_px, size*cell_px, 3)` instead of the cell id:
        black floor, the agent's cell red (Headless-AD App. E); the goal stays invisible.
      cell_px: pixels per cell side in the image.
    Tasks: id t in [0, size**2 - 1) -> goal cell t, skipping the centre (80 tasks on 9x9).
    """

    #: What `env.kwargs` take (checked before anything is built; core/validation.py).
    KWARGS = (validation.integer("size", 9, minimum=2), validation.positive_int("episode_length", 50),
              validation.boolean("pixels"), validation.positive_int("cell_px", 1))

    def __init__(self, size: int = 9, episode_length: int = 50, pixels: bool = False,
                 cell_px: int = 1):
        super().__init__(size, episode_length)
        self.num_tasks = self.size * self.size - 1
        self.pixels, self.cell_px = bool(pixels), int(cell_px)
        if self.pixels:
            side = self.size * self.cell_px
            self.num_observations = None
            self.observation_shape = (side, side, 3)

    def observe(self, pos: jax.Array) -> jax.Array:
        """The observation at pos `(2,)`: int32 cell id, or with `pixels` uint8 `(H, W, 3)`."""
        if not self.pixels:
            return self.cell(pos)
        # Rendered on device: a one-hot of the agent's cell, upsampled to cell_px blocks.
        rows = jnp.arange(self.size * self.cell_px) // self.cell_px
        agent = (rows[:, None] == pos[0]) & (rows[None, :] == pos[1])
        red = jnp.array([255, 0, 0], jnp.uint8)
        return jnp.where(agent[..., None], red, jnp.uint8(0))

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        """The observation of `state` (cell id or image, see `observe`)."""
        return self.observe(state.pos)

    def observation_space(self, params=None):
        if not self.pixels:
            return super().observation_space(params)
        return spaces.Box(0, 255, self.observation_shape, jnp.uint8)

    @property
    def name(self) -> str:
        return "darkroom"

    @property
    def num_actions(self) -> int:
        return 5

    @property
    def default_params(self) -> DarkRoomParams:
        return self.task_params(0)

    def params_for_goal(self, goal_cell) -> DarkRoomParams:
        """Params for an explicit goal cell id."""
        return DarkRoomParams(goal=jnp.asarray(goal_cell, jnp.int32),
                              action_mask=jnp.ones(5, bool), max_steps_in_episode=self._steps())

    def _task_params_one(self, task_id) -> DarkRoomParams:
        return self.params_for_goal(self._goal_from_task(task_id))

    def reset_env(self, key, params):
        pos = jnp.asarray(self.centre)
        return self.observe(pos), GridState(pos=pos, time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        pos = self.move(state.pos, action)
        cell = self.cell(pos)
        reward = (cell == params.goal).astype(jnp.float32)
        # The goal does not end the episode: only the time limit does (gymnax's is_truncated).
        return self.observe(pos), GridState(pos=pos, time=state.time + 1), reward, jnp.bool_(False), {}

    def optimal_return(self, params) -> jax.Array:
        """Best episode return, float32: walk the shortest path, then stay on the goal."""
        dist = jnp.abs(self.position(params.goal) - jnp.asarray(self.centre)).sum(-1)
        steps_on_goal = params.max_steps_in_episode - jnp.maximum(dist, 1) + 1
        return jnp.maximum(steps_on_goal, 0).astype(jnp.float32)


def composite_actions(k: int = 3) -> np.ndarray:
    """All 5**k composite actions in canonical order, int32 `(5**k, k)`.

    Canonical id = sum_j move_j * 5**(k-1-j) (first sub-step most significant), i.e. the order of
    `itertools.product(range(5), repeat=k)`: id 0 = (up, up, up), id 124 = (noop, noop, noop).
    """
    return np.array(list(itertools.product(range(5), repeat=k)), dtype=np.int32).reshape(-1, k)


def split_actions(seed: int = 0, num_train: int = 50, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of the 5**k composite action ids into train and test (Headless-AD: 50 / 75).

    Both parts keep the order of the seeded permutation (so "the first 50 test actions" is a random
    subset, not the lowest ids). Returns int32 `(num_train,)`, `(5**k - num_train,)`.
    """
    perm = np.random.default_rng(seed).permutation(5 ** k).astype(np.int32)
    return perm[:num_train], perm[num_train:]


def distance_split(seed: int = 0, k: int = 3, test_distance: int = 2
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Headless-AD appendix F's split by move distance: the test actions are those whose
    endpoint lies `test_distance` cells (Manhattan, in open space) from where they start, the
    train actions all others (k = 3: 89 of distance 0, 1 or 3 / 36 of distance 2), so no test
    action reaches a displacement that some train action also reaches. Both keep the order of a
    seeded permutation; int32 `(n_train,)`, `(n_test,)`."""
    distance = np.abs(np.asarray(_MOVE_DELTAS)[composite_actions(k)].sum(1)).sum(-1)
    perm = np.random.default_rng(seed).permutation(5 ** k).astype(np.int32)
    return perm[distance[perm] != test_distance], perm[distance[perm] == test_distance]


HEADLESS_AD_ACTION_SETS = ("train", "permuted_train", "sliced_test", "test", "all")
#: How the composite actions split into train and test: seeded at random, 50 / 75 (section 4.3),
#: or by move distance (appendix F, Figure 12).
ACTION_SPLITS = ("random", "distance")


def headless_ad_action_sets(seed: int = 0, k: int = 3, split: str = "random"
                            ) -> dict[str, np.ndarray]:
    """The five Headless-AD action sets (composite ids, int32 1-d arrays), from one seed.

    train: 50 ids ("random") or 89 ("distance"); permuted_train: the same reordered (seeded);
    sliced_test: the first len(train) of test (all of them when fewer); test: 75 or 36 ids;
    all: train followed by test (125).
    """
    if split not in ACTION_SPLITS:
        raise ValueError(f"unknown action split {split!r}; valid: {ACTION_SPLITS}")
    train, test = split_actions(seed, 50, k) if split == "random" else distance_split(seed, k)
    permuted = np.random.default_rng([seed, 1]).permutation(train).astype(np.int32)
    return {"train": train, "permuted_train": permuted, "sliced_test": test[:len(train)],
            "test": test, "all": np.concatenate([train, test])}


class CompositeDarkRoom(_Grid):
    """Dark Room whose actions are k-step sequences of atomic moves (Headless-AD 4.3).

    Args:
      size: grid side (9). k: atomic moves per action (3 -> 125 actions).
      episode_length: steps per episode (20).
      max_actions: padded action count (default 5**k).
      action_split_seed: seed of the train/test action split used by named action sets.
      action_split: "random" (50 / 75, section 4.3) or "distance" (89 / 36 by move distance,
        appendix F); see `headless_ad_action_sets`.
      actions: the action set used when `task_params`/`params_from_actions` get none (a name such
        as "train", or composite ids); None = all 5**k in canonical order.

    Executing action index a applies the moves `params.action_set[a]` in order (walls clamp); if any
    sub-step lands on the goal the agent stops there, gets reward 1 and the episode terminates.
    The agent starts at the centre; tasks: id t -> goal cell t skipping the centre (80 on 9x9).
    """

    composite_actions = True

    #: What `env.kwargs` take; `actions` is None (all 5**k), a named set (`action_sets`) or
    #: composite ids, checked against `max_actions` when the env is built.
    KWARGS = (validation.integer("size", 9, minimum=2), validation.integer("k", 3, minimum=1, maximum=4),
              validation.positive_int("episode_length", 20),
              validation.optional(validation.positive_int("max_actions", 125)),
              validation.integer("action_split_seed", 0), validation.choice("action_split", ACTION_SPLITS),
              validation.Constraint(("actions",), "must be None, the name of an action set or a tuple of "
                           "composite action ids >= 0",
                           lambda v: v is None or isinstance(v, str) or (
                               isinstance(v, (tuple, list)) and all(
                                   validation.is_int(a) and a >= 0 for a in v)), "None"))

    def __init__(self, size: int = 9, k: int = 3, episode_length: int = 20,
                 max_actions: int | None = None, action_split_seed: int = 0,
                 actions: str | Sequence[int] | None = None, action_split: str = "random"):
        super().__init__(size, episode_length)
        self.k = int(k)
        self.all_actions = composite_actions(self.k)
        self.max_actions = len(self.all_actions) if max_actions is None else int(max_actions)
        self.action_split_seed = int(action_split_seed)
        if action_split not in ACTION_SPLITS:
            raise ValueError(f"unknown action_split {action_split!r}; valid: {ACTION_SPLITS}")
        self.action_split = action_split
        self.num_tasks = self.size * self.size - 1
        self.default_actions = actions
        self._resolve_actions(actions)  # fail early on a bad default action set

    @property
    def name(self) -> str:
        return "darkroom_composite"

    @property
    def num_actions(self) -> int:
        return self.max_actions

    @property
    def default_params(self) -> CompositeDarkRoomParams:
        return self.task_params(0)

    def action_sets(self) -> dict[str, np.ndarray]:
        """The five Headless-AD action sets under this env's `action_split(_seed)`."""
        return headless_ad_action_sets(self.action_split_seed, self.k, self.action_split)

    def _resolve_actions(self, actions) -> np.ndarray:
        if actions is None:
            actions = self.default_actions
        if actions is None:
            ids = np.arange(len(self.all_actions), dtype=np.int32)
        elif isinstance(actions, str):
            sets = self.action_sets()
            if actions not in sets:
                raise ValueError(f"unknown action set {actions!r}; valid: {list(sets)}")
            ids = sets[actions]
        else:
            ids = np.asarray(actions, dtype=np.int32).reshape(-1)
            if ids.size and (ids.min() < 0 or ids.max() >= len(self.all_actions)):
                raise ValueError(f"composite action ids must lie in [0, {len(self.all_actions)})")
        if ids.size > self.max_actions:  # the padded action axis holds every action of the set
            raise ValueError(f"{ids.size} actions exceed max_actions={self.max_actions}")
        return ids

    def action_set_arrays(self, actions=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded `(action_set (max_actions, k), action_ids (max_actions,), mask (max_actions,))`.

        `actions`: None (all, canonical order), a name from `HEADLESS_AD_ACTION_SETS`, or a
        sequence of composite ids (a subset and/or permutation; its order is the index order).
        """
        ids = self._resolve_actions(actions)
        n = ids.size
        action_set = np.full((self.max_actions, self.k), NOOP, np.int32)
        action_set[:n] = self.all_actions[ids]
        padded_ids = np.full(self.max_actions, -1, np.int32)
        padded_ids[:n] = ids
        return action_set, padded_ids, np.arange(self.max_actions) < n

    def params_from_actions(self, goal_cell, actions: Sequence[int] | str | None = None
                            ) -> CompositeDarkRoomParams:
        """Params for a goal cell id and an action set (see `action_set_arrays`)."""
        action_set, ids, mask = self.action_set_arrays(actions)
        return CompositeDarkRoomParams(goal=jnp.asarray(goal_cell, jnp.int32),
                                       action_set=jnp.asarray(action_set),
                                       action_ids=jnp.asarray(ids), action_mask=jnp.asarray(mask),
                                       max_steps_in_episode=self._steps())

    def task_params(self, task_ids, actions=None):
        """Params for goal-task ids (`()` or `(n,)`) sharing one action set (see
        `action_set_arrays` for `actions`; default: all 5**k in canonical order)."""
        action_set, ids, mask = (jnp.asarray(x) for x in self.action_set_arrays(actions))
        task_ids = as_task_ids(task_ids, self.num_tasks)

        def one(task_id):
            return CompositeDarkRoomParams(goal=self._goal_from_task(task_id),
                                           action_set=action_set, action_ids=ids,
                                           action_mask=mask, max_steps_in_episode=self._steps())

        return one(task_ids) if task_ids.ndim == 0 else jax.vmap(one)(task_ids.reshape(-1))

    def _execute(self, pos: jax.Array, moves: jax.Array, goal: jax.Array):
        """Run the atomic moves `(k,)` from pos, stopping on the goal -> (pos, reached goal)."""
        reached = jnp.bool_(False)
        for j in range(self.k):
            nxt = self.move(pos, moves[j])
            pos = jnp.where(reached, pos, nxt)
            reached = reached | (self.cell(pos) == goal)
        return pos, reached

    def reset_env(self, key, params):
        pos = jnp.asarray(self.centre)
        return self.cell(pos), GridState(pos=pos, time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        pos, reached = self._execute(state.pos, params.action_set[action], params.goal)
        return (self.cell(pos), GridState(pos=pos, time=state.time + 1),
                reached.astype(jnp.float32), reached, {})

    def min_steps_to_goal(self, params) -> jax.Array:
        """Fewest env steps from the start to the goal with the available actions, int32 `()`
        (`max_steps_in_episode + 1` when the goal cannot be reached within an episode)."""
        cells = jnp.arange(self.num_observations)
        starts = self.position(cells)
        # Transition table over (cell, action index): where it ends and whether it hit the goal.
        ends, hits = jax.vmap(lambda p: jax.vmap(
            lambda m: self._execute(p, m, params.goal))(params.action_set))(starts)
        hits = hits & params.action_mask[None, :]
        moves_to = jax.nn.one_hot(self.cell(ends), self.num_observations, dtype=jnp.bool_)
        moves_to = moves_to & (params.action_mask[None, :, None] & ~hits[..., None])
        reach_next = moves_to.any(axis=1)  # (cell, next cell)
        can_hit = hits.any(axis=1)  # (cell,)
        horizon = params.max_steps_in_episode

        def body(t, carry):
            reach, best = carry
            best = jnp.where((best > horizon) & (reach & can_hit).any(), t, best)
            reach = (reach[:, None] & reach_next).any(axis=0)
            return reach, best

        reach0 = cells == self.cell(jnp.asarray(self.centre))
        _, best = jax.lax.fori_loop(1, horizon + 1, body, (reach0, horizon + 1))
        return best.astype(jnp.int32)

    def optimal_return(self, params) -> jax.Array:
        """1.0 if the goal is reachable within an episode with the available actions, else 0.0."""
        return (self.min_steps_to_goal(params) <= params.max_steps_in_episode).astype(jnp.float32)


class KeyToDoor(_Grid):
    """Dark Key-to-Door: random start cell, +1 at the key (once), then +1 and termination at the door.

    Args:
      size: grid side (9). episode_length: steps per episode (50).
      start: "random" (a uniform cell each episode: our reading of the n-gram paper's App. B,
        "resets to a random grid") or "centre" (Dark Room's start; the fixed start that public AD
        replications of Key-to-Door use): an episode that starts from the same cell can repeat
        the path of an earlier one step for step.
    Tasks: id t in [0, n*(n-1)) with n = size**2 -> key = t // (n-1), door = the (t % (n-1))-th
    cell other than the key (6480 tasks on 9x9).
    """

    key_flag = True

    STARTS = ("random", "centre")

    KWARGS = (validation.integer("size", 9, minimum=2), validation.positive_int("episode_length", 50),
              validation.choice("start", ("random", "centre")))

    def __init__(self, size: int = 9, episode_length: int = 50, start: str = "random"):
        super().__init__(size, episode_length)
        if start not in self.STARTS:
            raise ValueError(f"KeyToDoor start must be one of {self.STARTS}, got {start!r}")
        self.start = start
        n = self.num_observations
        self.num_tasks = n * (n - 1)

    @property
    def name(self) -> str:
        return "key_to_door"

    @property
    def num_actions(self) -> int:
        return 5

    @property
    def default_params(self) -> KeyToDoorParams:
        return self.task_params(0)

    def params_for(self, key_cell, door_cell) -> KeyToDoorParams:
        """Params for explicit key and door cell ids."""
        return KeyToDoorParams(key=jnp.asarray(key_cell, jnp.int32),
                               door=jnp.asarray(door_cell, jnp.int32),
                               action_mask=jnp.ones(5, bool), max_steps_in_episode=self._steps())

    def _task_params_one(self, task_id) -> KeyToDoorParams:
        n_other = self.num_observations - 1
        key_cell, door_index = task_id // n_other, task_id % n_other
        door_cell = door_index + (door_index >= key_cell).astype(jnp.int32)
        return self.params_for(key_cell, door_cell)

    def _start_cells(self) -> jax.Array:
        """The cells an episode starts from, uniformly: int32 `(n,)` or `(1,)`."""
        if self.start == "centre":
            return jnp.array([self.centre_cell], jnp.int32)
        return jnp.arange(self.num_observations, dtype=jnp.int32)

    def reset_env(self, key, params):
        if self.start == "centre":
            cell = jnp.int32(self.centre_cell)
        else:
            cell = jax.random.randint(key, (), 0, self.num_observations, dtype=jnp.int32)
        state = KeyToDoorState(pos=self.position(cell), has_key=jnp.bool_(False),
                               time=jnp.int32(0))
        return cell, state

    def step_env(self, key, state, action, params):
        pos = self.move(state.pos, action)
        cell = self.cell(pos)
        # Key and door are different cells, so at most one of these fires in a step.
        picks_key = (cell == params.key) & ~state.has_key
        opens_door = (cell == params.door) & state.has_key
        reward = (picks_key | opens_door).astype(jnp.float32)
        state = KeyToDoorState(pos=pos, has_key=state.has_key | picks_key, time=state.time + 1)
        return cell, state, reward, opens_door, {}

    def optimal_return(self, params) -> jax.Array:
        """Expected best return over the start cells, float32 (2.0 on 9x9 with 50 steps)."""
        starts = self.position(self._start_cells())
        key_pos, door_pos = self.position(params.key), self.position(params.door)
        # Standing on the key at the start still costs one (noop) step to pick it up.
        to_key = jnp.maximum(jnp.abs(starts - key_pos).sum(-1), 1)
        to_door = to_key + jnp.abs(key_pos - door_pos).sum(-1)
        horizon = params.max_steps_in_episode
        return ((to_key <= horizon).astype(jnp.float32)
                + (to_door <= horizon).astype(jnp.float32)).mean()
