"""Headless-AD: embeddings, action-set order invariance, padding, losses, ablations, report."""

import json
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from icrl_jax.data.windows import StepWindows, sample_windows, to_step_windows
from icrl_jax.data.train_data import on_device
from icrl_jax.data.history import History
from icrl_jax.papers.headless_ad.method import (HeadlessAD, PermutedAD, default_headless_config,
                                          permute_action_ids, prompt_attention_mask,
                                          orthonormal_columns, sample_action_embeddings)
from icrl_jax.models.heads import mask_logits
from icrl_jax.methods.fields import ad_model_config
from icrl_jax.core.config import default_train_config
from icrl_jax.pipeline.train import train

A, E, L = 6, 16, 12


def tiny_config(**overrides):
    config = ad_model_config()
    config.update(dict(d_model=32, num_layers=2, num_heads=2, max_len=32, label_smoothing=0.0))
    for key, value in dict(default_headless_config(), action_embed_dim=E, tau=1.0).items():
        config[key] = value
    config.update(overrides)
    return config


def random_window(seed=0, batch=3, num_available=(6, 4, 5)) -> StepWindows:
    rng = np.random.default_rng(seed)
    mask = np.arange(A)[None] < np.array(num_available)[:, None]
    actions = np.stack([rng.integers(0, n, L) for n in num_available]).astype(np.int32)
    prev = np.concatenate([np.full((batch, 1), A), actions[:, :-1]], 1).astype(np.int32)
    return StepWindows(observations=np.zeros((batch, L), np.int32),
                       prev_actions=jnp.asarray(prev),
                       prev_rewards=jnp.asarray(rng.random((batch, L)), jnp.float32),
                       actions=jnp.asarray(actions), action_mask=jnp.asarray(mask))


@jax.jit
def _softmax_available(logits, action_mask):
    return jax.nn.softmax(mask_logits(logits, action_mask[:, None, :]), -1)


def probabilities(method, params, window, embeddings):
    """Policy probabilities `(B, L, A)` given one embedding map `(A, E)`."""
    logits = jax.jit(method.context_logits)({"model": params, "action_embeddings": embeddings},
                                            window, jax.random.PRNGKey(0))
    return _softmax_available(logits, window.action_mask)


@pytest.mark.parametrize("num_actions,dim", [(5, 16), (16, 16), (125, 128)])
def test_sampled_embeddings_are_orthonormal_and_fresh(num_actions, dim):
    key = jax.random.PRNGKey(3)
    emb = sample_action_embeddings(key, num_actions, dim)
    assert emb.shape == (num_actions, dim) and emb.dtype == jnp.float32
    np.testing.assert_allclose(emb @ emb.T, np.eye(num_actions), atol=2e-5)
    other = sample_action_embeddings(jax.random.PRNGKey(4), num_actions, dim)
    assert not np.allclose(emb, other)
    np.testing.assert_array_equal(emb, sample_action_embeddings(key, num_actions, dim))


@pytest.mark.parametrize("rows,columns", [(512, 20), (16, 16), (128, 125)])
def test_orthonormal_columns_equal_householder_qr_with_positive_diagonal(rows, columns):
    """Gram-Schmidt gives the Q of LAPACK's Householder QR once R's diagonal signs are folded
    into it (the unique QR with a positive diagonal), square and nearly square included."""
    matrix = jax.random.normal(jax.random.PRNGKey(rows + columns), (rows, columns))
    q, r = np.linalg.qr(np.asarray(matrix, np.float64))
    expected = q * np.sign(np.diagonal(r))[None, :]
    got = np.asarray(jax.jit(orthonormal_columns)(matrix))
    np.testing.assert_allclose(got, expected, atol=5e-5)
    np.testing.assert_allclose(got.T @ got, np.eye(columns), atol=2e-5)


def test_orthonormal_embeddings_need_enough_dimensions_and_normal_ablation_is_not_orthogonal():
    with pytest.raises(ValueError, match="action_embed_dim >= 20"):
        sample_action_embeddings(jax.random.PRNGKey(0), 20, 8)
    emb = sample_action_embeddings(jax.random.PRNGKey(0), 10, 16, "normal")
    gram = np.asarray(emb @ emb.T)
    assert np.abs(gram - np.diag(np.diag(gram))).max() > 0.05


NGRAM = dict(ngram_positions=(1,), ngram_max=2, ngram_match="transition")


@pytest.mark.parametrize("prompt,extra", [(True, {}), (False, {"reward_gated_actions": True}),
                                          (True, NGRAM), (False, NGRAM)])
def test_action_probabilities_are_invariant_to_action_set_order(prompt, extra):
    """Also with n-gram layers, whose matches compare action indices: relabelling the actions
    changes no equality, so the pattern and hence the probabilities follow the permutation."""
    method = HeadlessAD(tiny_config(prompt=prompt, **extra), num_observations=1)
    window = random_window()
    if extra.get("ngram_positions"):  # 0/1 rewards, so that transitions repeat and match
        window = window.replace(prev_rewards=jnp.round(window.prev_rewards))
    params = method.init(jax.random.PRNGKey(1), window)
    embeddings = sample_action_embeddings(jax.random.PRNGKey(2), A, E)
    probs = probabilities(method, params, window, embeddings)

    # Window b's available actions are reordered by perm[b] (padded slots stay); every action
    # keeps its embedding, and the history refers to actions by their new indices.
    rng = np.random.default_rng(7)
    mask = np.asarray(window.action_mask)
    perms = []
    for m in mask:
        n = int(m.sum())
        perms.append(np.concatenate([rng.permutation(n), np.arange(n, A)]))
    perm = np.stack(perms)  # new index j holds old action perm[b, j]
    new_of_old = np.argsort(perm, -1)
    relabel = lambda x: np.where(x < A, np.take_along_axis(new_of_old, np.minimum(x, A - 1), -1),
                                 x)
    permuted_window = window.replace(actions=jnp.asarray(relabel(np.asarray(window.actions))),
                                     prev_actions=jnp.asarray(relabel(np.asarray(window.prev_actions))))
    # One shared map per batch: permute windows one at a time, each with its own embedding order.
    for b in range(mask.shape[0]):
        one = jax.tree.map(lambda x: x[b:b + 1], permuted_window)
        permuted_probs = probabilities(method, params, one, embeddings[perm[b]])
        np.testing.assert_allclose(permuted_probs[0], np.asarray(probs[b])[:, perm[b]],
                                   atol=1e-5)
    assert not np.allclose(probs[0], probs[0][:, ::-1], atol=1e-3)  # it is not trivially uniform


def test_padded_actions_get_zero_probability_and_do_not_influence_the_policy():
    method = HeadlessAD(tiny_config(), num_observations=1)
    window = random_window()
    params = method.init(jax.random.PRNGKey(1), window)
    embeddings = sample_action_embeddings(jax.random.PRNGKey(2), A, E)
    probs = np.asarray(probabilities(method, params, window, embeddings))
    mask = np.asarray(window.action_mask)[:, None, :]
    assert (probs[~np.broadcast_to(mask, probs.shape)] == 0).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    # Whatever the padded rows' embeddings are, the available actions' probabilities are the same.
    scrambled = embeddings.at[4:].set(jax.random.normal(jax.random.PRNGKey(9), (A - 4, E)))
    sub = jax.tree.map(lambda x: x[1:2], window)  # the window with 4 available actions
    np.testing.assert_allclose(probabilities(method, params, sub, scrambled), probs[1:2],
                               atol=1e-5)


def test_infonce_loss_ignores_padded_actions_and_mse_policy_is_nearest_neighbour():
    method = HeadlessAD(tiny_config(), num_observations=1)
    window = random_window()
    params = method.init(jax.random.PRNGKey(1), window)
    loss, metrics = method.loss(params, window, jax.random.PRNGKey(3), deterministic=True)
    # The same loss with padding widened (more padded action slots) is unchanged.
    wide = window.replace(action_mask=jnp.concatenate(
        [window.action_mask, jnp.zeros((3, 2), bool)], 1),
        prev_actions=jnp.where(window.prev_actions >= A, A + 2, window.prev_actions))
    assert np.isfinite(float(loss)) and 0.0 <= float(metrics["accuracy"]) <= 1.0
    embeddings = sample_action_embeddings(jax.random.PRNGKey(2), A, E)
    wide_embeddings = sample_action_embeddings(jax.random.PRNGKey(2), A + 2, E).at[:A].set(
        embeddings)
    a = probabilities(method, params, window, embeddings)
    b = probabilities(method, params, wide, wide_embeddings)[..., :A]
    np.testing.assert_allclose(a, b, atol=1e-5)

    mse = HeadlessAD(tiny_config(loss="mse"), num_observations=1)
    mse_params = mse.init(jax.random.PRNGKey(1), window)
    logits = mse.context_logits({"model": mse_params, "action_embeddings": embeddings}, window,
                                jax.random.PRNGKey(0))
    predicted = mse.predict(mse_params, window, embeddings)
    distance = ((predicted[:, :, None] - embeddings[None, None]) ** 2).sum(-1)
    nearest = jnp.argmin(jnp.where(window.action_mask[:, None], distance, jnp.inf), -1)
    np.testing.assert_array_equal(jnp.argmax(logits, -1), nearest)
    assert ((logits == 0).sum(-1) == 1).all()  # exactly one selectable action
    with pytest.raises(ValueError, match="episode_starts is an AD option"):
        HeadlessAD(tiny_config(episode_starts=True), num_observations=1)
    with pytest.raises(ValueError, match="episode_returns is an AD option"):
        HeadlessAD(tiny_config(episode_returns=True), num_observations=1)


def test_prompt_mask_structure():
    mask = np.asarray(prompt_attention_mask(jnp.array([[True, True, False]]), 2))[0, 0]
    expected = np.array([  # keys: p0 p1 p2(pad) s0 s1
        [1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 1, 0, 1, 1]], bool)
    np.testing.assert_array_equal(mask, expected)
    causal = np.asarray(prompt_attention_mask(jnp.array([[True, True, False]]), 2, True))[0, 0]
    expected[0, 1] = False  # an ordered prompt: p0 no longer sees p1
    np.testing.assert_array_equal(causal, expected)


def repeat_task_history(n=64, t=48, seed=0) -> History:
    """Each history pulls one arm (random, among 3-6 available) over and over: the next action
    is the previous one, which only a model that reads action embeddings can copy."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(3, A + 1, n)
    arms = rng.integers(0, counts)
    actions = np.repeat(arms[:, None], t, 1).astype(np.int32)
    return History(observations=np.zeros((n, t), np.int32), actions=actions,
                   rewards=np.ones((n, t), np.float32), dones=np.ones((n, t), bool),
                   task_ids=np.arange(n, dtype=np.int32),
                   action_mask=np.arange(A)[None] < counts[:, None])


def test_headless_ad_learns_to_copy_actions_with_fresh_embeddings_every_step(tmp_path):
    data = to_step_windows(repeat_task_history())
    config = default_train_config()
    config.update(dict(num_steps=200, batch_size=16, seq_len=12, steps_per_call=50, log_every=50,
                       checkpoint_every=200, learning_rate=3e-3, warmup_steps=10))
    method = HeadlessAD(tiny_config(num_layers=1), num_observations=1)
    state = train(method, on_device(data, sample_windows, 12), config, str(tmp_path),
                  {"m": "headless"}, show_progress=False)
    windows = jax.tree.map(lambda x: x[:16, :12], data)
    # Embeddings never seen in training (a new key): still copies after the first step.
    for seed in (11, 12):
        probs = probabilities(method, state.params, windows,
                              sample_action_embeddings(jax.random.PRNGKey(seed), A, E))
        chosen = np.asarray(jnp.argmax(probs, -1))[:, 1:]
        assert (chosen == np.asarray(windows.actions)[:, 1:]).mean() > 0.95


def test_permute_action_ids_relabels_available_actions_consistently():
    window = random_window(batch=3)
    out = permute_action_ids(jax.random.PRNGKey(0), window)
    np.testing.assert_array_equal(out.action_mask, window.action_mask)
    for b in range(3):
        n = int(window.action_mask[b].sum())
        old, new = np.asarray(window.actions[b]), np.asarray(out.actions[b])
        assert new.max() < n
        mapping = {}
        for o, m in zip(old, new):
            assert mapping.setdefault(o, m) == m  # a function of the old id
        assert len(set(mapping.values())) == len(mapping)  # and injective
        prev_new = np.asarray(out.prev_actions[b])
        assert prev_new[0] == A  # "no previous action" is kept
        np.testing.assert_array_equal(prev_new[1:], new[:-1])
    ad_config = ad_model_config()
    ad_config.update(dict(d_model=32, num_layers=1, num_heads=2, max_len=32, label_smoothing=0.0))
    method = PermutedAD(ad_config, A, 1)
    params = method.init(jax.random.PRNGKey(0), window)
    loss, _ = method.loss(params, window, jax.random.PRNGKey(1))
    assert np.isfinite(float(loss))


def test_registry_builds_headless_ad_and_report_writes_table(tmp_path):
    from icrl_jax.methods import build_method
    from icrl_jax.papers.headless_ad.table1 import write_report
    from icrl_jax import envs

    config = ml_collections.ConfigDict(dict(method="headless_ad", model=tiny_config()))
    env = envs.make("bernoulli_bandit", arms=(4, 20))
    assert isinstance(build_method(config, env), HeadlessAD)

    def curves(n):
        return {"model": list(np.linspace(0, 5, n)), "source": list(np.linspace(0, 4, n)),
                "random": list(np.linspace(0, 9, n))}

    for label, env_name, names, seeds in [
            ("Headless-AD", "bernoulli_bandit", ["arms_20", "arms_50"], 2),
            ("Headless-AD", "darkroom_composite", ["train__test_goals", "all__test_goals"], 2),
            ("AD", "darkroom_composite", ["train__test_goals"], 1)]:
        for s in range(seeds):
            run = tmp_path / f"{label}_{env_name}" / f"seed_{s}"
            run.mkdir(parents=True)
            variants = {n: dict(applicable=True, score=0.9 + 0.02 * s, arms_used=10.0 + s,
                                curves=curves(5)) for n in names}
            variants["all__test_goals_ad"] = dict(applicable=False)
            (run / "variants.json").write_text(json.dumps(dict(
                experiment="x", method="m", env=env_name, label=label, seed=s, variants=variants)))
    written = write_report([str(p) for p in tmp_path.iterdir()], str(tmp_path / "report"))
    table = open(written["table"]).read()
    assert "| Headless-AD | 0.91 ± 0.01 | 10.50 ± 0.50 |" in table
    assert "| AD | - | - | 0.90 | 10.00 |" in table
    for key in ("bandit_regret", "darkroom_success"):
        assert open(written[key], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_report_reuses_an_evaluation_only_at_the_configured_step(tmp_path):
    """Raising `train.num_steps` must resume and re-evaluate a seed, not reuse its old table."""
    from icrl_jax.papers.headless_ad.variants import evaluated_at

    assert not evaluated_at(str(tmp_path), 100)  # nothing evaluated yet
    (tmp_path / "variants.json").write_text(json.dumps(dict(checkpoint_step=100, variants={})))
    assert evaluated_at(str(tmp_path), 100)
    assert not evaluated_at(str(tmp_path), 200)
    (tmp_path / "variants.json").write_text(json.dumps(dict(variants={})))  # step unknown
    assert not evaluated_at(str(tmp_path), 100)


@pytest.mark.parametrize("prompt,position,gated,ngrams", [
    (True, "rotary", False, {}), (False, "learned", True, {}),
    (True, "rotary", False, dict(prompt_order="causal")),
    (True, "learned", False, dict(ngram_positions=(0, 1), ngram_max=2)),
    (False, "rotary", False, dict(ngram_positions=(1,), ngram_latest=True))])
def test_cached_decoding_equals_the_full_forward_pass(prompt, position, gated, ngrams):
    """Step-by-step decoding from a cache (prompt written once) gives the logits of the whole
    sequence at once, with padded actions, either position encoding, with or without
    reward-gated action inputs, and with n-gram layers (the prompt's ids written too)."""
    method = HeadlessAD(tiny_config(prompt=prompt, position=position,
                                    reward_gated_actions=gated, **ngrams), num_observations=1)
    window = random_window(seed=5)
    params = method.eval_params(method.init(jax.random.PRNGKey(1), window), jax.random.PRNGKey(2),
                                types.SimpleNamespace(num_actions=A))
    full = method.context_logits(params, window, None)
    cache = method.decode_init(params, window, L)
    pieces = []
    for start, stop in [(0, 1), (1, 5), (5, L)]:  # one step, then blocks of steps
        step = jax.tree.map(lambda x: x[:, start:stop] if x.ndim > 1 and x.shape[1] == L else x,
                            window)
        logits, cache = method.decode_logits(params, cache, step, jnp.int32(start))
        pieces.append(logits)
    available = np.asarray(window.action_mask)[:, None, :]
    np.testing.assert_allclose(np.where(available, np.concatenate(pieces, 1), 0),
                               np.where(available, full, 0), atol=1e-5)


def test_cached_rollout_takes_the_actions_of_the_recomputed_window():
    """A bandit rollout that fits in the context: the cached in-context policy and the one that
    recomputes the window every step choose the same arms."""
    from icrl_jax.envs.bandits import BernoulliBandit
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.methods.in_context import in_context_source

    env = BernoulliBandit(arms=5, max_arms=A, seed=0)
    method = HeadlessAD(tiny_config(), num_observations=1)
    window = random_window()
    params = method.eval_params(method.init(jax.random.PRNGKey(1), window), jax.random.PRNGKey(2),
                                types.SimpleNamespace(num_actions=A))
    task_params = env.task_params(np.arange(4))
    actions = {}
    for max_steps in (None, L):
        policy = in_context_source(method, params, env, L, greedy=False, max_steps=max_steps)
        assert policy.build.cached == (max_steps is not None)
        history = generate_histories(env, policy, task_params, L, jax.random.PRNGKey(7))
        actions[max_steps] = np.asarray(history.actions)
    np.testing.assert_array_equal(actions[None], actions[L])
    assert len(np.unique(actions[L])) > 1  # sampled, not a constant policy


def test_ngram_prompt_ids_match_nothing_and_cached_rollouts_take_the_same_actions():
    """Prompt tokens get unique negative ids (no n-gram match with a step or each other), and a
    model with n-gram layers takes the same actions decoded from a cache as with its window
    recomputed every step."""
    from icrl_jax.envs.bandits import BernoulliBandit
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.methods.in_context import in_context_source
    from icrl_jax.papers.headless_ad.method import with_prompt_ids
    from icrl_jax.models.ngram import token_equality

    window = random_window()
    window = window.replace(prev_rewards=jnp.round(window.prev_rewards))
    method = HeadlessAD(tiny_config(**NGRAM), num_observations=1)
    ids = with_prompt_ids(method.window_ngram_ids(window), A)
    assert ids.shape[:2] == (3, A + L)
    equal = np.asarray(token_equality(ids))
    off_diagonal = equal & ~np.eye(A + L, dtype=bool)[None]
    assert not off_diagonal[:, :A, :].any() and not off_diagonal[:, :, :A].any()
    assert off_diagonal[:, A:, A:].any()  # steps do repeat (observation 0, same action)

    env = BernoulliBandit(arms=5, max_arms=A, seed=0)
    params = method.eval_params(method.init(jax.random.PRNGKey(1), window), jax.random.PRNGKey(2),
                                types.SimpleNamespace(num_actions=A))
    actions = {}
    for max_steps in (None, L):
        policy = in_context_source(method, params, env, L, greedy=False, max_steps=max_steps)
        assert policy.build.cached == (max_steps is not None)
        actions[max_steps] = np.asarray(generate_histories(
            env, policy, env.task_params(np.arange(2)), L, jax.random.PRNGKey(7)).actions)
    np.testing.assert_array_equal(actions[None], actions[L])
    assert actions[L].max() < 5 and len(np.unique(actions[L])) > 1


def test_contextual_model_transfers_to_bernoulli_bandits_seen_through_a_context(tmp_path):
    """Appendix D (Figure 9) end to end at toy size: a Headless-AD model trained on contextual
    bandits is evaluated on Bernoulli bandits whose observation is one fixed context, and the
    report gives that transfer a column of its own."""
    from icrl_jax.experiments.headless_ad import contextual_bandit
    from icrl_jax.pipeline import run as run_pipeline
    from icrl_jax.papers.headless_ad import variants
    from icrl_jax.core.config import set_dotted
    from icrl_jax.papers.headless_ad.table1 import write_report

    config = contextual_bandit.get_config("quick")
    for key, value in {"workdir": str(tmp_path / "run"), "run.progress": False,
                       "data.num_train_tasks": 16, "data.num_test_tasks": 3,
                       "data.num_steps": 24, "eval.num_steps": 24, "model.d_model": 16,
                       "model.num_layers": 1, "model.num_heads": 2, "model.action_embed_dim": 32,
                       "train.num_steps": 4, "train.steps_per_call": 2, "train.batch_size": 4,
                       "train.seq_len": 24, "train.log_every": 2, "train.checkpoint_every": 4,
                       "train.warmup_steps": 1, "run.evaluate": False}.items():
        set_dotted(config, key, value)
    config.variants = ml_collections.ConfigDict(
        {name: config.variants[name] for name in ("heldout_4_20", "bernoulli_arms_25")})
    config = run_pipeline.resolve_config(config)
    run_pipeline.train(config)
    summary = variants.evaluate_variants(config)
    transfer = summary["variants"]["bernoulli_arms_25"]
    assert transfer["env"] == "bernoulli_bandit" and transfer["num_actions"] == 25
    assert summary["variants"]["heldout_4_20"]["env"] == "contextual_bandit"
    assert np.isfinite(transfer["score"]) and 1 <= transfer["arms_used"] <= 25
    written = write_report([config.workdir], str(tmp_path / "report"))
    table = open(written["table"]).read()
    assert "Contextual -> Bandit" in table and "bernoulli_arms_25" in table
    assert open(written["contextual_to_bandit_regret"], "rb").read(4) == b"\x89PNG"
