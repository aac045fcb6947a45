"""`models.compiled`: a module's eager init / apply compiled as one program, with the eager
call's results; inside a trace the module is called as it is."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.models.compiled import Compiled


class Net(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x, scale, deterministic: bool = True):
        h = nn.Dense(self.width)(x) * scale
        self.sow("intermediates", "hidden", h)
        h = nn.Dropout(0.5)(h, deterministic=deterministic)
        return nn.Dense(2)(h)

    def hidden_width(self, x):
        return jnp.zeros((x.shape[0], self.width))


class CountingNet(Net):
    """`Net` that counts how often its forward pass is traced: once per compiled program."""
    traces = []

    def __call__(self, x, scale, deterministic: bool = True):
        CountingNet.traces.append(1)
        return super().__call__(x, scale, deterministic)


def test_eager_calls_equal_the_module_and_compile_once():
    net, wrapped = Net(4), Compiled(CountingNet(4))
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    params = wrapped.init(jax.random.key(0), x, 2.0)
    for ours, eager in zip(jax.tree.leaves(params), jax.tree.leaves(net.init(jax.random.key(0), x, 2.0))):
        np.testing.assert_array_equal(ours, eager)
    np.testing.assert_allclose(wrapped.apply(params, x, 2.0), net.apply(params, x, 2.0), rtol=1e-6)
    # Static leaves as the eager call sees them: a Python scale, the dropout flag, mutable names
    # in a list, the `method=` function; arrays traced, so new values reuse the program.
    out, state = wrapped.apply(params, x, 3.0, deterministic=False, rngs={"dropout": jax.random.key(1)},
                               mutable=["intermediates"])
    ref, ref_state = net.apply(params, x, 3.0, deterministic=False, rngs={"dropout": jax.random.key(1)},
                               mutable=["intermediates"])
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    np.testing.assert_allclose(state["intermediates"]["hidden"][0], ref_state["intermediates"]["hidden"][0],
                               rtol=1e-6)
    assert wrapped.apply(params, x, method=Net.hidden_width).shape == (3, 4)
    assert wrapped.width == 4  # the module's attributes
    # Counted by traces: the jitted function's C++ cache is not used on every JAX setup.
    programs = len(CountingNet.traces)
    np.testing.assert_allclose(wrapped.apply(params, x + 1, 2.0), net.apply(params, x + 1, 2.0), rtol=1e-6)
    assert len(CountingNet.traces) == programs  # new values, the same program
    wrapped.apply(params, x, 2.5)
    assert len(CountingNet.traces) == programs + 1  # a new static value: a new one


def test_inside_a_trace_the_module_is_inlined():
    wrapped = Compiled(Net(4))
    x = jnp.ones((3, 2))
    params = wrapped.init(jax.random.key(0), x, 2.0)
    jaxpr = jax.make_jaxpr(lambda p, x: wrapped.apply(p, x, 2.0))(params, x)
    assert not any(eqn.primitive.name in ("pjit", "jit") for eqn in jaxpr.jaxpr.eqns)
    grads = jax.grad(lambda p: wrapped.apply(p, x, 2.0).sum())(params)
    assert jax.tree.structure(grads) == jax.tree.structure(params)
