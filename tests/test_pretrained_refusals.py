"""Loading a pretrained checkpoint computes what its config asks for, or refuses it in one line
naming the setting (`models/gpt2.py`, `clip_text.py`, `llama.py`, `pretrained.py`).

The fixtures (tests/fixtures/make_pretrained_variants_fixture.py, transformers 5.24, no torch
here) are tiny random GPT-2, CLIP text and Llama models, each with one non-default setting, and
transformers' outputs on fixed ids. Every implemented setting must reproduce them; every refused
one must name itself; and the audited field tables must cover every field of the transformers
that made the fixtures.
"""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from icrl_jax.models import llama
from icrl_jax.models.clip_text import CLIPTextEncoder, load_hf_clip_text
from icrl_jax.models.gpt2 import CheckpointFormatError, GPT2LM, load_hf_gpt2, save_hf_gpt2
from icrl_jax.models.pretrained import (adopt_pretrained_architecture, backbone_from_lm,
                                        check_backbone_fits, load_pretrained,
                                        pretrained_architecture, unaudited_fields)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "pretrained_variants")
with open(os.path.join(FIXTURES, "variants.json")) as _f:
    MANIFEST = json.load(_f)
TENSORS = {family: load_file(os.path.join(FIXTURES, f"{family}.safetensors"))
           for family in MANIFEST["families"]}

#: Variants whose setting changes transformers' numbers (so matching them shows we compute it),
#: and variants whose setting changes nothing (so accepting them is right).
CHANGES = {"gpt2": ["scale_attn_weights", "scale_attn_by_inverse_layer_idx", "both_scales",
                    "layer_norm_epsilon", "activation_gelu", "activation_gelu_python",
                    "activation_quick_gelu"],
           "clip_text": ["layer_norm_eps", "hidden_act_gelu", "hidden_act_gelu_new"],
           "llama": ["rms_norm_eps", "rope_theta"]}
NEUTRAL = {"gpt2": ["reorder_and_upcast_attn", "dropout", "activation_gelu_pytorch_tanh",
                    "activation_gelu_python_tanh", "activation_gelu_fast",
                    "activation_gelu_accurate"],
           "clip_text": ["pooling_and_projection", "dropout"],
           "llama": ["head_dim", "pretraining_tp", "dropout"]}
ALL = [(family, variant) for family, entries in MANIFEST["families"].items()
       for variant in entries]


def write_variant(tmp_path, family: str, variant: str = "default", **config_changes) -> str:
    """A Hugging Face directory of a fixture variant (its config.json as transformers wrote it,
    with `config_changes` applied; a value None removes the field)."""
    entry = MANIFEST["families"][family][variant]
    weights = entry["weights"] + "/"
    state = {k[len(weights):]: v for k, v in TENSORS[family].items()
             if k.startswith(weights) and not k.endswith("/output")}
    config = dict(entry["config"])
    for key, value in config_changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path = tmp_path / f"{family}_{variant}"
    path.mkdir(exist_ok=True)
    save_file(state, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def our_output(family: str, path: str) -> np.ndarray:
    ids = jnp.asarray(TENSORS[family]["ids"])
    if family == "gpt2":
        cfg, params = load_hf_gpt2(path)
        return np.asarray(GPT2LM(cfg).apply({"params": params}, ids))
    if family == "clip_text":
        cfg, params = load_hf_clip_text(path)
        return np.asarray(CLIPTextEncoder(cfg).apply({"params": params}, ids))
    cfg, params = llama.load_hf_llama(path)
    return np.asarray(llama.logits_fn(cfg, params)(ids))


@pytest.mark.parametrize("family,variant", ALL)
def test_every_implemented_setting_gives_transformers_outputs(tmp_path, family, variant):
    want = TENSORS[family][f"{variant}/output"]
    np.testing.assert_allclose(our_output(family, write_variant(tmp_path, family, variant)),
                               want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family,variant", [(f, v) for f, vs in CHANGES.items() for v in vs])
def test_the_implemented_settings_change_transformers_outputs(family, variant):
    """By more than 4x the equivalence tolerance (1e-4), so that matching them (above) shows the
    setting computed, not ignored (the smallest: the exact GELU against the tanh one, 5e-4)."""
    gap = np.abs(TENSORS[family][f"{variant}/output"] - TENSORS[family]["default/output"]).max()
    assert gap > 4e-4, gap


@pytest.mark.parametrize("family,variant", [(f, v) for f, vs in NEUTRAL.items() for v in vs])
def test_the_accepted_settings_change_nothing(family, variant):
    np.testing.assert_allclose(TENSORS[family][f"{variant}/output"],
                               TENSORS[family]["default/output"], atol=1e-5, rtol=0)


def test_the_audited_tables_cover_every_field_of_the_fixtures_transformers():
    """The fixture script records every config field of the transformers it ran (5.24 here);
    regenerating it with a release that adds a field fails here until the field is audited."""
    assert set(MANIFEST["fields"]) == {"gpt2", "clip_text", "llama"}
    assert unaudited_fields(MANIFEST["fields"]) == {}
    assert unaudited_fields({"gpt2": ["n_embd", "a_new_field"]}) == {"gpt2": ["a_new_field"]}


def assert_refused(path: str, *fragments: str) -> None:
    """Both entry points (config only, and weights) refuse `path` in one line naming every
    fragment."""
    for load in (pretrained_architecture, load_pretrained):
        with pytest.raises(CheckpointFormatError) as error:
            load(path)
        message = str(error.value)
        assert "\n" not in message, message
        for fragment in fragments:
            assert fragment in message, (fragment, message)


REFUSED = [
    ("gpt2", "activation_function", "relu"),
    ("gpt2", "activation_function", "silu"),
    ("gpt2", "add_cross_attention", True),
    ("gpt2", "pruned_heads", {"0": [1]}),
    ("gpt2", "a_field_from_the_future", 3),
    ("clip_text", "hidden_act", "relu"),
    ("clip_text", "pruned_heads", {"1": [0]}),
    ("clip_text", "a_field_from_the_future", 3),
    ("llama", "hidden_act", "gelu"),
    ("llama", "head_dim", 8),
    ("llama", "rope_parameters", {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}),
    ("llama", "rope_parameters", {"rope_type": "default", "rope_theta": 1e4,
                                  "partial_rotary_factor": 0.5}),
    ("llama", "rope_scaling", {"rope_type": "dynamic", "factor": 2.0}),
    ("llama", "sliding_window", 4),
    ("llama", "use_sliding_window", True),
    ("llama", "pruned_heads", {"0": [1]}),
    ("llama", "a_field_from_the_future", 3),
]


@pytest.mark.parametrize("family,field,value", REFUSED)
def test_a_setting_we_do_not_compute_is_refused_naming_it(tmp_path, family, field, value):
    assert_refused(write_variant(tmp_path, family, **{field: value}), f"{field}={value!r}")


def test_a_clip_model_config_is_audited_in_its_text_config(tmp_path):
    path = write_variant(tmp_path, "clip_text")
    text = json.loads(open(os.path.join(path, "config.json")).read())
    whole = {"model_type": "clip", "projection_dim": 4, "logit_scale_init_value": 2.6592,
             "text_config": dict(text, hidden_act="relu"), "vision_config": {"hidden_size": 8}}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(whole, f)
    assert_refused(path, "text_config", "hidden_act='relu'")
    whole["text_config"] = text
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(dict(whole, a_field_from_the_future=1), f)
    assert_refused(path, "a_field_from_the_future=1")


def test_fields_that_change_nothing_load(tmp_path):
    """Fields of the real GPT-2 config.json and of transformers 4's files: generation settings,
    the double-heads model's summary head, n_ctx, dropout rates (at inference; a fine-tuned
    GPT-DT takes model.*_dropout from its own config)."""
    path = write_variant(tmp_path, "gpt2", n_ctx=8, task_specific_params={
        "text-generation": {"do_sample": True, "max_length": 50}}, summary_type="cls_index",
        torch_dtype="float32", num_beams=4, use_cache=False, resid_pdrop=0.1)
    np.testing.assert_allclose(our_output("gpt2", path), TENSORS["gpt2"]["default/output"],
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("family,field,shape,heads", [
    ("gpt2", "n_head", "'h.0.attn.c_attn.weight' of shape (8, 24)", 3),
    ("clip_text", "num_attention_heads",
     "'encoder.layers.0.self_attn.q_proj.weight' of shape (8, 8)", 3),
])
def test_a_head_count_the_width_cannot_have_names_the_parameter(tmp_path, family, field, shape,
                                                                heads):
    assert_refused(write_variant(tmp_path, family, **{field: heads}), f"{field}={heads}", shape)


def test_a_llama_head_count_the_weights_cannot_have_names_the_parameter_and_both_shapes(
        tmp_path):
    # 4 heads of 2 on width 8: the key projection of the 1 key/value head would be (2, 8).
    path = write_variant(tmp_path, "llama", num_attention_heads=4, head_dim=None)
    with pytest.raises(CheckpointFormatError, match=r"k_proj.weight has shape \(4, 8\), the "
                                                     r"config needs \(2, 8\)"):
        load_pretrained(path)


LAYERS = {"gpt2": "n_layer", "clip_text": "num_hidden_layers", "llama": "num_hidden_layers"}


@pytest.mark.parametrize("family", sorted(LAYERS))
def test_a_config_with_other_layers_than_the_checkpoint_is_refused(tmp_path, family):
    field = LAYERS[family]
    full = MANIFEST["families"][family]["default"]["config"][field]
    fewer = write_variant(tmp_path, family, **{field: full - 1})
    with pytest.raises(CheckpointFormatError, match=f"blocks 0 .. {full - 1} \\({full}\\), "
                                                     f"config.json's {field}.* is {full - 1}.*"
                                                     "model.pretrained_layers=k") as error:
        load_pretrained(fewer)
    assert "\n" not in str(error.value)
    os.rename(fewer, tmp_path / "fewer")
    more = write_variant(tmp_path, family, **{field: full + 1})
    with pytest.raises(CheckpointFormatError, match=f"has {full} blocks .* but config.json's "
                                                     f"{field}.* is {full + 1}"):
        load_pretrained(more)


@pytest.mark.parametrize("family", sorted(LAYERS))
def test_the_first_k_layers_are_taken_only_when_asked(tmp_path, family):
    path = write_variant(tmp_path, family)
    full_stack, full = load_pretrained(path)
    stack, part = load_pretrained(path, layers=2 if full_stack.num_layers > 2 else 1)
    k = stack.num_layers
    assert k < full_stack.num_layers
    assert sorted(k for k in part if k.startswith("block_")) == [f"block_{i}" for i in range(k)]
    np.testing.assert_array_equal(part["final_norm"]["scale"], full["final_norm"]["scale"])
    assert pretrained_architecture(path, k) == stack
    assert dict(stack.fields) == dict(full_stack.fields, num_layers=k)
    with pytest.raises(CheckpointFormatError, match=f"model.pretrained_layers=9: .* has "
                                                     f"{full_stack.num_layers} layers"):
        load_pretrained(path, layers=9)


def test_a_gpt_dt_backbone_takes_the_first_k_blocks_through_the_config(tmp_path):
    import jax
    import ml_collections

    from icrl_jax.core.config import default_transformer_config
    from icrl_jax.models.transformer import Transformer
    from icrl_jax.papers.gpt_dtma.fields import gpt_dt_model_config

    path = write_variant(tmp_path, "gpt2")
    model = default_transformer_config()
    model.update(gpt_dt_model_config())
    model.update(dict(pretrained=path, pretrained_architecture=True, pretrained_layers=2))
    model = ml_collections.ConfigDict(model)
    adopt_pretrained_architecture(model)
    assert (model.d_model, model.num_layers, model.num_heads) == (8, 2, 2)
    stack, blocks = load_pretrained(path, int(model.pretrained_layers))
    backbone = Transformer(num_layers=2, num_heads=2, norm_epsilon=1e-5, max_len=8)
    check_backbone_fits(stack, 8, backbone, path)
    fresh = backbone.init(jax.random.key(0), jnp.zeros((1, 4, 8)))["params"]
    params = backbone_from_lm(fresh, blocks, path)
    np.testing.assert_array_equal(params["block_1"]["Dense_0"]["kernel"],
                                  blocks["block_1"]["Dense_0"]["kernel"])
    # Without the explicit option the 3-block LM does not fit a 2-layer backbone.
    with pytest.raises(CheckpointFormatError, match=r"model.num_layers=2 \(the LM has 3\); "
                                                     r"model.pretrained_layers=2 takes only"):
        check_backbone_fits(load_pretrained(path)[0], 8, backbone, path)


def test_a_tied_head_that_differs_from_the_embedding_is_refused(tmp_path):
    path = write_variant(tmp_path, "gpt2", "tie_word_embeddings", tie_word_embeddings=True)
    with pytest.raises(CheckpointFormatError, match="lm_head.weight differs from wte.weight"):
        load_pretrained(path)


def test_folded_attention_scales_save_as_a_default_gpt2(tmp_path):
    """A checkpoint loaded with scale_attn_weights=False and scale_attn_by_inverse_layer_idx is
    saved with the scales in its query weights: transformers' defaults then compute it."""
    cfg, params = load_hf_gpt2(write_variant(tmp_path, "gpt2", "both_scales"))
    save_hf_gpt2(str(tmp_path / "saved"), cfg, params)
    hf = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert "scale_attn_weights" not in hf and "scale_attn_by_inverse_layer_idx" not in hf
    np.testing.assert_allclose(our_output("gpt2", str(tmp_path / "saved")),
                               TENSORS["gpt2"]["both_scales/output"], atol=1e-4, rtol=0)


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> its bfloat16 rounding (to nearest even), as the 16-bit patterns."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_bfloat16_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file of BF16 tensors, written by hand (numpy has no bfloat16)."""
    header, chunks, offset = {}, [], 0
    for key, value in tensors.items():
        data = bfloat16_bits(value).tobytes()
        header[key] = {"dtype": "BF16", "shape": list(value.shape),
                       "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(chunks))


@pytest.mark.parametrize("family", sorted(LAYERS))
def test_bfloat16_and_float16_checkpoints_load_exactly_widened(tmp_path, family):
    """Most Hugging Face LLM checkpoints store bfloat16 (config torch_dtype / dtype, accepted:
    we compute in float32); safetensors.numpy cannot read it, our reader widens it exactly."""
    path = write_variant(tmp_path, family)
    state = load_file(os.path.join(path, "model.safetensors"))
    rounded = {k: (bfloat16_bits(v).astype(np.uint32) << 16).view(np.float32)
               for k, v in state.items()}
    save_file(rounded, os.path.join(path, "model.safetensors"))
    _, want = load_pretrained(path)
    write_bfloat16_safetensors(os.path.join(path, "model.safetensors"), state)
    _, got = load_pretrained(path)
    for a, b in zip(jax_leaves(want), jax_leaves(got)):
        np.testing.assert_array_equal(a, b)
    save_file({k: v.astype(np.float16) for k, v in state.items()},
              os.path.join(path, "model.safetensors"))
    _, half = load_pretrained(path)
    save_file({k: v.astype(np.float16).astype(np.float32) for k, v in state.items()},
              os.path.join(path, "model.safetensors"))
    for a, b in zip(jax_leaves(half), jax_leaves(load_pretrained(path)[1])):
        assert a.dtype == np.float32 and np.array_equal(a, b)


def jax_leaves(tree):
    import jax
    return jax.tree.leaves(tree)


def test_a_tensor_of_a_dtype_we_do_not_read_is_named(tmp_path):
    path = write_variant(tmp_path, "llama")
    state = load_file(os.path.join(path, "model.safetensors"))
    state["model.norm.weight"] = state["model.norm.weight"].astype(np.int8)
    save_file(state, os.path.join(path, "model.safetensors"))
    with pytest.raises(CheckpointFormatError, match="tensor 'model.norm.weight' has dtype I8"):
        load_pretrained(path)


#: The base fields transformers 4 wrote into every sub-config of a CLIPModel's config.json (e.g.
#: OpenAI's CLIP ViT-B/32 text_config), at the values it wrote.
TRANSFORMERS_4_BASE = {
    "add_cross_attention": False, "bad_words_ids": None, "begin_suppress_tokens": None,
    "chunk_size_feed_forward": 0, "cross_attention_hidden_size": None,
    "decoder_start_token_id": None, "diversity_penalty": 0.0, "do_sample": False, "dropout": 0.0,
    "early_stopping": False, "encoder_no_repeat_ngram_size": 0,
    "exponential_decay_length_penalty": None, "finetuning_task": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "is_decoder": False,
    "is_encoder_decoder": False, "length_penalty": 1.0, "max_length": 20, "min_length": 0,
    "no_repeat_ngram_size": 0, "num_beam_groups": 1, "num_beams": 1, "num_return_sequences": 1,
    "output_scores": False, "prefix": None, "pruned_heads": {}, "remove_invalid_values": False,
    "repetition_penalty": 1.0, "return_dict_in_generate": False, "sep_token_id": None,
    "suppress_tokens": None, "task_specific_params": None, "temperature": 1.0,
    "tf_legacy_loss": False, "tie_encoder_decoder": False, "tie_word_embeddings": True,
    "tokenizer_class": None, "top_k": 50, "top_p": 1.0, "torch_dtype": None, "torchscript": False,
    "typical_p": 1.0, "use_bfloat16": False, "gradient_checkpointing": False}


def test_a_transformers_4_clip_model_config_loads(tmp_path):
    path = write_variant(tmp_path, "clip_text")
    text = json.loads(open(os.path.join(path, "config.json")).read())
    whole = {"_name_or_path": "openai/clip-vit-base-patch32", "architectures": ["CLIPModel"],
             "initializer_factor": 1.0, "logit_scale_init_value": 2.6592, "model_type": "clip",
             "projection_dim": 4, "torch_dtype": "float32", "transformers_version": "4.21.0",
             "text_config": dict(text, **TRANSFORMERS_4_BASE), "text_config_dict": None,
             "vision_config": dict(TRANSFORMERS_4_BASE, hidden_size=8), "vision_config_dict": None}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(whole, f)
    np.testing.assert_allclose(our_output("clip_text", path),
                               TENSORS["clip_text"]["default/output"], atol=1e-4, rtol=0)
