"""In-context evaluation: the rollout's context equals the training window format, one trace."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from icrl_jax.data.dataset import to_step_windows
from icrl_jax.data.histories import generate_histories
from icrl_jax.methods.in_context import in_context_source
from icrl_jax.methods.ad import AD
from icrl_jax.models.heads import mask_logits, select_actions
from icrl_jax.models.ngram import ngram_pattern
from icrl_jax.models.transformer import default_transformer_config

CONTEXT = 12


def tiny_ad(env):
    config = default_transformer_config()
    config.update(dict(d_model=16, num_layers=1, num_heads=2, max_len=CONTEXT,
                       label_smoothing=0.0))
    return AD(config, env.num_actions, env.num_observations)


def test_greedy_rollout_matches_the_model_on_training_windows():
    """Every action of a greedy rollout is the argmax the model gives on the same steps laid out
    as a training window, both while the context fills and after it starts sliding."""
    env = envs.make("darkroom")
    method = tiny_ad(env)
    task_params = env.task_params(np.array([3, 40]))
    probe = to_step_windows(generate_histories(env, envs_random(), task_params, CONTEXT,
                                               jax.random.PRNGKey(0)))
    params = method.init(jax.random.PRNGKey(1), probe)
    steps = CONTEXT + 6
    history = generate_histories(env, in_context_source(method, params, env, CONTEXT, True),
                                 task_params, steps, jax.random.PRNGKey(2))
    windows = to_step_windows(history)
    for t in range(steps):
        start = max(0, t - CONTEXT + 1)
        window = jax.tree.map(lambda x: x[:, start:start + CONTEXT] if x.ndim > 1 and x.shape[1] == steps else x,
                              windows)
        logits = method.context_logits(params, window, jax.random.PRNGKey(0))
        expected = jnp.argmax(mask_logits(logits[:, t - start], window.action_mask), -1)
        np.testing.assert_array_equal(np.asarray(history.actions[:, t]), np.asarray(expected))


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
                    ngram_match="observation"))])
def test_ad_cached_decoding_equals_the_full_forward_pass(position, ngrams):
    """AD decoded step by step (and in blocks) from a cache gives the logits of the whole
    context at once, grid-cell features included, and with n-gram layers (uniform over all
    matches, or the latest one) before, between and after the attention blocks."""
    env = envs.make("darkroom")
    config = default_transformer_config()
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


@pytest.mark.parametrize("ngrams", [{}, dict(ngram_positions=(0, 1), ngram_max=2)])
def test_ad_rollout_that_fits_the_context_decodes_from_a_cache_same_actions(ngrams):
    """A Dark Room rollout no longer than the context: the cached in-context policy and the one
    that recomputes the window every step sample the same actions, with n-gram layers too (the
    cache keeps each step's ids and the layers' inputs)."""
    env = envs.make("darkroom")
    config = default_transformer_config()
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
    """The shuffled-pattern ablation draws each row from the whole window: no cache."""
    env = envs.make("darkroom")
    config = default_transformer_config()
    config.update(dict(d_model=16, num_layers=1, num_heads=2, max_len=CONTEXT,
                       label_smoothing=0.0, ngram_positions=(1,), ngram_shuffle=True))
    shuffled = AD(config, env.num_actions, env.num_observations)
    assert not in_context_source(shuffled, {}, env, CONTEXT, greedy=False,
                                 max_steps=CONTEXT).build.cached
    with pytest.raises(ValueError, match="ngram_shuffle"):
        shuffled.decode_init({}, to_step_windows(generate_histories(
            env, envs_random(), env.task_params(np.arange(1)), CONTEXT,
            jax.random.PRNGKey(0))), CONTEXT)
