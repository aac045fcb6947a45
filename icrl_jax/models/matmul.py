"""Products whose gradients contract the token axis, laid out for XLA's CPU kernels.

A dense layer's weight gradient `x^T dy` and attention's `dK` / `dV` sum over tokens, the major
axis of both operands. XLA's CPU backend either runs such a product in a generic matmul (slower
than its fast kernels; benchmarks/RESULTS.md) or transposes one operand first, and it picks the wider one:
`(tokens, 4d)` rather than `(tokens, d)` in the feed-forward. `contract_tokens` transposes the
narrower operand itself, behind optimisation barriers so that XLA's simplifier does not fold
the transposes back into the product. Other backends take the product as written: their
matmuls read transposed operands in place.

`activated_product` is a feed-forward's second layer, `activation(*inputs) @ kernel`, whose
backward pass recomputes the activation from its inputs: autodiff would keep the activation's
output and its own intermediates (SiLU's sigmoid) for every layer, each as large as the hidden
layer (`tokens x 4d`), until the backward pass reaches it.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp


def contract_tokens(a: jax.Array, b: jax.Array) -> jax.Array:
    """`sum_t a[..., t, i] b[..., t, o]` -> `(..., i, o)` for `a` `(..., T, I)` and `b`
    `(..., T, O)`: on CPU `a^T b` when I <= O, else `(b^T a)^T`, the transposed operand being
    the narrower one (the other transpose is of the small `(O, I)` result)."""
    if jax.default_backend() != "cpu":
        return jnp.einsum("...ti,...to->...io", a, b)
    if a.shape[-1] <= b.shape[-1]:
        a_t = jax.lax.optimization_barrier(jnp.swapaxes(a, -1, -2))
        return jnp.matmul(a_t, b)
    b_t = jax.lax.optimization_barrier(jnp.swapaxes(b, -1, -2))
    return jnp.swapaxes(jax.lax.optimization_barrier(jnp.matmul(b_t, a)), -1, -2)


@jax.custom_vjp
def _dense_product(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """`x (N, K) @ kernel (K, M)` whose kernel gradient is `contract_tokens(x, dy)`."""
    return x @ kernel


def _dense_product_fwd(x, kernel):
    return x @ kernel, (x, kernel)


def _dense_product_bwd(residuals, d_out):
    x, kernel = residuals
    d_kernel = contract_tokens(x, d_out).astype(kernel.dtype)
    # The layers below wait for the input's gradient, so for the kernel's too: else XLA may
    # leave every layer's kernel gradient to the end of the backward pass and keep what it
    # reads (each layer's input and output gradient) alive for all layers at once.
    return after(d_out @ kernel.T, d_kernel), d_kernel


def after(x: jax.Array, y: jax.Array) -> jax.Array:
    """`x`, computed only once `y` exists: `x + 0 * y[0]`, the same values wherever `y` is
    finite. An order XLA keeps, where its CPU backend drops optimisation barriers before it
    schedules."""
    tie = y.reshape(-1)[0] * jnp.zeros((), y.dtype)
    return x + tie.astype(x.dtype)


_dense_product.defvjp(_dense_product_fwd, _dense_product_bwd)


def dense_dot_general(lhs, rhs, dimension_numbers, precision=None,
                      preferred_element_type=None):
    """`jax.lax.dot_general` for flax's `Dense` / `DenseGeneral` (their `dot_general`
    argument): the same product, with the kernel gradient from `contract_tokens`. A dense
    layer's product (the last k axes of the input against the first k of the kernel, no batch
    axes, one dtype) runs as `(tokens, K) @ (K, M)`; anything else goes to `dot_general`."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    k = len(lhs_contract)
    dense = (not lhs_batch and not rhs_batch and k > 0
             and tuple(lhs_contract) == tuple(range(lhs.ndim - k, lhs.ndim))
             and tuple(rhs_contract) == tuple(range(k)) and lhs.dtype == rhs.dtype
             and preferred_element_type in (None, lhs.dtype))
    if not dense or jax.default_backend() != "cpu":
        return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                                   preferred_element_type=preferred_element_type)
    inner = math.prod(rhs.shape[:k])
    out = _dense_product(lhs.reshape(-1, inner), rhs.reshape(inner, -1))
    return out.reshape(lhs.shape[:lhs.ndim - k] + rhs.shape[k:])


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def activated_product(activation: Callable, inputs: tuple, kernel: jax.Array) -> jax.Array:
    """`activation(*inputs) @ kernel`: `inputs` each `(N, K)`, `activation` elementwise,
    `kernel` `(K, M)` -> `(N, M)`. Its backward pass keeps only `inputs` and the kernel and
    recomputes `activation` there (module docstring); the kernel gradient is `contract_tokens`'s.
    `activation` is static: pass a function defined once, not a new lambda each call."""
    return activation(*inputs) @ kernel


def _activated_product_fwd(activation, inputs, kernel):
    return activation(*inputs) @ kernel, (inputs, kernel)


def _activated_product_bwd(activation, residuals, d_out):
    inputs, kernel = residuals
    # After the incoming gradient: else XLA merges the recomputation with the forward pass's
    # identical one (keeping its output after all) or runs it early, for all layers at once.
    inputs = tuple(after(x, d_out) for x in inputs)
    hidden, pullback = jax.vjp(activation, *inputs)
    d_kernel = contract_tokens(hidden, d_out).astype(kernel.dtype)
    return pullback(after((d_out @ kernel.T).astype(hidden.dtype), d_kernel)), d_kernel


activated_product.defvjp(_activated_product_fwd, _activated_product_bwd)
