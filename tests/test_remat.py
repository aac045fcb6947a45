"""Activation rematerialisation (`model.remat`): the same parameters, values and gradients as
without it, with dropout and every position kind; the AD config carries the field."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.methods.fields import ad_model_config
from icrl_jax.models.fields import REMAT_CPU_XLA_FLAG
from icrl_jax.models.transformer import Transformer
from xla_flags import xla_flags


def _grads(model, params, x, rng, deterministic):
    def loss(params, x):
        out = model.apply(params, x, deterministic=deterministic, rngs={"dropout": rng})
        return jnp.sum(jnp.sin(out) * jnp.arange(out.shape[-1]))
    return jax.value_and_grad(loss, argnums=(0, 1))(params, x)


@pytest.mark.parametrize("position,impl,dropout", [
    ("learned", "dense", 0.0), ("alibi", "blockwise", 0.2), ("rotary", "dense", 0.2)])
def test_remat_gradients_equal(position, impl, dropout):
    kwargs = dict(num_layers=3, num_heads=2, position=position, max_len=40,
                  residual_dropout=dropout, attention_dropout=dropout, attention_impl=impl,
                  attention_block_size=16)
    plain, remat = Transformer(**kwargs), Transformer(**kwargs, remat=True)
    x = jax.random.normal(jax.random.key(0), (2, 37, 16))
    params = plain.init(jax.random.key(1), x)
    assert (jax.tree.structure(remat.init(jax.random.key(1), x))
            == jax.tree.structure(params))  # a checkpoint restores either way
    deterministic = dropout == 0.0
    (value, grads) = _grads(plain, params, x, jax.random.key(2), deterministic)
    (value_r, grads_r) = _grads(remat, params, x, jax.random.key(2), deterministic)
    np.testing.assert_allclose(value_r, value, rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves(grads_r), jax.tree.leaves(grads)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_remat_is_a_model_field():
    config = ad_model_config()
    assert config.remat is False
    config.remat = True
    assert Transformer.from_config(config).remat
    assert "remat" not in Transformer.changed_settings(config)  # computes the same function


_TEMP_BYTES = """
import jax, jax.numpy as jnp
from icrl_jax.models.transformer import Transformer
for remat in (False, True):
    model = Transformer(num_layers=4, num_heads=4, position="alibi", max_len=512,
                        attention_impl="dense", remat=remat)
    x = jnp.zeros((2, 512, 64))
    params = model.init(jax.random.key(0), x)
    grad = jax.jit(jax.grad(lambda p, x: jnp.sum(model.apply(p, x) ** 2)))
    print(grad.lower(params, x).compile().memory_analysis().temp_size_in_bytes)
"""


def test_remat_holds_less_memory_under_the_cpu_flag():
    """Under REMAT_CPU_XLA_FLAG the compiled gradient with remat needs well under the temporary
    memory of the one without (the attention weights of every layer are not kept)."""
    env = dict(os.environ, XLA_FLAGS=" ".join([xla_flags(os.environ), REMAT_CPU_XLA_FLAG]))
    out = subprocess.run([sys.executable, "-c", _TEMP_BYTES], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    plain, remat = (int(line) for line in out.stdout.split())
    assert remat < 0.7 * plain


def test_the_cli_sets_the_cpu_scheduler_flag_only_for_a_config_that_asks():
    import ml_collections
    from icrl_jax.models.fields import use_memory_scheduler
    environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    assert not use_memory_scheduler(ml_collections.ConfigDict({"model": {"remat": False}}), environ)
    assert not use_memory_scheduler(ml_collections.ConfigDict({"lm": {}}), environ)
    assert environ == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    remat = ml_collections.ConfigDict({"model": {"remat": True}})
    assert use_memory_scheduler(remat, environ)
    assert environ["XLA_FLAGS"] == f"--xla_force_host_platform_device_count=2 {REMAT_CPU_XLA_FLAG}"
    assert use_memory_scheduler(remat, environ)  # once only
    assert environ["XLA_FLAGS"].count(REMAT_CPU_XLA_FLAG) == 1
    asked = {}
    assert use_memory_scheduler(ml_collections.ConfigDict(
        {"model": {"remat": False, "memory_scheduler": True}}), asked)
    assert asked == {"XLA_FLAGS": REMAT_CPU_XLA_FLAG}
    chosen = {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true"}
    use_memory_scheduler(remat, chosen)  # the user's choice stands
    assert chosen == {"XLA_FLAGS": "--xla_cpu_enable_concurrency_optimized_scheduler=true"}
