"""models/step_tokens.py: AD's step tokens with the mixing map folded into the embeddings are the
concatenate-then-mix tokens of the n-gram paper, computed here by hand from the same
parameters, and keep the parameter tree (and initial values) that checkpoints hold."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.models.step_tokens import ADStepTokens, ObservationEmbedding, _DenseParameters

D, B, T = 8, 3, 5


def _concatenate_then_mix(params, observations, prev_actions, prev_rewards, grid_size):
    """The tokens as the paper writes them: three embeddings, concatenated, one linear map."""
    p = params["params"]
    observation = p["observation"]
    if "table" in observation:
        obs = observation["table"]["embedding"][observations]
        if grid_size is not None:
            cells = jnp.concatenate([jax.nn.one_hot(observations // grid_size, grid_size),
                                     jax.nn.one_hot(observations % grid_size, grid_size)], -1)
            obs = obs + cells @ observation["coordinates"]["kernel"] + \
                observation["coordinates"]["bias"]
    else:
        flat = observations.reshape(observations.shape[:2] + (-1,))
        obs = flat @ observation["linear"]["kernel"] + observation["linear"]["bias"]
    if "action" in p:
        action = p["action"]["embedding"][prev_actions]
    else:
        action = prev_actions @ p["action_linear"]["kernel"] + p["action_linear"]["bias"]
    reward = prev_rewards[..., None] * p["reward"]["kernel"][0] + p["reward"]["bias"]
    stacked = jnp.concatenate([obs, action, reward], axis=-1)
    return stacked @ p["mix"]["kernel"] + p["mix"]["bias"]


def _inputs(kind, rng):
    rewards = jnp.asarray(rng.normal(size=(B, T)), jnp.float32)
    if kind == "float":
        return (dict(num_actions=1, num_observations=None),
                jnp.asarray(rng.normal(size=(B, T, 2, 3)), jnp.float32),
                jnp.asarray(rng.normal(size=(B, T, 4)), jnp.float32), rewards)
    grid = dict(grid_size=4) if kind == "grid ids" else {}
    return (dict(num_actions=3, num_observations=16, **grid),
            jnp.asarray(rng.integers(0, 16, (B, T))), jnp.asarray(rng.integers(0, 4, (B, T))),
            rewards)


@pytest.mark.parametrize("kind", ["ids", "grid ids", "float"])
def test_folded_tokens_and_their_gradients_are_the_concatenate_then_mix_ones(kind):
    kwargs, observations, prev_actions, prev_rewards = _inputs(kind, np.random.default_rng(0))
    module = ADStepTokens(D, **kwargs)
    params = module.init(jax.random.key(0), observations, prev_actions, prev_rewards)
    # Random biases too, so that folding them is exercised (they start at zero).
    params = jax.tree.map(lambda x, k: jax.random.normal(k, x.shape), params, jax.tree.unflatten(
        jax.tree.structure(params), list(jax.random.split(jax.random.key(1),
                                                          len(jax.tree.leaves(params))))))
    grid_size = kwargs.get("grid_size")
    args = (observations, prev_actions, prev_rewards)
    np.testing.assert_allclose(module.apply(params, *args),
                               _concatenate_then_mix(params, *args, grid_size),
                               rtol=1e-5, atol=1e-5)
    folded = jax.grad(lambda p: jnp.sum(jnp.sin(module.apply(p, *args))))(params)
    by_hand = jax.grad(lambda p: jnp.sum(jnp.sin(_concatenate_then_mix(p, *args, grid_size))))(
        params)
    for got, want in zip(jax.tree.leaves(folded), jax.tree.leaves(by_hand)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_parameter_tree_is_the_one_checkpoints_hold():
    kwargs, *args = _inputs("grid ids", np.random.default_rng(0))
    params = ADStepTokens(D, **kwargs).init(jax.random.key(0), *args)["params"]
    shapes = jax.tree.map(np.shape, params)
    assert shapes == {
        "observation": {"table": {"embedding": (16, D)},
                        "coordinates": {"kernel": (8, D), "bias": (D,)}},
        "action": {"embedding": (4, D)},
        "reward": {"kernel": (1, D), "bias": (D,)},
        "mix": {"kernel": (3 * D, D), "bias": (D,)}}
    kwargs, *args = _inputs("float", np.random.default_rng(0))
    params = ADStepTokens(D, **kwargs).init(jax.random.key(0), *args)["params"]
    assert set(params) == {"observation", "action_linear", "reward", "mix"}
    assert jax.tree.map(np.shape, params["observation"]) == {
        "linear": {"kernel": (6, D), "bias": (D,)}}


def test_dense_parameters_start_where_nn_dense_starts():
    """Same names, initialisers and order as `nn.Dense`: a seed gives the same initial model."""
    class WithDense(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(D, name="layer")(x)

    class WithParameters(nn.Module):
        @nn.compact
        def __call__(self, x):
            kernel, bias = _DenseParameters(x.shape[-1], D, name="layer")()
            return x @ kernel + bias

    x = jnp.ones((2, 5))
    dense = WithDense().init(jax.random.key(3), x)
    folded = WithParameters().init(jax.random.key(3), x)
    assert jax.tree.structure(dense) == jax.tree.structure(folded)
    for a, b in zip(jax.tree.leaves(dense), jax.tree.leaves(folded)):
        np.testing.assert_array_equal(a, b)


def test_observation_embedding_alone_is_a_table_row_plus_grid_features():
    module = ObservationEmbedding(D, 16, grid_size=4)
    ids = jnp.array([[0, 5, 15]])
    params = module.init(jax.random.key(0), ids)
    p = params["params"]
    rows_cols = jnp.concatenate([jax.nn.one_hot(ids // 4, 4), jax.nn.one_hot(ids % 4, 4)], -1)
    want = p["table"]["embedding"][ids] + rows_cols @ p["coordinates"]["kernel"]
    np.testing.assert_allclose(module.apply(params, ids), want, rtol=1e-6, atol=1e-6)


def test_a_table_with_more_ids_than_tokens_maps_the_tokens_instead_same_result():
    """Folding the mixing map into a table costs a product per id: with more ids than tokens
    (one environment decoding one step) the tokens are mapped instead, to the same values."""
    rng = np.random.default_rng(1)
    module = ADStepTokens(D, num_actions=3, num_observations=16, grid_size=4)
    one_token = (jnp.array([[7]]), jnp.array([[2]]), jnp.array([[0.5]], jnp.float32))
    params = module.init(jax.random.key(0), *one_token)
    params = jax.tree.map(lambda x: x + jnp.asarray(rng.normal(size=x.shape), x.dtype), params)
    np.testing.assert_allclose(module.apply(params, *one_token),
                               _concatenate_then_mix(params, *one_token, 4), rtol=1e-5, atol=1e-5)
