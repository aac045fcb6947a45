"""Pixel encoders: plain CNN and the VQ-VAE whose codes are n-gram match ids."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from icrl_jax.models.encoders import CNNEncoder, VQVAE, codes_to_ids, vq_loss


def _images(n, size=32, seed=0):
    """Blocky random images uint8 (n, size, size, 3): learnable in a few steps."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (n, size // 8, size // 8, 3), dtype=np.uint8)
    return jnp.asarray(np.repeat(np.repeat(coarse, 8, 1), 8, 2))


def test_cnn_encoder_shapes():
    model = CNNEncoder(out_dim=16)
    x = _images(6).reshape(2, 3, 32, 32, 3)
    params = model.init(jax.random.PRNGKey(0), x)
    y = model.apply(params, x)
    assert y.shape == (2, 3, 16) and y.dtype == jnp.float32


def test_vq_codes_are_a_4x4_grid_and_deterministic():
    model = VQVAE(image_size=64, grid=4, num_codes=16, code_dim=8, channels=16)
    x = _images(3, size=64)
    params = model.init(jax.random.PRNGKey(0), x)
    codes = model.apply(params, x, method=VQVAE.codes)
    assert codes.shape == (3, 4, 4) and codes.dtype == jnp.int32
    assert ((codes >= 0) & (codes < 16)).all()
    # the same image gives identical codes, alone or in a batch, and the same id
    again = model.apply(params, x[1:2], method=VQVAE.codes)
    np.testing.assert_array_equal(again[0], codes[1])
    ids = codes_to_ids(codes, 16)
    assert ids.shape == (3,) and int(codes_to_ids(again, 16)[0]) == int(ids[1])
    out = model.apply(params, x)
    assert out["recon"].shape == (3, 64, 64, 3)


def test_vq_reconstruction_loss_falls():
    model = VQVAE(image_size=32, grid=4, num_codes=32, code_dim=16, channels=32)
    x = _images(8)
    params = model.init(jax.random.PRNGKey(1), x)
    opt = optax.adam(3e-3)
    state = opt.init(params)

    @jax.jit
    def step(params, state):
        def loss_fn(p):
            return vq_loss(model.apply(p, x))
        (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, parts["recon"]

    first = None
    for _ in range(60):
        params, state, recon = step(params, state)
        first = recon if first is None else first
    assert float(recon) < 0.75 * float(first)


def test_pixel_store_windows_and_prefetch(tmp_path):
    from icrl_jax.data.pixel_store import PixelStore, PixelStoreWriter, PrefetchLoader

    rng = np.random.default_rng(0)
    with PixelStoreWriter(str(tmp_path), (8, 8, 3), chunk_steps=50) as w:
        for h in range(4):  # frame value encodes (history, step) so windows can be checked
            t = np.arange(30)
            obs = np.broadcast_to((h * 60 + t)[:, None, None, None], (30, 8, 8, 3)).astype(np.uint8)
            w.add_history(obs, rng.integers(0, 3, 30), np.zeros(30), t % 10 == 9)
    store = PixelStore(str(tmp_path))
    assert store.num_steps == 120 and store.meta["chunks"] == [50, 50, 20]
    loader = PrefetchLoader(store, batch_size=16, seq_len=12, seed=3)
    batches = [next(loader) for _ in range(3)]
    loader.close()
    b = batches[0]
    assert b["obs"].shape == (16, 12, 8, 8, 3) and b["obs"].dtype == jnp.uint8
    assert isinstance(b["obs"], jax.Array)
    v = np.asarray(b["obs"])[:, :, 0, 0, 0].astype(int)
    # consecutive steps of one history: no window crosses a history or chunk boundary
    assert (np.diff(v, axis=1) == 1).all()
    again = PrefetchLoader(store, batch_size=16, seq_len=12, seed=3)
    np.testing.assert_array_equal(np.asarray(next(again)["obs"]), np.asarray(b["obs"]))
    again.close()
