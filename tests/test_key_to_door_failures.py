"""The Key-to-Door failure analysis on hand-worked trajectories."""

import numpy as np

from icrl_jax.experiments.ad.key_to_door_failures import (door_rate_by_distance, door_revisits,
                                                 episode_spans, outcome_transitions)


def two_rollouts():
    """Key at cell 0, door at cell 2 (distance 2). Both rollouts open the door from cell 1 in
    episode 1 (steps 0-2), then get the key and time out (steps 3-5), then fail at once (step
    6). After the key the first walks 0 -> 9, the second 0 -> 1, back to the cell it entered
    the door from."""
    observations = np.array([[1, 0, 1, 1, 0, 9, 10],
                             [1, 0, 1, 1, 0, 1, 10]])
    rewards = np.array([[1, 0, 1, 1, 0, 0, 0]] * 2, np.float32)
    dones = np.array([[False, False, True, False, False, True, True]] * 2)
    return observations, rewards, dones


def test_outcomes_distances_and_revisits_by_hand():
    observations, rewards, dones = two_rollouts()
    assert episode_spans(dones[0]) == [(0, 2), (3, 5), (6, 6)]
    counts = outcome_transitions(rewards, dones)
    expected = np.zeros((3, 3), int)
    expected[2, 1] = expected[1, 0] = 2  # 2 -> 1 -> 0 in both
    np.testing.assert_array_equal(counts, expected)
    keys, doors = np.array([0, 0]), np.array([2, 2])
    assert door_rate_by_distance(rewards, dones, keys, doors) == {2: (6, 1 / 3, 2, 1 / 3)}
    assert door_rate_by_distance(rewards, dones, keys, doors, skip_steps=3) == {2: (4, 0.0, 2, 0.0)}
    assert door_revisits(observations, rewards, dones) == (2, 1)


def test_door_rate_weighs_each_goal_once():
    """Goal A (distance 1) opens the door in each of three 2-step episodes; goal B (distance 1)
    fails one 6-step episode. Pooled: 3 of 4 episodes; per goal: (1 + 0) / 2. Goal C
    (distance 5) has no episode after the skipped steps and is left out."""
    rewards = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.float32)
    dones = np.array([[0, 1, 0, 1, 0, 1], [0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 1]], bool)
    keys, doors = np.array([0, 0, 0]), np.array([1, 9, 13])
    assert door_rate_by_distance(rewards, dones, keys, doors) == {1: (4, 0.75, 2, 0.5),
                                                                  5: (1, 0.0, 1, 0.0)}
    assert door_rate_by_distance(rewards, dones, keys, doors, skip_steps=1) == {
        1: (2, 1.0, 1, 1.0)}
