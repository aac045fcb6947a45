"""XLand-MiniGrid through xminigrid: the registered envs, hand-worked steps, the ruleset
generator and its splits."""

from __future__ import annotations

import bz2
import json
import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("xminigrid")
h5py = pytest.importorskip("h5py")

import xminigrid  # noqa: E402
from xminigrid.core.constants import TILES_REGISTRY, Colors, Tiles  # noqa: E402
from xminigrid.core.goals import AgentHoldGoal  # noqa: E402
from xminigrid.core.rules import EmptyRule  # noqa: E402

from icrl_jax import envs  # noqa: E402
from icrl_jax.core.errors import UserError  # noqa: E402
from icrl_jax.data import xland_hdf5 as H  # noqa: E402
from icrl_jax.envs import xland_rulesets as R  # noqa: E402
from icrl_jax.envs.xland import ENV_IDS, XLAND_IDS  # noqa: E402
from helpers import check_env_contract  # noqa: E402

FORWARD, RIGHT, LEFT, PICK_UP = 0, 1, 2, 3


def test_every_xminigrid_env_is_registered_under_its_own_id():
    assert set(ENV_IDS) == set(xminigrid.registered_environments())
    assert set(ENV_IDS) <= set(envs.REGISTRY.names())
    env = envs.make("XLand-MiniGrid-R1-9x9", num_rulesets=20)
    assert (env.name, env.observation_shape, env.num_actions, env.num_tasks, env.episode_length) == (
        "XLand-MiniGrid-R1-9x9", (5, 5, 2), 6, 20, 3 * 9 * 9)


def test_xland_meets_the_env_contract_with_its_rulesets_as_tasks():
    env = envs.make("XLand-MiniGrid-R4-13x13", num_rulesets=5)
    first, (obs, rewards, *_) = check_env_contract(env)
    assert first.dtype == jnp.uint8 and obs.dtype == jnp.uint8
    params = env.task_params(jnp.arange(3))
    np.testing.assert_array_equal(params.env_params.ruleset.goal, env.benchmark.goals[:3])


def test_empty_5x5_by_hand_walks_to_the_goal_and_auto_resets():
    """MiniGrid-Empty-5x5: the agent starts at (1, 1) facing right, the goal is at (3, 3);
    forward, forward, turn right, forward, forward reaches it on step 5 of 100."""
    env = envs.make("MiniGrid-Empty-5x5")
    params = env.task_params(0)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    agent = state.timestep.state.agent
    assert agent.position.tolist() == [1, 1] and int(agent.direction) == 1
    # The view is rotated so the agent (bottom centre) looks up: the goal is 2 ahead, 2 right.
    assert obs[6, 3].tolist() == [Tiles.FLOOR, Colors.BLACK]
    assert obs[4, 5].tolist() == [Tiles.GOAL, Colors.GREEN]
    positions, rewards, terminated = [], [], []
    for action in (FORWARD, FORWARD, RIGHT, FORWARD, FORWARD):
        obs, state, reward, term, trunc, info = env.step(jax.random.PRNGKey(1), state, action, params)
        positions.append(state.timestep.state.agent.position.tolist())
        rewards.append(float(reward))
        terminated.append(bool(term))
        assert not bool(trunc)
    assert positions[:4] == [[1, 2], [1, 3], [1, 3], [2, 3]]
    assert rewards == pytest.approx([0, 0, 0, 0, 1 - 0.9 * 5 / 100])
    assert terminated == [False, False, False, False, True]
    assert positions[4] == [1, 1] and int(state.time) == 0  # auto-reset, same task
    assert info["final_observation"][6, 3].tolist() == [Tiles.GOAL, Colors.GREEN]


def test_xland_by_hand_picking_up_the_goal_ball_ends_the_episode():
    """A ruleset "hold the red ball": the agent facing the ball picks it up on step 1."""
    env = envs.make("XLand-MiniGrid-R1-9x9", num_rulesets=3)
    ball = TILES_REGISTRY[Tiles.BALL, Colors.RED]
    params = env.task_params(0)
    ruleset = params.env_params.ruleset.replace(
        goal=AgentHoldGoal(tile=ball).encode(), rules=EmptyRule().encode()[None],
        init_tiles=jnp.zeros_like(params.env_params.ruleset.init_tiles))
    params = params.replace(env_params=params.env_params.replace(ruleset=ruleset))
    _, state = env.reset(jax.random.PRNGKey(0), params)
    inner = state.timestep.state
    inner = inner.replace(grid=inner.grid.at[3, 4].set(ball),
                          agent=inner.agent.replace(position=jnp.array([4, 4]), direction=jnp.asarray(0)))
    state = state.replace(timestep=state.timestep.replace(state=inner))
    obs, after, reward, term, trunc, info = env.step(jax.random.PRNGKey(1), state, RIGHT, params)
    assert float(reward) == 0 and not bool(term)  # turning: the ball is now to the left
    obs, after, reward, term, trunc, info = env.step(jax.random.PRNGKey(1), state, PICK_UP, params)
    assert float(reward) == pytest.approx(1 - 0.9 / 243) and bool(term) and not bool(trunc)
    assert info["final_observation"][3, 2].tolist() == [Tiles.FLOOR, Colors.BLACK]  # picked up


def test_xland_invalid_traced_action_is_a_no_op():
    env = envs.make("XLand-MiniGrid-R1-9x9", num_rulesets=3)
    params = env.task_params(1)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    step = jax.jit(lambda s, a: env.step(jax.random.PRNGKey(1), s, a, params))
    new_obs, new_state, reward, term, trunc, info = step(state, jnp.int32(6))
    assert bool(info["invalid_action"]) and float(reward) == 0
    np.testing.assert_array_equal(new_obs, obs)
    assert int(new_state.time) == 0


def test_truncation_at_max_steps():
    env = envs.make("XLand-MiniGrid-R1-9x9", num_rulesets=3, max_steps=4)
    params = env.task_params(0)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    truncated = []
    for _ in range(4):
        _, state, _, term, trunc, _ = env.step(jax.random.PRNGKey(1), state, LEFT, params)
        truncated.append(bool(trunc))
    assert truncated == [False, False, False, True] and int(state.time) == 0


# ---------------------------------------------------------------- rulesets

def test_generated_rulesets_are_deterministic_unique_and_in_xminigrid_encodings():
    a = R.generate_benchmark.__wrapped__("trivial", 64, 3)
    b = R.generate_benchmark.__wrapped__("trivial", 64, 3)
    c = R.generate_benchmark.__wrapped__("trivial", 64, 4)
    for key in ("goals", "rules", "init_tiles", "num_rules"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.goals, c.goals)
    goals = np.asarray(a.goals)
    assert goals.shape == (64, 5) and goals.dtype == np.uint8
    assert len({g.tobytes() for g in goals}) == 64  # unique (trivial rulesets have no rules)
    assert (np.asarray(a.num_rules) == 0).all() and not np.asarray(a.rules).any()
    # Goal kinds: hold (1), agent near (3, 11-14), tile near (4, 7-10); its tiles are placed.
    assert set(goals[:, 0]) <= {1, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14}
    for goal, tiles in zip(goals, np.asarray(a.init_tiles)):
        placed = {tuple(t) for t in tiles if t.any()}
        needed = [tuple(goal[1:3])] + ([tuple(goal[3:5])] if goal[0] in (4, 7, 8, 9, 10) else [])
        assert set(needed) <= placed and len(placed) == len(needed) + 3  # three distractors


def test_small_rulesets_produce_what_their_goal_needs():
    bench = R.generate_benchmark.__wrapped__("small", 200, 0)
    rules, goals = np.asarray(bench.rules), np.asarray(bench.goals)
    num_rules = np.asarray(bench.num_rules)
    assert num_rules.max() >= 2 and (num_rules == 0).any()
    for goal, ruleset, tiles, n in zip(goals, rules, np.asarray(bench.init_tiles), num_rules):
        assert (ruleset[:, 0] != 0).sum() == n
        placed = {tuple(t) for t in tiles if t.any()}
        products = {tuple(r[3:5] if r[0] in (1, 2, 8, 9, 10, 11) else r[5:7]) for r in ruleset if r[0]}
        needed = [tuple(goal[1:3])] + ([tuple(goal[3:5])] if goal[0] in (4, 7, 8, 9, 10) else [])
        assert set(needed) <= placed | products


def test_splits_are_disjoint_and_deterministic():
    bench = R.generate_benchmark("trivial", 50, 0)
    (train, test), (train_bench, test_bench) = R.split_benchmark(bench, 40, 10, seed=2)
    (train2, test2), _ = R.split_benchmark(bench, 40, 10, seed=2)
    np.testing.assert_array_equal(train, train2)
    np.testing.assert_array_equal(test, test2)
    assert not set(train) & set(test) and len(set(train) | set(test)) == 50
    np.testing.assert_array_equal(test_bench.goals, np.asarray(bench.goals)[test])


def test_benchmark_file_round_trip_through_xminigrids_loader(tmp_path):
    bench = R.generate_benchmark("small", 30, 1)
    path = str(tmp_path / "small_30")
    R.save_benchmark(bench, path)
    with bz2.open(path, "rb") as f:
        assert set(pickle.load(f)) == {"goals", "rules", "init_tiles", "num_rules"}
    loaded = xminigrid.benchmarks.load_benchmark_from_path(path)
    env = envs.make("XLand-MiniGrid-R1-9x9", benchmark=path)
    assert env.num_tasks == 30
    for key in ("goals", "rules", "init_tiles", "num_rules"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(bench, key))
    np.testing.assert_array_equal(env.task_params(jnp.arange(30)).env_params.ruleset.rules, bench.rules)


def test_a_missing_benchmark_file_is_one_line_naming_how_to_get_it(tmp_path):
    with pytest.raises(UserError) as e:
        envs.make("XLand-MiniGrid-R1-9x9", benchmark=str(tmp_path / "trivial_21k"))
    message = str(e.value)
    assert "\n" not in message and "curl" in message and "trivial_21k" in message
    with pytest.raises(UserError, match="generated kinds"):
        R.generate_benchmark("medium", 10, 0)


def test_random_policy_sometimes_solves_trivial_rulesets():
    env = envs.make(XLAND_IDS[0], num_rulesets=16)
    params = env.task_params(jnp.arange(16))

    def rollout(key, p):
        _, state = env.reset(key, p)

        def body(carry, k):
            state, total = carry
            a = jax.random.randint(k, (), 0, 6)
            _, state, r, *_ = env.step(k, state, a, p)
            return (state, total + r), None

        return jax.lax.scan(body, (state, 0.0), jax.random.split(key, 500))[0][1]

    totals = jax.jit(jax.vmap(rollout))(jax.random.split(jax.random.PRNGKey(0), 16), params)
    assert 0 < float((totals > 0).mean()) < 1


# ---------------------------------------------------------------- XLand-100B's HDF5 layout

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "xland_hdf5")


def test_reads_a_file_written_to_xland_100bs_documented_layout():
    path = os.path.join(FIXTURE, "xland_layout.hdf5")
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))
    info = H.file_info(path)
    assert (info.num_tasks, info.histories_per_task, info.num_steps) == (2, 3, 40)
    assert info.env_ids == ["XLand-MiniGrid-R1-9x9"] * 2 and info.benchmark_ids == ["trivial-1m"] * 2
    assert info.ruleset_ids.tolist() == [100, 107]
    tasks = H.read_xland_hdf5(path)
    for i, task in enumerate(tasks):
        assert task.observations.shape == (3, 40, 5, 5, 2) and task.observations.dtype == np.uint8
        np.testing.assert_array_equal(task.observations, expected[f"observations_{i}"])
        np.testing.assert_array_equal(task.rewards, expected[f"rewards_{i}"])
        assert task.rewards.dtype == np.float16 and task.dones.dtype == np.bool_
        assert task.actions.dtype == np.uint8 and task.expert_actions.dtype == np.uint8
        assert task.ruleset_id == 100 + 7 * i
    part = H.read_xland_hdf5(path, num_tasks=1, histories=2, num_steps=25)
    assert len(part) == 1 and part[0].actions.shape == (2, 25)
    np.testing.assert_array_equal(part[0].observations, expected["observations_0"][:2, :25])


def test_the_fixture_is_their_layout_read_with_h5py_alone():
    """The file itself, without our reader: each group's five datasets in the README's dtypes
    and shapes, `states` the observations compressed to `tile * 12 + colour`, the `.attrs`
    strings and an integer; our reader returns every field as stored."""
    path = os.path.join(FIXTURE, "xland_layout.hdf5")
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))
    tasks = H.read_xland_hdf5(path)
    layout = {"states": (np.uint8, (3, 40, 5, 5)), "actions": (np.uint8, (3, 40)),
              "rewards": (np.float16, (3, 40)), "dones": (np.bool_, (3, 40)),
              "expert_actions": (np.uint8, (3, 40))}
    with h5py.File(path, "r") as f:
        assert sorted(f) == ["0", "1"]
        for i, task in enumerate(tasks):
            group = f[str(i)]
            assert sorted(group) == sorted(layout)
            for name, (dtype, shape) in layout.items():
                assert (group[name].dtype, group[name].shape) == (np.dtype(dtype), shape), name
            obs = expected[f"observations_{i}"].astype(np.int64)
            np.testing.assert_array_equal(group["states"][:], obs[..., 0] * 12 + obs[..., 1])
            attrs = dict(group.attrs)
            assert sorted(attrs) == ["benchmark-id", "env-id", "ruleset-id"]
            assert isinstance(attrs["env-id"], str) and isinstance(attrs["benchmark-id"], str)
            assert np.issubdtype(type(attrs["ruleset-id"]), np.integer)
            for name in ("actions", "rewards", "dones", "expert_actions"):
                np.testing.assert_array_equal(getattr(task, name), group[name][:])
                assert getattr(task, name).dtype == group[name].dtype


def test_observation_compression_is_xminigrids_and_inverts():
    from xminigrid.core.constants import NUM_COLORS, NUM_TILES
    assert H.NUM_COLORS == NUM_COLORS
    tiles, colours = np.meshgrid(np.arange(NUM_TILES), np.arange(NUM_COLORS), indexing="ij")
    obs = np.stack([tiles, colours], -1).astype(np.uint8)  # every (tile, colour)
    states = H.compress_obs(obs)
    np.testing.assert_array_equal(states, tiles * NUM_COLORS + colours)
    np.testing.assert_array_equal(H.decompress_obs(states), obs)


def test_our_writer_writes_the_same_layout_and_round_trips(tmp_path):
    fixture = os.path.join(FIXTURE, "xland_layout.hdf5")
    tasks = H.read_xland_hdf5(fixture)
    path = str(tmp_path / "ours.hdf5")
    H.write_xland_hdf5(path, tasks)
    with h5py.File(fixture, "r") as theirs, h5py.File(path, "r") as ours:
        assert sorted(theirs) == sorted(ours) == ["0", "1"]
        for g in theirs:
            assert dict(theirs[g].attrs) == dict(ours[g].attrs)
            assert sorted(theirs[g]) == sorted(ours[g])
            for name in theirs[g]:
                a, b = theirs[g][name], ours[g][name]
                assert (a.shape, a.dtype, a.chunks, a.compression) == (b.shape, b.dtype, b.chunks, b.compression)
                np.testing.assert_array_equal(a[:], b[:])
    again = H.read_xland_hdf5(path)
    for a, b in zip(tasks, again):
        for field in ("observations", "actions", "rewards", "dones", "expert_actions", "ruleset_id"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_files_not_in_the_layout_are_one_line_errors(tmp_path):
    with pytest.raises(UserError) as e:
        H.file_info(str(tmp_path / "xland-trivial-20b.hdf5"))
    assert "\n" not in str(e.value) and "tinyurl.com/trivial-10k" in str(e.value)
    bad = str(tmp_path / "bad.hdf5")
    with h5py.File(bad, "w") as f:
        f.create_group("0").create_dataset("states", data=np.zeros((1, 4, 5, 5), np.uint8))
    with pytest.raises(UserError, match="lacks"):
        H.file_info(bad)


def _hdf5_config(tmp_path, path):
    from icrl_jax.experiments.xland import ad as xland_ad
    from icrl_jax.core.config import set_dotted
    config = xland_ad.get_config("quick")
    for dotted, value in {"data.builder": "xland_hdf5", "data.path": path, "data.num_train_tasks": 2,
                          "data.num_test_tasks": 3, "data.histories_per_task": 3, "data.num_steps": 40,
                          "env.kwargs.num_rulesets": 120, "train.seq_len": 20, "train.num_steps": 2,
                          "train.steps_per_call": 2, "train.batch_size": 2, "train.warmup_steps": 1,
                          "train.log_every": 2, "train.checkpoint_every": 2, "eval.num_steps": 130,
                          "eval.num_envs_per_task": 1, "eval.baselines": ("random",),
                          "run.progress": False}.items():
        set_dotted(config, dotted, value)
    config.workdir = str(tmp_path / "run")
    return config


def test_a_file_in_their_layout_trains_through_data_builder_with_no_conversion(tmp_path):
    """XLand-100B's layout read by `data.builder='xland_hdf5'`: the file's rulesets are the
    training tasks, held-out ones are the benchmark's others, and AD trains and evaluates."""
    from icrl_jax.pipeline import run as RUN
    from icrl_jax.data.builders import open_dataset, task_split
    benchmark = str(tmp_path / "trivial-1m")  # the benchmark the fixture names
    R.save_benchmark(R.generate_benchmark("trivial", 120, 0), benchmark)
    config = _hdf5_config(tmp_path, os.path.join(FIXTURE, "xland_layout.hdf5"))
    config.env.kwargs.benchmark = benchmark
    config = RUN.resolve_config(config)
    env = RUN.build_env(config)
    train, test = task_split(env, config)
    assert train.tolist() == [100, 107] and len(test) == 3 and not set(test) & {100, 107}
    history = open_dataset(config, env)
    assert history.observations.shape == (6, 40, 5, 5, 2) and history.task_ids.tolist() == [100] * 3 + [107] * 3
    RUN.train(config)
    with open(os.path.join(config.workdir, "eval.json")) as f:
        result = json.load(f)
    assert np.isfinite(result["model_mean_return"]) and "random_mean_return" in result


def test_a_file_made_on_another_benchmark_or_env_is_refused(tmp_path):
    from icrl_jax.pipeline import run as RUN
    config = RUN.resolve_config(_hdf5_config(tmp_path, os.path.join(FIXTURE, "xland_layout.hdf5")))
    with pytest.raises(UserError, match="trivial-1m"):
        RUN.dataset_of(config, RUN.build_env(config))


# ---------------------------------------------------------------- the recurrent PPO source

def test_ppo_learns_a_trivial_ruleset_and_relabels_with_its_final_policy():
    """Hold the red ball (the only object) in a 6 x 6 room: 16 envs x 200 updates of 16 steps
    per agent; the recorded histories' returns rise, and the expert actions are the final
    policy's argmax along each whole recorded history."""
    from xminigrid.core.goals import AgentHoldGoal as Hold
    from icrl_jax.data.sources import xland_ppo as X
    env = envs.make("XLand-MiniGrid-R1-9x9", num_rulesets=2, size=6, max_steps=30)
    params = env.task_params(jnp.arange(2))
    ball = TILES_REGISTRY[Tiles.BALL, Colors.RED]
    ruleset = params.env_params.ruleset
    ruleset = ruleset.replace(goal=jnp.stack([Hold(tile=ball).encode()] * 2),
                              rules=jnp.zeros_like(ruleset.rules),
                              init_tiles=jnp.zeros_like(ruleset.init_tiles).at[:, 0].set(ball))
    params = params.replace(env_params=params.env_params.replace(ruleset=ruleset))
    config = X.XLandPPOConfig(num_envs=16, rollout_steps=16, minibatches=2, epochs=2, learning_rate=3e-3,
                              obs_embedding=8, action_embedding=8, obs_features=32, rnn_hidden=32,
                              head_hidden=32, updates_per_call=100)
    out = X.train_on_rulesets(env, params, config, num_steps=3200, num_recorded=4, seed=0,
                              show_progress=False)
    assert out.observations.shape == (2, 4, 3200, 5, 5, 2) and out.expert_actions.dtype == np.uint8
    assert out.env_steps == 2 * 16 * 200 * 16
    curve = out.return_by_episode()
    assert len(curve) >= 60 and curve[-20:].mean() > curve[:20].mean() + 0.2, curve
    # Relabelling in windows carries the GRU state: the same as one pass over each history.
    _, _, act = X.make_train(env, config, 1, 4)
    agent = jax.tree.map(lambda x: x[1], out.final_params)
    actions = out.actions[1].astype(np.int32)
    prev = np.concatenate([np.zeros((4, 1), np.int32), actions[:, :-1]], 1)
    _, greedy = jax.jit(act)(agent, jnp.zeros((4, config.rnn_hidden)), jnp.swapaxes(out.observations[1], 0, 1),
                             jnp.swapaxes(prev, 0, 1))
    np.testing.assert_array_equal(np.asarray(greedy).T, out.expert_actions[1])


def test_xland_ppo_builder_writes_their_layout_and_trains_from_it_as_read(tmp_path):
    """`data.builder='xland_ppo'` writes the training rulesets' histories and the held-out
    ones' in XLand-100B's layout (`.attrs`: the env, the benchmark, the split's ruleset ids);
    the dataset AD trains on is the file as `xland_hdf5` reads it, with no other step."""
    from icrl_jax.core.config import set_dotted
    from icrl_jax.data import builders
    from icrl_jax.experiments.xland import ad as xland_ad
    from icrl_jax.pipeline import run as RUN
    config = xland_ad.get_config("quick")
    for dotted, value in {"data.num_train_tasks": 2, "data.num_test_tasks": 1,
                          "data.histories_per_task": 2, "data.num_steps": 24,
                          "data.source_kwargs.num_envs": 4, "data.source_kwargs.rollout_steps": 8,
                          "data.source_kwargs.rnn_hidden": 8, "data.source_kwargs.head_hidden": 8,
                          "data.source_kwargs.obs_features": 8, "data.source_kwargs.updates_per_call": 1,
                          "env.kwargs.num_rulesets": 20, "eval.num_steps": 16,
                          "eval.num_envs_per_task": 3, "run.progress": False}.items():
        set_dotted(config, dotted, value)
    config.workdir = str(tmp_path / "run")
    config = RUN.resolve_config(config)
    env = RUN.build_env(config)
    train_ids, test_ids = builders.task_split(env, config)
    history = RUN.dataset_of(config, env)
    path = os.path.join(config.workdir, "histories.hdf5")
    heldout = os.path.join(config.workdir, "histories.heldout.hdf5")
    for file, ids, shape in ((path, train_ids, (2, 24)), (heldout, test_ids, (3, 16))):
        with h5py.File(file, "r") as f:
            assert sorted(f) == [str(i) for i in range(len(ids))]
            for i, ruleset in enumerate(ids):
                group = f[str(i)]
                assert dict(group.attrs) == {"env-id": env.name, "benchmark-id": env.benchmark_id,
                                             "ruleset-id": int(ruleset)}
                assert {k: (group[k].dtype, group[k].shape) for k in group} == {
                    k: (np.dtype(d), shape + ((5, 5) if k == "states" else ()))
                    for k, d in H.FIELDS.items()}
                assert group["states"][:].max() < 13 * 12  # a tile id x 12 + a colour id
    as_read = H.to_history(H.read_xland_hdf5(path), env.num_actions)
    for field in ("observations", "actions", "rewards", "dones", "task_ids"):
        np.testing.assert_array_equal(getattr(history, field), getattr(as_read, field))
    assert history.task_ids.tolist() == np.repeat(train_ids, 2).tolist()
    source = builders.builder_of(config).recorded_rollouts(config, env)["source"]
    assert source["rewards"].shape == (3, 16)
