"""CLIP's text encoder on the shared transformer equals transformers' CLIPTextModel (golden
fixture); loading a checkpoint that does not fit names what is wrong; CLIP-DT takes its blocks."""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from icrl_jax.core.config import default_transformer_config
from icrl_jax.papers.gpt_dtma.fields import gpt_dt_model_config
from icrl_jax.data.trajectories import Trajectories
from icrl_jax.papers.gpt_dtma.method import GPTDecisionTransformer
from icrl_jax.models.clip_text import CLIPTextConfig, CLIPTextEncoder, load_hf_clip_text
from icrl_jax.models.gpt2 import CheckpointFormatError
from icrl_jax.models.pretrained import load_pretrained

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "clip_text_tiny")


def test_last_hidden_state_equals_transformers():
    """tests/fixtures/clip_text_tiny: a random CLIPTextModel saved by transformers and its
    last_hidden_state on fixed ids (tests/fixtures/make_clip_fixture.py)."""
    cfg, params = load_hf_clip_text(FIXTURE)
    assert cfg == CLIPTextConfig(vocab_size=99, max_position_embeddings=32, hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4)
    ids = np.load(os.path.join(FIXTURE, "ids.npy"))
    want = np.load(os.path.join(FIXTURE, "last_hidden_state.npy"))
    got = CLIPTextEncoder(cfg).apply({"params": params}, jnp.asarray(ids, jnp.int32))
    assert got.shape == want.shape == (3, 17, 32)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)
    # The activation matters: GPT-2's tanh GELU in the same blocks gives another output.
    tanh = cfg.backbone(activation="gelu_tanh").apply(
        {"params": params["transformer"]}, jnp.take(params["token_embedding"], ids, axis=0))
    assert np.abs(np.asarray(tanh) - want).max() > 1e-3


def _rewrite(path, config=None, drop=None):
    if config is not None:
        with open(path / "config.json", "w") as f:
            json.dump(config, f)
    if drop is not None:
        from safetensors.numpy import load_file, save_file
        tensors = load_file(str(path / "model.safetensors"))
        del tensors[drop]
        save_file(tensors, str(path / "model.safetensors"))


def test_checkpoint_that_does_not_fit_names_the_parameter(tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(FIXTURE, path)
    with open(path / "config.json") as f:
        hf = json.load(f)
    _rewrite(path, dict(hf, hidden_size=64, intermediate_size=128))
    with pytest.raises(CheckpointFormatError, match=r"'embeddings.token_embedding.weight' has "
                                                     r"shape \(99, 32\).*needs \(99, 64\)"):
        load_hf_clip_text(str(path))
    _rewrite(path, dict(hf, intermediate_size=48))  # any width loads, if the weights have it
    with pytest.raises(CheckpointFormatError, match=r"'encoder.layers.0.mlp.fc1.weight' has "
                                                     r"shape \(64, 32\).*needs \(48, 32\)"):
        load_hf_clip_text(str(path))
    _rewrite(path, hf, drop="encoder.layers.1.self_attn.v_proj.bias")
    with pytest.raises(CheckpointFormatError,
                       match="no parameter 'encoder.layers.1.self_attn.v_proj.bias'"):
        load_hf_clip_text(str(path))
    os.remove(path / "model.safetensors")
    with pytest.raises(CheckpointFormatError, match="no model.safetensors"):
        load_hf_clip_text(str(path))
    with pytest.raises(CheckpointFormatError, match="no config.json"):
        load_hf_clip_text(str(tmp_path))
    _rewrite(path, dict(hf, model_type="bert"))
    with pytest.raises(CheckpointFormatError, match="model_type 'bert'"):
        load_pretrained(str(path))


def test_full_clip_model_checkpoint_gives_its_text_tower(tmp_path):
    """A CLIPModel directory: `text_model.`-prefixed keys next to a vision tower, and the text
    architecture under config.json's `text_config`."""
    from safetensors.numpy import load_file, save_file
    tensors = {"text_model." + k: v for k, v in
               load_file(os.path.join(FIXTURE, "model.safetensors")).items()}
    tensors["vision_model.embeddings.patch_embedding.weight"] = np.zeros((8, 3, 4, 4), np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with open(os.path.join(FIXTURE, "config.json")) as f:
        text = json.load(f)
    with open(tmp_path / "config.json", "w") as f:
        json.dump(dict(model_type="clip", text_config=text, vision_config=dict(hidden_size=8)), f)
    cfg, params = load_hf_clip_text(str(tmp_path))
    cfg_ref, ref = load_hf_clip_text(FIXTURE)
    assert cfg == cfg_ref
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(a, b)
    stack, stack_params = load_pretrained(str(tmp_path))
    fields = dict(stack.fields)
    assert (stack.family, fields["mlp_ratio"], fields["activation"]) == ("clip", 2, "quick_gelu")
    assert set(stack_params) == {"position_embedding", "block_0", "block_1", "final_norm"}


def test_live_transformers_equivalence(tmp_path):
    """Where torch and transformers are installed: a random CLIPTextModel of another shape (and a
    whole CLIPModel) saved by transformers gives our last_hidden_state."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    text = transformers.CLIPTextConfig(vocab_size=50, max_position_embeddings=20, hidden_size=48,
                                       intermediate_size=192, num_hidden_layers=3,
                                       num_attention_heads=6)
    ids = np.random.default_rng(1).integers(0, 50, (2, 20))
    for kind, model in (
            ("text", transformers.CLIPTextModel(text)),
            ("clip", transformers.CLIPModel(transformers.CLIPConfig(
                text_config=text.to_dict(), vision_config=dict(
                    hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, image_size=8, patch_size=4))))):
        model.eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "layer_norm" in name or name.endswith("bias"):
                    p.add_(0.1 * torch.randn_like(p))
            tower = model if kind == "text" else model.text_model
            want = tower(input_ids=torch.from_numpy(ids)).last_hidden_state.numpy()
        model.save_pretrained(str(tmp_path / kind), safe_serialization=True)
        cfg, params = load_hf_clip_text(str(tmp_path / kind))
        got = CLIPTextEncoder(cfg).apply({"params": params}, jnp.asarray(ids, jnp.int32))
        np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)


def _model_config():
    """The schema's GPT-DT model fields, the size of the CLIP fixture."""
    config = default_transformer_config()
    config.update(gpt_dt_model_config())
    config.update(dict(d_model=32, num_layers=2, num_heads=4, norm_epsilon=1e-5, mlp_ratio=2,
                       activation="quick_gelu"))
    return config


def _dt(**model):
    config = _model_config()
    config.update(model)
    return GPTDecisionTransformer(config, (), context_len=4, continuous_dim=2)


def _windows(n):  # (n, 4 steps) of a continuous-action task
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 4, 3)).astype(np.float32)
    rewards = np.ones((n, 4), np.float32)
    returns_to_go = np.cumsum(rewards, 1)[:, ::-1].copy()
    return Trajectories(obs, np.tanh(obs[..., :2]), rewards, returns_to_go,
                        np.tile(np.arange(4, dtype=np.int32), (n, 1)), np.ones((n, 4), bool))


def test_clip_dt_takes_the_text_encoders_blocks():
    method = _dt(pretrained=FIXTURE)
    params = method.init(jax.random.PRNGKey(0), jax.tree.map(jnp.asarray, _windows(2)))
    _, clip = load_hf_clip_text(FIXTURE)
    flat = lambda tree: {jax.tree_util.keystr(k): v for k, v in  # noqa: E731
                         jax.tree_util.tree_leaves_with_path(tree)}
    ours, theirs = flat(params["backbone"]), flat(clip["transformer"])
    del theirs["['position_embedding']"]  # the DT has its own timestep embedding instead
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        np.testing.assert_array_equal(ours[key], value, err_msg=key)
    assert method.model.backbone.activation == "quick_gelu"
    assert method.markov.shape == (2, 4)
    labels = [GPTDecisionTransformer.label(ml_collections.ConfigDict(dict(model=dict(
        _model_config().to_dict(), pretrained=FIXTURE, mixture_of_attention=moa))))
        for moa in (False, True)]
    assert labels == ["clip_dt", "clip_dtma"]


def test_clip_text_encoder_that_does_not_fit_is_named():
    with pytest.raises(CheckpointFormatError, match=r"model.activation='gelu_tanh' \(the LM has "
                                                     r"'quick_gelu'\)"):
        _dt(pretrained=FIXTURE, activation="gelu_tanh")
    with pytest.raises(CheckpointFormatError, match=r"model.num_layers=3 \(the LM has 2\).*"
                                                     r"model.mlp_ratio=4 \(the LM has 2\)"):
        _dt(pretrained=FIXTURE, mlp_ratio=4, num_layers=3)
