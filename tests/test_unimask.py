"""Uni[MASK]: masked inputs are invisible, attention is bidirectional, a tiny task is learnt,
policies act, backward sampling respects the dynamics, the grid resumes; clear errors."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.envs.doorkey import DoorKey, cell_of
from icrl_jax.experiments.unimask.doorkey import get_config
from icrl_jax.papers.unimask import appendix, grid, grid_training, report, rollouts
from icrl_jax.pipeline import run
from icrl_jax.pipeline.run import aggregate_runs
from icrl_jax.pipeline import train as trainer
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.sources import build_source
from icrl_jax.core.errors import UnknownNameError, UserError
from icrl_jax.papers.unimask.method import UniMask, sample_past
from icrl_jax.papers.unimask.masks import TASKS

K = 10


def small_config(workdir, **overrides):
    config = get_config("quick")
    config.workdir = str(workdir)
    config.model.d_model = 32
    config.model.num_heads = 2
    config.data.num_train_tasks = 64
    config.data.num_test_tasks = 16
    config.train.num_steps = 100
    config.train.batch_size = 32
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        config[section][key] = value
    return config


@pytest.fixture(scope="module")
def doorkey_data():
    env = DoorKey(episode_length=K, terminate_at_goal=False)
    source = build_source("noisy_rational", env, K, {})
    history = generate_histories(env, source, env.task_params(jnp.arange(96)), K,
                                 jax.random.key(0))
    return env, history


def test_hidden_tokens_do_not_change_predictions_and_attention_is_bidirectional(doorkey_data,
                                                                               tmp_path):
    env, history = doorkey_data
    config = small_config(tmp_path)
    method = UniMask(config.model, env, K)
    episodes = method.episodes(history, env)
    snippets = method.snippets(episodes)
    params = method.init(jax.random.key(0), jax.tree.map(lambda x: x[:2], snippets))
    mask = jax.tree.map(lambda m: jnp.broadcast_to(m, (snippets.actions.shape[0],) + m.shape),
                        TASKS["behaviour_cloning"].mask(4, K))
    out = method.apply(params, snippets, mask)
    # Scramble everything hidden (states after step 4, actions from step 4, the return-to-go).
    scrambled = snippets.replace(
        observations=snippets.observations.at[:, 5:].set(7),
        actions=snippets.actions.at[:, 4:].set(3),
        returns_to_go=snippets.returns_to_go + 5.0)
    for a, b in zip(out, method.apply(params, scrambled, mask)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # A visible later state changes an earlier token's output: not causal.
    shown = mask._replace(state_in=mask.state_in.at[:, 9].set(True))
    moved = method.apply(params, snippets.replace(observations=snippets.observations.at[:, 9].set(
        (snippets.observations[:, 9] + 17) % 256)), shown)
    base = method.apply(params, snippets, shown)
    assert float(jnp.abs(moved[1][:, 0] - base[1][:, 0]).max()) > 1e-4


def test_forward_dynamics_is_learnt_on_a_tiny_dataset(doorkey_data, tmp_path):
    env, history = doorkey_data
    config = small_config(tmp_path, **{"model.regime": "forward_dynamics",
                                       "train.num_steps": 300, "train.learning_rate": 3e-3})
    config.train.checkpoint_every = 300
    method = UniMask(config.model, env, K)
    data = method.training_data(history, config, env)
    validation = method.snippets(method.episodes(history, env))
    before = method.init(jax.random.key(1), data.example)
    state = trainer.train(method, data, config.train, str(tmp_path), method.signature(config, env),
                    seed=1, show_progress=False)
    losses_before = method.task_losses(before, validation)
    losses_after = method.task_losses(jax.tree.map(jnp.asarray, state.params), validation)
    forward = list(TASKS).index("forward_dynamics")
    # Deterministic dynamics: from ~log(16 * 16) = 5.5 nats to near zero.
    assert float(losses_before[forward]) > 4.0
    assert float(losses_after[forward]) < 0.5


def test_authors_inverse_dynamics_index_changes_only_that_column_and_the_signature(doorkey_data,
                                                                                  tmp_path):
    env, history = doorkey_data
    ours = small_config(tmp_path)
    theirs = small_config(tmp_path, **{"model.inverse_dynamics_index": "authors"})
    a, b = UniMask(ours.model, env, K), UniMask(theirs.model, env, K)
    snippets = a.snippets(a.episodes(history, env))
    params = a.init(jax.random.key(0), jax.tree.map(lambda x: x[:2], snippets))
    la, lb = np.asarray(a.task_losses(params, snippets)), np.asarray(b.task_losses(params, snippets))
    inverse = list(TASKS).index("inverse_dynamics")
    np.testing.assert_allclose(np.delete(la, inverse), np.delete(lb, inverse), rtol=1e-6)
    assert abs(la[inverse] - lb[inverse]) > 1e-4  # one index in k - 1 asks another question
    # A checkpoint of one is refused by the other; the default's signature is unchanged.
    assert UniMask.signature(theirs, env) == dict(UniMask.signature(ours, env),
                                                  inverse_dynamics_index="authors")
    assert "inverse_dynamics_index" not in UniMask.signature(ours, env)


def test_policies_act_in_the_env_and_rtg_needs_an_rtg_regime(doorkey_data, tmp_path):
    env, _ = doorkey_data
    config = small_config(tmp_path)
    config.eval.target_returns = (4.0,)
    method = UniMask(config.model, env, K)
    snippets = jax.tree.map(lambda x: x[:1], method.snippets(method.episodes(
        doorkey_data[1], env)))
    params = method.init(jax.random.key(0), snippets)
    policies = method.policies(params, env, config)
    assert set(policies) == {"model_bc", "model@4"}
    layout = env.layout_params(jnp.full(8, cell_of(1, 4)), jnp.full(8, cell_of(2, 2)))
    for policy in policies.values():
        history = generate_histories(env, policy, layout, 2 * K, jax.random.key(2))
        actions = np.asarray(history.actions)
        assert actions.shape == (8, 2 * K) and actions.min() >= 0 and actions.max() < 4
    config.model.regime = "behaviour_cloning"
    with pytest.raises(UserError, match="never shows the return-to-go"):
        method.policies(params, env, config)


def test_backward_sampling_rejects_inconsistent_draws(doorkey_data, tmp_path):
    env, history = doorkey_data
    method = UniMask(small_config(tmp_path).model, env, K)
    snippets = method.snippets(method.episodes(history, env))
    params = method.init(jax.random.key(3), snippets)  # untrained: many draws are inconsistent
    sampled, rejected = sample_past(method, params, snippets, 5, jax.random.key(4),
                                    env.next_observation)
    assert float(rejected) > 0.9  # near-uniform draws: rarely a consistent pair
    nxt = env.next_observation(sampled.observations[:, :5], sampled.actions[:, :5, 0])
    np.testing.assert_array_equal(nxt, sampled.observations[:, 1:6])  # all consistent
    np.testing.assert_array_equal(sampled.observations[:, 5:], snippets.observations[:, 5:])


def test_grid_end_to_end_resumes_and_checks_claims(tmp_path):
    config = small_config(tmp_path / "grid")
    config.grid.regimes = ("behaviour_cloning", "forward_dynamics", "random")
    config.grid.num_seeds = 2
    config.grid.eval_every = 50
    config.train.num_steps = 50  # one evaluation per group: the numbers need not be good
    config.train.steps_per_call = 50
    config.grid.finetune_steps = 50
    config.grid.finetune_eval_every = 50
    config.grid.finetune_from = "seed0"
    config.grid.finetune_seeds = 3  # more than the regimes' seeds: every one from seed 0
    config.grid.mlp_regimes = ("random",)
    config.grid.dt_regimes = ("behaviour_cloning",)
    config.grid.dt_overrides = {"train": {"num_steps": 50}}  # not the preset's 1000
    config = run.resolve_config(config)
    first = run.report(config)
    for name in ("heatmap.png", "heatmap_raw.png", "heatmap.json"):
        assert os.path.exists(os.path.join(config.workdir, name))
    assert first["rows"] == ["behaviour_cloning", "forward_dynamics", "random",
                             "random+finetune", "(MLP) random", "(DT) behaviour_cloning"]
    assert np.asarray(first["losses"]["random"]).shape == (2, 8)
    assert np.asarray(first["losses"]["random+finetune"]).shape == (3, 8)
    dt = first["mean"]["(DT) behaviour_cloning"]
    assert dt[0] > 0 and dt[1] > 0 and dt[2:] == [None] * 6  # BC and RC columns only
    assert first["backward_inference"]["consistent_after_rejection"] == 1.0
    assert os.path.exists(os.path.join(config.workdir, "rollouts.png"))
    np.testing.assert_allclose(first["normalised"]["random+finetune"], 1.0)
    assert set(first["claims"]) == {"random_within_15pct_of_best_single_task",
                                    "bc_several_times_worse_than_random_on_dynamics_and_inference",
                                    "finetune_at_least_as_good_as_single_task"}
    again = run.report(config)  # everything is saved: no training, the same numbers
    assert again["losses"] == first["losses"]
    with open(os.path.join(config.workdir, "heatmap.json")) as f:
        assert json.load(f)["losses"] == first["losses"]


def test_clear_errors(doorkey_data, tmp_path):
    env, history = doorkey_data
    config = small_config(tmp_path)
    tuned = small_config(tmp_path / "grid")
    tuned.grid.num_seeds, tuned.grid.finetune_seeds = 2, 3  # "own": each seed tunes its own
    with pytest.raises(UserError, match="grid.finetune_seeds=3 with grid.finetune_from='own'"):
        grid.run_grid(tuned, history, env)
    assert not os.path.exists(tuned.workdir + "/grid")  # refused before any training
    with pytest.raises(UnknownNameError, match="masking scheme"):
        UniMask(ml_collections.ConfigDict(dict(config.model.to_dict(), regime="bc")), env, K)
    with pytest.raises(UserError, match="too few for one snippet"):
        UniMask(config.model, env, 12).training_data(history, config, env)
    with pytest.raises(UserError, match="seq_len=1: snippets of at least 2 steps"):
        UniMask(config.model, env, 1)  # before any training: no evaluation task fits
    with pytest.raises(UserError, match="not a mix"):
        UniMask(config.model, envs.make("darkroom", pixels=True), K)


def test_maze_returns_table_end_to_end(tmp_path):
    from icrl_jax.experiments.unimask.maze2d import get_config as maze_config
    config = maze_config("quick")
    config.workdir = str(tmp_path / "maze")
    config.data.num_train_tasks = 30
    config.data.num_steps = 300
    config.data.num_test_tasks = 4
    config.train.num_steps = 50
    config.model.d_model = 32
    config.grid.num_seeds = 2
    config.grid.eval_every = 50
    config.grid.validation_episodes = 5  # early stopping evaluates every snippet of these
    config = run.resolve_config(config)
    out = run.report(config)
    assert set(out["table"]) == {label for label, _, _ in rollouts.RETURN_ROWS}
    for row in out["table"].values():
        assert 0.0 <= row["success"][0] <= 1.0 and row["steps_to_goal"][0] <= 300
    assert len(out["per_seed"]["random-mask, RC"]) == 2
    assert os.path.exists(os.path.join(config.workdir, "returns.png"))


def test_point_maze_goal_observation_is_the_goal_at_rest():
    env = envs.make("point_maze", task="random_goal")
    obs = jnp.array([0.1, 0.2, 0.3, -0.4, 1.5, -0.5])
    np.testing.assert_allclose(env.goal_observation(obs), [1.5, -0.5, 0, 0, 1.5, -0.5])


#: Table 2 of the appendix: batch, embedding, layer width, layers, heads, state loss weight.
TABLE_2 = {
    "behaviour_cloning": (250, 32, 128, 2, 4, 0.1), "reward_conditioned": (50, 32, 128, 3, 4, 1.0),
    "goal_conditioned": (250, 128, 128, 3, 8, 1.0), "waypoint_conditioned": (250, 128, 128, 3, 8, 1.0),
    "past_inference": (250, 32, 128, 4, 4, 0.5), "future_inference": (250, 128, 32, 2, 4, 0.5),
    "forward_dynamics": (250, 128, 128, 3, 8, 1.0), "inverse_dynamics": (50, 128, 128, 3, 8, 0.5),
    "all": (250, 32, 128, 3, 4, 1.0), "random": (100, 128, 128, 2, 8, 1.0),
}


#: The authors' budgets (their scripts/minigrid_repro.sh) at 500 trajectories: epochs per regime.
EPOCHS_500 = {"random": 10000, "all": 10000, "future_inference": 2000, "past_inference": 2000,
              "behaviour_cloning": 1500, "reward_conditioned": 1500, "forward_dynamics": 1500,
              "inverse_dynamics": 1500, "goal_conditioned": 3000, "waypoint_conditioned": 3000}


def test_paper_scale_default_is_the_papers_setting():
    config = get_config()
    assert config.data.num_train_tasks == 500 and config.grid.num_seeds == 6
    assert config.train.learning_rate == 1e-4 and config.grid.finetune
    assert (config.train.weight_decay, config.train.grad_clip) == (1e-4, 0.5)  # their AdamW
    assert all(config.model[d] == 0.1 for d in ("embedding_dropout", "residual_dropout",
                                                "attention_dropout"))
    assert config.env.kwargs.expert_walls == "authors" and config.model.all_per == "batch"
    assert (config.model.positions, config.model.mask_flags, config.model.rtg_encoding,
            config.model.input_embedding, config.model.pre_norm, config.model.activation) == (
        "sinusoidal", False, "onehot", "relu_scaled", False, "relu")
    assert config.data.num_test_tasks == 1000 and config.grid.validation_first_task == 1000
    trained = {}
    for _, cfg, regimes in grid_training.group_configs(config):
        for regime in regimes:
            batch, embed, width, layers, heads, state_weight = TABLE_2[regime]
            assert (cfg.train.batch_size, cfg.model.d_model, cfg.model.num_layers,
                    cfg.model.num_heads) == (batch, embed, layers, heads), regime
            assert cfg.model.mlp_hidden == width, regime  # future inference: 32 under 128
            assert config.grid.overrides[regime]["model"]["state_weight"] == state_weight
            # Their epoch: 500 // batch batches; validation every 10 epochs.
            assert cfg.train.num_steps == EPOCHS_500[regime] * (500 // batch), regime
            assert cfg.grid.eval_every == 10 * (500 // batch), regime
            trained[regime] = cfg
    assert set(trained) == set(TABLE_2)
    assert trained["random"].train.num_steps == 50_000
    # Early stopping of ALL / random: the six non-dynamics tasks.
    assert grid_training.watched_tasks("random", config.grid.stop_on) == [True] * 6 + [False] * 2
    # Fine-tuning: from random-mask seed 0, their per-task epochs, rates and batch sizes.
    assert config.grid.finetune_from == "seed0"
    budget = {t: (cfg.train.num_steps, b[t]["learning_rate"], cfg.train.batch_size)
              for _, cfg, tasks, b in grid_training.finetune_groups(config) for t in tasks}
    assert budget["behaviour_cloning"] == (10000 * 2, 5e-6, 250)
    assert budget["reward_conditioned"] == (500 * 10, 5e-6, 50)
    assert budget["inverse_dynamics"] == (1500 * 10, 1e-5, 50)
    assert budget["past_inference"] == (500 * 2, 5e-6, 250)
    # Cheapest group first (steps x batch x tasks); behaviour cloning + forward dynamics last.
    groups = grid_training.finetune_groups(config)
    costs = [cfg.train.num_steps * cfg.train.batch_size * len(tasks) for _, cfg, tasks, _ in groups]
    assert costs == sorted(costs) and set(groups[-1][2]) == {"behaviour_cloning", "forward_dynamics"}
    assert groups[0][2] == ["reward_conditioned"]
    # The budgets follow the data size: at 50 trajectories an epoch is one batch.
    small = get_config("paper_n50")
    steps = {r: cfg.train.num_steps for _, cfg, rs in grid_training.group_configs(small) for r in rs}
    assert steps["random"] == 100_000 and steps["behaviour_cloning"] == 15_000
    mlp = grid_training.mlp_config(config)  # Table 2's MLPs: 3 hidden layers of 128
    assert (mlp.model.backbone, mlp.model.mlp_layers, mlp.model.mlp_width,
            mlp.model.state_weight) == ("mlp", 3, 128, 0.5)
    assert mlp.train.num_steps == 10000 * (500 // mlp.train.batch_size)
    dt = config.grid.dt_overrides  # Table 2's DT: batch 250, embedding 32, width 128, 3 x 8
    assert (dt.train.batch_size, dt.model.d_model, dt.model.d_model * dt.model.mlp_ratio,
            dt.model.num_layers, dt.model.num_heads) == (250, 32, 128, 3, 8)


def test_appendix_comparison_and_best_normalised_heatmap():
    paper = appendix.APPENDIX_RAW[500]
    mean = {r: [v * 1.1 for v in vals] for r, vals in paper.items()}  # ours 10% above
    mean["random"] = [v * 1.3 for v in paper["random"]]
    sem = {r: [0.01] * 8 for r in mean}
    text = appendix.appendix_comparison(mean, sem, 500, 3)
    # 11 rows x 8 columns, less the 4 x 4 untrained-head cells; random's 8 are off by 30%.
    assert "Cells within 15% of the appendix: 64 of 72 compared" in text
    bc = next(line for line in text.splitlines() if line.startswith("| behaviour_cloning"))
    assert bc.split(" | ")[5] == "7.25 / 7.98 ± 0.01 / 1.10 *u*"  # past inference, marked
    best = report.best_normalised({"a": [1.0, 4.0], "b": [2.0, 2.0]})
    assert best == {"a": [1.0, 2.0], "b": [2.0, 1.0]}
    with pytest.raises(UserError, match="50, 500 and 1000"):
        appendix.appendix_comparison(mean, sem, 200, 3)


def test_data_size_report_from_three_grids(tmp_path):
    rng = np.random.default_rng(0)
    rows = list(TASKS) + ["random", appendix.FINETUNED]
    made = {}
    for size in (1000, 50, 500):
        config = get_config("quick")
        config.data.num_train_tasks = size
        losses = {r: rng.uniform(0.5, 2.0, (3, 8)) / np.log10(size) for r in rows}
        result = report.summarise(losses, config, 1.0)
        workdir = tmp_path / f"n{size}"
        workdir.mkdir()
        report.write_heatmaps(result, str(workdir))
        (workdir / "config.json").write_text(json.dumps({"report": {"kind": "grid"}}))
        made[size] = losses
    out = tmp_path / "sizes"
    written = aggregate_runs([str(tmp_path / f"n{s}") for s in (500, 50, 1000)], str(out))
    assert set(written) == {"json", "figure", "table"}
    assert all(os.path.exists(p) for p in written.values())
    with open(written["json"]) as f:
        table = json.load(f)
    assert table["sizes"] == [50, 500, 1000] and table["seeds"] == [3, 3, 3]
    for j, task in enumerate(TASKS):
        own = table["rows"]["single-task (own task)"][task]
        np.testing.assert_allclose(own["mean"], [made[s][task][:, j].mean() for s in (50, 500, 1000)])
        np.testing.assert_allclose(own["sem"], [made[s][task][:, j].std(ddof=1) / np.sqrt(3)
                                                for s in (50, 500, 1000)])
        random = table["rows"]["random mask"][task]["mean"]
        np.testing.assert_allclose(random, [made[s]["random"][:, j].mean() for s in (50, 500, 1000)])
        assert table["rows"]["(MLP) random"][task]["mean"] == [None] * 3  # not in these grids
    assert set(table["claims"]) == {"50", "500", "1000"}
    with pytest.raises(UserError, match="repeat a data size"):
        report.data_size_report([str(tmp_path / "n50"), str(tmp_path / "n50")], str(out))
    with pytest.raises(UserError, match="no heatmap.json"):
        report.data_size_report([str(tmp_path / "n50"), str(tmp_path)], str(out))


def test_expert_wall_rules_by_hand():
    from icrl_jax.data.sources.noisy_rational import noisy_rational_probs

    def progress(rule, agent, key, door_open=False):
        env = DoorKey(expert_walls=rule)
        params = env.layout_params(cell_of(*agent), cell_of(*key))
        _, state = env.reset_env(jax.random.key(0), params)
        return np.asarray(env.subgoal_progress(state.replace(door_open=jnp.bool_(door_open)),
                                               params))

    # Corner (1, 1), key at (2, 2) (actions right, down, left, up): the authors' agent scores
    # left (to x = 0) and up (to y = 0) as moving away; the paper's text scores them 0.
    np.testing.assert_array_equal(progress("authors", (1, 1), (2, 2)), [1, 1, -1, -1])
    np.testing.assert_array_equal(progress("blocked_zero", (1, 1), (2, 2)), [1, 1, 0, 0])
    # Entropies at beta = 1: 2 (e ln(...) ...) by hand, 1.0585 and 1.2754 nats.
    for rule, nats in (("authors", 1.0585), ("blocked_zero", 1.2754)):
        p = np.asarray(noisy_rational_probs(jnp.asarray(progress(rule, (1, 1), (2, 2)))))
        assert abs(-(p * np.log(p)).sum() - nats) < 1e-3
    # Beside the locked door, heading for the key at (1, 2): the authors' agent walks "through"
    # the door (away from the key), and up to y = 0 (away).
    np.testing.assert_array_equal(progress("authors", (2, 1), (1, 2)), [-1, 1, 1, -1])
    np.testing.assert_array_equal(progress("blocked_zero", (2, 1), (1, 2)), [0, 1, 1, 0])
    # The right and bottom outer walls clip back to 4 and the internal wall stops: 0 in both.
    for rule in ("authors", "blocked_zero"):
        np.testing.assert_array_equal(progress(rule, (4, 4), (4, 4), door_open=True), [0, 0, 0, -1])
    with pytest.raises(UserError, match="env.kwargs.expert_walls"):
        DoorKey(expert_walls="clipped")


def test_the_authors_architecture_options(doorkey_data, tmp_path):
    env, history = doorkey_data
    ours = small_config(tmp_path)
    theirs = small_config(tmp_path, **{"model.positions": "sinusoidal", "model.mask_flags": False,
                                       "model.rtg_encoding": "onehot",
                                       "model.input_embedding": "relu_scaled",
                                       "model.pre_norm": False, "model.activation": "relu"})
    snippets = jax.tree.map(lambda x: x[:4], UniMask(ours.model, env, K).snippets(
        UniMask(ours.model, env, K).episodes(history, env)))
    shapes = {}
    for name, config in (("ours", ours), ("theirs", theirs)):
        method = UniMask(config.model, env, K)
        assert method.model.backbone.activation == ("relu" if name == "theirs" else "gelu_tanh")
        params = jax.jit(method.init)(jax.random.key(0), snippets)  # jitted: one compile
        shapes[name] = params["embed"]["kernel"].shape[0]
        has_learned = "position_embedding" in str(jax.tree_util.tree_structure(params))
        assert has_learned == (name == "ours")
        mask = jax.tree.map(lambda m: jnp.broadcast_to(m, (4,) + m.shape),
                            TASKS["reward_conditioned"].mask(3, K))
        state_out, action_out = jax.jit(method.apply)(params, snippets, mask)
        assert state_out.shape == (4, K, 32) and np.isfinite(np.asarray(action_out)).all()
    # Token width: agent + key one-hots (32) + action (4) + return-to-go (ours: the (R, t0)
    # pair and three visibility flags; theirs: 17 classes, no flags).
    assert shapes == {"ours": 32 + 4 + 2 + 3, "theirs": 32 + 4 + 17}
    _, _, rtg = UniMask(theirs.model, env, K).inputs(snippets)
    np.testing.assert_array_equal(np.argmax(rtg, -1), np.asarray(snippets.returns_to_go[:, 0]) + 6)
    from icrl_jax.papers.unimask.method import sinusoidal_positions
    table = np.asarray(sinusoidal_positions(4, 6))
    np.testing.assert_allclose(table[1, :2], [np.sin(1.0), np.cos(1.0)], rtol=1e-6)
    np.testing.assert_allclose(table[2, 2:4], [np.sin(2 * 10000 ** (-2 / 6)),
                                               np.cos(2 * 10000 ** (-2 / 6))], rtol=1e-5)

