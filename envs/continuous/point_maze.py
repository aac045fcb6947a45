"""Point maze: D4RL's maze2d point mass in JAX, with MuJoCo's contact model and a waypoint expert.

**Geometry** (gymnasium-robotics' `PointMaze`, `maze_size_scaling=1`): a maze of `H x W` unit cells,
row 0 at the top, centred on the origin. Cell `(i, j)` has its centre at
`x = j + 0.5 - W/2, y = H/2 - i - 0.5`; wall cells are unit blocks. (D4RL's own maze2d frame is
the transpose of this one, offset by 0.2 from the cell centres; we use gymnasium-robotics'.)

**Dynamics** are those of gymnasium-robotics' `assets/point/point.xml` under MuJoCo: a sphere of
radius 0.1 and density 1000 (mass 4.18879) on two slide joints with damping 1, motors of gear 100
and ctrlrange [-1, 1], timestep 0.01, one MuJoCo step per env step, Euler integrator. Before each
step the velocity is clipped to [-5, 5] per axis (as `PointEnv` does). MuJoCo's Euler integrates
joint damping implicitly, so in free motion

    v' = (m v + h * 100 a) / (m + h * damping),   p' = p + h v'.

Walls are MuJoCo's soft contacts, reproduced row by row: a contact with a wall block is active
while the sphere is within the contact margin 0.004 of it (0.002 per geom, summed as MuJoCo 4
does), normal from the block's nearest point to the sphere's centre, impedance from the default
solimp (0.9, 0.95, 0.001, 0.5, 2), reference acceleration from the default solref (0.02, 1), and
the frictionless (condim 1) constraint problem solved exactly by a few Newton/active-set
iterations on its 2x2 system. As in MuJoCo, contacts are found at the start of a step, so the
sphere can sink up to one step's travel (~0.05) into a wall before it is pushed back; its centre
never enters a wall. Equivalence with gymnasium-robotics (mujoco 4.0.0), measured in
tests/test_point_maze.py: free motion max |error| < 1e-4 in position and velocity over 100 random
steps (float32 vs float64); with wall contact see the bounds stated there.

**Observation**: float32 `(6,)` = position (2), velocity (2), goal position (2).
**Action**: float32 `(2,)` motor controls in [-1, 1] (`continuous_actions=True`, `action_dim=2`,
`num_actions=0`). `step` checks actions eagerly: a shape other than `(2,)` raises
`InvalidActionError` (a ValueError) even under `jit` (shapes are static); an eager action outside
[-1, 1] or non-finite raises too. Under `jit`/`vmap` values are clipped to [-1, 1] (NaN -> 0), as
gymnasium-robotics clips them. `transition` (no checks) is the data-generation hot path.

**Tasks** (`task=`):

* ``"d4rl"``: D4RL maze2d's fixed goal at the centre of the layout's goal cell and its sparse
  reward, 1.0 on every step that ends within `goal_radius` (0.5, D4RL's threshold;
  gymnasium-robotics uses 0.45) of the goal. The episode never terminates (D4RL's `done=False`,
  gymnasium-robotics' `continuing_task=True`, `reset_target=False`): it is truncated at the time
  limit (umaze 300, medium 600, large 800 steps, D4RL maze2d-*-v1).
* ``"random_goal"`` (Uni[MASK]): random start and goal cells; dense reward = distance to the goal
  before the step minus after it; terminates on success (within `goal_radius`) or is truncated at
  the same time limits.

`task_params(ids)` draws, from `task_key(seed, id)`, a start cell among the free cells other than
the goal cell and (random_goal) a goal cell among all free cells, the goal moved by uniform noise
of +-`goal_noise` (0.25, gymnasium-robotics' `position_noise_range`) per axis once per task. Every
reset starts the point at rest at the start cell's centre plus uniform +-`params.reset_noise`
per axis, as gymnasium-robotics' resets do; auto-reset keeps the task.

**Metrics**: `info["success"]` (bool) says the step ended within `goal_radius` of the goal; an
episode succeeded if any of its steps did. Episode lengths are the gaps between steps with
`terminated | truncated`.

**Expert**: `waypoint_action` is the D4RL-style waypoint controller: a breadth-first-search table,
built once in numpy, gives for every (cell, goal cell) the next cell on a shortest 4-connected path;
a PD controller (kp 10, kd 1, D4RL's gains) steers to that cell's centre, or to the goal itself in
the goal cell, with optional Gaussian action noise. `expert_action(state, params)` is its
noiseless form (`has_oracle=True`).
"""

from __future__ import annotations

import math
from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from icrl_jax.core import validation
from icrl_jax.envs.continuous.maps import EPISODE_LENGTHS, LAYOUTS, parse_layout
from icrl_jax.envs.base import EPISODIC, ICRLEnv, InvalidActionError
from icrl_jax.envs.tasks import as_task_ids, task_key

# point.xml as MuJoCo compiles it (checked against the compiled model in the tests).
TIMESTEP = 0.01
RADIUS = 0.1
MASS = 1000.0 * 4.0 / 3.0 * math.pi * RADIUS ** 3  # inertiafromgeom: sphere, density 1000
GEAR = 100.0
DAMPING = 1.0
MAX_SPEED = 5.0  # PointEnv's per-axis velocity clip before every step
# Contact parameters: MuJoCo's defaults for solref/solimp; the margin is both geoms' 0.002.
CONTACT_MARGIN = 0.004
SOLREF_TIMECONST, SOLREF_DAMPRATIO = 0.02, 1.0
SOLIMP_D0, SOLIMP_DMAX, SOLIMP_WIDTH, SOLIMP_MID = 0.9, 0.95, 0.001, 0.5  # power 2
_REF_B = 2.0 / (SOLIMP_DMAX * SOLREF_TIMECONST)
_REF_K = 1.0 / (SOLIMP_DMAX ** 2 * SOLREF_TIMECONST ** 2 * SOLREF_DAMPRATIO ** 2)
# MuJoCo's diagonal approximation of the contact's inverse inertia: the body's invweight0 = 1/m.
_INV_WEIGHT = 1.0 / MASS
# The constraint problem is piecewise quadratic with at most a few rows; its active set settles in
# one or two iterations, three leave a margin (MuJoCo runs Newton to convergence).
_NEWTON_ITERS = 3
# The 8 cells around the point's cell: every wall it can touch (it moves < 0.06 per step).
_NEIGHBOURS = np.array([(-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)],
                       dtype=np.int32)
# D4RL's waypoint controller gains (d4rl/pointmaze/waypoint_controller.py: p 10, d -1).
KP, KD = 10.0, 1.0
TASKS = ("d4rl", "random_goal")


@struct.dataclass(kw_only=True)
class PointMazeState(environment.EnvState):
    """pos, vel: float32 `(2,)` xy position and velocity; time: int32 steps this episode."""

    pos: jax.Array
    vel: jax.Array
    time: jax.Array


@struct.dataclass(kw_only=True)
class PointMazeParams(environment.EnvParams):
    """One point-maze task.

    start: float32 `(2,)`, centre of the start cell.
    goal: float32 `(2,)`, goal position.
    reset_noise: float32 `()`, half-width of the uniform per-axis noise added to `start` at reset.
    goal_radius: float32 `()`, success distance (sparse reward / termination).
    max_steps_in_episode: int32 `()`, time limit.
    """

    start: jax.Array
    goal: jax.Array
    reset_noise: jax.Array
    goal_radius: jax.Array
    max_steps_in_episode: jax.Array


def next_cell_table(walls: np.ndarray) -> np.ndarray:
    """Shortest-path successor of every (cell, goal cell) on the 4-connected free cells.

    Args:
      walls: bool `(H, W)`.
    Returns:
      int32 `(H*W, H*W)`: `[c, g]` is the flat id (`row * W + col`) of the neighbour of `c` one
      step closer to `g`; `c` itself where `c == g`, either is a wall, or `g` is unreachable.
    """
    h, w = walls.shape
    n = h * w
    table = np.tile(np.arange(n, dtype=np.int32)[:, None], (1, n))
    moves = ((-1, 0), (1, 0), (0, -1), (0, 1))
    for goal in np.flatnonzero(~walls.ravel()):
        dist = np.full(n, -1, np.int64)
        dist[goal] = 0
        queue = deque([goal])
        while queue:  # BFS outward from the goal
            c = queue.popleft()
            i, j = divmod(int(c), w)
            for di, dj in moves:
                ni, nj = i + di, j + dj
                if 0 <= ni < h and 0 <= nj < w and not walls[ni, nj] and dist[ni * w + nj] < 0:
                    dist[ni * w + nj] = dist[c] + 1
                    queue.append(ni * w + nj)
        for c in np.flatnonzero(dist > 0):
            i, j = divmod(int(c), w)
            for di, dj in moves:  # first neighbour one step closer (fixed order: deterministic)
                ni, nj = i + di, j + dj
                if 0 <= ni < h and 0 <= nj < w and dist[ni * w + nj] == dist[c] - 1:
                    table[c, goal] = ni * w + nj
                    break
    return table


class PointMaze(ICRLEnv):
    """D4RL maze2d point maze with continuous actions (see the module docstring).

    Args:
      layout: "umaze" (5x5), "medium" (8x8), "large" (9x12), or a custom map: rows of
        `#`/`.`/`G` characters or a 2-D array of 0 (free) / 1 (wall), walled all round.
      task: "d4rl" (fixed goal, sparse reward, no termination) or "random_goal" (random start and
        goal, dense progress reward, terminates on success).
      episode_length: time limit; default D4RL's per layout (custom maps: required).
      goal_radius: success distance (0.5).
      reset_noise: per-axis uniform start noise at every reset (0.25).
      goal_noise: random_goal: per-axis uniform goal noise, drawn once per task (0.25).
      goal_cell: d4rl: `(row, col)` of the goal cell instead of the layout's `G` (custom maps
        without a `G` need it).
      seed: seed of the task-id draws (`task_key(seed, id)`).
    """

    continuous_actions = True
    goal_terminates = True
    action_dim = 2
    num_actions = 0  # no discrete actions; see `action_dim`
    num_observations = None
    observation_shape = (6,)
    kind = EPISODIC
    has_oracle = True
    num_tasks = None  # task ids are seeds of unlimited draws
    grid_size = None

    #: What `env.kwargs` take (checked before anything is built; core/validation.py); a
    #: `goal_cell` must also be a free cell of the layout, checked when the env is built.
    KWARGS = (
        validation.Constraint(("layout",), f"must be one of {', '.join(LAYOUTS)} or a map (a tuple of "
                     f"rows of '#', '.', 'G' characters)",
                     lambda v: v in LAYOUTS if isinstance(v, str) else (
                         isinstance(v, (tuple, list)) and len(v) > 0
                         and all(isinstance(row, str) for row in v)), "umaze"),
        validation.choice("task", TASKS), validation.optional(validation.positive_int("episode_length", 300)),
        validation.positive("goal_radius", 0.5), validation.non_negative("reset_noise", 0.25),
        validation.non_negative("goal_noise", 0.25),
        validation.Constraint(("goal_cell",), "must be None or a (row, column) pair of integers >= 0",
                     lambda v: v is None or (isinstance(v, (tuple, list)) and len(v) == 2
                                             and all(validation.is_int(x) and x >= 0 for x in v)),
                     "None"),
        validation.integer("seed", 0))

    def __init__(self, layout="umaze", task: str = "d4rl", episode_length: int | None = None,
                 goal_radius: float = 0.5, reset_noise: float = 0.25, goal_noise: float = 0.25,
                 goal_cell=None, seed: int = 0):
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"unknown point maze task {task!r}; choose one of {TASKS}")
        if isinstance(layout, str):
            if layout not in LAYOUTS:
                raise ValueError(f"unknown point maze layout {layout!r}; choose one of "
                                 f"{tuple(LAYOUTS)} or pass a map")
            walls, marked_goal = parse_layout(LAYOUTS[layout])
            default_length = EPISODE_LENGTHS[layout]
        else:
            walls, marked_goal = parse_layout(layout)
            default_length = None
        if episode_length is None:
            if default_length is None:
                raise ValueError("a custom maze map needs episode_length")
            episode_length = default_length
        if int(episode_length) < 1:
            raise ValueError(f"episode_length must be >= 1, got {episode_length}")
        for name, value in (("goal_radius", goal_radius), ("reset_noise", reset_noise),
                            ("goal_noise", goal_noise)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if max(reset_noise, goal_noise) >= 0.5 - RADIUS:
            raise ValueError("reset_noise and goal_noise must be < 0.4 (inside the cell, clear of "
                             "its walls)")
        self.layout = layout if isinstance(layout, str) else "custom"
        self.task = task
        self.walls = walls
        self.height, self.width = walls.shape
        self.episode_length = int(episode_length)
        self.goal_radius, self.reset_noise, self.goal_noise = (
            float(goal_radius), float(reset_noise), float(goal_noise))
        self.seed = int(seed)

        free = np.flatnonzero(~walls.ravel()).astype(np.int32)
        if goal_cell is None:
            goal_cell = marked_goal
        if task == "d4rl":
            if goal_cell is None:
                raise ValueError("task='d4rl' needs a goal cell: mark 'G' in the map or pass "
                                 "goal_cell=(row, col)")
            i, j = (int(v) for v in goal_cell)
            if not (0 <= i < self.height and 0 <= j < self.width) or walls[i, j]:
                raise ValueError(f"goal_cell {(i, j)} is not a free cell of the maze")
            self.goal_cell = (i, j)
        else:
            self.goal_cell = None
        self._free_cells = jnp.asarray(free)
        self._next_cell = jnp.asarray(next_cell_table(walls))
        rows, cols = np.divmod(np.arange(walls.size), self.width)
        self._centres = jnp.asarray(self._centre_np(rows, cols))
        # One wall ring of padding keeps neighbour look-ups in range without clamping.
        self._walls_padded = jnp.asarray(np.pad(walls, 1, constant_values=True))
        # Task draws compiled once each rather than a dozen eagerly dispatched ops per call.
        self._draw_one = jax.jit(self._task_params_one)
        self._draw_batch = jax.jit(jax.vmap(self._task_params_one))

    # ---- geometry -------------------------------------------------------------------------

    def _centre_np(self, rows, cols) -> np.ndarray:
        x = np.asarray(cols) + 0.5 - self.width / 2
        y = self.height / 2 - np.asarray(rows) - 0.5
        return np.stack([x, y], -1).astype(np.float32)

    def cell_centre(self, row, col) -> np.ndarray:
        """xy float32 `(..., 2)` of the centres of cells `(row, col)` (numpy, host side)."""
        return self._centre_np(row, col)

    def cell_of(self, pos: jax.Array) -> jax.Array:
        """(row, col) int32 `(..., 2)` of the cells holding positions float `(..., 2)`."""
        row = jnp.floor(self.height / 2 - pos[..., 1]).astype(jnp.int32)
        col = jnp.floor(pos[..., 0] + self.width / 2).astype(jnp.int32)
        return jnp.stack([jnp.clip(row, 0, self.height - 1), jnp.clip(col, 0, self.width - 1)], -1)

    def cell_index(self, pos: jax.Array) -> jax.Array:
        """Flat cell id (`row * W + col`) int32 `(...)` of positions `(..., 2)`."""
        rc = self.cell_of(pos)
        return rc[..., 0] * self.width + rc[..., 1]

    # ---- physics --------------------------------------------------------------------------

    def physics(self, pos: jax.Array, vel: jax.Array, ctrl: jax.Array):
        """One MuJoCo step of the point: pos, vel, ctrl float32 `(2,)` (ctrl in [-1, 1]) ->
        (pos, vel) float32 `(2,)` after the step."""
        vel = jnp.clip(vel, -MAX_SPEED, MAX_SPEED)
        force = GEAR * ctrl
        acc_free = (force - DAMPING * vel) / MASS  # MuJoCo's unconstrained qacc (explicit damping)

        # Candidate contacts: the 8 neighbouring cells; only walls within the margin are active.
        rc = self.cell_of(pos)[None, :] + jnp.asarray(_NEIGHBOURS)
        is_wall = self._walls_padded[rc[:, 0] + 1, rc[:, 1] + 1]
        lo = jnp.stack([rc[:, 1] - self.width / 2, self.height / 2 - rc[:, 0] - 1], -1)
        diff = pos - jnp.clip(pos, lo, lo + 1.0)  # from the block's nearest point to the centre
        dist = jnp.linalg.norm(diff, axis=-1)
        normal = diff / jnp.maximum(dist, 1e-12)[:, None]
        violation = dist - RADIUS - CONTACT_MARGIN  # MuJoCo's efc_pos - efc_margin
        active = is_wall & (violation < 0)
        x = jnp.minimum(jnp.abs(violation) / SOLIMP_WIDTH, 1.0)
        y = jnp.where(x <= SOLIMP_MID, x * x / SOLIMP_MID,
                      1.0 - (1.0 - x) ** 2 / (1.0 - SOLIMP_MID))
        imp = SOLIMP_D0 + y * (SOLIMP_DMAX - SOLIMP_D0)
        stiffness = imp / ((1.0 - imp) * _INV_WEIGHT)  # MuJoCo's efc_D = 1 / R
        aref = -_REF_B * (normal @ vel) - _REF_K * imp * violation

        # Minimise 1/2 m|a - a0|^2 + sum_active 1/2 D (n.a - aref)^2 over rows with n.a < aref.
        acc = acc_free
        for _ in range(_NEWTON_ITERS):  # unrolled at trace time
            weight = jnp.where(active & (normal @ acc < aref), stiffness, 0.0)
            hxx = MASS + jnp.sum(weight * normal[:, 0] ** 2)
            hyy = MASS + jnp.sum(weight * normal[:, 1] ** 2)
            hxy = jnp.sum(weight * normal[:, 0] * normal[:, 1])
            g = MASS * acc_free + jnp.sum((weight * aref)[:, None] * normal, axis=0)
            det = hxx * hyy - hxy * hxy
            acc = jnp.stack([hyy * g[0] - hxy * g[1], hxx * g[1] - hxy * g[0]]) / det
        constraint_force = MASS * (acc - acc_free)

        # Euler with implicit damping: (M + hB) qacc = force - B v + constraint force.
        vel = (MASS * vel + TIMESTEP * (force + constraint_force)) / (MASS + TIMESTEP * DAMPING)
        return pos + TIMESTEP * vel, vel

    # ---- gymnax interface -----------------------------------------------------------------

    @property
    def name(self) -> str:
        return "point_maze"

    @property
    def default_params(self) -> PointMazeParams:
        return self.task_params(0)

    def action_space(self, params=None) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

    def observation_space(self, params=None) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (6,), jnp.float32)

    def action_mask(self, params):
        raise TypeError("PointMaze has continuous actions (action_dim=2): there is no action mask")

    def get_obs(self, state, params=None, key=None) -> jax.Array:
        """float32 `(6,)`: position, velocity, goal."""
        if params is None:
            params = self.default_params
        return jnp.concatenate([state.pos, state.vel, params.goal]).astype(jnp.float32)

    def goal_observation(self, obs: jax.Array) -> jax.Array:
        """The observation `(6,)` of the point at rest on the goal that `obs` shows."""
        goal = obs[..., 4:6]
        return jnp.concatenate([goal, jnp.zeros_like(goal), goal], -1)

    def reset_env(self, key, params):
        noise = jax.random.uniform(key, (2,), jnp.float32, -1.0, 1.0) * params.reset_noise
        state = PointMazeState(pos=params.start + noise, vel=jnp.zeros(2, jnp.float32),
                               time=jnp.int32(0))
        return self.get_obs(state, params), state

    def step_env(self, key, state, action, params):
        ctrl = jnp.clip(jnp.nan_to_num(jnp.asarray(action, jnp.float32), nan=0.0), -1.0, 1.0)
        pos, vel = self.physics(state.pos, state.vel, ctrl)
        distance = jnp.linalg.norm(pos - params.goal)
        success = distance <= params.goal_radius
        if self.task == "d4rl":
            reward, terminated = success.astype(jnp.float32), jnp.bool_(False)
        else:
            reward = jnp.linalg.norm(state.pos - params.goal) - distance
            terminated = success
        new_state = PointMazeState(pos=pos, vel=vel, time=state.time + 1)
        return self.get_obs(new_state, params), new_state, reward, terminated, {"success": success}

    def step(self, key, state, action, params=None):
        """gymnax `step` with continuous-action checks (see the module docstring).

        Eager: an action that is not shaped `(2,)`, not real-valued, non-finite or outside
        [-1, 1] raises `InvalidActionError`. Traced: the shape and dtype are still checked; values
        are clipped to [-1, 1] (NaN -> 0). `info["invalid_action"]` is always False (no action is
        a no-op) and `info["success"]` is the step's success flag.
        """
        if params is None:
            params = self.default_params
        check_continuous_action(action, self.action_dim)
        action = jnp.asarray(action, jnp.float32)  # one array leaf for jit, whatever came in
        *out, info = self.transition(key, state, action, params)
        return (*out, {**info, "invalid_action": jnp.bool_(False)})

    # ---- tasks ----------------------------------------------------------------------------

    def params_for(self, start_cell, goal=None) -> PointMazeParams:
        """Params for an explicit start cell `(row, col)` and goal position xy `(2,)` (default:
        the d4rl goal cell's centre). Host-side (concrete values)."""
        i, j = (int(v) for v in start_cell)
        if not (0 <= i < self.height and 0 <= j < self.width) or self.walls[i, j]:
            raise ValueError(f"start cell {(i, j)} is not a free cell of the maze")
        if goal is None:
            if self.goal_cell is None:
                raise ValueError("task='random_goal' has no default goal: pass goal=(x, y)")
            goal = self.cell_centre(*self.goal_cell)
        return self._params(jnp.asarray(self.cell_centre(i, j)), jnp.asarray(goal, jnp.float32))

    def _params(self, start, goal) -> PointMazeParams:
        return PointMazeParams(start=start, goal=goal,
                               reset_noise=jnp.float32(self.reset_noise),
                               goal_radius=jnp.float32(self.goal_radius),
                               max_steps_in_episode=jnp.int32(self.episode_length))

    def task_params(self, task_ids) -> PointMazeParams:
        """Params for task ids: int `()` -> one task, int `(n,)` -> params batched along n.

        Deterministic in (`seed`, id) and traceable; concrete ids must be >= 0.
        """
        ids = as_task_ids(task_ids, self.num_tasks)
        if not isinstance(ids, jax.core.Tracer) and ids.size and int(ids.min()) < 0:
            raise ValueError(f"task ids must be >= 0, got {int(ids.min())}")
        if ids.ndim == 0:
            return self._draw_one(ids)
        return self._draw_batch(ids.reshape(-1))

    def _task_params_one(self, task_id) -> PointMazeParams:
        key_goal, key_start, key_noise = jax.random.split(task_key(self.seed, task_id), 3)
        free, n = self._free_cells, self._free_cells.shape[0]
        if self.task == "d4rl":
            goal_id = self.goal_cell[0] * self.width + self.goal_cell[1]
            goal = self._centres[goal_id]
            goal_slot = jnp.argmax(free == goal_id)
        else:
            goal_slot = jax.random.randint(key_goal, (), 0, n)
            noise = jax.random.uniform(key_noise, (2,), jnp.float32, -1.0, 1.0) * self.goal_noise
            goal = self._centres[free[goal_slot]] + noise
        # Start among the other n - 1 free cells: skip over the goal's slot.
        start_slot = jax.random.randint(key_start, (), 0, n - 1)
        start_slot = start_slot + (start_slot >= goal_slot).astype(jnp.int32)
        return self._params(self._centres[free[start_slot]], goal)

    # ---- expert ---------------------------------------------------------------------------

    def waypoint_action(self, state: PointMazeState, params: PointMazeParams, key=None,
                        noise_scale=0.0) -> jax.Array:
        """Waypoint controller action float32 `(2,)` in [-1, 1].

        PD control toward the centre of the next cell on a shortest path to the goal's cell (the
        goal itself once in that cell); with `key`, Gaussian noise of std `noise_scale` (float or
        traced scalar) is added before clipping.
        """
        cell, goal_cell = self.cell_index(state.pos), self.cell_index(params.goal)
        target = jnp.where(cell == goal_cell, params.goal,
                           self._centres[self._next_cell[cell, goal_cell]])
        action = KP * (target - state.pos) - KD * state.vel
        if key is not None:
            action = action + noise_scale * jax.random.normal(key, (2,), jnp.float32)
        return jnp.clip(action, -1.0, 1.0)

    def expert_action(self, state: PointMazeState, params: PointMazeParams) -> jax.Array:
        """The noiseless waypoint controller's action, float32 `(2,)`."""
        return self.waypoint_action(state, params)


def check_continuous_action(action, action_dim: int) -> None:
    """Raise `InvalidActionError` unless `action` is a real `(action_dim,)` vector; concrete
    actions must also be finite and within [-1, 1] (traced ones are clipped by the env)."""
    shape = tuple(np.shape(action))
    if shape != (action_dim,):
        raise InvalidActionError(f"actions must have shape ({action_dim},), got {shape}")
    dtype = action.dtype if isinstance(action, jax.core.Tracer) else np.asarray(action).dtype
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        raise InvalidActionError(f"actions must be real numbers, got dtype {dtype}")
    if isinstance(action, jax.core.Tracer):
        return
    values = np.asarray(action, np.float64)
    if not np.isfinite(values).all() or np.abs(values).max() > 1.0:
        raise InvalidActionError(f"action {values.tolist()} is outside [-1, 1] (values are only "
                                 "clipped under jit/vmap)")
