"""Continuous actions end to end on the point maze: waypoint source, Minari builder, DT (tanh head,
MSE), evaluation metrics, continuous random / noisy-oracle sources and eager action checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("minari")

from icrl_jax import envs  # noqa: E402
from icrl_jax.envs.base import InvalidActionError  # noqa: E402
from icrl_jax.core import metrics  # noqa: E402
from icrl_jax.core.config import base_config  # noqa: E402
from icrl_jax.data import builders  # noqa: E402
from icrl_jax.data import minari_io as mio  # noqa: E402
from icrl_jax.data.rollout import run_policies  # noqa: E402
from icrl_jax.data.sources import build_source, noisy_oracle  # noqa: E402
from icrl_jax.data.trajectories import pad_for_windows, sample_trajectory_windows  # noqa: E402
from icrl_jax.core.errors import UserError  # noqa: E402


@pytest.mark.parametrize("layout", ["umaze", "medium", "large"])
def test_noiseless_waypoint_source_reaches_every_goal(layout):
    env = envs.make("point_maze", layout=layout, task="random_goal")
    tasks = env.task_params(np.arange(16))
    source = build_source("waypoint", env, env.episode_length, {})
    out = run_policies(env, {"w": source}, tasks, env.episode_length, jax.random.PRNGKey(0))["w"]
    goal = metrics.first_episode_goal(out["dones"], out["terminated"])
    assert goal["goal_reached"] == 1.0
    assert goal["episode_length"] < env.episode_length / 2
    assert out["actions"].dtype == np.float32 and out["actions"].shape[-1] == 2


def test_first_episode_goal_hand_worked():
    dones = np.array([[0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]], bool)
    terminated = np.array([[0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]], bool)
    assert metrics.first_episode_goal(dones, terminated) == dict(goal_reached=1 / 3,
                                                           episode_length=(3 + 4 + 4) / 3)
    # Only where termination is the goal: a hopper's termination is a fall, not a success.
    rollout = dict(rewards=np.ones((3, 4), np.float32), dones=dones, terminated=terminated)
    assert "goal_reached" in metrics.policy_metrics("returns", rollout, 4, goal=True)[0]
    assert "goal_reached" not in metrics.policy_metrics("returns", rollout, 4)[0]
    assert envs.make("point_maze").goal_terminates and not envs.make("hopper").goal_terminates
    assert not envs.make("darkroom").goal_terminates


def test_continuous_random_and_noisy_oracle_sources():
    env = envs.make("point_maze", layout="umaze", task="random_goal")
    params = env.task_params(0)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    rand = build_source("uniform_random", env, 10, {})
    acts = jax.vmap(lambda k: rand.act(k, (), obs, state, params)[0])(
        jax.random.split(jax.random.PRNGKey(1), 2000))
    assert acts.shape == (2000, 2) and acts.dtype == jnp.float32
    assert float(jnp.abs(acts).max()) <= 1.0 and abs(float(acts.mean())) < 0.05
    assert float(acts.std()) > 0.5  # uniform on [-1, 1]: std 0.577
    expert = noisy_oracle(env, 10, 0.0, 0.0)
    np.testing.assert_allclose(expert.act(jax.random.PRNGKey(2), 0, obs, state, params)[0],
                               env.expert_action(state, params))
    noisy = noisy_oracle(env, 10, 1.0, 1.0)
    a = noisy.act(jax.random.PRNGKey(2), 0, obs, state, params)[0]
    assert a.shape == (2,) and not np.allclose(a, env.expert_action(state, params))
    with pytest.raises(UserError, match="point maze"):
        build_source("waypoint", envs.make("darkroom"), 10, {})


def test_eager_step_rejects_bad_actions_and_jit_clips():
    env = envs.make("point_maze", layout="umaze")
    params = env.default_params
    _, state = env.reset(jax.random.PRNGKey(0), params)
    key = jax.random.PRNGKey(1)
    with pytest.raises(InvalidActionError, match=r"shape \(2,\)"):
        env.step(key, state, jnp.zeros(3), params)
    with pytest.raises(InvalidActionError, match=r"outside \[-1, 1\]"):
        env.step(key, state, jnp.array([1.5, 0.0]), params)
    clipped = jax.jit(env.step)(key, state, jnp.array([1.5, -7.0]), params)
    edge = env.step(key, state, jnp.array([1.0, -1.0]), params)
    np.testing.assert_allclose(clipped[0], edge[0], rtol=1e-6)


def _maze_config(tmp_path, **data):
    config = base_config()
    config.experiment, config.workdir = "t", str(tmp_path)
    config.env.name = "point_maze"
    config.env.kwargs.update(dict(layout="umaze", task="random_goal"))
    config.data.builder = "minari"
    config.data.dataset_id = "point_maze/test-v0"
    config.data.source = "waypoint"
    config.data.source_kwargs.noise_scale = 0.3
    config.data.num_train_tasks, config.data.num_test_tasks = 8, 4
    config.data.num_steps = 300
    config.data.update(data)
    return config


def test_minari_builder_writes_consistent_episodes_and_checks_spaces(tmp_path):
    config = _maze_config(tmp_path)
    env = envs.make("point_maze", layout="umaze", task="random_goal")
    path = builders.generate(config, env)
    data = builders.open_dataset(config, env)
    assert isinstance(data, mio.MinariEpisodes) and data.num_episodes >= 8
    assert data.ref_max_score > data.ref_min_score
    assert data.metadata["source"] == "waypoint"
    for i in range(data.num_episodes):
        t = data.lengths[i]
        # One episode: goals fixed, each state continues the previous one (no reset inside),
        # and it ends at the goal (terminated) or at the time limit (truncated), never both.
        obs = data.observations[i, :t]
        assert np.all(obs[:, 4:] == obs[0, 4:])
        assert data.terminations[i, t - 1] != data.truncations[i, t - 1]
        assert not (data.terminations[i, : t - 1] | data.truncations[i, : t - 1]).any()
        goal_distance = np.linalg.norm(data.final_observations[i, :2] - obs[0, 4:])
        assert (goal_distance <= env.goal_radius) == data.terminations[i, t - 1]
    np.testing.assert_allclose(builders.dataset_returns(data), data.returns)
    # The dataset opened for an env with other spaces: a clear error.
    with pytest.raises(mio.DatasetSpaceError, match="does not match"):
        mio.read_minari(path, env=envs.make("darkroom"))
    # A config that points at a dataset that is not there (no source to make one).
    missing = _maze_config(tmp_path, source="", minari_root=str(tmp_path / "nowhere"))
    with pytest.raises(mio.DatasetNotFoundError, match="no Minari dataset at .*nowhere"):
        builders.open_dataset(missing, env)
    with pytest.raises(UserError, match="dataset_id"):
        builders.dataset_path(_maze_config(tmp_path, dataset_id=""), env)


def test_continuous_dt_learns_the_controller(tmp_path):
    """DT with a tanh head imitates noiseless waypoint actions: MSE falls well below the
    variance of the actions, and the learned policy acts through the rollout driver."""
    import optax

    from icrl_jax.methods.dt import DecisionTransformer, dt_model_config
    from icrl_jax.core.config import default_transformer_config
    config = _maze_config(tmp_path, num_train_tasks=16)
    config.data.source_kwargs.noise_scale = 0.0
    env = envs.make("point_maze", layout="umaze", task="random_goal")
    data = builders.open_dataset(config, env)
    model_config = default_transformer_config()
    model_config.update(dt_model_config())
    model_config.update(dict(d_model=32, num_layers=1, num_heads=2, rtg_scale=3.0,
                             max_timestep=300, embedding_dropout=0.0, residual_dropout=0.0,
                             attention_dropout=0.0))
    method = DecisionTransformer(model_config, (), 4, None, continuous_dim=2)
    windows = pad_for_windows(data.to_trajectories(), 4)
    params = method.init(jax.random.PRNGKey(0), sample_trajectory_windows(
        windows, jax.random.PRNGKey(1), 2, 4))
    opt = optax.adam(3e-3)
    opt_state = opt.init(params)

    @jax.jit
    def step(params, opt_state, key):
        batch = sample_trajectory_windows(windows, key, 64, 4)
        (loss, _), grads = jax.value_and_grad(method.loss, has_aux=True)(params, batch, key)
        updates, opt_state = opt.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for i in range(300):
        params, opt_state, loss = step(params, opt_state, jax.random.PRNGKey(i))
        losses.append(float(loss))
    actions = data.actions[data.mask]
    assert np.mean(losses[-20:]) < 0.3 * float(((actions - actions.mean(0)) ** 2).mean(-1).mean())
    policy = method.policies(params, env, _eval_config(3.0))
    out = run_policies(env, policy, env.task_params(np.arange(100, 104)), 50,
                       jax.random.PRNGKey(3))["model@3"]
    assert out["actions"].shape == (4, 50, 2) and np.abs(out["actions"]).max() <= 1.0


def _eval_config(target):
    config = base_config()
    config.train.seq_len = 4
    config.eval.target_returns = (target,)
    config.eval.greedy = True
    return config
