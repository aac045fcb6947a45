"""DPT (papers/dpt): equal to the authors' model on their weights (committed fixtures made by
tests/fixtures/dpt/make_fixtures.py with their `net.Transformer`; no torch here), its labelled
histories, context sampling and online / offline policies, and the paper's bandit algorithms on
hand-worked cases."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.core.errors import UserError
from icrl_jax.core.validation import ConfigValueError, validate
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.history import History
from icrl_jax.data.sources import ParamSource, Transition, build_source, noisy_oracle
from icrl_jax.papers.dpt import bandits, data, method as dpt_method, reference, report
from icrl_jax.papers.dpt.fields import dpt_config

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "dpt", "dpt_tiny.npz")
ATOL = 1e-4


def _fixture(prefix):
    with np.load(FIXTURE) as f:
        return {k[len(prefix) + 1:]: f[k] for k in f.files if k.startswith(prefix + "/")}


def _authors_method(env, out, position="learned"):
    """Our DPT on `env`, shaped as the fixture's model, with the authors' weights."""
    horizon, _, _, layers, width = (int(x) for x in out["config"])
    config = dpt_config()
    config.model.update(dict(d_model=width, num_layers=layers, num_heads=1, norm_epsilon=1e-5,
                             position=position, max_len=4 * (1 + horizon)))
    dpt = dpt_method.DPT(config.model, env, horizon)
    weights = {k: v for k, v in out.items() if "." in k}  # their state dict's keys
    return dpt, reference.authors_params(weights, layers, positions=position == "learned")


def _grid_batch(out):
    """The fixture's (x, y) states as cells of a 10 x 10 grid (our Dark Room's observations)."""
    cells = lambda s: jnp.asarray(s[..., 0] * 10 + s[..., 1], jnp.int32)  # noqa: E731
    return data.ContextBatch(
        query_observations=cells(out["query_states"]), observations=cells(out["context_states"]),
        actions=jnp.asarray(out["context_actions"].argmax(-1), jnp.int32),
        next_observations=cells(out["context_next_states"]),
        rewards=jnp.asarray(out["context_rewards"][..., 0]),
        labels=jnp.asarray(out["optimal_actions"].argmax(-1), jnp.int32),
        action_mask=jnp.ones((3, 5), bool))


def test_logits_and_loss_equal_the_authors_model():
    out = _fixture("grid")
    dpt, params = _authors_method(envs.make("darkroom", size=10), out)
    batch = _grid_batch(out)
    logits = dpt.logits(params, batch)  # (B, L + 1, A): the query's position, then 1..L
    np.testing.assert_allclose(logits[:, 1:], out["preds"], atol=ATOL)
    np.testing.assert_allclose(logits[:, -1], out["test_preds"], atol=ATOL)
    empty = jax.tree.map(lambda x: x[:, :0] if x.ndim > 1 and x.shape[1] == 12 else x, batch)
    np.testing.assert_allclose(dpt.logits(params, empty)[:, 0], out["empty_preds"], atol=ATOL)
    loss, _ = dpt.loss(params, batch, jax.random.key(0), deterministic=True)
    # theirs: the sum over the batch's 3 x 12 positions
    np.testing.assert_allclose(float(loss) * 3 * 12, float(out["loss_sum"]), rtol=1e-5)


def test_without_positions_it_is_their_model_with_a_zero_position_table():
    out = _fixture("grid")
    dpt, params = _authors_method(envs.make("darkroom", size=10), out, position="none")
    assert "position_embedding" not in params["backbone"]
    np.testing.assert_allclose(dpt.logits(params, _grid_batch(out))[:, 1:],
                               out["preds_no_positions"], atol=ATOL)


@pytest.mark.parametrize("cached", [True, False])
def test_online_pulls_equal_the_authors_online_choices(cached):
    """Their online evaluation, greedy with noise-free rewards: each pull joins the context."""
    out = _fixture("bandit")
    env = bandits.GaussianBandit(arms=5, noise=0.0)
    dpt, params = _authors_method(env, out)
    steps = len(out["actions"])
    # max_steps beyond the context turns the key/value cache off: the recomputed path
    policy = dpt_method.DPTPolicy(dpt, env, steps, True, 1.0, steps if cached else steps + 1)
    assert policy.cached == cached
    tasks = envs.stack_params([env.params_from_means(out["means"])])
    history = generate_histories(env, ParamSource(policy, params), tasks, steps,
                                 jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(history.actions[0]), out["actions"])


def _random_dpt(env, context_len, **model):
    config = dpt_config()
    config.model.update(dict(d_model=16, num_layers=2, num_heads=2, max_len=context_len + 1,
                             **model))
    dpt = dpt_method.DPT(config.model, env, context_len)
    example = data.ContextBatch(
        query_observations=jnp.zeros((1,), jnp.int32), observations=jnp.zeros((1, 3), jnp.int32),
        actions=jnp.zeros((1, 3), jnp.int32), next_observations=jnp.zeros((1, 3), jnp.int32),
        rewards=jnp.zeros((1, 3)), labels=jnp.zeros((1,), jnp.int32),
        action_mask=jnp.ones((1, env.num_actions), bool))
    return dpt, dpt.init(jax.random.key(1), example)


def test_cached_decoding_samples_exactly_what_recomputing_samples():
    env = bandits.GaussianBandit(arms=4, noise=0.3)
    dpt, params = _random_dpt(env, 20, position="learned")
    tasks = env.task_params(jnp.arange(6))
    actions = {}
    for cached in (True, False):
        policy = dpt_method.DPTPolicy(dpt, env, 20, False, 1.0, 20 if cached else 21)
        history = generate_histories(env, ParamSource(policy, params), tasks, 20,
                                     jax.random.key(3))
        actions[cached] = np.asarray(history.actions)
    np.testing.assert_array_equal(actions[True], actions[False])
    assert len(np.unique(actions[True])) > 1


def test_online_context_adds_whole_episodes_and_keeps_the_newest():
    env = envs.make("darkroom", size=3, episode_length=2)
    dpt, params = _random_dpt(env, 3)
    source = dpt_method.DPTPolicy(dpt, env, 3, False, 1.0, 10)(params)
    task = env.task_params(0)
    state = source.init(jax.random.key(0), task)
    tokens = []
    for t in range(5):
        done = t % 2 == 1
        step = Transition(obs=jnp.int32(t), action=jnp.int32(t % 5), reward=jnp.float32(t),
                          next_obs=jnp.int32(t + 1), terminated=jnp.bool_(False),
                          truncated=jnp.bool_(done), env_state=None, next_env_state=None)
        tokens.append(dpt.transition_tokens(step.obs, step.action, step.next_obs, step.reward))
        state = source.update(jax.random.key(0), state, step, task)
        finished = t + 1 if done else t  # the transitions of ended episodes
        count = int(state.count)
        assert count == min(finished, 3)
        if count:
            np.testing.assert_array_equal(state.context[3 - count:],
                                          np.stack(tokens[finished - count:finished]))


def test_offline_policies_read_the_same_fixed_dataset_and_never_update():
    env = bandits.GaussianBandit(arms=3, noise=0.3)
    behaviour = bandits.dirichlet_mixture()
    key, task = jax.random.key(5), env.task_params(2)
    first = dpt_method.collect_transitions(env, behaviour, key, task, 30)
    again = dpt_method.collect_transitions(env, behaviour, key, task, 30)
    np.testing.assert_array_equal(first.action, again.action)
    lcb = dpt_method.offline_source(bandits.lcb(), behaviour, env, 30)
    counts, sums = lcb.init(key, task)
    np.testing.assert_allclose(counts, np.bincount(np.asarray(first.action), minlength=3))
    np.testing.assert_allclose(sums, [float(first.reward[first.action == a].sum())
                                      for a in range(3)], rtol=1e-6)
    step = jax.tree.map(lambda x: x[0], first)
    assert lcb.update(key, (counts, sums), step, task) == (counts, sums)
    dpt, params = _random_dpt(env, 30)
    offline = dpt_method.DPTPolicy(dpt, env, 30, True, 1.0, 50, behaviour, 30)(params)
    logits = offline.init(key, task)  # a constant query: its one pass over the dataset
    tokens = dpt.transition_tokens(first.obs, first.action, first.next_obs, first.reward)
    np.testing.assert_allclose(logits, dpt.query_logits(
        params, dpt.query_tokens(jnp.int32(0)), tokens, jnp.int32(30)), rtol=1e-6)
    assert offline.update(key, logits, step, task) is logits
    room = envs.make("darkroom", size=3, episode_length=4)
    dpt, params = _random_dpt(room, 6)
    task = room.task_params(1)
    walk = dpt_method.collect_transitions(room, bandits.dirichlet_mixture(), key, task, 10)
    state = dpt_method.DPTPolicy(dpt, room, 6, True, 1.0, 50, bandits.dirichlet_mixture(), 10)(
        params).init(key, task)
    np.testing.assert_allclose(state.context, dpt.transition_tokens(
        walk.obs, walk.action, walk.next_obs, walk.reward)[-6:], rtol=1e-6)
    assert int(state.count) == 6


def test_labelled_histories_record_the_oracle_and_the_next_observation():
    env = envs.make("darkroom", size=5, episode_length=6)
    source = build_source("grid_explorer", env, 18, {"eps": 0.3})
    tasks = jnp.array([3, 17])
    labelled = data.labelling(source, noisy_oracle(env, 18, 0.0, 0.0), 18, jnp.zeros((), jnp.int32))
    history, info = generate_histories(env, labelled, env.task_params(tasks), 18,
                                       jax.random.key(0), with_state=True)
    plain = generate_histories(env, source, env.task_params(tasks), 18, jax.random.key(0))
    np.testing.assert_array_equal(history.actions, plain.actions)  # acts exactly as the source
    obs, actions = np.asarray(history.observations), np.asarray(history.actions)
    labels, next_obs = (np.asarray(info["policy_state"][k]) for k in ("labels", "next"))
    for n, task in enumerate(np.asarray(tasks)):
        goal_row, goal_col = divmod(int(env.task_params(int(task)).goal), 5)
        for t in range(18):
            row, col = divmod(int(obs[n, t]), 5)
            # up, down, left, right, stay: the first that brings the agent closest
            want = (0 if row > goal_row else 1 if row < goal_row else 2 if col > goal_col
                    else 3 if col < goal_col else 4)
            assert labels[n, t] == want
            # the cell the move led to, also at an episode's end (before the reset)
            moved = env.move(jnp.array([row, col]), actions[n, t])
            assert next_obs[n, t] == int(env.cell(moved))


def test_bandit_labels_are_the_best_arm():
    env = bandits.GaussianBandit(arms=4, noise=0.3)
    labelled = data.labelling(bandits.dirichlet_mixture(), noisy_oracle(env, 12, 0.0, 0.0), 12,
                              jnp.zeros((), jnp.int32))
    params = env.task_params(jnp.arange(5))
    _, info = generate_histories(env, labelled, params, 12, jax.random.key(1), with_state=True)
    best = np.argmax(np.asarray(params.means), -1)
    np.testing.assert_array_equal(info["policy_state"]["labels"], np.repeat(best[:, None], 12, 1))


def test_sampled_contexts_are_windows_of_one_history_with_a_query_of_it():
    rows, steps = 6, 10
    code = np.arange(rows)[:, None] * 100 + np.arange(steps)[None]  # row and step of each entry
    dataset = data.LabelledHistory(
        observations=jnp.asarray(code, jnp.int32), actions=jnp.zeros((rows, steps), jnp.int32),
        rewards=jnp.asarray(code, jnp.float32), dones=jnp.ones((rows, steps), bool),
        task_ids=jnp.arange(rows), action_mask=jnp.ones((rows, 3), bool),
        next_observations=jnp.asarray(code + 1, jnp.int32),
        optimal_actions=jnp.asarray(code % 3, jnp.int32))
    batch = data.sample_contexts(dataset, jax.random.key(2), 200, 4, shuffle=True)
    shuffled = 0
    for b in range(200):
        rewards = np.asarray(batch.rewards[b]).astype(int)
        row, first = rewards.min() // 100, rewards.min() % 100
        np.testing.assert_array_equal(np.sort(rewards), row * 100 + first + np.arange(4))
        np.testing.assert_array_equal(batch.observations[b], rewards)
        np.testing.assert_array_equal(batch.next_observations[b], rewards + 1)
        query = int(batch.query_observations[b])
        assert query // 100 == row and int(batch.labels[b]) == query % 3
        shuffled += not (np.diff(rewards) > 0).all()
    assert shuffled > 150
    ordered = data.sample_contexts(dataset, jax.random.key(2), 50, 4, shuffle=False)
    assert (np.diff(np.asarray(ordered.rewards), axis=1) == 1).all()


def test_bandit_algorithms_on_hand_worked_counts():
    mask = jnp.ones(3, bool)
    task = bandits.GaussianBandit(arms=3).params_from_means(jnp.array([0.2, 0.5, 0.4]))
    counts, sums = jnp.array([4.0, 1.0, 0.0]), jnp.array([2.4, 0.5, 0.0])  # means 0.6, 0.5, 0
    act = lambda source, state: int(source.act(jax.random.key(0), state, 0, None, task)[0])  # noqa
    assert act(bandits.empirical_mean(untried_first=False), (counts, sums)) == 0
    assert act(bandits.empirical_mean(), (counts, sums)) == 2  # the arm never pulled
    # UCB 0.6 + 0.5 = 1.1, 0.5 + 1 = 1.5; LCB 0.6 - 0.4 = 0.2, 0.5 - 0.8 < 0, 0 - 0.8
    assert act(bandits.ucb(untried_first=False), (counts, sums)) == 1
    assert act(bandits.lcb(), (counts, sums)) == 0
    mean, var = bandits.gaussian_posterior(counts, sums, 0.3, 0.5, 1 / 12)
    w = 0.09 / (0.09 + 4 / 12)
    np.testing.assert_allclose(mean, [w * 0.5 + (1 - w) * 0.6, 0.09 / (0.09 + 1 / 12) * 0.5
                                      + (1 - 0.09 / (0.09 + 1 / 12)) * 0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(var, [1 / (12 + 4 / 0.09), 1 / (12 + 1 / 0.09), 1 / 12], rtol=1e-6)
    # many draws vote for the arm of highest posterior mean
    assert act(bandits.gaussian_thompson(0.3, draws=1000), (counts * 100, sums * 100)) == 0
    probs = bandits.dirichlet_mixture().init(jax.random.key(4), task)
    np.testing.assert_allclose(float(probs.sum()), 1.0, rtol=1e-6)
    assert bool(mask.all())


def test_gaussian_bandit_rewards_are_the_mean_plus_noise():
    env = bandits.GaussianBandit(arms=2, noise=0.3)
    task = env.params_from_means(jnp.array([0.25, 0.75]))
    _, state = env.reset(jax.random.key(0), task)
    keys = jax.random.split(jax.random.key(1), 4000)
    rewards = jax.vmap(lambda k: env.transition(k, state, jnp.int32(1), task)[2])(keys)
    assert abs(float(rewards.mean()) - 0.75) < 0.02 and abs(float(rewards.std()) - 0.3) < 0.02
    noiseless = bandits.GaussianBandit(arms=2, noise=0.0)
    assert float(noiseless.transition(keys[0], state, jnp.int32(0), task)[2]) == 0.25


def test_bad_inputs_are_one_clear_error():
    with pytest.raises(UserError, match="pixels"):
        dpt_method.StateFeatures.of(envs.make("darkroom", pixels=True))
    env = bandits.GaussianBandit(arms=3)
    with pytest.raises(UserError, match="rotary"):
        _random_dpt(env, 4, position="rotary")
    dpt, _ = _random_dpt(env, 4)
    plain = History(observations=np.zeros((1, 4), np.int32), actions=np.zeros((1, 4), np.int32),
                    rewards=np.zeros((1, 4), np.float32), dones=np.ones((1, 4), bool),
                    task_ids=np.zeros(1, np.int32), action_mask=np.ones((1, 3), bool))
    config = dpt_config()
    config.data.builder = "histories"
    with pytest.raises(UserError, match="dpt_histories"):
        dpt.training_data(plain, config, env)
    config = dpt_config()
    config.dpt.comparisons = {"ucb": 1.0}
    with pytest.raises(ConfigValueError, match="dpt.comparisons"):
        validate(config)
    # The compared sources are built only at evaluation: their names and arguments are checked
    # before anything runs, each error naming the key.
    for comparisons, message in [
            ({"ucbb": {}}, r"^config dpt.comparisons: 'ucbb' is not a registered source; did you "
                           r"mean 'ucb'\?$"),
            ({"ucb": {"alphaa": 1.0}}, r"^config dpt.comparisons.ucb.alphaa is not an argument of "
                                       r"source 'ucb'")]:
        for key in ("dpt.comparisons", "dpt.offline_comparisons"):
            config = dpt_config()
            config[key.split(".")[0]][key.split(".")[1]] = comparisons
            with pytest.raises(ConfigValueError, match=message.replace("dpt.comparisons", key)):
                validate(config)
    config = dpt_config()
    config.dpt.comparisons = {"ucb": {"bonus": 2.0}, "empirical_mean": {}}
    validate(config)


def test_xland_histories_are_labelled_with_their_expert_actions_and_views_one_hot():
    pytest.importorskip("h5py")
    pytest.importorskip("xminigrid")
    from icrl_jax.data.xland_hdf5 import read_xland_hdf5
    from icrl_jax.papers.dpt.xland import labelled_xland

    path = os.path.join(os.path.dirname(__file__), "fixtures", "xland_hdf5", "xland_layout.hdf5")
    tasks = read_xland_hdf5(path)
    labelled = labelled_xland(tasks, 6)
    np.testing.assert_array_equal(labelled.optimal_actions,
                                  np.concatenate([t.expert_actions for t in tasks]))
    obs = np.asarray(labelled.observations)
    np.testing.assert_array_equal(labelled.next_observations[:, :-1], obs[:, 1:])
    np.testing.assert_array_equal(labelled.next_observations[:, -1], obs[:, -1])
    env = envs.make("XLand-MiniGrid-R1-9x9", num_rulesets=4)
    features = dpt_method.StateFeatures.of(env)
    view = obs[0, 0]  # (5, 5, 2): (tile, colour) per cell
    coded = np.asarray(features(jnp.asarray(view))).reshape(5, 5, 25)
    assert features.dim == 5 * 5 * 25 and (coded.sum(-1) == 2).all()
    np.testing.assert_array_equal(coded[..., :13].argmax(-1), view[..., 0])
    np.testing.assert_array_equal(coded[..., 13:].argmax(-1), view[..., 1])


def test_the_episodic_table_shows_the_episodes_every_policy_has():
    """Policies end different numbers of episodes in the same steps (XLand's episodes end at
    the goal): the columns stop at the fewest, and each cell is mean ± s.e.m. over seeds."""
    def seed(model_episodes, source_episodes, offset):
        arrays = {"model_returns": np.full((2, model_episodes), 0.5 + offset),
                  "source_returns": np.full((2, source_episodes), 0.25)}
        arrays["model_returns"][1, -1] = np.nan  # a rollout that ended fewer episodes
        return {"curves": {"model": [], "source": []}}, arrays

    rows = report.return_rows([seed(12, 7, 0.0), seed(11, 8, 0.1)])
    assert len(rows["model"]["returns"]) == 11 and len(rows["source"]["returns"]) == 7
    table = report.return_table(rows)
    assert "| policy | episode 1 | episode 2 | episode 3 | episode 5 | episode 7 |" in table
    assert "| model: return | 0.55 ± 0.05 |" in table
    assert "| source: reached the goal | 1.00 ± 0.00 |" in table
