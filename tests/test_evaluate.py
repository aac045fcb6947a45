"""In-context evaluation: the rollout's context equals the training window format, one trace."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.data.windows import to_step_windows
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.methods.in_context import (CachedContext, PreviousStep, in_context_source,
                                       staggered_slots)
from icrl_jax.methods.ad import AD
from icrl_jax.models.heads import mask_logits, select_actions
from icrl_jax.models.ngram import ngram_pattern
from icrl_jax.methods.fields import ad_model_config

CONTEXT = 12


def tiny_ad(env, **overrides):
    config = ad_model_config()
    config.update(dict(d_model=16, num_layers=1, num_heads=2, max_len=CONTEXT,
                       label_smoothing=0.0, **overrides))
    return AD(config, env.num_actions, env.num_observations)


@pytest.mark.parametrize("episode_starts", [False, True])
def test_greedy_rollout_matches_the_model_on_training_windows(episode_starts):
    """Every action of a greedy rollout is the argmax the model gives on the same steps laid out
    as a training window, both while the context fills and after it starts sliding; with
    episode starts marked and returns so far added (5-step episodes), the rollout's tokens
    carry what the dataset's do."""
    env = envs.make("darkroom", episode_length=5)
    method = tiny_ad(env, episode_starts=episode_starts, episode_returns=episode_starts)
    task_params = env.task_params(np.array([3, 40]))
    probe = to_step_windows(generate_histories(env, envs_random(), task_params, CONTEXT,
                                               jax.random.PRNGKey(0)))
    params = method.init(jax.random.PRNGKey(1), probe)
    if episode_starts:  # away from the start vector's small initialisation, so it matters
        params = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.PRNGKey(4),
                                                                    x.shape), params)
    steps = CONTEXT + 6
    history = generate_histories(env, in_context_source(method, params, env, CONTEXT, True),
                                 task_params, steps, jax.random.PRNGKey(2))
    windows = to_step_windows(history)
    context_logits = jax.jit(method.context_logits)  # every window is CONTEXT steps: one shape
    for t in range(steps):
        start = max(0, t - CONTEXT + 1)
        window = steps_of(windows, start, start + CONTEXT)
        logits = context_logits(params, window, jax.random.PRNGKey(0))
        expected = jnp.argmax(mask_logits(logits[:, t - start], window.action_mask), -1)
        np.testing.assert_array_equal(np.asarray(history.actions[:, t]), np.asarray(expected))


def test_rollout_context_lays_out_its_steps_as_the_dataset_does():
    """After a rollout longer than its context, the sliding window holds the last L steps as
    `to_step_windows` lays out the recorded history: previous actions and rewards, episode
    starts, and the reward each step's episode collected before it (Dark Room, 5-step
    episodes, goals next to the start so that rewards come)."""
    env = envs.make("darkroom", episode_length=5)
    method = tiny_ad(env)
    task_params = env.task_params(np.array([31, 39, 40, 48] * 4))  # the centre's neighbours
    params = method.init(jax.random.PRNGKey(1), to_step_windows(generate_histories(
        env, envs_random(), task_params, CONTEXT, jax.random.PRNGKey(0))))
    policy = in_context_source(method, params, env, CONTEXT, greedy=False)
    history, info = generate_histories(env, policy, task_params, CONTEXT + 7,
                                       jax.random.PRNGKey(2), with_state=True)
    window, expected = info["policy_state"].window, to_step_windows(history)
    for field in ("observations", "prev_actions", "prev_rewards", "episode_starts",
                  "episode_returns"):
        np.testing.assert_array_equal(np.asarray(getattr(window, field))[:, 0],
                                      np.asarray(getattr(expected, field))[:, -CONTEXT:], field)
    returns = np.asarray(expected.episode_returns)
    assert (returns > 0).any() and (returns[np.asarray(expected.episode_starts)] == 0).all()


def envs_random():
    from icrl_jax.data.sources import uniform_random
    return uniform_random()


def test_evaluation_rollout_compiles_once_for_new_parameters():
    env = envs.make("darkroom")
    method = tiny_ad(env)
    calls = chex.assert_max_traces(method.context_logits, n=1)
    method.context_logits = calls  # counts traces of the rollout body
    task_params = env.task_params(np.arange(4))
    probe = to_step_windows(generate_histories(env, envs_random(), task_params, CONTEXT,
                                               jax.random.PRNGKey(0)))
    results = []
    for seed in (1, 2):  # different parameter values, same shapes: no retrace
        params = method.init(jax.random.PRNGKey(seed), probe)
        results.append(generate_histories(env, in_context_source(method, params, env, CONTEXT, False),
                                          task_params, 30, jax.random.PRNGKey(3)).actions)
    assert not np.array_equal(np.asarray(results[0]), np.asarray(results[1]))


def test_sampling_temperature_sharpens_the_policy_and_keeps_the_mask():
    """softmax(logits / T): logits (0, log 3, 5) with the last action masked give probabilities
    (1/4, 3/4) at T = 1 and (1/10, 9/10) at T = 1/2; the masked action is never drawn."""
    logits = jnp.array([0.0, jnp.log(3.0), 5.0])
    mask = jnp.array([True, True, False])
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    for temperature, expected in ((1.0, 0.75), (0.5, 0.9)):
        actions = jax.vmap(lambda k: select_actions(k, logits, mask, False, temperature))(keys)
        assert not bool((actions == 2).any())
        np.testing.assert_allclose(float((actions == 1).mean()), expected, atol=0.01)


def test_non_positive_temperature_is_a_clear_error():
    env = envs.make("darkroom")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        in_context_source(tiny_ad(env), {}, env, CONTEXT, False, temperature=0.0)


@pytest.mark.parametrize("position,ngrams", [
    ("learned", {}), ("rotary", {}),
    ("learned", dict(ngram_positions=(0, 2), ngram_max=3)),
    ("rotary", dict(ngram_positions=(1,), ngram_max=2, ngram_latest=True,
                    ngram_match="observation", episode_starts=True)),
    ("learned", dict(ngram_positions=(1,), ngram_latest=True, ngram_match="observation_return",
                     episode_returns=True))])
def test_ad_cached_decoding_equals_the_full_forward_pass(position, ngrams):
    """AD decoded step by step (and in blocks) from a cache gives the logits of the whole
    context at once, grid-cell features included, and with n-gram layers (uniform over all
    matches, or the latest one) before, between and after the attention blocks, and with
    episode starts marked (5-step episodes)."""
    env = envs.make("darkroom", episode_length=5)
    config = ad_model_config()
    config.update(dict(d_model=16, num_layers=2, num_heads=2, max_len=CONTEXT,
                       label_smoothing=0.0, position=position, **ngrams))
    method = AD(config, env.num_actions, env.num_observations, grid_size=9)
    task_params = env.task_params(np.array([3, 40]))
    window = to_step_windows(generate_histories(env, envs_random(), task_params, CONTEXT,
                                                jax.random.PRNGKey(0)))
    params = method.init(jax.random.PRNGKey(1), window)
    params = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.PRNGKey(4), x.shape),
                          params)  # biases and gates away from their zero initialisation
    if ngrams:  # the n-gram layers have matches to read
        assert np.asarray(ngram_pattern(method.window_ngram_ids(window), 1)).any()
    full = method.context_logits(params, window, None)
    cache = method.decode_init(params, window, CONTEXT)
    pieces = []
    for start, stop in [(0, 1), (1, 5), (5, CONTEXT)]:
        step = jax.tree.map(lambda x: x[:, start:stop] if x.ndim > 1 and x.shape[1] == CONTEXT
                            else x, window)
        logits, cache = method.decode_logits(params, cache, step, jnp.int32(start))
        pieces.append(logits)
    np.testing.assert_allclose(np.concatenate(pieces, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ngrams", [{}, dict(ngram_positions=(0, 1), ngram_max=2,
                                             episode_starts=True),
                                    dict(ngram_positions=(0,), ngram_latest=True,
                                         ngram_match="observation_return")])
def test_ad_rollout_that_fits_the_context_decodes_from_a_cache_same_actions(ngrams):
    """A Dark Room rollout no longer than the context: the cached in-context policy and the one
    that recomputes the window every step sample the same actions, with n-gram layers too (the
    cache keeps each step's ids and the layers' inputs) and episode starts marked (5-step
    episodes)."""
    env = envs.make("darkroom", episode_length=5)
    config = ad_model_config()
    config.update(dict(d_model=16, num_layers=1, num_heads=2, max_len=CONTEXT,
                       label_smoothing=0.0, **ngrams))
    method = AD(config, env.num_actions, env.num_observations)
    task_params = env.task_params(np.arange(4))
    probe = to_step_windows(generate_histories(env, envs_random(), task_params, CONTEXT,
                                               jax.random.PRNGKey(0)))
    params = method.init(jax.random.PRNGKey(1), probe)
    params = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.PRNGKey(4), x.shape),
                          params)  # away from the zero biases, so the n-gram reads matter
    actions = {}
    for max_steps in (None, CONTEXT):
        policy = in_context_source(method, params, env, CONTEXT, greedy=False,
                                   max_steps=max_steps, temperature=0.7)
        assert policy.build.cached == (max_steps is not None)
        actions[max_steps] = np.asarray(generate_histories(
            env, policy, task_params, CONTEXT, jax.random.PRNGKey(7)).actions)
    np.testing.assert_array_equal(actions[None], actions[CONTEXT])
    assert len(np.unique(actions[CONTEXT])) > 1  # sampled, not a constant policy


def test_shuffled_ngram_patterns_recompute_the_window():
    """The shuffled-pattern ablation draws each row from the whole window: no cache, and
    staggered caches are refused with a clear error."""
    env = envs.make("darkroom")
    config = ad_model_config()
    config.update(dict(d_model=16, num_layers=1, num_heads=2, max_len=CONTEXT,
                       label_smoothing=0.0, ngram_positions=(1,), ngram_shuffle=True))
    shuffled = AD(config, env.num_actions, env.num_observations)
    assert not in_context_source(shuffled, {}, env, CONTEXT, greedy=False,
                                 max_steps=CONTEXT).build.cached
    with pytest.raises(ValueError, match="eval.context_caches=2 needs a model that decodes"):
        in_context_source(shuffled, {}, env, CONTEXT, False, max_steps=50, context_caches=2)
    with pytest.raises(ValueError, match="ngram_shuffle"):
        shuffled.decode_init({}, to_step_windows(generate_histories(
            env, envs_random(), env.task_params(np.arange(1)), CONTEXT,
            jax.random.PRNGKey(0))), CONTEXT)


def test_staggered_slots_by_hand():
    """Two caches of 10 slots: cache 1 starts at step 5; the fuller one acts."""
    expected = {0: ([0, 5], 0), 4: ([4, 9], 0), 5: ([5, 0], 0), 9: ([9, 4], 0),
                10: ([0, 5], 1), 14: ([4, 9], 1), 15: ([5, 0], 0), 24: ([4, 9], 1)}
    for step, (slots, acting) in expected.items():
        got_slots, got_acting = staggered_slots(jnp.int32(step), 10, 2)
        assert np.asarray(got_slots).tolist() == slots and int(got_acting) == acting, step
    # One cache restarts every `length` steps; as many caches as slots always hold `length`.
    assert int(staggered_slots(jnp.int32(23), 10, 1)[0][0]) == 3
    slots, acting = staggered_slots(jnp.int32(23), 10, 10)
    assert int(slots[acting]) == 9


def map_steps(fn, windows):
    """`fn` on each `(B, T, ...)` field of step windows (the action masks `(B, A)` as they are)."""
    steps = windows.prev_actions.shape[1]
    return jax.tree.map(lambda x: fn(x) if x.ndim > 1 and x.shape[1] == steps else x, windows)


def steps_of(windows, start: int, stop: int):
    """Steps `[start, stop)` of `(B, T)` step windows."""
    return map_steps(lambda x: x[:, start:stop], windows)


def assert_staggered_logits_equal_the_window_since_the_acting_cache_started(
        policy, params, windows, num_caches: int):
    """Teacher-forces `windows` `(B, T)` through `policy.decode_step` (one env per row) and
    checks each step's logits against the full forward pass over the steps since the acting
    cache started; returns the window lengths seen once the context is full."""
    method, context_len = policy.method, policy.context_len
    batch, steps = windows.prev_actions.shape
    example = jax.tree.map(lambda x: x[:1], steps_of(windows, 0, 1))
    cache = method.decode_init(params, example, context_len)  # each env's caches, batch 1
    cache = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch, num_caches) + x.shape), cache)
    first = jax.vmap(lambda _: PreviousStep.first(0))(jnp.arange(batch))
    contexts = CachedContext(cache, jnp.zeros(batch, jnp.int32), first)

    @jax.jit
    def decode(contexts, step):
        def one(context, step):
            logits, context = policy.decode_step(params, context, step)
            return logits, policy.record_step(context, jnp.int32(0), jnp.float32(0), jnp.bool_(False))
        return jax.vmap(one)(contexts, step)

    # The full forward pass is causal, so the logits after the steps [start, t] are those at
    # position t - start of any context-long window that begins at `start`: one compiled shape
    # for every window length (the windows run past `steps` into a padding of repeated steps).
    padded = map_steps(lambda x: jnp.concatenate([x] + [x[:, -1:]] * context_len, axis=1),
                       windows)
    full_logits = jax.jit(lambda window: method.context_logits(params, window, None))
    lengths = set()
    for t in range(steps):
        step = jax.tree.map(lambda x: x[:, None], steps_of(windows, t, t + 1))
        logits, contexts = decode(contexts, step)
        slots, acting = staggered_slots(jnp.int32(t), context_len, num_caches)
        start = t - int(slots[acting])
        if t >= context_len:
            lengths.add(t - start + 1)
        expected = full_logits(steps_of(padded, start, start + context_len))[:, t - start]
        available = np.asarray(windows.action_mask)
        np.testing.assert_allclose(np.where(available, logits[:, 0, 0], 0),
                                   np.where(available, expected, 0), rtol=1e-5, atol=1e-5)
    return lengths


def perturbed_darkroom_ad(steps: int, **model):
    """A 2-layer AD on Dark Room with `model` fields, its parameters perturbed away from the
    init (so every path through the network matters), and `steps`-step random histories of two
    tasks as step windows: (env, method, steps, windows, params)."""
    env = envs.make("darkroom")
    config = ad_model_config()
    config.update(dict(d_model=16, num_layers=2, num_heads=2, max_len=CONTEXT,
                       label_smoothing=0.0, **model))
    method = AD(config, env.num_actions, env.num_observations, grid_size=9)
    windows = to_step_windows(generate_histories(env, envs_random(),
                                                 env.task_params(np.array([3, 40])), steps,
                                                 jax.random.PRNGKey(0)))
    params = method.init(jax.random.PRNGKey(1), steps_of(windows, 0, CONTEXT))
    params = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.PRNGKey(4), x.shape),
                          params)
    return env, method, steps, windows, params


@pytest.mark.parametrize("num_caches,position,ngrams", [
    (2, "learned", {}), (3, "rotary", dict(ngram_positions=(0, 2), ngram_max=2)),
    (1, "learned", dict(ngram_positions=(1,), ngram_latest=True, ngram_match="observation"))])
def test_staggered_caches_give_the_logits_of_the_window_since_the_acting_cache_started(
        num_caches, position, ngrams):
    """A random walk three contexts long, decoded from staggered caches step by step: each
    step's logits are those of the full forward pass over the steps since the acting cache
    started (`staggered_slots`), n-gram layers included; once the context is full, the model
    sees between L - L/m + 1 and L steps."""
    env, method, steps, windows, params = perturbed_darkroom_ad(3 * CONTEXT + 5, position=position,
                                                                **ngrams)
    policy = in_context_source(method, params, env, CONTEXT, greedy=False, max_steps=steps,
                               context_caches=num_caches).build
    assert policy.staggered and not policy.cached
    lengths = assert_staggered_logits_equal_the_window_since_the_acting_cache_started(
        policy, params, windows, num_caches)
    assert min(lengths) == CONTEXT - CONTEXT // num_caches + 1 and max(lengths) == CONTEXT


def test_staggered_rollout_runs_in_the_rollout_driver_and_compiles_once():
    """The staggered policy as a `Source` in `generate_histories`: sampled actions, one trace
    for new parameters; with the rollout inside the context it is the single cache."""
    env = envs.make("darkroom")
    method = tiny_ad(env)
    task_params = env.task_params(np.arange(4))
    probe = to_step_windows(generate_histories(env, envs_random(), task_params, CONTEXT,
                                               jax.random.PRNGKey(0)))
    calls = chex.assert_max_traces(method.decode_logits, n=1)
    method.decode_logits = calls
    results = []
    for seed in (1, 2):
        params = method.init(jax.random.PRNGKey(seed), probe)
        policy = in_context_source(method, params, env, CONTEXT, False, max_steps=40,
                                   context_caches=2)
        results.append(np.asarray(generate_histories(env, policy, task_params, 40,
                                                     jax.random.PRNGKey(3)).actions))
    assert not np.array_equal(results[0], results[1]) and len(np.unique(results[0])) > 1
    assert in_context_source(method, {}, env, CONTEXT, False, max_steps=CONTEXT,
                             context_caches=2).build.cached


def test_context_caches_out_of_range_are_a_clear_error():
    env = envs.make("darkroom")
    with pytest.raises(ValueError, match=r"context_caches must be in \[0, context length 12\]"):
        in_context_source(tiny_ad(env), {}, env, CONTEXT, False, context_caches=13)


@pytest.mark.parametrize("prompt", [True, False])
def test_headless_ad_staggered_caches_keep_the_action_set_prompt(prompt):
    """Headless-AD from staggered caches: every cache keeps the action-set prompt in front of
    the steps since it started, and gives the full forward pass's logits over them."""
    from icrl_jax.envs.bandits import BernoulliBandit
    from icrl_jax.papers.headless_ad.method import HeadlessAD, default_headless_config

    env = BernoulliBandit(arms=5, max_arms=6, seed=0)
    config = ad_model_config()
    config.update(dict(d_model=32, num_layers=2, num_heads=2, max_len=32, label_smoothing=0.0))
    for key, value in dict(default_headless_config(), action_embed_dim=16, tau=1.0,
                           prompt=prompt).items():
        config[key] = value
    method = HeadlessAD(config, num_observations=1)
    steps = 3 * CONTEXT + 2
    windows = to_step_windows(generate_histories(env, envs_random(), env.task_params(np.arange(2)),
                                                 steps, jax.random.PRNGKey(0)))
    params = method.eval_params(method.init(jax.random.PRNGKey(1), steps_of(windows, 0, CONTEXT)),
                                jax.random.PRNGKey(2), env)
    policy = in_context_source(method, params, env, CONTEXT, greedy=False, max_steps=steps,
                               context_caches=2).build
    lengths = assert_staggered_logits_equal_the_window_since_the_acting_cache_started(
        policy, params, windows, 2)
    assert lengths == set(range(CONTEXT // 2 + 1, CONTEXT + 1))


def assert_ring_logits_equal_the_trained_computation(policy, params, windows, window: int,
                                                     num_layers: int):
    """Teacher-forces `windows` `(B, T)`, T beyond the context, through the windowed policy's
    `decode_step` one step at a time (a ring of `window` slots) and checks each step's logits
    against (a) the full forward pass over the whole sequence with the sliding-window mask and
    (b) what training computes on a training window of the model's reach, num_layers x
    (window - 1) + 1 steps (each layer looks W - 1 steps further back), that ends at the step
    (or starts the rollout)."""
    method = policy.method
    reach = num_layers * (window - 1) + 1
    batch, steps = windows.prev_actions.shape
    assert policy.cached and policy.windowed and policy.cache_slots == window < steps
    cache = method.decode_init(params, steps_of(windows, 0, 1), policy.cache_slots)
    context = CachedContext(cache, jnp.zeros((), jnp.int32),
                            jax.vmap(lambda _: PreviousStep.first(0))(jnp.arange(batch)))

    @jax.jit
    def decode(context, step):
        logits, context = policy.decode_step(params, context, step)
        return logits, policy.record_step(context, jnp.int32(0), jnp.float32(0), jnp.bool_(False))

    whole = method.context_logits(params, windows, None)  # (B, T, A), windowed attention
    trained = jax.jit(lambda w: method.context_logits(params, w, None))
    available = np.asarray(windows.action_mask)[:, None]
    decoded = []
    for t in range(steps):
        logits, context = decode(context, steps_of(windows, t, t + 1))
        decoded.append(logits[:, 0])
        start = max(0, t - reach + 1)
        expected = trained(steps_of(windows, start, start + reach))[:, t - start]
        np.testing.assert_allclose(np.where(available[:, 0], logits[:, 0], 0),
                                   np.where(available[:, 0], expected, 0), rtol=1e-5, atol=1e-5,
                                   err_msg=f"step {t}")
    decoded = np.stack(decoded, 1)
    np.testing.assert_allclose(np.where(available, decoded, 0), np.where(available, whole, 0),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position,window", [("rotary", CONTEXT), ("none", CONTEXT),
                                             ("rotary", CONTEXT // 2), ("alibi", CONTEXT // 2)])
def test_ad_with_an_attention_window_decodes_any_rollout_from_a_ring(position, window):
    """AD trained with a sliding attention window and relative positions: a rollout three
    contexts long decodes one token a step from a ring of W slots, and every step's logits are
    the full pass's over the whole rollout and the training computation's over its last
    num_layers x (W - 1) + 1 steps; learned positions or n-gram layers keep the recomputed
    window."""
    env, method, steps, windows, params = perturbed_darkroom_ad(4 * CONTEXT + 5, position=position,
                                                                attention_window=window)
    policy = in_context_source(method, params, env, CONTEXT, greedy=False,
                               max_steps=steps).build
    assert_ring_logits_equal_the_trained_computation(policy, params, windows, window, 2)
    for other in (dict(position="learned"), dict(ngram_positions=(1,))):
        config = ad_model_config()
        config.update(dict(d_model=16, num_layers=1, num_heads=2, max_len=CONTEXT,
                           label_smoothing=0.0, position=position, attention_window=window))
        config.update(other)
        unwindowed = AD(config, env.num_actions, env.num_observations)
        assert not in_context_source(unwindowed, {}, env, CONTEXT, False,
                                     max_steps=steps).build.cached


@pytest.mark.parametrize("prompt,position", [(True, "none"), (False, "rotary")])
def test_headless_ad_with_an_attention_window_decodes_any_rollout_from_a_ring(prompt, position):
    """Headless-AD with a sliding window: the action-set prompt stays in front of a ring of W
    step slots, and each step's logits are the full windowed pass's and the training window's
    (the prompt stays visible in both). With rotary positions the prompt sits at position 0, so
    its distance to a step grows past the window: such a model recomputes the window (ALiBi's
    too)."""
    from icrl_jax.envs.bandits import BernoulliBandit
    from icrl_jax.papers.headless_ad.method import HeadlessAD, default_headless_config

    env = BernoulliBandit(arms=5, max_arms=6, seed=0)
    config = ad_model_config()
    config.update(dict(d_model=32, num_layers=2, num_heads=2, max_len=32, label_smoothing=0.0,
                       position=position, attention_window=CONTEXT))
    for key, value in dict(default_headless_config(), action_embed_dim=16, tau=1.0,
                           prompt=prompt).items():
        config[key] = value
    method = HeadlessAD(config, num_observations=1)
    for relative in ("rotary", "alibi"):
        with_prompt = config.copy_and_resolve_references()
        with_prompt.update(dict(position=relative, prompt=True))
        assert HeadlessAD(with_prompt, num_observations=1).decode_window == 0
    steps = 4 * CONTEXT + 2
    windows = to_step_windows(generate_histories(env, envs_random(), env.task_params(np.arange(2)),
                                                 steps, jax.random.PRNGKey(0)))
    params = method.eval_params(method.init(jax.random.PRNGKey(1), steps_of(windows, 0, CONTEXT)),
                                jax.random.PRNGKey(2), env)
    policy = in_context_source(method, params, env, CONTEXT, greedy=False, max_steps=steps).build
    assert_ring_logits_equal_the_trained_computation(policy, params, windows, CONTEXT, 2)


def test_chunked_evaluation_equals_unchunked_for_every_policy(capsys, monkeypatch):
    """`run_policies` over 7 envs in chunks of at most 3 (3 equal chunks, the last padded) gives
    exactly the rollouts of one call, for the trained model (a windowed AD from its ring cache,
    and one recomputing its window), the data's source and the random baseline; the progress
    bars count every env-step of every policy, one update per chunk."""
    from icrl_jax.data import sources
    from icrl_jax.data.rollout import run_policies

    monkeypatch.delenv("CI", raising=False)  # bars are off on CI without a terminal
    env = envs.make("darkroom")
    steps = CONTEXT + 8
    tasks = env.task_params(np.arange(7))
    probe = to_step_windows(generate_histories(env, envs_random(), tasks, CONTEXT,
                                               jax.random.PRNGKey(0)))
    policies = {}
    for name, position, window in (("ring", "rotary", CONTEXT // 2),
                                   ("window", "learned", 0)):
        method = tiny_ad(env, position=position, attention_window=window)
        params = method.init(jax.random.PRNGKey(1), probe)
        policies[name] = in_context_source(method, params, env, CONTEXT, False, max_steps=steps)
    assert policies["ring"].build.cached and not policies["window"].build.cached
    policies.update(source=sources.build_source("grid_explorer", env, steps, {"eps": 0.1}),
                    random=sources.uniform_random())
    key = jax.random.PRNGKey(5)
    whole = run_policies(env, policies, tasks, steps, key)
    chunked = run_policies(env, policies, tasks, steps, key, chunk_size=3, show_progress=True)
    for name in policies:
        for field in ("rewards", "dones", "actions", "terminated"):
            np.testing.assert_array_equal(chunked[name][field], whole[name][field],
                                          err_msg=f"{name} {field}")
        assert len(np.unique(whole[name]["actions"])) > 1
    err = capsys.readouterr().err
    for name in policies:
        assert f"rollout {name}: 7 envs x {steps} steps" in err
    assert f"{7 * steps}/{7 * steps}" in err
