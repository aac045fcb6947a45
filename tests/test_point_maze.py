"""Point maze: MuJoCo-equivalent dynamics, contacts, task modes, action checks, waypoint expert.

Equivalence with gymnasium-robotics' PointMaze (measured with gymnasium-robotics 1.4.2, mujoco
4.0.0, float32 JAX on x86 CPU):
* free motion, 5 x 100 random steps: max |error| 4.4e-6 in position and velocity (asserted < 2e-5);
* with wall contact, one step from MuJoCo's own state (3 layouts x 2 runs x 300 steps of
  persistent random pushes into walls): max 9.9e-6 (asserted < 5e-5); the same step in float64
  agrees to 4e-14, so the contact model is MuJoCo's and what remains is float32 rounding;
* with wall contact, whole 300-step rollouts: contact forces are stiff (an error dp in position
  changes the velocity by about h*K*dp = 27 dp), so rounding grows at every impact: measured up to
  3.8e-3 in position and 1.5e-2 in velocity (asserted < 2e-2 and < 1e-1).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.envs.continuous import PointMaze, PointMazeState, next_cell_table, parse_layout
from icrl_jax.envs.continuous import point_maze as pm
from icrl_jax.envs.base import InvalidActionError

LAYOUTS = ("umaze", "medium", "large")


def state_at(pos, vel=(0.0, 0.0), time=0) -> PointMazeState:
    return PointMazeState(pos=jnp.asarray(pos, jnp.float32), vel=jnp.asarray(vel, jnp.float32),
                          time=jnp.int32(time))


def rollout_physics(env, pos, actions):
    """Our float32 trajectory from rest at pos: (T, 4) position and velocity after each step."""
    def body(carry, a):
        p, v = env.physics(*carry, jnp.clip(a, -1.0, 1.0))
        return (p, v), jnp.concatenate([p, v])

    init = (jnp.asarray(pos, jnp.float32), jnp.zeros(2, jnp.float32))
    return np.asarray(jax.jit(lambda a: jax.lax.scan(body, init, a)[1])(
        jnp.asarray(actions, jnp.float32)), np.float64)


# ---- layouts and geometry -----------------------------------------------------------------


def test_layouts_match_gymnasium_robotics_maps_and_d4rl_goals():
    maps = pytest.importorskip("gymnasium_robotics.envs.maze.maps")
    for name, ref, goal in (("umaze", maps.U_MAZE, (1, 1)), ("medium", maps.MEDIUM_MAZE, (6, 6)),
                            ("large", maps.LARGE_MAZE, (7, 9))):
        env = PointMaze(name)
        np.testing.assert_array_equal(env.walls, np.array(ref, dtype=bool))
        assert env.goal_cell == goal
        params = env.default_params
        np.testing.assert_allclose(params.goal, env.cell_centre(*goal))
    assert PointMaze("umaze").walls.shape == (5, 5)
    assert PointMaze("medium").walls.shape == (8, 8)
    assert PointMaze("large").walls.shape == (9, 12)
    assert [PointMaze(n).episode_length for n in LAYOUTS] == [300, 600, 800]


def test_cell_geometry_matches_gymnasium_robotics():
    maze_v4 = pytest.importorskip("gymnasium_robotics.envs.maze.maze_v4")
    maps = pytest.importorskip("gymnasium_robotics.envs.maze.maps")
    ref = maze_v4.Maze(maps.LARGE_MAZE, 1.0, 0.4)
    env = PointMaze("large")
    for i, j in [(1, 1), (7, 9), (3, 6), (5, 10)]:
        xy = ref.cell_rowcol_to_xy(np.array([i, j]))
        np.testing.assert_allclose(env.cell_centre(i, j), xy, atol=1e-6)
        off = xy + np.array([0.3, -0.2])
        np.testing.assert_array_equal(env.cell_of(jnp.asarray(off, jnp.float32)),
                                      ref.cell_xy_to_rowcol(off))


def test_bad_layouts_and_arguments_raise():
    with pytest.raises(ValueError, match="layout"):
        PointMaze("huge")
    with pytest.raises(ValueError, match="task"):
        PointMaze("umaze", task="sparse")
    with pytest.raises(ValueError, match="walls"):
        parse_layout(["#.#", "#.#", "###"])
    with pytest.raises(ValueError, match="same length"):
        parse_layout(["###", "#.##", "###"])
    with pytest.raises(ValueError, match="episode_length"):
        PointMaze([[1, 1, 1, 1], [1, 0, 0, 1], [1, 1, 1, 1]], task="random_goal")
    with pytest.raises(ValueError, match="goal cell"):
        PointMaze([[1, 1, 1, 1], [1, 0, 0, 1], [1, 1, 1, 1]], episode_length=10)
    with pytest.raises(ValueError, match="not a free cell"):
        PointMaze("umaze", goal_cell=(2, 1))
    with pytest.raises(ValueError, match="task ids"):
        PointMaze("umaze").task_params(-1)


def test_next_cell_table_walks_shortest_paths():
    walls, _ = parse_layout(PointMaze("medium").walls.astype(int))
    table = next_cell_table(walls)
    w = walls.shape[1]
    start, goal = 1 * w + 1, 6 * w + 6
    path = [start]
    while path[-1] != goal and len(path) < 64:
        nxt = table[path[-1], goal]
        assert abs(nxt // w - path[-1] // w) + abs(nxt % w - path[-1] % w) == 1  # 4-neighbours
        assert not walls.ravel()[nxt]
        path.append(nxt)
    # Shortest route in medium from (1, 1) to (6, 6), by hand on the map: (1,2) (2,2) (3,2)
    # (3,3) (3,4) (4,4) (4,5) (4,6) (5,6) (6,6), 10 moves.
    assert path[-1] == goal and len(path) - 1 == 10


# ---- dynamics -----------------------------------------------------------------------------


def test_constants_are_the_compiled_mujoco_model():
    point_maze = pytest.importorskip("gymnasium_robotics.envs.maze.point_maze")
    ref = point_maze.PointMazeEnv()
    m = ref.point_env.model
    particle = m.geom("particle_geom").id
    assert m.body_mass[1] == pytest.approx(pm.MASS, rel=1e-12)
    np.testing.assert_array_equal(m.dof_damping, [pm.DAMPING] * 2)
    np.testing.assert_array_equal(m.dof_armature, [0.0, 0.0])
    np.testing.assert_array_equal(m.actuator_gear[:, 0], [pm.GEAR] * 2)
    assert m.opt.timestep == pm.TIMESTEP and ref.point_env.frame_skip == 1
    assert m.geom_size[particle, 0] == pm.RADIUS
    assert 2 * m.geom_margin[particle] == pytest.approx(pm.CONTACT_MARGIN)
    assert m.body_invweight0[1, 0] == pytest.approx(1.0 / pm.MASS)


def test_free_motion_matches_hand_formula():
    env = PointMaze("umaze")
    m, h = pm.MASS, pm.TIMESTEP
    # Centre of cell (3, 2): no wall within reach for one step.
    pos, vel, ctrl = np.array([0.0, -1.0]), np.array([0.5, -0.25]), np.array([0.3, -1.0])
    p, v = env.physics(jnp.asarray(pos, jnp.float32), jnp.asarray(vel, jnp.float32),
                       jnp.asarray(ctrl, jnp.float32))
    v_expected = (m * vel + h * 100.0 * ctrl) / (m + h * 1.0)  # implicit damping
    np.testing.assert_allclose(v, v_expected, rtol=1e-6)
    np.testing.assert_allclose(p, pos + h * v_expected, atol=1e-7)
    # The velocity is clipped to [-5, 5] before the step, as gymnasium-robotics' PointEnv does.
    _, v = env.physics(jnp.asarray(pos, jnp.float32), jnp.asarray([9.0, -7.0], jnp.float32),
                       jnp.zeros(2, jnp.float32))
    np.testing.assert_allclose(v, np.array([5.0, -5.0]) * m / (m + h), rtol=1e-6)


def test_contact_hand_worked_step():
    """Point at rest touching the wall block right of U-maze cell (3, 3) (face at x = 1.5, so
    touching at x = 1.4), pushed into it with ctrl (1, 0).

    By hand: within the margin 0.004 the violation is -0.004, past solimp's width, so imp = 0.95
    and D = imp / ((1 - imp) / m) = 19 m. aref = K * imp * 0.004 with K = 1 / (0.95 * 0.02)^2,
    i.e. 2770.08 * 0.95 * 0.004 = 10.526. Along the wall normal n = (-1, 0): a0.n = -100 / m,
    so the row is active and n.a = (m * (-100 / m) + D * aref) / (m + D) = (-100 + 19 m aref)
    / (20 m) = 8.806. The contact force is m (a - a0) = -136.9 N along x and
    v' = h (100 - 136.9) / (m + h) = -0.0879: the soft contact pushes the point back out of the
    margin band; y is untouched.
    """
    env = PointMaze("umaze")
    m, h = pm.MASS, pm.TIMESTEP
    aref = 0.95 * 0.004 / (0.95 * 0.02) ** 2
    acc_n = (-100.0 + 19 * m * aref) / (20 * m)
    force = m * (-acc_n - 100.0 / m)
    v_expected = h * (100.0 + force) / (m + h)
    assert v_expected == pytest.approx(-0.0879, abs=1e-4)
    p, v = env.physics(jnp.asarray([1.4, -1.0], jnp.float32), jnp.zeros(2, jnp.float32),
                       jnp.asarray([1.0, 0.0], jnp.float32))
    np.testing.assert_allclose(v, [v_expected, 0.0], atol=1e-5)
    np.testing.assert_allclose(p, [1.4 + h * v_expected, -1.0], atol=1e-6)


def test_push_into_wall_stops_there_and_slides_along_it():
    env = PointMaze("umaze")
    # From the centre of cell (3, 3) push right: the wall face is at x = 1.5, contact at 1.4.
    traj = rollout_physics(env, [1.0, -1.0], np.tile([1.0, 0.0], (150, 1)))
    x, vx = traj[:, 0], traj[:, 2]
    assert x.max() < 1.4 + 0.06  # sinks at most one step's travel into the contact
    assert 1.39 < x[-1] < 1.4 and abs(vx[-1]) < 1e-3  # at rest against the wall
    np.testing.assert_allclose(traj[:, 1], -1.0)  # a head-on push has no sideways force
    # Push right and up: the point slides up the wall (x stays at it) into the top-right corner.
    traj = rollout_physics(env, [1.0, -1.0], np.tile([1.0, 0.5], (400, 1)))
    x, y = traj[:, 0], traj[:, 1]
    touching = np.flatnonzero(x > 1.39)
    assert touching.size and np.all((x[touching[0]:] > 1.38) & (x[touching[0]:] < 1.46))
    sliding = y[touching[0]:np.argmax(y > 1.3)]  # until it meets the top wall (and bounces)
    assert sliding.size > 20 and np.all(np.diff(sliding) > 0)  # keeps going up along the wall
    # Corner of cell (1, 3): walls at x = 1.5 and y = 1.5.
    np.testing.assert_allclose(traj[-1, :2], [1.3966, 1.3966], atol=2e-3)
    np.testing.assert_allclose(traj[-1, 2:], 0.0, atol=1e-3)


def _reference_env(layout_map, start_xy):
    point_maze = pytest.importorskip("gymnasium_robotics.envs.maze.point_maze")
    ref = point_maze.PointMazeEnv(maze_map=layout_map, continuing_task=True)
    ref.reset(seed=0)
    ref.point_env.set_state(np.asarray(start_xy, np.float64), np.zeros(2))
    return ref


def test_free_motion_matches_gymnasium_robotics_step_by_step():
    pytest.importorskip("gymnasium_robotics")
    open_map = [[1] * 21] + [[1] + [0] * 19 + [1] for _ in range(19)] + [[1] * 21]
    env = PointMaze(open_map, episode_length=10_000, goal_cell=(1, 1))
    start = env.cell_centre(10, 10)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(5):
        # Uniform in [-1.2, 1.2]: some components are out of range and must be clipped alike.
        actions = rng.uniform(-1.2, 1.2, (100, 2))
        ref = _reference_env(open_map, start)
        expected = np.array([ref.step(a)[0]["observation"] for a in actions])
        ours = rollout_physics(env, start, actions)
        assert np.abs(ours[:, :2] - start).max() < 8.5  # stayed clear of the walls
        worst = max(worst, np.abs(ours - expected).max())
    assert worst < 2e-5, worst


@pytest.mark.parametrize("layout", LAYOUTS)
def test_wall_contacts_match_gymnasium_robotics(layout):
    maps = pytest.importorskip("gymnasium_robotics.envs.maze.maps")
    layout_map = {"umaze": maps.U_MAZE, "medium": maps.MEDIUM_MAZE,
                  "large": maps.LARGE_MAZE}[layout]
    env = PointMaze(layout, episode_length=10_000)
    physics = jax.jit(env.physics)
    free = np.argwhere(~env.walls)
    for seed in range(2):
        rng = np.random.default_rng(seed)
        actions = np.repeat(rng.uniform(-1, 1, (15, 2)), 20, axis=0)  # 300 steps of pushing
        start = env.cell_centre(*free[rng.integers(len(free))])
        ref = _reference_env(layout_map, start)
        data = ref.point_env.data
        expected, one_step, contact_steps = [], 0.0, 0
        for a in actions:
            pos, vel = data.qpos.copy(), data.qvel.copy()
            expected.append(ref.step(a)[0]["observation"])
            contact_steps += int(any(c.frame[0] != 0 or c.frame[1] != 0
                                     for c in data.contact[:data.ncon]))  # walls, not the floor
            p, v = physics(jnp.asarray(pos, jnp.float32), jnp.asarray(vel, jnp.float32),
                           jnp.asarray(a, jnp.float32))
            one_step = max(one_step, np.abs(np.concatenate([p, v]) - expected[-1]).max())
        assert contact_steps > 30  # the runs do exercise the walls
        assert one_step < 5e-5, one_step
        err = np.abs(rollout_physics(env, start, actions) - np.array(expected))
        assert err[:, :2].max() < 2e-2 and err[:, 2:].max() < 1e-1, err.max(0)


# ---- tasks, rewards, actions ---------------------------------------------------------------


def test_d4rl_sparse_reward_no_termination_and_time_limit():
    env = PointMaze("umaze", task="d4rl")
    params = env.default_params
    goal = np.asarray(params.goal)
    key = jax.random.PRNGKey(0)
    step = jax.jit(env.step)
    # 0.45 from the goal, at rest, no push: inside D4RL's 0.5 radius.
    obs, state, reward, term, trunc, info = step(key, state_at(goal + [0.45, 0.0]), jnp.zeros(2),
                                                 params)
    assert reward == 1.0 and bool(info["success"]) and not term and not trunc
    np.testing.assert_allclose(obs[4:], goal)
    _, _, reward, term, _, info = step(key, state_at(goal + [0.6, 0.0]), jnp.zeros(2), params)
    assert reward == 0.0 and not info["success"] and not term
    # The last step of the time limit truncates and auto-resets to the start.
    obs, state, _, term, trunc, _ = step(key, state_at(goal, time=299), jnp.zeros(2), params)
    assert bool(trunc) and not term and int(state.time) == 0
    assert np.abs(np.asarray(state.pos) - np.asarray(params.start)).max() <= 0.25


def test_random_goal_dense_reward_and_termination():
    env = PointMaze("medium", task="random_goal")
    params = env.task_params(3)
    goal = np.asarray(params.goal, np.float64)
    key = jax.random.PRNGKey(0)
    step = jax.jit(env.step)
    # A step from a cell centre at least 1 away: reward = previous distance - new distance.
    free = np.argwhere(~env.walls)
    start_cell = [c for c in free if np.abs(env.cell_centre(*c) - goal).sum() > 1.0][0]
    pos0 = env.cell_centre(*start_cell)
    action = jnp.asarray(np.clip(goal - pos0, -1, 1), jnp.float32)
    obs, state, reward, term, trunc, info = step(key, state_at(pos0, vel=(0.3, -0.2)), action,
                                                 params)
    p, _ = env.physics(jnp.asarray(pos0, jnp.float32), jnp.asarray([0.3, -0.2], jnp.float32),
                       action)
    expected = np.linalg.norm(pos0 - goal) - np.linalg.norm(np.asarray(p) - goal)
    assert float(reward) == pytest.approx(expected, abs=1e-5)
    assert not term and not info["success"]
    # Reaching the goal terminates with success, and the auto-reset returns to the start. The
    # goal cell's centre is within 0.25 * sqrt(2) < 0.5 of the goal.
    centre = env.cell_centre(*np.asarray(env.cell_of(params.goal)))
    obs, state, reward, term, trunc, info = step(key, state_at(centre), jnp.zeros(2), params)
    assert bool(term) and bool(info["success"]) and not trunc
    assert float(reward) == pytest.approx(0.0, abs=1e-5)  # at rest: no progress
    np.testing.assert_allclose(info["final_observation"][:2], centre, atol=1e-6)
    assert np.abs(np.asarray(state.pos) - np.asarray(params.start)).max() <= 0.25
    assert int(state.time) == 0


def test_task_params_are_deterministic_batched_and_valid():
    for task in ("d4rl", "random_goal"):
        env = PointMaze("large", task=task)
        batch = env.task_params(jnp.arange(32))
        assert batch.start.shape == (32, 2) and batch.goal.shape == (32, 2)
        assert batch.start.dtype == jnp.float32 and batch.max_steps_in_episode.shape == (32,)
        again = env.task_params(jnp.arange(32))
        np.testing.assert_array_equal(batch.start, again.start)
        np.testing.assert_array_equal(batch.goal, again.goal)
        np.testing.assert_array_equal(env.task_params(5).goal, batch.goal[5])
        start_cells = np.asarray(env.cell_of(batch.start))
        goal_cells = np.asarray(env.cell_of(batch.goal))
        assert not env.walls[start_cells[:, 0], start_cells[:, 1]].any()
        assert not env.walls[goal_cells[:, 0], goal_cells[:, 1]].any()
        assert (start_cells != goal_cells).any(-1).all()
        np.testing.assert_allclose(batch.start, env.cell_centre(start_cells[:, 0],
                                                                start_cells[:, 1]))
        assert len({tuple(c) for c in start_cells}) > 10
        offsets = np.asarray(batch.goal) - env.cell_centre(goal_cells[:, 0], goal_cells[:, 1])
        if task == "d4rl":
            assert (goal_cells == [7, 9]).all() and np.abs(offsets).max() == 0
        else:
            assert len({tuple(c) for c in goal_cells}) > 10
            assert 0 < np.abs(offsets).max() <= 0.25
    # A different seed gives different draws.
    assert not np.array_equal(PointMaze("large", seed=1).task_params(jnp.arange(8)).start,
                              PointMaze("large").task_params(jnp.arange(8)).start)


def test_vmap_over_task_params():
    env = PointMaze("medium", task="random_goal")
    params = env.task_params(jnp.arange(16))
    keys = jax.random.split(jax.random.PRNGKey(0), 16)
    obs, state = jax.vmap(env.reset)(keys, params)
    assert obs.shape == (16, 6) and obs.dtype == jnp.float32
    np.testing.assert_array_equal(obs[:, 4:], params.goal)
    assert np.abs(np.asarray(obs[:, :2] - params.start)).max() <= 0.25
    actions = jnp.tile(jnp.asarray([[0.5, -0.5]]), (16, 1))
    obs2, state2, reward, term, trunc, info = jax.jit(jax.vmap(env.step))(keys, state, actions,
                                                                          params)
    assert obs2.shape == (16, 6) and reward.shape == (16,) and info["success"].shape == (16,)
    one = env.step(keys[3], jax.tree.map(lambda x: x[3], state), actions[3],
                   jax.tree.map(lambda x: x[3], params))
    np.testing.assert_allclose(obs2[3], one[0], atol=1e-6)


def test_jit_step_clips_actions():
    env = PointMaze("umaze")
    params, key = env.default_params, jax.random.PRNGKey(0)
    state = state_at(env.cell_centre(3, 2), vel=(0.1, 0.2))
    step = jax.jit(env.step)
    clipped = step(key, state, jnp.asarray([5.0, -3.0]), params)
    inside = step(key, state, jnp.asarray([1.0, -1.0]), params)
    np.testing.assert_array_equal(clipped[0], inside[0])
    nan = step(key, state, jnp.asarray([jnp.nan, 0.5]), params)
    np.testing.assert_array_equal(nan[0], step(key, state, jnp.asarray([0.0, 0.5]), params)[0])
    assert not bool(clipped[5]["invalid_action"])


def test_eager_bad_actions_raise():
    env = PointMaze("umaze")
    params, key = env.default_params, jax.random.PRNGKey(0)
    state = state_at(env.cell_centre(3, 2))
    with pytest.raises(InvalidActionError, match=r"outside \[-1, 1\]"):
        env.step(key, state, jnp.asarray([1.5, 0.0]), params)
    with pytest.raises(ValueError, match=r"outside \[-1, 1\]"):
        env.step(key, state, np.array([np.nan, 0.0]), params)
    with pytest.raises(InvalidActionError, match=r"shape \(2,\), got \(3,\)"):
        env.step(key, state, jnp.zeros(3), params)
    with pytest.raises(InvalidActionError, match=r"got \(\)"):
        env.step(key, state, 0.5, params)
    with pytest.raises(InvalidActionError, match=r"got \(1, 2\)"):
        jax.jit(env.step)(key, state, jnp.zeros((1, 2)), params)  # shapes are checked under jit
    with pytest.raises(InvalidActionError, match="dtype bool"):
        env.step(key, state, np.array([True, False]), params)
    obs, *_ = env.step(key, state, [0.5, -0.5], params)  # lists of floats are fine
    assert obs.shape == (6,)


# ---- expert, registry ----------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_waypoint_controller_reaches_goal_from_random_starts(layout):
    env = PointMaze(layout, task="d4rl")
    params = env.task_params(jnp.arange(12))
    keys = jax.random.split(jax.random.PRNGKey(1), 12)

    def episode(key, p):
        _, state = env.reset(key, p)

        def body(s, k):
            a = env.expert_action(s, p)
            _, s, _, _, _, info = env.transition(k, s, a, p)
            return s, info["success"]

        return jax.lax.scan(body, state, jax.random.split(key, env.episode_length))[1]

    success = np.asarray(jax.jit(jax.vmap(episode))(keys, params))
    assert success.any(1).all(), success.any(1)
    # Measured: the goal is reached by step 122 / 199 / 355 of 300 / 600 / 800 (umaze / medium
    # / large, 64 starts); the expert then stays there.
    first = success.argmax(1)
    assert (first < env.episode_length * 0.75).all()
    assert success[np.arange(12), -1].all()


def test_noisy_waypoint_action():
    env = PointMaze("umaze")
    params = env.default_params
    state = state_at(env.cell_centre(3, 1))
    clean = env.waypoint_action(state, params)
    # In cell (3, 1) the next cell on the way to (1, 1) is (3, 2): push right, at full force.
    np.testing.assert_allclose(clean, [1.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(env.expert_action(state, params), clean)
    keys = jax.random.split(jax.random.PRNGKey(0), 256)
    # Moving right at 9.5: 10 * 1.0 (distance to (3, 2)'s centre) - 1 * 9.5 = 0.5.
    moving = state_at(env.cell_centre(3, 1), vel=(9.5, 0.0))
    base = env.waypoint_action(moving, params)
    noisy = jax.vmap(lambda k: env.waypoint_action(moving, params, k, 0.3))(keys)
    assert np.abs(noisy).max() <= 1.0
    np.testing.assert_allclose(base, [0.5, 0.0], atol=1e-5)
    assert 0.2 < float(jnp.std(noisy[:, 1])) < 0.4
    np.testing.assert_allclose(jax.vmap(lambda k: env.waypoint_action(moving, params, k, 0.0))(
        keys), np.tile(base, (256, 1)), atol=1e-7)


def test_registry_and_spec_attributes():
    env = envs.make("point_maze", layout="large", task="random_goal")
    assert isinstance(env, PointMaze) and env.name == "point_maze"
    assert env.continuous_actions and env.action_dim == 2 and env.num_actions == 0
    assert env.num_observations is None and env.observation_shape == (6,)
    assert env.has_oracle and not env.pixels and not env.host and env.kind == "episodic"
    assert env.episode_length == 800 and env.num_tasks is None
    assert env.action_space().shape == (2,) and env.observation_space().shape == (6,)
    with pytest.raises(TypeError, match="continuous"):
        env.action_mask(env.default_params)
    assert math.isclose(pm.MASS, 4.18879, rel_tol=1e-6)
