"""Metrics on hand-worked histories."""

import numpy as np

from icrl_jax.core import metrics


def test_episode_returns_split_at_dones_and_drop_the_incomplete_tail():
    rewards = np.array([[1, 0, 1, 1, 0, 1, 1]], np.float32)
    dones = np.array([[0, 1, 0, 0, 1, 0, 0]], bool)  # episodes: [1,0] [1,1,0] and an unfinished [1,1]
    returns = np.asarray(metrics.episode_returns(rewards, dones, max_episodes=4))
    np.testing.assert_array_equal(returns[0, :2], [1.0, 2.0])
    assert np.isnan(returns[0, 2:]).all()


def test_rollout_episode_returns_keep_as_many_columns_as_the_longest_row():
    rewards = np.array([[1, 0, 1, 1, 0, 1], [0, 2, 0, 0, 0, 0]], np.float32)
    dones = np.array([[0, 1, 0, 0, 1, 1], [0, 1, 0, 0, 0, 0]], bool)  # 3 episodes and 1
    returns = metrics.rollout_episode_returns(dict(rewards=rewards, dones=dones), num_steps=6)
    np.testing.assert_array_equal(returns, [[1.0, 2.0, 1.0], [2.0, np.nan, np.nan]])
    no_episode = dict(rewards=rewards, dones=np.zeros_like(dones))
    assert metrics.rollout_episode_returns(no_episode, num_steps=6).shape == (2, 1)


def test_cumulative_regret_and_normalised_score():
    optimal = np.full((1, 4), 0.9, np.float32)
    chosen = np.array([[0.1, 0.9, 0.9, 0.5]], np.float32)
    np.testing.assert_allclose(metrics.cumulative_regret(optimal, chosen)[0], [0.8, 0.8, 0.8, 1.2],
                               rtol=1e-6)
    # Regret: lower is better; random 0, source 1 either way round.
    assert metrics.normalised_score(10.0, 30.0, 10.0) == 1.0
    assert metrics.normalised_score(30.0, 30.0, 10.0) == 0.0
    assert metrics.normalised_score(20.0, 30.0, 10.0) == 0.5


def test_last_episodes_takes_each_rows_own_tail():
    nan = np.nan
    returns = np.array([[1.0, 2.0, 3.0, nan],   # 3 episodes
                        [4.0, nan, nan, nan],   # 1 episode (a long one)
                        [5.0, 6.0, 7.0, 8.0]])  # 4 episodes
    np.testing.assert_array_equal(metrics.last_episodes(returns, 1)[:, 0], [3.0, 4.0, 8.0])
    np.testing.assert_array_equal(metrics.last_episodes(returns, 2),
                                  [[2.0, 3.0], [nan, 4.0], [7.0, 8.0]])
