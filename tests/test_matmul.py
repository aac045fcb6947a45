"""`models/matmul.py`: the token-contracting products and the dense layers' `dot_general` give
what the plain products give, values and gradients, with the same parameters."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.models.matmul import contract_tokens, dense_dot_general


@pytest.mark.parametrize("narrow, wide", [(3, 7), (7, 3), (5, 5)])
def test_contract_tokens_is_the_sum_over_tokens_whichever_operand_is_narrower(narrow, wide):
    a = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 11, narrow))
    b = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 11, wide))
    expected = np.einsum("...ti,...to->...io", np.asarray(a, np.float64), np.asarray(b, np.float64))
    out = jax.jit(contract_tokens)(a, b)
    assert out.shape == (2, 4, narrow, wide)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _dense_pair(module_kwargs, x):
    """(outputs, input gradient, parameter gradients) of the layer with and without
    `dense_dot_general`, from the same parameters."""
    plain = nn.DenseGeneral(**module_kwargs)
    ours = nn.DenseGeneral(**module_kwargs, dot_general=dense_dot_general)
    params = plain.init(jax.random.PRNGKey(2), x)
    assert jax.tree.structure(params) == jax.tree.structure(ours.init(jax.random.PRNGKey(2), x))
    cotangent = jax.random.normal(jax.random.PRNGKey(3), plain.apply(params, x).shape)

    def results(module):
        out, pull = jax.vjp(lambda p, h: module.apply(p, h), params, x)
        return (out,) + pull(cotangent)
    return jax.jit(lambda: results(plain))(), jax.jit(lambda: results(ours))()


@pytest.mark.parametrize("module_kwargs, shape", [
    (dict(features=24), (3, 10, 8)),                       # a feed-forward's widening layer
    (dict(features=8), (3, 10, 24)),                       # and its narrowing one
    (dict(features=(3, 2, 4)), (3, 10, 8)),                # fused qkv: (3, heads, head width)
    (dict(features=8, axis=(-2, -1)), (3, 10, 2, 4)),      # attention's output over the heads
])
def test_dense_layers_give_the_plain_products_values_and_gradients(module_kwargs, shape):
    x = jax.random.normal(jax.random.PRNGKey(4), shape)
    plain, ours = _dense_pair(module_kwargs, x)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(ours)):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_dense_dot_general_under_vmap_matches_per_replica_gradients():
    """Sweeps vmap the whole step over replicas: each replica's kernel gradient is its own."""
    x = jax.random.normal(jax.random.PRNGKey(5), (4, 6, 8))   # 4 replicas' inputs
    kernels = jax.random.normal(jax.random.PRNGKey(6), (4, 8, 16))
    dims = (((1,), (0,)), ((), ()))

    def loss(kernel, h, dot):
        return jnp.sum(jnp.sin(dot(h, kernel, dims)))
    ours = jax.vmap(jax.grad(lambda k, h: loss(k, h, dense_dot_general)))(kernels, x)
    plain = jax.vmap(jax.grad(lambda k, h: loss(k, h, jax.lax.dot_general)))(kernels, x)
    np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-5)


def test_products_other_than_a_dense_layers_go_to_dot_general():
    """Batch axes, or contracting axes other than the input's last and the kernel's first,
    are passed through unchanged."""
    a = jax.random.normal(jax.random.PRNGKey(7), (3, 5, 4))
    b = jax.random.normal(jax.random.PRNGKey(8), (3, 4, 6))
    batched = (((2,), (1,)), ((0,), (0,)))
    np.testing.assert_array_equal(dense_dot_general(a, b, batched),
                                  jax.lax.dot_general(a, b, batched))
    leading = (((0,), (0,)), ((), ()))
    c = jax.random.normal(jax.random.PRNGKey(9), (3, 7))
    np.testing.assert_array_equal(dense_dot_general(a, c, leading),
                                  jax.lax.dot_general(a, c, leading))
