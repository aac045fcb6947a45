"""AD on pixel observations (the Miniworld pipeline's parts), on small synthetic pixel data:
the store's previous-step fields, the CNN-encoder AD model trained from the prefetching loader
through `train(loader_fn=...)` with checkpoint round trip and exact resume, the in-context host
policy, and VQ codes as n-gram ids."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from icrl_jax.core.config import default_train_config
from icrl_jax.core.errors import UserError
from icrl_jax.core.validation import validate
from icrl_jax.envs.host.bridge import HostStep
from icrl_jax.pipeline import train as trainer
from icrl_jax.methods.fields import ad_config
from icrl_jax.data.windows import StepWindows
from icrl_jax.data.pixel_store import (PixelStore, PixelStoreWriter, StepWindowsLoader,
                                       example_step_windows)
from icrl_jax.data.rollout import SourceOnHost
from icrl_jax.data.train_data import TrainData
from icrl_jax.methods.in_context import in_context_source
from icrl_jax.envs.host.specs import MiniworldRoom
from icrl_jax.methods.ad import AD
from icrl_jax.models.encoders import VQVAE, vq_ngram_ids
from icrl_jax.models.ngram import get_ngram_ids, ngram_pattern, register_ngram_ids

NUM_ACTIONS = 3
COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8)


def colour_store(path, num_histories=6, length=40, chunk_steps=64, seed=0):
    """Frames of one of 3 colours; the action is the colour's index (learnable from pixels)."""
    rng = np.random.default_rng(seed)
    with PixelStoreWriter(str(path), (8, 8, 3), chunk_steps=chunk_steps) as w:
        for _ in range(num_histories):
            actions = rng.integers(0, NUM_ACTIONS, length)
            obs = np.broadcast_to(COLOURS[actions][:, None, None, :], (length, 8, 8, 3))
            w.add_history(obs, actions, rng.random(length).astype(np.float32),
                          np.arange(length) % 10 == 9)
    return PixelStore(str(path))


def tiny_model_config(**extra) -> ml_collections.ConfigDict:
    config = ad_config().model
    config.update(dict(d_model=32, num_layers=1, num_heads=2, max_len=16))
    config.observation_encoder = "cnn"
    config.encoder_channels = (8,)
    config.encoder_dim = 16
    config.encoder_pool = 2
    config.update(extra)
    return config


def test_store_previous_step_fields_follow_histories_across_chunks(tmp_path):
    with PixelStoreWriter(str(tmp_path), (2, 2, 1), chunk_steps=25) as w:
        for h in range(3):  # frame value = h * 60 + t identifies the step
            t = np.arange(40)
            v = h * 60 + t
            w.add_history(np.broadcast_to(v[:, None, None, None], (40, 2, 2, 1)).astype(np.uint8),
                          v % 3, v.astype(np.float32), t % 10 == 9)
    store = PixelStore(str(tmp_path))
    b = store.sample(np.random.default_rng(0), 64, 6, previous_fill=NUM_ACTIONS)
    v = b["obs"][:, :, 0, 0, 0].astype(int)
    t = v % 60
    np.testing.assert_array_equal(b["prev_actions"], np.where(t > 0, (v - 1) % 3, NUM_ACTIONS))
    np.testing.assert_array_equal(b["prev_rewards"], np.where(t > 0, v - 1, 0))
    # some window starts right at a chunk boundary inside a history (chunk 1 starts at h0 t25)
    assert ((t[:, 0] == 25) | (t[:, 0] == 0) | (t[:, 0] == 10)).any()


def test_ad_with_cnn_encoder_shapes_and_rejects_discrete_ids():
    method = AD(tiny_model_config(), NUM_ACTIONS, None)
    window = StepWindows(jnp.zeros((2, 5, 8, 8, 3), jnp.uint8), jnp.zeros((2, 5), jnp.int32),
                         jnp.zeros((2, 5)), jnp.zeros((2, 5), jnp.int32), jnp.ones((2, 3), bool))
    params = jax.jit(method.init)(jax.random.key(0), window)
    # 8x8 frames pooled to 4x4, one stride-2 conv of 8 channels -> 2x2x8 features -> 16
    assert params["obs_encoder"]["Dense_0"]["kernel"].shape == (2 * 2 * 8, 16)
    logits = jax.jit(method.context_logits)(params, window, None)
    assert logits.shape == (2, 5, NUM_ACTIONS)
    with pytest.raises(ValueError, match="num_observations=None"):
        AD(tiny_model_config(), NUM_ACTIONS, 25)
    with pytest.raises(UserError, match=r"model.observation_encoder='resnet' must be one of none, "
                                        r"cnn, xland"):
        validate(ml_collections.ConfigDict({"model": tiny_model_config(observation_encoder="resnet")}))


def _train(method, store, workdir, stop_at=None):
    config = default_train_config()
    # 2 steps per call: the loader step is unrolled at trace time, so compile time grows with it
    config.update(dict(num_steps=30, batch_size=8, seq_len=12, steps_per_call=2, learning_rate=3e-3,
                       warmup_steps=5, log_every=10, checkpoint_every=30))
    config.lock()

    def loader_fn(start):
        return StepWindowsLoader(store, NUM_ACTIONS, 8, 12, 2, start, seed=3)

    data = TrainData(example_step_windows(store, NUM_ACTIONS, 12), loader_fn=loader_fn)
    return trainer.train(method, data, config, str(workdir), {"method": "ad", "test": "pixels"},
                   seed=0, show_progress=False, stop_at=stop_at), config


def test_ad_trains_on_pixel_store_resumes_exactly_and_restores(tmp_path):
    import json

    store = colour_store(tmp_path / "store")
    method = AD(tiny_model_config(), NUM_ACTIONS, None)
    state, config = _train(method, store, tmp_path / "run")
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert losses[-1] < 0.5 * losses[0]  # the action is readable from the pixels only

    # interrupted at step 10 and resumed: the same batches, so the same parameters
    _train(method, store, tmp_path / "resumed", stop_at=10)
    resumed, _ = _train(method, store, tmp_path / "resumed")
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 state.params, resumed.params)

    # checkpoint round trip into a freshly initialised state
    restored = trainer.restore_params(method, TrainData(example_step_windows(store, NUM_ACTIONS, 12),
                                                  loader_fn=iter), config,
                                str(tmp_path / "run"), {"method": "ad", "test": "pixels"})
    jax.tree.map(np.testing.assert_array_equal, restored, state.params)


class PixelRoom(MiniworldRoom):
    """The Miniworld dark room's spec with the small frames of these tests."""

    observation_shape = (8, 8, 3)


@pytest.mark.parametrize("vq_ngrams", [False, True])
def test_in_context_host_policy_acts_on_its_own_sliding_history(vq_ngrams):
    """Greedy actions through the host policy equal the model's argmax on the window rebuilt
    from the steps taken (prev action / reward tokens, sliding once longer than the context).
    With n-gram layers on VQ codes, the context keeps each frame's codes beside its features
    (coded once per frame) and the actions still equal recomputing the codes of the window."""
    length, num_envs, steps = 4, 2, 7
    rng = np.random.default_rng(0)
    if vq_ngrams:  # frames repeat, so the n-gram layers find matches
        pool = rng.integers(0, 256, (3, 8, 8, 3)).astype(np.uint8)
        frames = pool[rng.integers(0, 3, (steps, num_envs))]
        vq = VQVAE(image_size=8, grid=4, num_codes=16, code_dim=4, channels=8)
        register_ngram_ids("vq_sliding_test", vq_ngram_ids(
            vq, jax.jit(vq.init)(jax.random.key(2), jnp.asarray(pool))["params"]))
        config = tiny_model_config(ngram_positions=(1,), ngram_match="vq_sliding_test")
    else:
        frames = rng.integers(0, 256, (steps, num_envs, 8, 8, 3)).astype(np.uint8)
        config = tiny_model_config()
    method = AD(config, NUM_ACTIONS, None)
    rewards = rng.random((steps, num_envs)).astype(np.float32)
    example = StepWindows(jnp.asarray(frames[:length, :1].transpose(1, 0, 2, 3, 4)),
                          jnp.zeros((1, length), jnp.int32), jnp.zeros((1, length)),
                          jnp.zeros((1, length), jnp.int32), jnp.ones((1, 3), bool))
    params = jax.jit(method.init)(jax.random.key(1), example)
    env = PixelRoom()
    source = in_context_source(method, params, env, length, greedy=True)
    assert source.build.encoded  # the context keeps encoder features (16 per frame), not pixels
    policy = SourceOnHost(source, env)
    stored = policy.init(jax.random.key(0), num_envs)[0].window.observations
    if vq_ngrams:
        assert stored["features"].shape == stored["ngram_ids"].shape == (num_envs, 1, length, 16)
    else:
        assert stored.shape == (num_envs, 1, length, 16)
    act = jax.jit(policy.act)
    logits_fn = jax.jit(method.context_logits)
    state = policy.init(jax.random.key(0), num_envs)
    taken = []
    for t in range(steps):
        step = HostStep(jnp.asarray(frames[t]), jnp.zeros((num_envs, 0)),
                        jnp.asarray(rewards[t - 1] if t else np.zeros(num_envs, np.float32)),
                        jnp.zeros(num_envs, bool), jnp.int32(t))
        actions, state = act(jax.random.key(t), state, step)
        taken.append(np.asarray(actions))
        # The last `length` steps; before the context fills, zero padding after step t, which
        # a causal model does not read at position t.
        lo = max(0, t + 1 - length)
        idx = list(range(lo, t + 1))
        pad = length - len(idx)
        obs = np.concatenate([frames[idx], np.zeros((pad,) + frames.shape[1:], np.uint8)])
        prev_a = [taken[i - 1] if i else np.full(num_envs, NUM_ACTIONS) for i in idx]
        prev_r = [rewards[i - 1] if i else np.zeros(num_envs) for i in idx]
        window = StepWindows(jnp.asarray(obs.swapaxes(0, 1)),
                             jnp.asarray(np.pad(np.stack(prev_a, 1), ((0, 0), (0, pad))), jnp.int32),
                             jnp.asarray(np.pad(np.stack(prev_r, 1), ((0, 0), (0, pad))), jnp.float32),
                             jnp.zeros((num_envs, length), jnp.int32), jnp.ones((num_envs, 3), bool))
        logits = logits_fn(params, window, None)[:, len(idx) - 1]
        np.testing.assert_array_equal(taken[-1], np.asarray(jnp.argmax(logits, -1)))
    with pytest.raises(ValueError, match="observations"):
        policy.act(jax.random.key(0), state, step._replace(obs=jnp.zeros((2, 4, 4, 3), jnp.uint8)))


def test_vq_codes_are_ngram_ids():
    vq = VQVAE(image_size=16, grid=4, num_codes=16, code_dim=4, channels=8)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 16, 16, 3)).astype(np.uint8)
    params = jax.jit(vq.init)(jax.random.key(0), jnp.asarray(images))["params"]
    order = np.array([0, 1, 2, 0, 1, 2, 2])  # image index per step
    window = StepWindows(jnp.asarray(images[order][None]), jnp.zeros((1, 7), jnp.int32),
                         jnp.zeros((1, 7)), jnp.zeros((1, 7), jnp.int32), jnp.ones((1, 3), bool))
    register_ngram_ids("vq_test", vq_ngram_ids(vq, params))
    ids = jax.jit(get_ngram_ids("vq_test"))(window)
    assert ids.shape == (1, 7, 16) and ids.dtype == jnp.int32
    # the same image gives the same id; these three images give three different 4x4 grids
    np.testing.assert_array_equal(ids[0, 0], ids[0, 3])
    distinct = {tuple(np.asarray(ids[0, i])) for i in range(3)}
    assert len(distinct) == 3
    for n in (1, 2):
        np.testing.assert_array_equal(ngram_pattern(ids, n), ngram_pattern(jnp.asarray(order[None]), n))
    # the n-gram layers of an AD model on pixels read their pattern from these ids
    method = AD(tiny_model_config(ngram_positions=(1,), ngram_match="vq_test"), NUM_ACTIONS, None)
    model_params = jax.jit(method.init)(jax.random.key(0), window)
    assert jax.jit(method.context_logits)(model_params, window, None).shape == (1, 7, NUM_ACTIONS)
    # each frame's ids depend on it alone, so in-context rollouts keep them, not the pixels
    assert in_context_source(method, model_params, PixelRoom(), 7, False).build.encoded
    with pytest.raises(ValueError, match="uint8 pixel windows"):
        get_ngram_ids("vq_test")(window.replace(observations=jnp.zeros((1, 7), jnp.int32)))


def test_miniworld_configs_resolve_to_the_one_pipeline():
    from icrl_jax.experiments.miniworld import ad_darkroom, ad_key_to_door
    from icrl_jax.pipeline.run import build_env

    for module, length in ((ad_darkroom, 50), (ad_key_to_door, 100)):
        for preset in ("", "quick"):
            config = module.get_config(preset)
            env = build_env(config)
            assert env.host and env.pixels and env.episode_length == length
            assert config.train.seq_len == 2 * length  # two episodes of context (appendix C)
            assert config.model.observation_encoder == "cnn"
    paper = ad_darkroom.get_config("")
    assert (paper.train.batch_size, paper.model.d_model, paper.train.num_steps) == (1024, 512, 10_000)
    with pytest.raises(ValueError, match="unknown preset"):
        ad_darkroom.get_config("qiuck")
