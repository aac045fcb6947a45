"""`model.layout="reference"`: Headless-AD on the authors' bandit model, through our method API
(the fixtures of tests/fixtures/make_headless_ad_fixtures.py), its init, training and refusals."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from safetensors.numpy import load_file

from icrl_jax import envs
from icrl_jax.core.errors import UserError
from icrl_jax.data.windows import StepWindows
from icrl_jax.models.heads import mask_logits
from icrl_jax.methods.fields import ad_model_config
from icrl_jax.papers.headless_ad import reference_layout as RL
from icrl_jax.papers.headless_ad.method import HeadlessAD, default_headless_config
from icrl_jax.papers.headless_ad.reference_method import ReferenceHeadlessAD

from helpers import fixture_config, fixture_outputs

ATOL = 1e-4
HEADLESS = os.path.join(os.path.dirname(__file__), "fixtures", "headless_ad_tiny")


def model_config(**overrides):
    config = ad_model_config()
    for key, value in dict(default_headless_config(), layout="reference").items():
        config[key] = value
    config.update(overrides)
    return config


def bandit(arms=(2, 4)):
    return envs.make("bernoulli_bandit", arms=arms)


def build(config, env=None):
    return HeadlessAD.from_config(ml_collections.ConfigDict({"model": config}), env or bandit(),
                                  config)


def fixture_method():
    cfg = fixture_config(HEADLESS)
    config = model_config(d_model=cfg["n_embd"], num_layers=cfg["n_layer"],
                          num_heads=cfg["n_head"], mlp_hidden=cfg["intermediate_size"],
                          action_embed_dim=cfg["token_embed_dim"], tau=cfg["tau"])
    return build(config, bandit((2, cfg["num_actions"])))


def fixture_window(out, length):
    """Our window of `length` steps whose previous actions / rewards are their inputs."""
    actions = np.asarray(out["actions"], np.int32)
    rewards = np.asarray(out["rewards"], np.float32)
    batch, num_actions = actions.shape[0], out["action_map"].shape[0]
    first = np.full((batch, 1), num_actions, np.int32)  # no previous action
    prev_actions = np.concatenate([first, actions], 1)[:, :length]
    prev_rewards = np.concatenate([np.zeros((batch, 1), np.float32), rewards], 1)[:, :length]
    mask = np.arange(num_actions)[None] < np.asarray(out["num_actions_per_env"])[:, None]
    return StepWindows(observations=np.zeros((batch, length), np.int32),
                       prev_actions=jnp.asarray(prev_actions),
                       prev_rewards=jnp.asarray(prev_rewards),
                       actions=jnp.asarray(actions[:, :length]), action_mask=jnp.asarray(mask))


def fixture_params(method, out):
    weights = load_file(os.path.join(HEADLESS, "headless.safetensors"))
    return RL.params_from_reference(method.reference, weights,
                                    (out["action_embeddings"], out["rewards"], out["prompt"]))


def test_reference_layout_builds_the_reference_method():
    method = fixture_method()
    assert isinstance(method, ReferenceHeadlessAD) and not method.has_cache_decoder
    assert not isinstance(build(model_config(layout="ours")), ReferenceHeadlessAD)


def test_reference_backbone_takes_the_settings_of_how_it_computes():
    """The attention implementation, its block and remat reach the authors' backbone (they were
    not read, so `--config.model.remat=True` changed nothing at this layout)."""
    settings = dict(attention_impl="blockwise", attention_block_size=64,
                    attention_blockwise_from=128, remat=True)
    backbone = build(model_config(layout="reference", **settings)).reference.backbone
    assert {field: getattr(backbone, field) for field in settings} == settings


def test_reference_method_predicts_loss_and_policy_as_the_authors():
    """Their outputs at the reward tokens, their InfoNCE loss (on `pred[:, :-1]`) and their
    policy, from our windows through the method's own predict / loss / context_logits."""
    out = fixture_outputs(HEADLESS)
    method = fixture_method()
    params = fixture_params(method, out)
    steps = out["actions"].shape[1]
    window = fixture_window(out, steps)  # steps pairs' inputs: outputs 0..steps-1
    action_map = out["action_map"]
    pred = method.predict(params, window, action_map)
    np.testing.assert_allclose(pred, out["headless_pred"][:, :steps], atol=ATOL)
    method.action_embeddings = lambda key, num_actions: action_map  # their map, not a draw
    loss, metrics = method.loss(params, window, jax.random.PRNGKey(0), deterministic=True)
    np.testing.assert_allclose(loss, out["headless_loss"][0], atol=ATOL)
    logits = method.context_logits({"model": params, "action_embeddings": action_map}, window,
                                   jax.random.PRNGKey(0))
    probs = jax.nn.softmax(mask_logits(logits, window.action_mask[:, None, :]), -1)
    np.testing.assert_allclose(probs, out["headless_probs"][:, :steps], atol=ATOL)
    # a later step sees nothing of the steps after it (the filled part of an evaluation context)
    shorter = fixture_window(out, 3)
    np.testing.assert_allclose(method.predict(params, shorter, action_map), pred[:, :3],
                               atol=ATOL)


def test_reference_init_draws_their_scales():
    """Their `_init_weights`: N(0, 2 / (5 fan_in)) weights, zero biases, unit norm scales, the
    SwiGLU output at 1 / (sqrt(hidden) n_layer)."""
    d, layers, e = 128, 2, 64
    method = build(model_config(d_model=d, num_layers=layers, num_heads=4, action_embed_dim=e))
    window = fixture_window(fixture_outputs(HEADLESS), 6)
    window = window.replace(action_mask=jnp.ones((3, 4), bool))
    params = method.init(jax.random.PRNGKey(0), window)
    block = params["backbone"]["block_0"]
    checks = {"proj": (params["proj"]["kernel"], np.sqrt(2 / (5 * e))),
              "out_proj": (params["out_proj"]["kernel"], np.sqrt(2 / (5 * d))),
              "qkv": (block["attention"]["qkv"]["kernel"], np.sqrt(2 / (5 * d))),
              "attention out": (block["attention"]["out"]["kernel"], np.sqrt(2 / (5 * d))),
              "gate": (block["mlp"]["gate"]["kernel"], np.sqrt(2 / (5 * d))),
              "down": (block["mlp"]["down"]["kernel"], 1 / np.sqrt(4 * d) / layers),
              "reward table": (params["reward_emb"]["embedding"], np.sqrt(2 / (5 * e)))}
    for name, (value, std) in checks.items():
        assert abs(float(jnp.std(value)) / std - 1) < 0.25, name
    for bias in (params["proj"]["bias"], block["attention"]["qkv"]["bias"]):
        assert not np.any(np.asarray(bias))
    np.testing.assert_array_equal(block["norm1"]["scale"], 1.0)


@pytest.mark.parametrize("layout", ["ours", "reference"])
def test_both_layouts_train_and_evaluate_through_the_train_command(tmp_path, layout):
    """`icrl-jax train` of the matched preset at toy size: the loss falls and the evaluation
    (the reference layout recomputes the window) scores every held-out bandit."""
    from icrl_jax.pipeline import run as run_pipeline
    from icrl_jax.core.config import set_dotted
    from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config

    config = get_config("matched" if layout == "ours" else "matched_reference")
    for key, value in {"workdir": str(tmp_path / layout), "run.progress": False,
                       "data.num_train_tasks": 64, "data.num_test_tasks": 4, "data.num_steps": 12,
                       "eval.num_steps": 12, "train.seq_len": 12, "train.num_steps": 60,
                       "train.steps_per_call": 20, "train.log_every": 20,
                       "train.checkpoint_every": 60, "train.warmup_steps": 6,
                       "train.learning_rate": 3e-3, "model.d_model": 32,
                       "eval.baselines": ("random",)}.items():
        set_dotted(config, key, value)
    config = run_pipeline.resolve_config(config)
    results = run_pipeline.train(config)
    losses = [row["loss"] for row in _metrics(config.workdir) if row.get("phase") == "train"]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert results["num_envs"] == 4 and np.isfinite(results["model_final_regret"])


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("overrides,env_name,needle", [
    ({}, "contextual_bandit", "needs env bernoulli_bandit"),
    ({}, "darkroom", "needs env bernoulli_bandit"),
    ({"attention_window": 8}, "bernoulli_bandit", "model.attention_window=0"),
    ({"ngram_positions": (0,)}, "bernoulli_bandit", "model.ngram_positions=()"),
    ({"reward_gated_actions": True}, "bernoulli_bandit", "model.reward_gated_actions=False"),
    ({"prompt_order": "causal"}, "bernoulli_bandit", "model.prompt_order='set'"),
    ({"loss": "mse"}, "bernoulli_bandit", "model.loss='mse'"),
    ({"embeddings": "normal"}, "bernoulli_bandit", "model.embeddings='normal'"),
])
def test_what_the_reference_layout_cannot_compute_is_refused_in_one_line(overrides, env_name,
                                                                         needle):
    env = bandit() if env_name == "bernoulli_bandit" else envs.make(env_name)
    with pytest.raises(UserError) as error:
        build(model_config(**overrides), env)
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_an_unknown_layout_is_refused_by_validation_naming_the_nearest():
    from icrl_jax.core.validation import validate
    with pytest.raises(UserError, match=r"^config model.layout='referense' must be one of ours, "
                                        r"reference; e.g. --config.model.layout=reference$"):
        validate(ml_collections.ConfigDict({"model": model_config(layout="referense")}))
