"""Our models compute what the papers' own code computes, checked against committed fixtures
made with that code (no torch here: the fixtures are safetensors files).

* tests/fixtures/headless_ad_tiny (tests/fixtures/make_headless_ad_fixtures.py): the Headless-AD
  authors' bandit Headless-AD and AD models (github.com/corl-team/headless-ad), against
  `papers/headless_ad/reference_layout.py` on the shared Transformer: predicted embeddings
  (with and without the action-set prompt), the InfoNCE loss, the policy's probabilities, AD's
  logits and loss.
* tests/fixtures/corl_dt_tiny (tests/fixtures/make_corl_dt_fixtures.py): CORL's
  DecisionTransformer (github.com/corl-team/CORL, algorithms/offline/dt.py) on a
  continuous-action batch, against `methods/dt.py`'s DTModel configured as CORL's (PyTorch's
  LayerNorm epsilon, `model.embed_norm_epsilon=1e-5`, for the token norm too).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from icrl_jax.models.transformer import Transformer
from icrl_jax.papers.headless_ad import reference_layout as ref

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
HEADLESS = os.path.join(FIXTURES, "headless_ad_tiny")
CORL_DT = os.path.join(FIXTURES, "corl_dt_tiny")
from helpers import fixture_config, fixture_outputs

ATOL = 1e-4


# ---------------------------------------------------------------- Headless-AD and AD (bandits)

def _bandit_model(head: str, prompt: bool = True, rotary_table_dtype: str = "bfloat16"):
    cfg = fixture_config(HEADLESS)
    backbone = ref.reference_backbone(cfg["n_layer"], cfg["n_head"], cfg["intermediate_size"],
                                      rotary_table_dtype=rotary_table_dtype)
    return ref.ReferenceBanditModel(head, cfg["n_embd"], cfg["token_embed_dim"], backbone,
                                    num_actions=cfg["num_actions"] if head == "ad" else 0,
                                    prompt=prompt)


def _bandit_inputs(head: str, out):
    if head == "ad":
        return out["actions"], out["rewards"]
    return out["action_embeddings"], out["rewards"], out["prompt"]


def _bandit_params(model, out, weights=None):
    if weights is None:
        weights = load_file(os.path.join(HEADLESS, f"{model.head}.safetensors"))
    return ref.params_from_reference(model, weights, _bandit_inputs(model.head, out))


def test_headless_ad_predictions_and_loss_equal_the_authors():
    out = fixture_outputs(HEADLESS)
    cfg = fixture_config(HEADLESS)
    model = _bandit_model("headless")
    params = _bandit_params(model, out)
    pred = model.apply({"params": params}, *_bandit_inputs("headless", out))
    np.testing.assert_allclose(pred, out["headless_pred"], atol=ATOL, rtol=0)
    # The action-set prompt is built as theirs: the map with unavailable rows zeroed.
    np.testing.assert_allclose(ref.action_set_prompt(out["action_map"],
                                                     out["num_actions_per_env"]),
                               out["prompt"], atol=0, rtol=0)
    loss, norm = ref.infonce_loss(pred[:, :-1], out["action_map"], out["actions"],
                                  out["num_actions_per_env"], cfg["tau"])
    np.testing.assert_allclose(loss, out["headless_loss"][0], atol=ATOL, rtol=0)
    np.testing.assert_allclose(norm, out["headless_norm"][0], atol=ATOL, rtol=0)
    probs = ref.action_probabilities(pred, out["action_map"], out["num_actions_per_env"])
    np.testing.assert_allclose(probs, out["headless_probs"], atol=ATOL, rtol=0)


def test_headless_ad_without_prompt_equals_the_authors():
    """Their `use_action_set_prompt=False` ablation, same weights."""
    out = fixture_outputs(HEADLESS)
    model = _bandit_model("headless", prompt=False)
    params = _bandit_params(model, out)
    pred = model.apply({"params": params}, out["action_embeddings"], out["rewards"])
    np.testing.assert_allclose(pred, out["headless_pred_no_prompt"], atol=ATOL, rtol=0)


def test_ad_logits_and_loss_equal_the_authors():
    out = fixture_outputs(HEADLESS)
    cfg = fixture_config(HEADLESS)
    model = _bandit_model("ad")
    params = _bandit_params(model, out)
    logits = model.apply({"params": params}, *_bandit_inputs("ad", out))
    np.testing.assert_allclose(logits, out["ad_logits"], atol=ATOL, rtol=0)
    loss = ref.ad_loss(logits[:, :-1], out["actions"], cfg["label_smoothing"])
    np.testing.assert_allclose(loss, out["ad_loss"][0], atol=ATOL, rtol=0)


def test_window_inputs_align_with_their_training_targets():
    """A window of our layout (previous actions and rewards per step) gives, through
    `window_inputs`, the predictions their training scores against the window's actions."""
    out = fixture_outputs(HEADLESS)
    model = _bandit_model("headless")
    params = _bandit_params(model, out)
    actions, rewards = np.asarray(out["actions"]), np.asarray(out["rewards"])
    none = np.full((actions.shape[0], 1), actions.max() + 1)  # "no previous action": unused
    prev_actions = np.concatenate([none, actions[:, :-1]], axis=1)
    prev_rewards = np.concatenate([np.zeros_like(none), rewards[:, :-1]], axis=1)
    embedded, reward_ids = ref.window_inputs(jnp.asarray(prev_actions),
                                             jnp.asarray(prev_rewards, jnp.float32),
                                             out["action_map"])
    pred = model.apply({"params": params}, embedded, reward_ids, out["prompt"])
    assert pred.shape[1] == actions.shape[1]
    np.testing.assert_allclose(pred, out["headless_pred"][:, :-1], atol=ATOL, rtol=0)


def test_their_bfloat16_rotary_tables_matter():
    """Their RoPE cache is bfloat16 (`Transformer.rotary_table_dtype`): exact float32 tables
    move the outputs by more than the tolerance, so the option is what makes them equal."""
    out = fixture_outputs(HEADLESS)
    model = _bandit_model("headless", rotary_table_dtype="float32")
    pred = model.apply({"params": _bandit_params(model, out)}, *_bandit_inputs("headless", out))
    assert np.abs(np.asarray(pred) - np.asarray(out["headless_pred"])).max() > 10 * ATOL


def test_bandit_weights_of_another_shape_name_the_parameter():
    out = fixture_outputs(HEADLESS)
    model = _bandit_model("headless")
    weights = dict(load_file(os.path.join(HEADLESS, "headless.safetensors")))
    good = dict(weights)
    weights["transformer.h.1.mlp.swiglu.w1.weight"] = np.zeros((40, 32), np.float32)
    with pytest.raises(ref.ReferenceWeightsError,
                       match=r"'transformer\.h\.1\.mlp\.swiglu\.w1\.weight' has shape \(40, 32\)"
                             r", but the model needs \(48, 32\)"):
        _bandit_params(model, out, weights)
    weights = dict(good, **{"transformer.h.0.attn.attn.weight": np.zeros((96, 16), np.float32)})
    with pytest.raises(ref.ReferenceWeightsError,
                       match=r"'transformer\.h\.0\.attn\.attn\.weight' has shape \(96, 16\), "
                             r"but the model needs \(96, 32\)"):
        _bandit_params(model, out, weights)
    del good["transformer.out_proj.bias"]
    with pytest.raises(ref.ReferenceWeightsError, match=r"missing \['transformer\.out_proj\.bias'\]"):
        _bandit_params(model, out, good)
    # An AD state dict is not a Headless-AD one.
    ad_weights = load_file(os.path.join(HEADLESS, "ad.safetensors"))
    with pytest.raises(ref.ReferenceWeightsError, match="unexpected.*transformer.action_emb.weight"):
        _bandit_params(model, out, ad_weights)


# ---------------------------------------------------------------- CORL's Decision Transformer

def corl_dt_model(embed_norm_epsilon: float = 1e-5):
    """`methods/dt.py`'s DTModel configured as CORL's DecisionTransformer: a pre-norm backbone
    with PyTorch's LayerNorm epsilon and exact GELU, no position encoding besides the timestep
    table (CORL's `episode_len + seq_len` rows), continuous actions."""
    from icrl_jax.methods.dt import DTModel
    cfg = fixture_config(CORL_DT)
    backbone = Transformer(num_layers=cfg["num_layers"], num_heads=cfg["num_heads"], mlp_ratio=4,
                           pre_norm=True, position="none", norm_epsilon=1e-5,
                           activation="gelu_exact", causal=True)
    return DTModel(cfg["embedding_dim"], backbone, (), None, cfg["action_dim"],
                   timestep_encoding="timestep",
                   max_timestep=cfg["episode_len"] + cfg["seq_len"],
                   embed_norm_epsilon=embed_norm_epsilon)


def _corl_dt_mapping(num_layers: int, num_heads: int) -> dict:
    """CORL's state-dict names -> (our parameter path, conversion, their shape from ours)."""
    transpose = (np.transpose, lambda s: tuple(reversed(s)))
    same = (None, lambda s: s)
    mapping = {
        "timestep_emb.weight": (("timestep", "embedding"),) + same,
        "emb_norm.weight": (("embed_norm", "scale"),) + same,
        "emb_norm.bias": (("embed_norm", "bias"),) + same,
        "out_norm.weight": (("backbone", "final_norm", "scale"),) + same,
        "out_norm.bias": (("backbone", "final_norm", "bias"),) + same,
        "action_head.0.weight": (("action_head", "kernel"),) + transpose,
        "action_head.0.bias": (("action_head", "bias"),) + same,
    }
    for theirs, ours in (("state_emb", "state"), ("action_emb", "action"),
                         ("return_emb", "return")):
        mapping[f"{theirs}.weight"] = ((ours, "linear", "kernel"),) + transpose
        mapping[f"{theirs}.bias"] = ((ours, "linear", "bias"),) + same
    for i in range(num_layers):
        block = ("backbone", f"block_{i}")
        theirs = f"blocks.{i}."
        for norm in ("norm1", "norm2"):
            mapping[theirs + norm + ".weight"] = (block + (norm, "scale"),) + same
            mapping[theirs + norm + ".bias"] = (block + (norm, "bias"),) + same
        # in_proj: rows q (all heads), k, v; ours (D, 3, H, Dh).
        mapping[theirs + "attention.in_proj_weight"] = (
            block + ("attention", "qkv", "kernel"),
            lambda w: w.reshape(3, num_heads, -1, w.shape[1]).transpose(3, 0, 1, 2),
            lambda s: (int(np.prod(s[1:])), s[0]))
        mapping[theirs + "attention.in_proj_bias"] = (
            block + ("attention", "qkv", "bias"), lambda b: b.reshape(3, num_heads, -1),
            lambda s: (int(np.prod(s)),))
        mapping[theirs + "attention.out_proj.weight"] = (
            block + ("attention", "out", "kernel"),
            lambda w: w.T.reshape(num_heads, -1, w.shape[0]), lambda s: (s[2], s[0] * s[1]))
        mapping[theirs + "attention.out_proj.bias"] = (block + ("attention", "out", "bias"),) + same
        for layer, dense in (("0", "Dense_0"), ("2", "Dense_1")):
            mapping[theirs + f"mlp.{layer}.weight"] = (block + (dense, "kernel"),) + transpose
            mapping[theirs + f"mlp.{layer}.bias"] = (block + (dense, "bias"),) + same
    return mapping


def corl_dt_params(model, state_dict, example_inputs) -> dict:
    """Our DTModel parameters from CORL's state dict; a tensor of another shape raises a
    ValueError naming it and both shapes, and missing or unexpected tensors are named."""
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *example_inputs))["params"]
    mapping = _corl_dt_mapping(model.backbone.num_layers, model.backbone.num_heads)
    missing, extra = sorted(set(mapping) - set(state_dict)), sorted(set(state_dict) - set(mapping))
    if missing or extra:
        raise ValueError(f"CORL state dict does not fit: missing {missing}, unexpected {extra}")
    params = {}
    for name, (path, convert, their_shape) in mapping.items():
        leaf = shapes
        for key in path:
            leaf = leaf[key]
        value = np.asarray(state_dict[name], np.float32)
        need = their_shape(tuple(leaf.shape))
        if value.shape != need:
            raise ValueError(f"CORL parameter {name!r} has shape {value.shape}, but the model "
                             f"needs {need} (our {'/'.join(path)} of shape {tuple(leaf.shape)})")
        node = params
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = jnp.asarray(np.ascontiguousarray(value if convert is None
                                                          else convert(value)))
    assert jax.tree.structure(params) == jax.tree.structure(shapes)
    return params


def _corl_inputs(out):
    return (out["returns_to_go"], out["states"], out["actions"],
            out["time_steps"].astype(jnp.int32), out["mask"].astype(bool))


def _corl_predictions(embed_norm_epsilon: float = 1e-5):
    out = fixture_outputs(CORL_DT)
    model = corl_dt_model(embed_norm_epsilon)
    inputs = _corl_inputs(out)
    params = corl_dt_params(model, load_file(os.path.join(CORL_DT, "model.safetensors")), inputs)
    got = model.apply({"params": params}, *inputs)
    valid = np.asarray(out["mask"]).astype(bool)  # padded steps' outputs differ (see report)
    return np.asarray(got)[valid], np.asarray(out["predicted_actions"])[valid]


def test_corl_dt_action_predictions():
    got, want = _corl_predictions()
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_corl_dt_needs_pytorchs_layernorm_epsilon():
    """With flax's epsilon (1e-6, our default) the token norm differs from CORL's measurably:
    the option `model.embed_norm_epsilon` is what makes the outputs equal."""
    got, want = _corl_predictions(embed_norm_epsilon=1e-6)
    assert np.abs(got - want).max() > ATOL


def test_corl_dt_weights_of_another_shape_name_the_parameter():
    out = fixture_outputs(CORL_DT)
    model = corl_dt_model()
    weights = dict(load_file(os.path.join(CORL_DT, "model.safetensors")))
    weights["blocks.1.mlp.0.weight"] = np.zeros((64, 32), np.float32)
    with pytest.raises(ValueError, match=r"'blocks\.1\.mlp\.0\.weight' has shape \(64, 32\), "
                                         r"but the model needs \(128, 32\)"):
        corl_dt_params(model, weights, _corl_inputs(out))


def test_backbone_options_are_checked():
    x = jnp.zeros((1, 3, 8))
    for field, value, options in (("norm", "batchnorm", "layernorm"), ("mlp_type", "moe", "dense")):
        model = Transformer(num_layers=1, num_heads=2, **{field: value})
        with pytest.raises(ValueError, match=f"{field} must be one of .*{options}.*{value}"):
            model.init(jax.random.key(0), x)
