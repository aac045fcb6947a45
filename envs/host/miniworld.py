"""Miniworld dark room and key-to-door (n-gram paper, sec. 4 / App. B-D), headless, 64x64 RGB.

The 3D counterparts of envs/darkroom.py: a 9x9 room (1 unit cells) whose floor hides unmarked
targets; the agent sees only a first-person 64x64 RGB image. Actions (ids used here):

    0 move forward (0.5 units), 1 turn left (30 degrees), 2 turn right (30 degrees)

Steps are deterministic (no domain randomisation), so a (seed, actions) pair fixes a rollout.

* `MiniworldDarkRoom`: start at the room centre with a seeded random heading (multiple of 30
  degrees); reward 1 on every step that ends inside the goal cell (the episode does not end
  there); 50-step episodes. 80 goal cells (all but the centre), as in Dark Room.
* `MiniworldKeyToDoor`: seeded random start cell and heading each episode; +1 the first time the
  key cell is entered, then +1 and termination in the door cell; 100-step episodes; key != door.

Tasks come from a seeded permutation (`specs.HostEnv.task_split`) so train and test goals are
disjoint.
`privileged()` gives float32 `(6,)` = (x, z, heading rad, target x, target z, has_key), target =
goal / key / door cell centre, for the noise-distillation oracle (`NoisyOracle`, on device).

Rendering is headless: pyglet uses EGL (`PYGLET_HEADLESS=1`, set here before pyglet loads).
"""

from __future__ import annotations

import functools
import math
import os

os.environ.setdefault("PYGLET_HEADLESS", "1")  # before any pyglet import, inherited by workers

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.envs.host.bridge import HostStep

ROOM = 9  # cells per side; cell (row, col) spans x in [col, col+1], z in [row, row+1]
FORWARD, TURN_LEFT, TURN_RIGHT = 0, 1, 2
STEP_SIZE, TURN_DEG = 0.5, 30.0
NUM_CELLS = ROOM * ROOM
CENTRE_CELL = NUM_CELLS // 2


def _make_base():
    """Import miniworld lazily (pyglet opens an EGL context on import) and build the class."""
    from miniworld.miniworld import MiniWorldEnv
    from miniworld.params import DEFAULT_PARAMS

    params = DEFAULT_PARAMS.no_random()  # deterministic steps and rendering
    params.set("forward_step", STEP_SIZE)
    params.set("turn_step", TURN_DEG)
    params.set("forward_drift", 0.0)

    class _CellRoom(MiniWorldEnv):
        """A ROOM x ROOM room. Subclasses define the task through three hooks:
        `_start_cell()` (cell of each episode's start), `_task_reward()` -> (reward, terminated)
        and `_target()` (the cell the privileged oracle heads for)."""

        env_name = "miniworld"

        def __init__(self, max_episode_steps: int, obs_size: int = 64):
            MiniWorldEnv.__init__(self, max_episode_steps=max_episode_steps, obs_width=obs_size,
                                  obs_height=obs_size, params=params, domain_rand=False)
            self.action_space = gym.spaces.Discrete(3)

        def _gen_world(self):
            self.add_rect_room(min_x=0, max_x=ROOM, min_z=0, max_z=ROOM)
            row, col = divmod(self._start_cell(), ROOM)
            heading = self.np_random.integers(0, int(360 / TURN_DEG)) * TURN_DEG * math.pi / 180
            self.place_agent(pos=np.array([col + 0.5, 0.0, row + 0.5]), dir=heading)

        def cell(self) -> int:
            x, _, z = self.agent.pos
            return int(min(int(z), ROOM - 1) * ROOM + min(int(x), ROOM - 1))

        def step(self, action):
            # our ids -> miniworld's (turn_left=0, turn_right=1, move_forward=2)
            mw_action = (self.actions.move_forward, self.actions.turn_left,
                         self.actions.turn_right)[int(action)]
            obs, _, _, trunc, info = MiniWorldEnv.step(self, mw_action)
            reward, term = self._task_reward()
            return obs, reward, term, trunc, info

        def privileged(self) -> np.ndarray:
            row, col = divmod(self._target(), ROOM)
            x, _, z = self.agent.pos
            return np.array([x, z, self.agent.dir, col + 0.5, row + 0.5,
                             float(getattr(self, "has_key", False))], np.float32)

    return _CellRoom


@functools.cache
def _classes():
    base = _make_base()

    class DarkRoom3D(base):
        env_name = "miniworld_darkroom"

        def __init__(self, goal: int, episode_length: int = 50):
            self.goal = int(goal)
            super().__init__(episode_length)

        def _start_cell(self):
            return CENTRE_CELL

        def _target(self):
            return self.goal

        def _task_reward(self):
            return float(self.cell() == self.goal), False

    class KeyToDoor3D(base):
        env_name = "miniworld_key_to_door"

        def __init__(self, key: int, door: int, episode_length: int = 100):
            self.key, self.door, self.has_key = int(key), int(door), False
            super().__init__(episode_length)

        def _start_cell(self):
            self.has_key = False
            return int(self.np_random.integers(0, NUM_CELLS))

        def _target(self):
            return self.door if self.has_key else self.key

        def _task_reward(self):
            cell = self.cell()
            if not self.has_key and cell == self.key:
                self.has_key = True
                return 1.0, False
            if self.has_key and cell == self.door:
                return 1.0, True
            return 0.0, False

    return DarkRoom3D, KeyToDoor3D


def make_darkroom(goal: int, episode_length: int = 50) -> gym.Env:
    """One Miniworld dark room with goal cell `goal` (picklable via functools.partial)."""
    if not 0 <= goal < NUM_CELLS or goal == CENTRE_CELL:
        raise ValueError(f"goal cell must be in [0, {NUM_CELLS}) and not the centre, got {goal}")
    return _classes()[0](goal, episode_length)


def make_key_to_door(key: int, door: int, episode_length: int = 100) -> gym.Env:
    """One Miniworld key-to-door with key and door cells (different)."""
    if key == door or not (0 <= key < NUM_CELLS and 0 <= door < NUM_CELLS):
        raise ValueError(f"key and door must be different cells in [0, {NUM_CELLS}), got {key}, {door}")
    return _classes()[1](key, door, episode_length)


def darkroom_goals() -> np.ndarray:
    """The 80 dark-room goal cells (all but the centre), int32 `(80,)`."""
    return np.array([c for c in range(NUM_CELLS) if c != CENTRE_CELL], np.int32)


def key_door_pairs() -> np.ndarray:
    """All 81*80 (key, door) cell pairs, int32 `(6480, 2)`."""
    return np.array([(k, d) for k in range(NUM_CELLS) for d in range(NUM_CELLS) if k != d], np.int32)


def darkroom_env_fns(goals, episode_length: int = 50) -> list:
    """Picklable constructors of one dark room per goal cell (the rows of a `HostVectorEnv`)."""
    return [functools.partial(make_darkroom, int(g), episode_length) for g in goals]


def key_to_door_env_fns(pairs, episode_length: int = 100) -> list:
    """Picklable constructors of one key-to-door per (key, door) row of `pairs`."""
    return [functools.partial(make_key_to_door, int(k), int(d), episode_length)
            for k, d in np.asarray(pairs)]


def oracle_action(priv: jax.Array) -> jax.Array:
    """Greedy action toward the privileged target, int32 `(...)` from float32 `(..., 6)`.

    Turn toward the target cell centre until the heading is within half a turn step, then move
    forward; inside the target cell keep turning (stays put, so a dark-room goal keeps paying).
    """
    x, z, heading, tx, tz = (priv[..., i] for i in range(5))
    # miniworld: dir_vec = (cos d, 0, -sin d), so the bearing to (tx, tz) is atan2(-(tz-z), tx-x)
    bearing = jnp.arctan2(-(tz - z), tx - x)
    diff = jnp.mod(bearing - heading + jnp.pi, 2 * jnp.pi) - jnp.pi
    aligned = jnp.abs(diff) <= jnp.deg2rad(TURN_DEG) / 2
    turn = jnp.where(diff > 0, TURN_LEFT, TURN_RIGHT)
    arrived = (jnp.floor(x) == jnp.floor(tx)) & (jnp.floor(z) == jnp.floor(tz))
    return jnp.where(arrived, TURN_LEFT, jnp.where(aligned, FORWARD, turn)).astype(jnp.int32)


class NoisyOracle:
    """Noise-distillation source (Zisman et al. 2024): oracle action with probability 1 - eps,
    else uniform; eps decays linearly from `eps_start` to `eps_end` over the first
    `decay_fraction` of a `num_steps` learning history, so the history looks like improvement.
    A `HostPolicy`."""

    def __init__(self, num_steps: int, eps_start: float = 1.0, eps_end: float = 0.0,
                 decay_fraction: float = 0.9):
        self.num_steps, self.eps_start, self.eps_end = num_steps, eps_start, eps_end
        self.decay_steps = max(1.0, decay_fraction * num_steps)

    def epsilon(self, t: jax.Array) -> jax.Array:
        frac = jnp.minimum(t.astype(jnp.float32) / self.decay_steps, 1.0)
        return self.eps_start + (self.eps_end - self.eps_start) * frac

    def init(self, key, num_envs):
        return ()

    def act(self, key, state, step: HostStep):
        n = step.obs.shape[0]
        k_eps, k_act = jax.random.split(key)
        explore = jax.random.uniform(k_eps, (n,)) < self.epsilon(step.t)
        random_a = jax.random.randint(k_act, (n,), 0, 3)
        return jnp.where(explore, random_a, oracle_action(step.privileged)), state
