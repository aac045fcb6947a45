"""Decision Transformers on pixels (the ViZDoom path) without ViZDoom's cost: a tiny synthetic
pixel dataset in the pixel store, DT/M-SAT shapes and loss masking, loader-fed training that
lowers the loss, the bridge-driven DT policy, and the ViZDoom dataset formats round-tripping."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.core.config import default_train_config
from icrl_jax.pipeline import train as trainer
from icrl_jax.data.train_data import TrainData
from icrl_jax.data.pixel_store import PixelStoreWriter, PrefetchLoader
from icrl_jax.data.pixel_trajectories import PixelTrajectoryStore
from icrl_jax.methods.dt import DecisionTransformer, dt_model_config
from icrl_jax.papers.msat.method import MSAT
from icrl_jax.core.config import default_transformer_config

DIMS = (3, 2)
OBS = (8, 8, 3)
K = 4


def model_config(**overrides):
    config = default_transformer_config()
    config.update(dt_model_config())
    config.update(dict(d_model=16, num_layers=1, num_heads=2, max_timestep=16,
                       cnn_channels=(4, 8), cnn_kernel=3, obs_pool=2), **overrides)
    return config


def synthetic_episode(rng, length):
    """A pixel episode whose action is readable from the frame: component 0 is the colour
    channel that is lit, component 1 whether the top half is lit."""
    actions = np.stack([rng.integers(0, DIMS[0], length), rng.integers(0, DIMS[1], length)], -1)
    obs = np.zeros((length, *OBS), np.uint8)
    for t, (c, top) in enumerate(actions):
        obs[t, : 4 if top else 8, :, c] = 255
    rewards = rng.random(length).astype(np.float32)
    dones = np.zeros(length, bool)
    dones[-1] = True
    return obs, actions.astype(np.int32), rewards, dones


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("pixels"))
    rng = np.random.default_rng(0)
    # chunk_steps=16 forces episodes across chunk boundaries (windows must stitch them).
    with PixelStoreWriter(directory, OBS, (len(DIMS),), chunk_steps=16) as writer:
        for length in (3, 9, 6, 12, 5, 7):
            writer.add_history(*synthetic_episode(rng, length))
    return directory


def test_store_windows_rtg_timesteps_and_padding(store_dir):
    store = PixelTrajectoryStore(store_dir)
    assert store.num_episodes == 6 and store.num_steps == 42
    np.testing.assert_array_equal(store.episode_lengths, [3, 9, 6, 12, 5, 7])
    # Window ending at step 1 of episode 0: two steps, two masked pads in front.
    w = store.window(1, K)
    np.testing.assert_array_equal(w.mask, [False, False, True, True])
    np.testing.assert_array_equal(w.timesteps, [0, 0, 0, 1])
    rewards = np.concatenate([np.asarray(c["rewards"]) for c in store.chunks])
    np.testing.assert_allclose(w.returns_to_go[2:], [rewards[0:3].sum(), rewards[1:3].sum()],
                               rtol=1e-6)
    assert w.observations.dtype == np.uint8 and w.observations.shape == (K, *OBS)
    assert not w.observations[:2].any()
    # A window across the chunk boundary at step 16 (episode 2 spans steps 12..17).
    w = store.window(17, K)
    all_obs = np.concatenate([np.asarray(c["obs"]) for c in store.chunks])
    np.testing.assert_array_equal(w.observations, all_obs[14:18])
    np.testing.assert_array_equal(w.timesteps, [2, 3, 4, 5])
    assert w.mask.all()
    batch = store.sample(np.random.default_rng(1), 5, K)
    assert batch.observations.shape == (5, K, *OBS) and batch.actions.shape == (5, K, 2)
    assert batch.mask[:, -1].all()  # a window always ends at a real step
    with pytest.raises(TypeError, match="previous_fill"):
        store.sample(np.random.default_rng(1), 2, K, previous_fill=0)


def test_store_rejects_unfinished_episodes(tmp_path):
    obs, actions, rewards, dones = synthetic_episode(np.random.default_rng(0), 5)
    with PixelStoreWriter(str(tmp_path), OBS, (2,)) as writer:
        writer.add_history(obs, actions, rewards, np.zeros(5, bool))
    with pytest.raises(ValueError, match="does not end with done"):
        PixelTrajectoryStore(str(tmp_path))


@pytest.mark.parametrize("cls", [DecisionTransformer, MSAT])
def test_pixel_dt_shapes_and_padding_masked_from_loss(store_dir, cls):
    store = PixelTrajectoryStore(store_dir)
    method = cls(model_config(), DIMS, K)
    batch = jax.tree.map(jnp.asarray, store.sample(np.random.default_rng(0), 3, K))
    params = method.init(jax.random.PRNGKey(0), batch)
    assert "cnn" in params["state"]  # pixels go through the CNN state embedding
    logits = method.apply(params, batch)
    assert logits.shape == (3, K, sum(DIMS))
    # Changing padded steps (frames, actions) changes neither valid outputs nor the loss.
    batch = batch.replace(mask=batch.mask.at[:, :2].set(False))
    noisy = batch.replace(observations=batch.observations.at[:, :2].set(200),
                          actions=batch.actions.at[:, :2].set(1))
    key = jax.random.PRNGKey(1)
    np.testing.assert_allclose(method.apply(params, batch)[:, 2:],
                               method.apply(params, noisy)[:, 2:], atol=1e-5)
    np.testing.assert_allclose(method.loss(params, batch, key, True)[0],
                               method.loss(params, noisy, key, True)[0], rtol=1e-5)
    with pytest.raises(ValueError, match="uint8"):
        method.apply(params, batch.replace(observations=batch.observations.astype(jnp.float32)))


def test_msat_pixel_training_from_loader_lowers_loss(store_dir, tmp_path):
    store = PixelTrajectoryStore(store_dir)
    method = MSAT(model_config(), DIMS, K)
    config = default_train_config()
    config.update(num_steps=60, batch_size=8, seq_len=K, steps_per_call=5, learning_rate=3e-3,
                  warmup_steps=5, log_every=10, checkpoint_every=30)
    example = jax.tree.map(jnp.asarray, store.sample(np.random.default_rng(0), 1, K))

    def loader_fn(start):
        return PrefetchLoader(store, config.steps_per_call * config.batch_size, K, seed=start)

    data = TrainData(example, loader_fn=loader_fn)
    trainer.train(method, data, config, str(tmp_path), {"test": 1}, show_progress=False)
    with open(tmp_path / "metrics.jsonl") as f:
        losses = [json.loads(line)["loss"] for line in f if '"train"' in line]
    assert len(losses) == 6
    assert losses[-1] < 0.7 * losses[0], losses
    # Resuming at the end trains no further and restores the same step.
    state = trainer.train(method, data, config, str(tmp_path), {"test": 1}, show_progress=False)
    assert int(state.step) == 60


def test_dt_host_policy_matches_context_rule(store_dir):
    """The DT policy on the bridge keeps its context rule: rtg minus rewards, reset at done."""
    from icrl_jax.envs.host.bridge import HostStep
    from icrl_jax.envs.host.specs import ViZDoom
    from icrl_jax.data.rollout import SourceOnHost
    from icrl_jax.methods.dt_rollout import return_conditioned_source

    store = PixelTrajectoryStore(store_dir)
    method = MSAT(model_config(), DIMS, K)
    params = method.init(jax.random.PRNGKey(0),
                         jax.tree.map(jnp.asarray, store.sample(np.random.default_rng(0), 1, K)))
    env = ViZDoom("deadly_corridor")  # with the store's small frames and (3, 2) actions
    env.observation_shape, env._action_dims, env.num_actions = OBS, DIMS, 6
    policy = SourceOnHost(return_conditioned_source(method, params, env, K, 5.0, False), env)
    state = policy.init(jax.random.PRNGKey(0), 2)
    obs = jnp.zeros((2, *OBS), jnp.uint8)
    rewards = [jnp.zeros(2), jnp.array([1.0, 2.0]), jnp.array([0.5, 1.0])]
    dones = [jnp.zeros(2, bool), jnp.zeros(2, bool), jnp.array([False, True])]
    for t, (r, d) in enumerate(zip(rewards, dones)):
        actions, state = policy.act(jax.random.PRNGKey(t), state,
                                    HostStep(obs, jnp.zeros((2, 0)), r, d, jnp.int32(t)))
        assert actions.shape == (2, 2) and actions.dtype == jnp.int32
    states = state[0]
    contexts, rtg, steps = states.context, states.return_to_go, states.t
    np.testing.assert_allclose(rtg, [3.5, 5.0])  # env 1's episode ended: back to the target
    np.testing.assert_array_equal(steps, [2, 0])  # steps taken in the episode before this one
    np.testing.assert_array_equal(contexts.mask[0], [False, True, True, True])
    np.testing.assert_array_equal(contexts.mask[1], [False, False, False, True])
    np.testing.assert_allclose(contexts.returns_to_go[0, 1:], [5.0, 4.0, 3.5])
    np.testing.assert_allclose(contexts.rewards[0, 1:3], [1.0, 0.5])


def test_doom_dataset_roundtrips_through_episode_format_and_store(tmp_path):
    from icrl_jax.envs.host import vizdoom as vd
    from icrl_jax.papers.msat import recording

    rng = np.random.default_rng(0)
    scenario = "my_way_home"
    episodes = []
    for length in (4, 7):
        episodes.append(dict(
            observations=rng.integers(0, 256, (length, *vd.OBS_SHAPE), dtype=np.uint8),
            actions=rng.integers(0, 3, (length, 2)).astype(np.int32),
            rewards=rng.normal(size=length).astype(np.float32),
            terminated=np.arange(length) == length - 1, truncated=np.zeros(length, bool)))
    # complete_episodes cuts a batch-major rollout the same way (the unfinished tail dropped).
    rollout = {k: np.concatenate([episodes[0][k], episodes[1][k], episodes[1][k][:2]])[None]
               for k in episodes[0]}
    rollout["dones"] = rollout["terminated"] | rollout["truncated"]
    cut = vd.complete_episodes(rollout)
    assert [len(e["rewards"]) for e in cut] == [4, 7]
    vd.save_episodes(str(tmp_path / "eps"), scenario, cut)
    info = recording.import_episodes_to_store(str(tmp_path / "eps"), str(tmp_path / "store"),
                                                chunk_steps=5)
    assert info["steps"] == 11 and info["episodes"] == 2
    store = PixelTrajectoryStore(str(tmp_path / "store"))
    assert store.meta["obs_shape"] == list(vd.OBS_SHAPE) and store.meta["action_shape"] == [2]
    w = store.window(10, 7)  # the whole second episode, across chunk boundaries
    np.testing.assert_array_equal(w.observations, episodes[1]["observations"])
    np.testing.assert_array_equal(w.actions, episodes[1]["actions"])
    np.testing.assert_allclose(w.returns_to_go[0], episodes[1]["rewards"].sum(), rtol=1e-5)
    np.testing.assert_allclose(store.episode_returns, [e["rewards"].sum() for e in episodes],
                               rtol=1e-5)
    bad = dict(episodes[0], actions=np.full((4, 2), 3, np.int32))
    with pytest.raises(ValueError, match="outside MultiDiscrete"):
        vd.save_episodes(str(tmp_path / "bad"), scenario, [bad])


def test_doom_episode_stats_counts_only_episodes_that_must_finish():
    from icrl_jax.envs.host import vizdoom as vd

    rewards = np.zeros((1, 10), np.float32)
    rewards[0, [2, 8]] = 1.0
    dones = np.zeros((1, 10), bool)
    dones[0, [2, 8]] = True
    returns, success = vd.episode_stats(rewards, dones, dones, "my_way_home")
    assert len(returns) == 2 and success.all()
    returns, _ = vd.episode_stats(rewards, dones, dones, "my_way_home", max_start=2)
    assert len(returns) == 1  # the episode starting at step 3 is left out


def test_doomexpert_per_env_noise():
    from icrl_jax.envs.host import vizdoom as vd
    from icrl_jax.envs.host.bridge import HostStep

    expert = vd.DoomExpert("my_way_home", (0.0, 1.0))
    priv = jnp.zeros((2, 7)).at[:, 4].set(100.0)  # waypoint straight ahead (+x)
    step = HostStep(jnp.zeros((2, *vd.OBS_SHAPE), jnp.uint8), priv, jnp.zeros(2),
                    jnp.zeros(2, bool), jnp.int32(0))
    acts = np.stack([np.asarray(expert.act(jax.random.PRNGKey(i), (), step)[0])
                     for i in range(40)])
    assert (acts[:, 0] == [0, 1]).all()  # noise 0: no turn, forward
    assert (acts[:, 1] != [0, 1]).any(axis=-1).mean() > 0.3  # noise 1: uniform
    with pytest.raises(ValueError, match="probability"):
        vd.DoomExpert("my_way_home", 1.5)


def test_vizdoom_configs_resolve():
    from icrl_jax.experiments.dt import vizdoom as vizdoom_experiment

    for scenario, paper in vizdoom_experiment.PAPER.items():
        config = vizdoom_experiment.make_config("msat", scenario)
        assert config.train.seq_len == paper["seq_len"] and config.model.num_layers == 8
        assert config.train.batch_size == 128 and config.train.learning_rate == 5e-3
        quick = vizdoom_experiment.make_config("msat", scenario, "quick", no_pe=True)
        assert quick.model.timestep_encoding == "none" and quick.model.obs_pool == 2
        assert quick.experiment == f"msat_nope_{scenario}"
    with pytest.raises(ValueError, match="scenario"):
        vizdoom_experiment.make_config("dt", "basic")
    assert os.path.exists(os.path.join(os.path.dirname(vizdoom_experiment.__file__), "mat_deadly_corridor.py"))


def test_table2_columns_share_one_dataset_named_by_its_recording(tmp_path):
    """Table 2's columns are the four methods on one dataset; the dataset folder is named by
    the recording's parameters, so mixed-quality data never reads the expert's store."""
    from icrl_jax import envs
    from icrl_jax.experiments.dt import table2_my_way_home
    from icrl_jax.reports.columns import column_config
    from icrl_jax.data.builders import dataset_path

    env = envs.make("vizdoom", scenario="my_way_home")
    config = table2_my_way_home.get_config("quick_mixed")
    config.unlock()
    config.workdir = str(tmp_path)
    seeds = {name: column_config(config, name, 1) for name in config.columns}
    assert {s.method for s in seeds.values()} == {"dt", "msat", "mat"}
    assert seeds["M-SAT-no-PE"].model.timestep_encoding == "none"
    assert seeds["M-SAT"].model.timestep_encoding == "timestep"
    assert len({s.data.path for s in seeds.values()}) == 1
    mixed = dataset_path(config, env)
    expert = dataset_path(table2_my_way_home.get_config("quick"), env)
    assert mixed != expert and "noise0.2-1_" in mixed and "noise0.05-0.3_" in expert
    assert seeds["DT"].data.path == mixed
