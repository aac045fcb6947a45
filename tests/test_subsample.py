"""The n-gram paper's `subsample`: every k-th episode of each learning history, and windows
sampled only from the valid steps of ragged (early-ending-episode) histories."""

import jax
import numpy as np
import pytest

from icrl_jax.data.windows import (check_dataset, sample_windows, subsample_episodes,
                                   to_step_windows)
from icrl_jax.data.history import History, HistoryFormatError


def history_from_episodes(episode_lengths, num_actions=5, seed=0):
    """One history per row of `episode_lengths`; observation = a unique positive step marker
    (row * 1000 + step + 1), so every kept step can be traced back to where it came from."""
    rng = np.random.default_rng(seed)
    total = sum(episode_lengths[0])
    assert all(sum(row) == total for row in episode_lengths)
    n = len(episode_lengths)
    dones = np.zeros((n, total), bool)
    for row, lengths in enumerate(episode_lengths):
        ends = np.cumsum(lengths) - 1
        dones[row, ends] = True
    return History(
        observations=(np.arange(n)[:, None] * 1000 + np.arange(total)[None] + 1).astype(np.int32),
        actions=rng.integers(0, num_actions, (n, total)).astype(np.int32),
        rewards=rng.integers(0, 2, (n, total)).astype(np.float32),
        dones=dones, task_ids=np.arange(n, dtype=np.int32),
        action_mask=np.ones((n, num_actions), bool))


def reference(history, every):
    """Brute force: split each row into episodes at its dones, keep episodes 0, k, 2k, ..."""
    out = []
    for row in range(history.num_histories):
        episodes, current = [], []
        for t in range(history.length):
            current.append(t)
            if history.dones[row, t]:
                episodes.append(current)
                current = []
        if current:  # an unfinished last episode counts
            episodes.append(current)
        out.append([t for e in episodes[::every] for t in e])
    return out


def test_fixed_length_episodes_keep_every_kth():
    history = history_from_episodes([[5] * 8, [5] * 8])  # 8 episodes of 5 steps
    kept, lengths = subsample_episodes(history, 3)  # episodes 0, 3, 6
    assert lengths is None and kept.length == 15
    for row, steps in enumerate(reference(history, 3)):
        np.testing.assert_array_equal(kept.observations[row], history.observations[row, steps])
        np.testing.assert_array_equal(kept.actions[row], history.actions[row, steps])
        np.testing.assert_array_equal(kept.rewards[row], history.rewards[row, steps])
        np.testing.assert_array_equal(kept.dones[row], history.dones[row, steps])
    assert [list(np.nonzero(d)[0]) for d in kept.dones] == [[4, 9, 14]] * 2
    # The first step of a kept episode sees the last action/reward of the kept episode before it.
    windows = to_step_windows(kept)
    assert int(windows.prev_actions[0, 5]) == int(history.actions[0, 4])  # episode 0 -> 3
    assert float(windows.prev_rewards[1, 10]) == float(history.rewards[1, 34])  # 3 -> 6
    assert int(windows.prev_actions[0, 0]) == 5  # no action before the history's first step
    # Kept episodes start at steps 0, 5 and 10 of the joined stream.
    assert [list(np.nonzero(s)[0]) for s in windows.episode_starts] == [[0, 5, 10]] * 2
    # Each step's return so far counts its own kept episode's rewards only.
    kept_rewards = np.asarray(kept.rewards).reshape(2, 3, 5)
    so_far = np.concatenate([np.zeros((2, 3, 1)), np.cumsum(kept_rewards, -1)[..., :-1]], -1)
    np.testing.assert_allclose(windows.episode_returns, so_far.reshape(2, 15))


def test_identity_and_bad_values():
    history = history_from_episodes([[5] * 4])
    same, lengths = subsample_episodes(history, 1)
    assert same is history and lengths is None
    with pytest.raises(ValueError, match="positive"):
        subsample_episodes(history, 0)


def test_ragged_episodes_are_padded_with_lengths():
    # Episodes ending early (Key-to-Door), and an unfinished last episode in row 2.
    rows = [[3, 7, 2, 8, 5, 5], [10, 10, 1, 1, 4, 4], [2, 2, 2, 2, 2, 20]]
    history = history_from_episodes(rows)
    history = history.replace(dones=history.dones.copy())
    history.dones[2, -1] = False  # row 2's last episode never ends
    kept, lengths = subsample_episodes(history, 2)  # episodes 0, 2, 4
    expected = reference(history, 2)
    np.testing.assert_array_equal(lengths, [len(e) for e in expected])  # 3+2+5, 10+1+4, 2+2+2
    assert kept.length == max(len(e) for e in expected)
    for row, steps in enumerate(expected):
        n = len(steps)
        np.testing.assert_array_equal(kept.observations[row, :n], history.observations[row, steps])
        np.testing.assert_array_equal(kept.actions[row, :n], history.actions[row, steps])
        assert (kept.observations[row, n:] == 0).all() and kept.dones[row, n:].all()


def test_windows_come_from_valid_steps_only():
    rows = [[3, 7, 2, 8, 5, 5], [10, 10, 1, 1, 4, 4], [2, 2, 2, 2, 2, 20]]
    history = history_from_episodes(rows)
    kept, lengths = subsample_episodes(history, 2)
    window = 6
    data = to_step_windows(kept, lengths)
    batch = jax.jit(sample_windows, static_argnums=(2, 3))(data, jax.random.PRNGKey(0), 4000,
                                                           window)
    obs = np.asarray(batch.observations)
    assert batch.lengths is None
    assert (obs > 0).all()  # no padding step ever enters a window
    # A step starts an episode exactly when its observation does in the original history.
    first_steps = {int(history.observations[r, t]) for r in range(history.num_histories)
                   for t in range(history.length) if t == 0 or history.dones[r, t - 1]}
    np.testing.assert_array_equal(np.asarray(batch.episode_starts),
                                  np.isin(obs, sorted(first_steps)))
    # A step's return so far is its episode's reward before it in the original history.
    so_far = {}
    for r in range(history.num_histories):
        total = 0.0
        for t in range(history.length):
            total = 0.0 if t == 0 or history.dones[r, t - 1] else total + history.rewards[r, t - 1]
            so_far[int(history.observations[r, t])] = total
    np.testing.assert_array_equal(np.asarray(batch.episode_returns),
                                  np.vectorize(so_far.get)(obs))
    # Every valid start of every row is drawn (uniform over [0, length - window]).
    starts = {(int(o[0]) // 1000, int(o[0]) % 1000) for o in obs}
    for row in range(3):
        valid_first = {int(x) % 1000 for x in kept.observations[row, :lengths[row] - window + 1]}
        assert {s for r, s in starts if r == row} == valid_first


def test_check_dataset_names_short_subsampled_histories():
    history = history_from_episodes([[3, 7, 2, 8, 5, 5], [10, 10, 1, 1, 4, 4]])
    kept, lengths = subsample_episodes(history, 2)  # lengths 10 and 15
    check_dataset(kept, num_actions=5, num_observations=None, observation_shape=(), window=10,
                  lengths=lengths)
    with pytest.raises(HistoryFormatError, match="1 subsampled histories have fewer than 12"):
        check_dataset(kept, num_actions=5, num_observations=None, observation_shape=(),
                      window=12, lengths=lengths)
