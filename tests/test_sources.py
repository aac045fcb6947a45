"""Behaviour of the source algorithms on the real environments (small and fast)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.core.metrics import episode_returns, episode_returns_ragged
from icrl_jax.data.sources import (episode_replay, grid_explorer, linucb, noisy_oracle, q_learning,
                                   sample_beta, thompson_sampling, uniform_random)


def _regret(info):
    return np.asarray(info["optimal_expected_reward"] - info["expected_reward"]).sum(1)


@pytest.fixture(scope="module")
def bandit():
    env = envs.make("bernoulli_bandit", arms=10)
    return env, env.task_params(np.arange(200))


def test_thompson_regret_below_random_and_best_arm_rate_rises(bandit):
    env, params = bandit
    h_ts, info_ts = generate_histories(env, thompson_sampling(), params, 300,
                                       jax.random.PRNGKey(0), with_info=True)
    _, info_rand = generate_histories(env, uniform_random(), params, 300,
                                      jax.random.PRNGKey(0), with_info=True)
    assert _regret(info_ts).mean() < 0.4 * _regret(info_rand).mean()
    best = np.asarray(info_ts["expected_reward"] == info_ts["optimal_expected_reward"])
    assert best[:, -50:].mean() > best[:, :50].mean() + 0.2


@pytest.mark.parametrize("sampler", ["exact", "mt_vmap_loop", "jax"])
def test_beta_samplers_match_moments(sampler):
    a = jnp.array([1.0, 2.0, 30.0, 1.0, 150.0])
    b = jnp.array([1.0, 5.0, 3.0, 200.0, 150.0])
    keys = jax.random.split(jax.random.PRNGKey(1), 20000)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: sample_beta(k, a, b, sampler)))(keys))
    a, b = np.asarray(a), np.asarray(b)
    mean = a / (a + b)
    var = a * b / ((a + b) ** 2 * (a + b + 1))
    assert np.all(np.abs(draws.mean(0) - mean) < 4.5 * np.sqrt(var / 20000))
    np.testing.assert_allclose(draws.var(0), var, rtol=0.06)
    assert np.all((draws > 0) & (draws < 1))


def test_exact_sampler_unbatched_call():
    x = jax.jit(lambda k: sample_beta(k, jnp.array([3.0, 1.0]), jnp.array([2.0, 9.0])))(
        jax.random.PRNGKey(0))
    assert x.shape == (2,) and np.all((np.asarray(x) > 0) & (np.asarray(x) < 1))


def test_linucb_beats_random_on_contextual_bandit():
    env = envs.make("contextual_bandit", arms=(4, 20))
    params = env.task_params(np.arange(100))
    _, info_ucb = generate_histories(env, linucb(env.context_dim, alpha=1.0), params, 300,
                                     jax.random.PRNGKey(0), with_info=True)
    _, info_rand = generate_histories(env, uniform_random(), params, 300, jax.random.PRNGKey(0),
                                      with_info=True)
    assert _regret(info_ucb).mean() < 0.5 * _regret(info_rand).mean()


def test_q_learning_reaches_goal_on_darkroom():
    env = envs.make("darkroom")
    params = env.task_params(np.arange(0, 80, 4))
    episodes = 150
    src = q_learning(env, episodes, lr=0.3, discount=0.9)
    h = generate_histories(env, src, params, episodes * 50, jax.random.PRNGKey(0))
    returns = np.asarray(episode_returns(h.rewards, h.dones, episodes))
    assert returns.shape == (20, episodes)
    assert (returns[:, -10:] > 0).mean() > 0.9
    assert returns[:, -10:].mean() > returns[:, :10].mean() + 5


def test_q_learning_reaches_goal_on_composite_darkroom():
    env = envs.make("darkroom_composite")
    params = env.task_params(np.arange(0, 80, 4))
    h = generate_histories(env, q_learning(env, 200), params, 200 * 20, jax.random.PRNGKey(0))
    returns = episode_returns_ragged(h.rewards, h.dones)
    late = np.mean([r[-20:].mean() for r in returns])
    assert late > 0.8


def test_q_learning_opens_the_door_on_key_to_door():
    env = envs.make("key_to_door")
    params = env.task_params(np.arange(0, 6480, 324))
    episodes = 500
    src = q_learning(env, episodes, lr=0.3, discount=0.95)
    h = generate_histories(env, src, params, episodes * 50, jax.random.PRNGKey(0))
    returns = episode_returns_ragged(h.rewards, h.dones)
    late = np.concatenate([r[-50:] for r in returns])
    early = np.concatenate([r[:50] for r in returns])
    assert (late == 2).mean() > 0.7
    assert late.mean() > early.mean() + 0.5


@pytest.mark.parametrize("name", ["darkroom", "key_to_door"])
def test_noisy_oracle_return_rises_as_eps_decays(name):
    env = envs.make(name)
    params = env.task_params(np.arange(0, env.num_tasks, env.num_tasks // 16))
    steps = 50 * 40
    h = generate_histories(env, noisy_oracle(env, steps), params, steps, jax.random.PRNGKey(0))
    returns = episode_returns_ragged(h.rewards, h.dones)
    early = np.mean([r[:5].mean() for r in returns])
    late = np.mean([r[-4:].mean() for r in returns])
    assert late > early + 0.5
    assert late > 0.8 * np.mean(np.asarray(jax.vmap(env.optimal_return)(params)))


def test_noisy_oracle_on_composite_darkroom_and_bandit():
    env = envs.make("darkroom_composite")
    params = env.task_params(np.arange(0, 80, 8), actions="train")
    h = generate_histories(env, noisy_oracle(env, 400, decay_fraction=0.5), params, 400,
                           jax.random.PRNGKey(0))
    late = np.mean([r[-5:].mean() for r in episode_returns_ragged(h.rewards, h.dones)])
    assert late >= np.mean(np.asarray(jax.vmap(env.optimal_return)(params))) - 0.1
    bandit = envs.make("bernoulli_bandit", arms=(4, 20))
    bp = bandit.task_params(np.arange(50))
    _, info = generate_histories(bandit, noisy_oracle(bandit, 100, decay_fraction=0.5), bp, 100,
                                 jax.random.PRNGKey(0), with_info=True)
    best = np.asarray(info["expected_reward"] == info["optimal_expected_reward"])
    assert best[:, -40:].all()


def test_episode_replay_repeats_the_first_paying_episode_without_noise():
    """eps = 0: episodes are uniformly random until one pays; every later episode takes exactly
    that episode's actions, in order, and pays in the same number of steps."""
    env = envs.make("darkroom_composite", max_actions=50, actions="train")
    params = env.task_params(np.arange(0, 80, 10))
    h = generate_histories(env, episode_replay(env, 600, eps_start=0.0), params, 600,
                           jax.random.PRNGKey(0))
    actions, rewards, dones = (np.asarray(x) for x in (h.actions, h.rewards, h.dones))
    replayed = 0
    for a, r, d in zip(actions, rewards, dones):
        ends = np.flatnonzero(d)
        episodes = np.split(a, ends + 1)[:len(ends)]
        paid = r[ends] > 0
        if not paid.any():
            continue
        first = int(np.argmax(paid))
        for episode in episodes[first + 1:]:
            np.testing.assert_array_equal(episode, episodes[first])
            replayed += 1
        assert paid[first:].all()
    assert replayed > 0


def test_episode_replay_by_cell_follows_the_loop_free_paying_path():
    """key_by="cell", eps = 0: after the first paying episode, the action in every cell it visited
    is the one it took there last; that path has no loops, so every later episode pays, in no
    more steps."""
    env = envs.make("darkroom_composite", max_actions=50, actions="train")
    params = env.task_params(np.arange(0, 80, 10))
    h = generate_histories(env, episode_replay(env, 600, eps_start=0.0, key_by="cell"), params,
                           600, jax.random.PRNGKey(0))
    obs, actions, rewards, dones = (np.asarray(x) for x in (h.observations, h.actions,
                                                            h.rewards, h.dones))
    checked = 0
    for o, a, r, d in zip(obs, actions, rewards, dones):
        ends = np.flatnonzero(d)
        if not (r[ends] > 0).any():
            continue
        first_end = ends[np.argmax(r[ends] > 0)]
        first_start = 0 if first_end == ends[0] else ends[ends < first_end][-1] + 1
        memory = {int(c): int(x) for c, x in zip(o[first_start:first_end + 1],
                                                 a[first_start:first_end + 1])}  # last visit
        later = np.arange(first_end + 1, len(a))
        np.testing.assert_array_equal(a[later], [memory[int(o[t])] for t in later])
        assert r[ends[ends > first_end]].all()
        checked += 1
    assert checked > 0
    with pytest.raises(ValueError, match="key_by"):
        episode_replay(env, 100, key_by="goal")


def test_episode_replay_shortens_episodes_with_noise_and_needs_an_episodic_env():
    env = envs.make("darkroom_composite", max_actions=50, actions="train")
    params = env.task_params(np.arange(0, 80, 4))
    h = generate_histories(env, episode_replay(env, 800), params, 800, jax.random.PRNGKey(1))
    lengths = [np.diff(np.concatenate([[-1], np.flatnonzero(d)])) for d in np.asarray(h.dones)]
    returns = episode_returns_ragged(h.rewards, h.dones)
    assert np.mean([r[-5:].mean() for r in returns]) == 1.0  # noise-free at the end
    assert np.mean([x[-5:].mean() for x in lengths]) < np.mean([x[:5].mean() for x in lengths])
    with pytest.raises(ValueError, match="episode_length"):
        episode_replay(envs.make("bernoulli_bandit", arms=5), 100)


def test_random_respects_action_mask():
    env = envs.make("bernoulli_bandit", arms=(4, 20))
    params = env.task_params(np.arange(64))
    for src in (uniform_random(), thompson_sampling()):
        h = generate_histories(env, src, params, 200, jax.random.PRNGKey(3))
        mask = np.asarray(h.action_mask)
        picked = np.take_along_axis(mask, np.asarray(h.actions), axis=1)
        assert picked.all()
        assert np.asarray(h.actions).max() >= 4  # masks really vary and wide arms are used
    room = envs.make("darkroom_composite")
    rp = room.task_params(np.arange(8), actions="sliced_test")
    h = generate_histories(room, uniform_random(), rp, 300, jax.random.PRNGKey(0))
    assert np.asarray(h.actions).max() < 50


def test_pick_available_matches_uniform_pick():
    from icrl_jax.data.sources.uniform import available_actions, pick_available, uniform_pick
    mask = jnp.array([False, True, True, False, True, False])
    available, count = available_actions(mask)
    for u in np.linspace(0.0, 0.999, 37):
        assert int(pick_available(u, available, count)) == int(uniform_pick(u, mask))


def test_grid_explorer_searches_once_then_walks_straight_to_key_and_door():
    """Without noise, on a 3x3 Key-to-Door (key in cell 8, door in cell 0): the first episode
    searches the grid, and every later one takes the shortest path, max(1, |start - key|) +
    |key - door| steps (a start on the key still costs a noop to pick it up)."""
    env = envs.make("key_to_door", size=3, episode_length=20)
    params = jax.tree.map(lambda x: x[None], env.params_for(8, 0))
    h = generate_histories(env, grid_explorer(env, eps=0.0), params, 200, jax.random.PRNGKey(4))
    obs, dones = np.asarray(h.observations[0]), np.asarray(h.dones[0])
    returns = episode_returns_ragged(np.asarray(h.rewards), np.asarray(h.dones))[0]
    ends = np.flatnonzero(dones)
    starts = np.r_[0, ends[:-1] + 1]
    assert returns[0] == 2.0 and ends[0] + 1 > 4 + 4  # found both, by searching
    for begin, end in zip(starts[1:], ends[1:]):
        row, col = divmod(int(obs[begin]), 3)
        to_key = max(1, abs(row - 2) + abs(col - 2))
        assert end - begin + 1 == to_key + 4
    assert len(ends) > 10 and (np.asarray(returns) == 2.0).all()


def test_grid_explorer_memory_forgets_and_lapses_play_at_random():
    """3x3 Key-to-Door from the centre, key in cell 8, door in cell 0, no noise. Unbounded
    memory: episodes after the first take the shortest path (2 + 4 steps). `memory=3`: by the
    next episode the key was seen more than 3 steps ago, so every episode repeats the first
    one's search step for step (a search that itself revisits cells seen 4 steps before).
    `lapse=1`: every episode is played at random."""
    env = envs.make("key_to_door", size=3, episode_length=20, start="centre")
    params = jax.tree.map(lambda x: x[None], env.params_for(8, 0))

    def episodes(**kwargs):
        h = generate_histories(env, grid_explorer(env, eps=0.0, **kwargs), params, 200,
                               jax.random.PRNGKey(4))
        obs, ends = np.asarray(h.observations[0]), np.flatnonzero(np.asarray(h.dones[0]))
        return [obs[a:b + 1].tolist() for a, b in zip(np.r_[0, ends[:-1] + 1], ends)], h

    remembered, _ = episodes()
    assert len(remembered[0]) > 6 and all(len(e) == 6 for e in remembered[1:])
    forgetful, _ = episodes(memory=3)
    assert len(forgetful) > 5 and all(e == forgetful[0] for e in forgetful)
    assert len(forgetful[1]) > 6  # it searches again (and revisits what it forgot)
    _, random = episodes(lapse=1.0)
    counts = np.bincount(np.asarray(random.actions[0]), minlength=5) / 200
    assert np.abs(counts - 0.2).max() < 0.08, counts  # 5 sigma of a uniform pick
    assert episodes(lapse=0.0)[0] == remembered
    with pytest.raises(ValueError, match="memory must be a positive"):
        grid_explorer(env, memory=0)
    with pytest.raises(ValueError, match="lapse must be a probability"):
        grid_explorer(env, lapse=1.5)


def test_grid_explorer_learns_dark_room_in_context_and_needs_a_grid():
    env = envs.make("darkroom")
    h = generate_histories(env, grid_explorer(env), env.task_params(np.arange(40)), 250,
                           jax.random.PRNGKey(0))
    returns = np.asarray(episode_returns(h.rewards, h.dones, 5))  # (tasks, 5 episodes)
    assert returns[:, 0].mean() < 0.6 * returns[:, -1].mean()
    with pytest.raises(ValueError, match="grid_explorer needs"):
        grid_explorer(envs.make("bernoulli_bandit"))
