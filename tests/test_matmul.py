"""`models/matmul.py`: the token-contracting products and the dense layers' `dot_general` give
what the plain products give, values and gradients, with the same parameters."""

import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.models.fields import REMAT_CPU_XLA_FLAG
from icrl_jax.models.matmul import after, contract_tokens, dense_dot_general
from icrl_jax.models.transformer import ActivatedDense, silu_gate
from xla_flags import xla_flags


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


def _gelu(x):
    return nn.gelu(x, approximate=True)


@pytest.mark.parametrize("activation, inputs, use_bias", [
    (silu_gate, 2, False),   # a SwiGLU's down projection
    (_gelu, 1, True),        # GPT-2's feed-forward's second layer
])
def test_activated_dense_is_a_dense_layer_on_the_activation(activation, inputs, use_bias):
    """Same parameters (names, shapes, initial values) as `nn.Dense` on the activation's
    output, and the same outputs and gradients of inputs and parameters."""
    keys = jax.random.split(jax.random.PRNGKey(10), inputs)
    xs = tuple(jax.random.normal(key, (3, 10, 24)) for key in keys)
    plain = nn.Dense(8, use_bias=use_bias)
    ours = ActivatedDense(8, activation, use_bias)
    params = plain.init(jax.random.PRNGKey(11), activation(*xs))
    mine = ours.init(jax.random.PRNGKey(11), *xs)
    assert jax.tree.structure(mine) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(mine), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)
    cotangent = jax.random.normal(jax.random.PRNGKey(12), (3, 10, 8))

    def results(apply):
        out, pull = jax.vjp(apply, params, *xs)
        return (out,) + pull(cotangent)
    expected = jax.jit(lambda: results(lambda p, *h: plain.apply(p, activation(*h))))()
    got = jax.jit(lambda: results(lambda p, *h: ours.apply(p, *h)))()
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_after_leaves_values_unchanged():
    x = jax.random.normal(jax.random.PRNGKey(13), (4, 5))
    y = jax.random.normal(jax.random.PRNGKey(14), (3, 2))
    np.testing.assert_array_equal(jax.jit(after)(x, y), x)


_FEED_FORWARD_TEMP_BYTES = """
import jax, jax.numpy as jnp
from icrl_jax.models.matmul import activated_product, dense_dot_general
from icrl_jax.models.transformer import silu_gate

def dense(x, kernel):
    return dense_dot_general(x, kernel, (((1,), (0,)), ((), ())))

def stack(kernels, x, ours):
    for gate, up, down in kernels:
        g, u = dense(x, gate), dense(x, up)
        x = x + (activated_product(silu_gate, (g, u), down) if ours else dense(silu_gate(g, u), down))
    return jnp.sum(x ** 2)

keys = jax.random.split(jax.random.key(0), 12)
kernels = [tuple(jax.random.normal(keys[3 * i + j], shape) / 8 for j, shape in
                 enumerate([(64, 256), (64, 256), (256, 64)])) for i in range(4)]
x = jnp.ones((4096, 64))
for ours in (False, True):
    grad = jax.jit(jax.grad(lambda k, x: stack(k, x, ours)))
    print(grad.lower(kernels, x).compile().memory_analysis().temp_size_in_bytes)
"""


def test_feed_forwards_keep_two_hidden_layers_a_block_for_the_backward_pass():
    """A 4-block SwiGLU stack's gradient (4,096 tokens, hidden 256: 4 MiB a hidden tensor)
    holds at most the inputs of each block's activation (gate and up) and a few block's work,
    where the plain products keep five hidden tensors a block (gate, up, sigmoid, silu and the
    product), under the CPU scheduler flag that `train` uses."""
    env = dict(os.environ, XLA_FLAGS=" ".join([xla_flags(os.environ), REMAT_CPU_XLA_FLAG]))
    out = subprocess.run([sys.executable, "-c", _FEED_FORWARD_TEMP_BYTES], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    plain, ours = (int(line) for line in out.stdout.split())
    hidden = 4096 * 256 * 4
    assert ours <= 0.6 * plain, (ours / hidden, plain / hidden)
