"""GPT-2 on the shared transformer equals transformers' GPT-2 (golden fixture), and Hugging Face
checkpoints round-trip; loading a checkpoint that does not fit names what is wrong."""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.models.gpt2 import (CheckpointFormatError, GPT2Config, GPT2LM, load_hf_gpt2,
                                  save_hf_gpt2, transformer_params)

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "gpt2_tiny")


def test_logits_equal_transformers():
    """tests/fixtures/gpt2_tiny: a random GPT2LMHeadModel saved by transformers and its logits
    on fixed ids (tests/fixtures/make_gpt2_fixture.py); our model must reproduce them."""
    cfg, params = load_hf_gpt2(FIXTURE)
    assert cfg == GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    ids = np.load(os.path.join(FIXTURE, "ids.npy"))
    want = np.load(os.path.join(FIXTURE, "logits.npy"))
    got = GPT2LM(cfg).apply({"params": params}, jnp.asarray(ids, jnp.int32))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("options", [{}, dict(n_inner=40, activation_function="gelu",
                                             tie_word_embeddings=False)])
def test_save_load_round_trip_is_exact(tmp_path, options):
    """(The second config, saved, also loads in transformers 5.24 with logits equal to ours
    to 1.3e-7: make_gpt2_fixture.py --check.)"""
    cfg = GPT2Config(vocab_size=50, n_positions=16, n_embd=24, n_layer=3, n_head=3, **options)
    params = GPT2LM(cfg).init(jax.random.key(0), jnp.zeros((1, 4), jnp.int32))["params"]
    save_hf_gpt2(str(tmp_path), cfg, params)
    cfg2, params2 = load_hf_gpt2(str(tmp_path))
    assert cfg2 == cfg
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2)):
        np.testing.assert_array_equal(np.asarray(a), b)
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["model_type"] == "gpt2"
    from safetensors.numpy import load_file
    assert ("lm_head.weight" in load_file(str(tmp_path / "model.safetensors"))) == bool(options)
    assert set(transformer_params(params2)) == {"position_embedding", "block_0", "block_1",
                                                "block_2", "final_norm"}


def test_checkpoint_that_does_not_fit_names_the_parameter(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "ckpt")
    path = tmp_path / "ckpt"
    with open(path / "config.json") as f:
        hf = json.load(f)
    with open(path / "config.json", "w") as f:
        json.dump(dict(hf, n_embd=64), f)
    with pytest.raises(CheckpointFormatError, match=r"'wte.weight' has shape \(96, 32\).*needs "
                                                     r"\(96, 64\)"):
        load_hf_gpt2(str(path))
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["transformer.h.1.mlp.c_fc.bias"]
    save_file(tensors, str(path / "model.safetensors"))
    with open(path / "config.json", "w") as f:
        json.dump(hf, f)
    with pytest.raises(CheckpointFormatError, match="no parameter 'h.1.mlp.c_fc.bias'"):
        load_hf_gpt2(str(path))
    with pytest.raises(CheckpointFormatError, match="no config.json"):
        load_hf_gpt2(str(tmp_path))


def test_live_transformers_equivalence(tmp_path):
    """Where torch and transformers are installed: our saved checkpoint, loaded by
    transformers, gives our logits."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    params = GPT2LM(cfg).init(jax.random.key(1), jnp.zeros((1, 4), jnp.int32))["params"]
    save_hf_gpt2(str(tmp_path), cfg, params)
    model = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path)).eval()
    ids = np.random.default_rng(1).integers(0, 64, (2, 16))
    with torch.no_grad():
        want = model(torch.from_numpy(ids)).logits.numpy()
    got = GPT2LM(cfg).apply({"params": params}, jnp.asarray(ids, jnp.int32))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)


def test_markov_head_test_on_hand_built_and_random_heads():
    from icrl_jax.papers.gpt_dtma.markov_heads import markov_heads, markov_statistics
    d, h = 16, 2
    rng = np.random.default_rng(0)
    kernel = rng.normal(0, 0.02, (d, 3, h, d // h))
    # Head 0: W_q = W_k = the first D/H coordinates (scaled): A = diag(1, .., 1, 0, .., 0) + noise.
    kernel[:, 0, 0] = kernel[:, 1, 0] = 0.0
    kernel[: d // h, 0, 0] = kernel[: d // h, 1, 0] = np.eye(d // h)
    params = {"block_0": {"attention": {"qkv": {"kernel": kernel}}}}
    heads = markov_heads(params)
    # Half the diagonal is zero, so R.1 fails: not a Markov matrix by Definition 1.
    assert heads[0]["r1"] is False and not heads[0]["markov"]
    assert markov_statistics(np.eye(4) + 0.01)[0] and markov_statistics(np.eye(4) + 0.01)[1] > 20
    assert markov_statistics(-np.eye(4))[0] is False
    # A random init (GPT-2's N(0, 0.02)) has none: its diagonal is as small as the rest.
    random = {"block_0": {"attention": {"qkv": {"kernel": rng.normal(0, 0.02, (64, 3, 4, 16))}}}}
    assert not any(x["markov"] for x in markov_heads(random))
    assert max(x["r2"] for x in markov_heads(random)) < 3


@pytest.mark.parametrize("d_model, head_dim", [(128, 32), (768, 64)])
def test_a_self_attending_head_passes_r2_only_in_a_privileged_basis(d_model, head_dim):
    from icrl_jax.papers.gpt_dtma.markov_heads import markov_statistics, random_basis_ratio
    rng = np.random.default_rng(1)
    # W_q = W_k in a random basis: every diagonal element positive (R.1), R.2 at its bound.
    w = rng.normal(size=(d_model, head_dim))
    r1, r2 = markov_statistics(w @ w.T)
    assert r1 and r2 == pytest.approx(random_basis_ratio(head_dim), rel=0.05)
    assert r2 < 20
    # A head whose dimensions each read one residual coordinate (plus noise): R.2 rises past it.
    aligned = rng.normal(0, 0.1, (d_model, head_dim))
    aligned[rng.choice(d_model, head_dim, replace=False), np.arange(head_dim)] += 3.0
    r1, r2 = markov_statistics(aligned @ aligned.T)
    assert r1 and r2 > 1.4 * random_basis_ratio(head_dim)


def test_pretrain_lm_learns_bytes_and_writes_a_loadable_checkpoint(tmp_path):
    from icrl_jax.experiments.gpt_dtma.lm import get_config
    from icrl_jax.pipeline import run

    corpus = tmp_path / "text.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    config = get_config("quick")
    config.workdir = str(tmp_path / "lm")
    config.lm.corpus = str(corpus)
    config.model.d_model, config.model.num_layers, config.model.num_heads = 32, 1, 2
    config.train.seq_len, config.train.num_steps, config.train.batch_size = 16, 200, 16
    config.train.warmup_steps = 10
    config.train.learning_rate = 3e-3
    config.train.checkpoint_every = 200
    config.run.progress = False
    config = run.resolve_config(config)
    out = run.run(config, "pretrain-lm")
    assert out["validation_bits_per_byte"] < 3.0  # uniform is 8; the text repeats
    cfg, params = load_hf_gpt2(os.path.join(config.workdir, "hf"))
    assert cfg.vocab_size == 256 and cfg.n_embd == 32
    assert {"layer", "head", "r1", "r2", "markov"} <= set(out["markov_heads_trained"][0])
    with pytest.raises(Exception, match="pretrain-lm takes a config with an `lm` section"):
        run.run(config, "train")


def test_markov_head_table_of_any_pretrained_family():
    """`python -m icrl_jax.papers.gpt_dtma.markov_heads DIR` reads a GPT-2 directory through the
    one pretrained entry point, beside a random init of the same blocks."""
    from icrl_jax.papers.gpt_dtma.markov_heads import main

    table = main([FIXTURE])
    assert table["family"] == "gpt"
    assert table["pretrained"]["heads"] == table["random_init"]["heads"] == 2 * 4
    assert table["random_basis_r2"] == pytest.approx(np.sqrt(np.pi * 8 / 2), abs=0.01)
