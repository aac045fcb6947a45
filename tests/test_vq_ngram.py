"""The n-gram paper's pixel pipeline (sec. 2.3) on tiny synthetic pixel stores: VQ-VAE
pretraining (`icrl_jax/papers/ngram/vq_pretrain.py`: loss falls, exact resume, reuse), the pretrained VQ on
disk and its errors, VQ codes as n-gram ids built from the model config, the configs' errors and
presets, and `train` end to end (VQ stage, AD + n-gram on VQ codes, the in-context policy)."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from icrl_jax.envs.host.bridge import HostStep
from icrl_jax.envs.host.specs import MiniworldRoom
from icrl_jax.core.config import set_dotted
from icrl_jax.methods.fields import ad_config, ad_model_config
from icrl_jax.papers.ngram.fields import default_vq_config
from icrl_jax.data.windows import StepWindows
from icrl_jax.data.pixel_store import FramesLoader, PixelStore, PixelStoreWriter
from icrl_jax.core.errors import UserError
from icrl_jax.models.encoders import (VQ_CONFIG, VQCheckpointError, load_vq, save_vq,
                                      vq_ids_from_config)
from icrl_jax.models.ngram import config_ngram_ids
from icrl_jax.papers.ngram.vq_pretrain import pretrain_vq, read_summary

SIZE = 16
NUM_SCENES = 6


def scenes(size=SIZE, seed=0) -> np.ndarray:
    """`NUM_SCENES` visibly different frames uint8 (S, size, size, 3): 4x4 blocks of random
    colours."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (NUM_SCENES, 4, 4, 3)).astype(np.uint8)
    return np.repeat(np.repeat(coarse, size // 4, 1), size // 4, 2)


def scene_store(path, size=SIZE, num_histories=4, length=30) -> PixelStore:
    """Histories of random scenes (the action is the scene's index mod 3)."""
    frames = scenes(size)
    rng = np.random.default_rng(1)
    with PixelStoreWriter(str(path), (size, size, 3), chunk_steps=50) as w:
        for _ in range(num_histories):
            idx = rng.integers(0, NUM_SCENES, length)
            w.add_history(frames[idx], idx % 3, (idx == 0).astype(np.float32),
                          np.arange(length) % 10 == 9)
    return PixelStore(str(path))


class SmallRoom(MiniworldRoom):
    """The Miniworld dark room's spec with the small frames of these tests."""

    observation_shape = (SIZE, SIZE, 3)


def vq_config(vq_dir, **vq) -> ml_collections.ConfigDict:
    config = ad_config()
    config.env.name = "miniworld_darkroom"
    config.run.progress = False
    config.model.vq_checkpoint = str(vq_dir)
    config.vq = default_vq_config()
    config.vq.update(dict(num_codes=16, code_dim=4, channels=16, num_steps=120, batch_size=16,
                          learning_rate=1e-2, warmup_steps=5, steps_per_call=4, log_every=4,
                          checkpoint_every=20, eval_frames=64))
    config.vq.update(vq)
    return config


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A store of scenes and a VQ-VAE pretrained on it: (store, vq dir, summary)."""
    root = tmp_path_factory.mktemp("vq")
    store = scene_store(root / "store")
    summary = pretrain_vq(vq_config(root / "vq"), SmallRoom(), store)
    return store, root / "vq", summary


def test_vq_pretraining_lowers_reconstruction_and_writes_its_summary(pretrained):
    _, vq_dir, summary = pretrained
    assert summary["steps"] == 120 and summary == read_summary(str(vq_dir))
    assert summary["recon_mse"] < 0.5 * summary["recon_mse_untrained"]
    recon = [json.loads(line)["recon"] for line in open(vq_dir / "metrics.jsonl")]
    assert recon[-1] < 0.5 * recon[0]
    # code usage is measured: 6 scenes x 16 cells need more than one code and one grid
    assert 1 < summary["codes_used"] <= 16 and 1.0 < summary["perplexity"] <= 16
    assert 1 < summary["distinct_grids"] <= NUM_SCENES
    assert os.path.isfile(vq_dir / "model.safetensors") and os.path.isfile(vq_dir / VQ_CONFIG)


def test_vq_pretraining_resumes_exactly_and_reuses_a_finished_directory(pretrained, tmp_path,
                                                                         capsys):
    store, vq_dir, _ = pretrained
    config = vq_config(tmp_path / "vq")
    assert pretrain_vq(config, SmallRoom(), store, stop_at=20) is None  # preempted
    assert not os.path.exists(tmp_path / "vq" / "model.safetensors")
    pretrain_vq(config, SmallRoom(), store)  # resumes from step 20
    (_, whole), (_, resumed) = load_vq(str(vq_dir)), load_vq(str(tmp_path / "vq"))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), whole,
                 resumed)
    # a finished directory is used as it is; one of another architecture is never overwritten
    before = os.path.getmtime(tmp_path / "vq" / "model.safetensors")
    capsys.readouterr()
    pretrain_vq(config, SmallRoom(), store)
    assert "using the pretrained VQ-VAE" in capsys.readouterr().out
    assert os.path.getmtime(tmp_path / "vq" / "model.safetensors") == before
    with pytest.raises(UserError, match="another architecture.*num_codes: 16 .there. vs 32"):
        pretrain_vq(vq_config(tmp_path / "vq", num_codes=32), SmallRoom(), store)


def test_frames_loader_draws_the_same_frames_when_resumed(pretrained):
    store, _, _ = pretrained
    whole = FramesLoader(store, 4, 2, seed=5)
    items = [np.asarray(next(whole)) for _ in range(3)]
    whole.close()
    resumed = FramesLoader(store, 4, 2, start_step=4, seed=5)
    np.testing.assert_array_equal(np.asarray(next(resumed)), items[2])
    resumed.close()
    assert items[0].shape == (8, SIZE, SIZE, 3) and items[0].dtype == np.uint8


def _window(frames: np.ndarray) -> StepWindows:
    length = len(frames)
    return StepWindows(jnp.asarray(frames[None]), jnp.zeros((1, length), jnp.int32),
                       jnp.zeros((1, length)), jnp.zeros((1, length), jnp.int32),
                       jnp.ones((1, 3), bool))


def vq_model_config(vq_dir) -> ml_collections.ConfigDict:
    """An AD model config with n-gram layers on the VQ codes of the VQ-VAE in `vq_dir`."""
    config = ad_model_config()
    config.update(dict(ngram_positions=(1,), ngram_match="vq", vq_checkpoint=str(vq_dir)))
    return config


def test_vq_ids_match_equal_frames_and_separate_different_ones(pretrained):
    _, vq_dir, _ = pretrained
    ids_fn = config_ngram_ids(vq_model_config(vq_dir))
    frames = scenes()
    order = np.array([0, 1, 2, 3, 4, 5, 0, 3])
    noise = np.random.default_rng(0).integers(-1, 2, frames[1].shape)
    noisy = np.clip(frames[1].astype(int) + noise, 0, 255).astype(np.uint8)
    window = np.concatenate([frames[order], noisy[None]])
    ids = np.asarray(jax.jit(ids_fn)(_window(window)))
    assert ids.shape == (1, 9, 16) and ids.dtype == np.int32
    np.testing.assert_array_equal(ids[0, 0], ids[0, 6])  # the same frame, the same 16 codes
    np.testing.assert_array_equal(ids[0, 3], ids[0, 7])
    assert len({tuple(ids[0, i]) for i in range(NUM_SCENES)}) == NUM_SCENES  # all different
    np.testing.assert_array_equal(ids[0, 8], ids[0, 1])  # +-1 pixel noise: still a match
    # the same directory gives the same function, with the parameters' fingerprint
    again = vq_ids_from_config(vq_model_config(vq_dir))
    assert again.fingerprint == ids_fn.fingerprint and len(ids_fn.fingerprint) == 16
    with pytest.raises(ValueError, match=r"takes \(16, 16, 3\) images, the window holds"):
        ids_fn(_window(np.zeros((2, 8, 8, 3), np.uint8)))


def test_vq_checkpoint_errors_name_the_problem(pretrained, tmp_path):
    _, vq_dir, _ = pretrained
    with pytest.raises(VQCheckpointError, match="needs model.vq_checkpoint"):
        config_ngram_ids(vq_model_config(""))
    with pytest.raises(VQCheckpointError, match="no pretrained VQ-VAE at model.vq_checkpoint"):
        config_ngram_ids(vq_model_config(tmp_path / "missing"))
    # weights of another shape than config.json's model: each parameter named with both shapes
    model, params = load_vq(str(vq_dir))
    save_vq(str(tmp_path / "bad"), model, params)
    fields = json.load(open(tmp_path / "bad" / VQ_CONFIG))
    json.dump(dict(fields, num_codes=32), open(tmp_path / "bad" / VQ_CONFIG, "w"))
    with pytest.raises(VQCheckpointError, match=r"codebook: \(16, 4\) in the file, \(32, 4\) in "
                                                r"the model"):
        config_ngram_ids(vq_model_config(tmp_path / "bad"))
    json.dump(dict(fields, image_size=20), open(tmp_path / "bad" / VQ_CONFIG, "w"))
    with pytest.raises(VQCheckpointError, match="must be grid 4"):
        load_vq(str(tmp_path / "bad"))


def test_vq_ngram_config_errors(tmp_path):
    from icrl_jax.experiments.ad import darkroom
    from icrl_jax.experiments.miniworld import ad_darkroom
    from icrl_jax.pipeline.run import resolve_config

    grid = darkroom.get_config("quick_ngram")
    grid.workdir = str(tmp_path / "grid")
    grid.model.ngram_match = "vq"
    with pytest.raises(UserError, match="VQ codes of pixel observations; env 'darkroom' has none"):
        resolve_config(grid)
    no_vq = ad_darkroom.get_config("quick_ngram")
    no_vq.workdir = str(tmp_path / "mw")
    del no_vq["vq"]
    with pytest.raises(UserError, match="needs a `vq` section"):
        resolve_config(no_vq)
    small = ad_darkroom.get_config("quick_ngram")
    small.vq.pool = 32  # 64 / 32 = 2 < the 4x4 grid
    with pytest.raises(UserError, match="vq section: VQVAE: image_size 64 / pool 32"):
        pretrain_vq(small, MiniworldRoom(), scene_store(tmp_path / "s", size=64, length=12))
    histories = ad_darkroom.get_config("quick_ngram")
    with pytest.raises(UserError, match="frames of a pixel store"):
        pretrain_vq(histories, MiniworldRoom(), object())


def test_miniworld_ngram_presets(tmp_path):
    from icrl_jax.experiments.miniworld import ad_darkroom, ad_key_to_door
    from icrl_jax.experiments.miniworld.common import ABLATIONS
    from icrl_jax.pipeline.run import resolve_config

    for module in (ad_darkroom, ad_key_to_door):
        ad, ngram = module.get_config("quick"), module.get_config("quick_ngram")
        assert not ad.model.ngram_positions
        assert (ngram.model.ngram_positions, ngram.model.ngram_match) == ((1,), "vq")
        # the same run otherwise, with the quick VQ-VAE on 16x16-pooled frames
        for section in ("data", "train", "eval"):
            assert ad[section].to_dict() == ngram[section].to_dict()
        assert ngram.vq.pool == 4 and ngram.model.encoder_pool == 4
        assert module.get_config("ngram").model.ngram_match == "vq"
    # Table 1's ablations: presets at paper scale; at CPU scale `quick_ngram` with 3 blocks and
    # the same settings as overrides (the module's docstring)
    for name, setting in ABLATIONS.items():
        quick = ad_darkroom.get_config("quick_ngram")
        for dotted, value in {"model.num_layers": 3, **setting}.items():
            set_dotted(quick, dotted, value)
        for config in (ad_darkroom.get_config(f"ngram_{name}"), quick):
            positions = config.model.ngram_positions
            assert positions == setting["model.ngram_positions"]
            # never the first or the last block (appendix E.1)
            assert all(0 < p < config.model.num_layers for p in positions), name
    assert ad_darkroom.get_config("ngram_length2").model.ngram_max == 2
    assert ad_darkroom.get_config("ngram_shuffled").model.ngram_shuffle
    # resolving fills the VQ directory inside the run's pixel store, only for VQ n-grams
    config = ad_darkroom.get_config("quick_ngram")
    config.workdir = str(tmp_path)
    assert resolve_config(config).model.vq_checkpoint == os.path.join(config.workdir,
                                                                      "pixel_store", "vq")


def test_train_pretrains_vq_then_ad_with_vq_ngrams_and_acts_in_context(tmp_path):
    """`train` on a Miniworld quick_ngram config whose store already exists (tiny, synthetic
    64x64 frames, so no simulator runs): the VQ stage, AD + n-gram on VQ codes, a checkpoint
    tagged with the VQ's fingerprint, and the in-context policy acting on its own pixels."""
    from icrl_jax.experiments.miniworld import ad_darkroom
    from icrl_jax.pipeline import run as run_pipeline
    from icrl_jax.data.rollout import SourceOnHost
    from icrl_jax.methods import build_method
    from icrl_jax.methods.in_context import in_context_source

    store = scene_store(tmp_path / "store", size=64, num_histories=2, length=40)
    config = ad_darkroom.get_config("quick_ngram")
    overrides = {"workdir": str(tmp_path / "run"), "data.path": str(tmp_path / "store"),
                 "run.progress": False, "run.evaluate": False, "run.generate": False,
                 "model.d_model": 16, "model.num_heads": 2, "model.encoder_channels": (8,),
                 "model.encoder_dim": 16, "train.num_steps": 4, "train.steps_per_call": 2,
                 "train.batch_size": 2, "train.seq_len": 8, "train.log_every": 2,
                 "train.checkpoint_every": 4, "train.warmup_steps": 1, "vq.channels": 8,
                 "vq.num_steps": 8, "vq.batch_size": 8, "vq.steps_per_call": 4,
                 "vq.log_every": 4, "vq.checkpoint_every": 8, "vq.eval_frames": 32}
    for key, value in overrides.items():
        set_dotted(config, key, value)
    config = run_pipeline.resolve_config(config)
    assert config.model.vq_checkpoint == str(tmp_path / "store" / "vq")
    run_pipeline.train(config)
    assert read_summary(config.model.vq_checkpoint)["steps"] == 8
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert len(losses) == 2 and np.isfinite(losses).all()
    env = run_pipeline.build_env(config)
    method = build_method(config, env)
    signature = json.load(open(tmp_path / "run" / "checkpoints" / "signature.json"))
    assert signature["ngram_ids"] == method.ngram_ids.fingerprint
    params = run_pipeline.load_params(config, env, method, method.training_data(store, config, env))
    assert "ngram_1_1" in params["backbone"]

    # the in-context policy codes each frame once and keeps features and codes in its context
    source = in_context_source(method, params, env, context_len=8, greedy=True)
    assert source.build.encoded
    policy = SourceOnHost(source, env)
    act = jax.jit(policy.act)
    frames = scenes(64)[[0, 1, 0]]
    state = policy.init(jax.random.key(0), 1)
    taken = []
    for t, frame in enumerate(frames):
        step = HostStep(jnp.asarray(frame[None]), jnp.zeros((1, 0)), jnp.zeros(1),
                        jnp.zeros(1, bool), jnp.int32(t))
        action, state = act(jax.random.key(t), state, step)
        taken.append(int(action[0]))
    window = StepWindows(jnp.asarray(np.pad(frames, ((0, 5), (0, 0), (0, 0), (0, 0)))[None]),
                         jnp.asarray([[3, *taken[:2]] + [0] * 5], jnp.int32),
                         jnp.zeros((1, 8)), jnp.zeros((1, 8), jnp.int32), jnp.ones((1, 3), bool))
    logits = method.context_logits(params, window, None)[0, :3]
    assert taken == np.argmax(np.asarray(logits), -1).tolist()
