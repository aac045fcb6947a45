"""Random search: vmapped replicas = one-by-one training, sampling, resume, and EMP."""

import json

import jax
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.core import metrics
from icrl_jax.papers.ngram.search_space import table2_space
from icrl_jax.tools import sweep
from icrl_jax.methods.fields import ad_config
from icrl_jax.data.windows import sample_windows, to_step_windows
from icrl_jax.data.train_data import on_device
from icrl_jax.core.errors import UserError
from icrl_jax.data.history import History, HistoryFormatError


def tiny_config(tmp_path=None, ngram=False):
    config = ad_config()
    config.experiment = "sweep_test"
    config.env.name = "darkroom"
    config.data.source = "q_learning"
    config.data.num_train_tasks = 4
    config.data.num_test_tasks = 2
    config.data.num_steps = 100
    config.model.update(dict(d_model=16, num_layers=2, num_heads=2, max_len=16))
    if ngram:
        config.model.ngram_positions = (1,)
        config.model.ngram_max = 2
    config.train.update(dict(num_steps=6, batch_size=4, seq_len=12, steps_per_call=3,
                             warmup_steps=2))
    config.eval.update(dict(num_steps=100, num_envs_per_task=1))
    config.workdir = str(tmp_path) if tmp_path else ""
    sweep.add_sweep_fields(config, {
        "train.learning_rate": dict(log_uniform=(1e-4, 1e-2)),
        "train.weight_decay": dict(log_uniform=(1e-7, 2e-2)),
        "model.embedding_dropout": dict(uniform=(0.0, 0.9)),
        "model.residual_dropout": dict(uniform=(0.0, 0.5)),
        "model.label_smoothing": dict(uniform=(0.0, 0.8)),
    }, num_assignments=3, max_replicas=3)
    return config


def random_data(n=6, t=40, seed=0):
    rng = np.random.default_rng(seed)
    history = History(observations=rng.integers(0, 81, (n, t)).astype(np.int32),
                      actions=rng.integers(0, 5, (n, t)).astype(np.int32),
                      rewards=rng.integers(0, 2, (n, t)).astype(np.float32),
                      dones=np.zeros((n, t), bool), task_ids=np.arange(n, dtype=np.int32),
                      action_mask=np.ones((n, 5), bool))
    return on_device(to_step_windows(history), sample_windows, 12)


def test_vmapped_replicas_equal_one_by_one(tmp_path):
    config = tiny_config(ngram=True)  # n-gram layers and their dropout included
    config.model.num_layers = 1
    space = sweep.flatten_space(config.sweep.space)
    assignments = [sweep.sample_assignment(space, 0, i) for i in range(3)]
    env, data, seeds = envs.make("darkroom"), random_data(), [11, 12, 13]
    together, metrics_v = sweep.train_assignments(config, env, data, assignments, seeds,
                                              str(tmp_path / "v"), vmapped=True)
    alone, metrics_1 = sweep.train_assignments(config, env, data, assignments, seeds,
                                           str(tmp_path / "1"), vmapped=False)
    for path, a in jax.tree_util.tree_leaves_with_path(together):
        b = alone
        for entry in path:
            b = b[entry.key]
        name = jax.tree_util.keystr(path)
        assert a.shape[0] == 3, name
        if name.endswith("['qkv']['bias']"):
            # The key bias has an exactly zero gradient (softmax is shift-invariant): Adam's
            # g / sqrt(v) turns float-reassociation noise into lr-sized steps there. Skip it.
            a, b = a[:, [0, 2]], b[:, [0, 2]]
        # Batched and unbatched matmuls sum in different orders; Adam amplifies that noise only
        # on coordinates whose gradient is ~0 (e.g. embedding rows a batch barely touched).
        assert np.linalg.norm(a - b) <= 1e-3 * np.linalg.norm(b) + 1e-6, name
        assert np.isclose(a, b, rtol=1e-4, atol=1e-6).mean() > 0.99, name
    for name in ("loss", "accuracy"):
        np.testing.assert_allclose(metrics_v[name], metrics_1[name], rtol=1e-4, atol=1e-6)
    # Different assignments really train differently.
    first = jax.tree.leaves(together)[0]
    assert not np.allclose(first[0], first[1])


def test_sampling_is_per_index_and_in_range():
    space = sweep.flatten_space(table2_space(ngram=True))
    a = [sweep.sample_assignment(space, 0, i) for i in range(200)]
    assert sweep.sample_assignment(space, 0, 7) == a[7]
    lr = np.array([x["train.learning_rate"] for x in a])
    assert 1e-4 <= lr.min() and lr.max() <= 1e-2 and np.median(lr) < 3e-3  # log-uniform
    assert {tuple(x["model.ngram_positions"]) for x in a} == {(1,), (2,), (1, 2)}
    assert len({sweep.group_key(x) for x in a}) > 1
    assert sweep.group_key(dict(a[0], **{"train.learning_rate": 0.5})) == sweep.group_key(a[0])
    with pytest.raises(ValueError, match="exactly one"):
        sweep.flatten_space({"train": {"learning_rate": {"uniform": (0, 1), "choice": [1]}}})


def test_emp_hand_computed():
    # Scores 1, 2, 3 (N = 3). n = 1: mean. n = 2: P(max=v_i) = (i^2 - (i-1)^2) / 9 = 1/9, 3/9, 5/9.
    mean, std = metrics.expected_max_performance([3.0, 1.0, 2.0])
    np.testing.assert_allclose(mean, [2.0, (1 + 6 + 15) / 9, (1 + 2 * 7 + 3 * 19) / 27])
    e2 = 22 / 9
    var2 = (1 * (1 - e2) ** 2 + 3 * (2 - e2) ** 2 + 5 * (3 - e2) ** 2) / 9
    np.testing.assert_allclose(std, [np.sqrt(2 / 3), np.sqrt(var2), std[2]])
    assert std[2] < std[1]
    assert metrics.assignments_to_reach([1.0, 2.0, 3.0], 2.4) == 2
    assert metrics.assignments_to_reach([1.0, 2.0, 3.0], 3.0) is None
    mean, _ = metrics.expected_max_performance([5.0, 5.0])
    np.testing.assert_allclose(mean, [5.0, 5.0])


def test_sweep_writes_results_and_resumes(tmp_path):
    config = tiny_config(tmp_path / "sweep", ngram=True)
    config.model.num_layers = 1
    config.eval.num_steps = 50
    config.sweep.num_assignments = 2
    config.sweep.max_replicas = 2
    results = sweep.run_sweep(config)
    assert sorted(r["index"] for r in results) == [0, 1]
    lines = (tmp_path / "sweep" / "results.jsonl").read_text().splitlines()
    first = [json.loads(x) for x in lines]
    assert {r["replicas"] for r in first} == {2}
    assert all(np.isfinite(r["model_last_episode_return"]) for r in first)
    config.sweep.num_assignments = 4  # a rerun trains only the missing assignments
    sweep.run_sweep(config)
    lines = (tmp_path / "sweep" / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["index"] for x in lines] == [0, 1, 2, 3]
    assert [json.loads(x) for x in lines[:2]] == first
    emp = json.loads((tmp_path / "sweep" / "emp.json").read_text())
    assert len(emp["emp_mean"]) == 4 and (tmp_path / "sweep" / "emp.png").exists()
    config.sweep.seed = 1  # another space/seed must not mix into this file
    with pytest.raises(ValueError, match="new workdir"):
        sweep.run_sweep(config)
    config.sweep.seed = 0
    config.train.num_steps = 3  # nor results of another training budget
    with pytest.raises(ValueError, match="train.num_steps: 6 \\(saved\\) vs 3"):
        sweep.run_sweep(config)
    summary = sweep.compare_sweeps([str(tmp_path / "sweep")] * 2, str(tmp_path / "cmp"), ["a", "b"])
    assert set(summary["methods"]) == {"a", "b"}
    emp, source = sweep.emp_of(str(tmp_path / "sweep")), summary["source_last_episode_return"]
    for f, n in summary["methods"]["a"]["assignments_to_fraction_of_source"].items():
        assert n == metrics.assignments_to_reach(emp["scores"], float(f) * source)
    # Dark Room's best return from the centre: walk the Manhattan distance, then stay (50 steps).
    _, test_ids = sweep.task_split(envs.make("darkroom"), config)
    goals = [t + (t >= 40) for t in test_ids]  # task t is cell t, skipping the centre (40)
    optimal = np.mean([51 - (abs(g // 9 - 4) + abs(g % 9 - 4)) for g in goals])
    assert summary["optimal_last_episode_return"] == pytest.approx(optimal)
    fractions = summary["methods"]["a"]["assignments_to_fraction_of_optimal"]
    assert fractions["0.8"] == metrics.assignments_to_reach(emp["scores"], 0.8 * optimal)
    assert (tmp_path / "cmp" / "emp_compare.png").exists()
    # A repeated search (another seed) pools with it into one curve; another budget does not.
    other = tmp_path / "sweep_seed1"
    other.mkdir()
    saved = json.loads((tmp_path / "sweep" / "sweep_config.json").read_text())
    (other / "sweep_config.json").write_text(json.dumps(dict(saved, seed=1)))
    (other / "results.jsonl").write_text("\n".join(
        json.dumps(dict(json.loads(x), source_last_episode_return=source + 1.0)) for x in lines))
    pooled = sweep.emp_of(f"{tmp_path / 'sweep'},{other}")
    assert pooled["scores"] == emp["scores"] * 2
    np.testing.assert_allclose(pooled["emp_mean"], metrics.expected_max_performance(emp["scores"] * 2)[0])
    assert pooled["source_last_episode_return"] == pytest.approx(source + 0.5)
    summary = sweep.compare_sweeps([f"{tmp_path / 'sweep'},{other}"], str(tmp_path / "cmp2"))
    assert list(summary["methods"]) == ["sweep (2 searches pooled)"]
    (other / "sweep_config.json").write_text(json.dumps(dict(saved, seed=1, **{
        "train.num_steps": 3})))
    with pytest.raises(UserError, match="differ in train.num_steps"):
        sweep.emp_of(f"{tmp_path / 'sweep'},{other}")


def test_subsample_is_searched_as_its_own_groups(tmp_path):
    space = sweep.flatten_space(table2_space(ngram=False))
    assert space["data.subsample"] == dict(choice=[4, 8, 10, 20, 50])  # Table 2(a)
    a = sweep.sample_assignment(space, 0, 0)
    assert sweep.group_key(a) != sweep.group_key(dict(a, **{"data.subsample": a["data.subsample"] + 1}))
    # What a group trains on: every k-th episode of each history (50-step Dark Room episodes).
    env = envs.make("darkroom")
    history = History(observations=np.tile(np.arange(200, dtype=np.int32) % 81, (3, 1)),
                      actions=np.zeros((3, 200), np.int32), rewards=np.zeros((3, 200), np.float32),
                      dones=np.tile(np.arange(200) % 50 == 49, (3, 1)),
                      task_ids=np.arange(3, dtype=np.int32), action_mask=np.ones((3, 5), bool))
    base = tiny_config()
    cache = {}
    for k, kept_steps in ((1, np.arange(200)), (2, np.r_[0:50, 100:150]), (3, np.r_[0:50, 150:200])):
        group = sweep.assignment_config(base, {"data.subsample": k})
        data = sweep.group_data(history, env, group, cache)
        np.testing.assert_array_equal(data.arrays.observations,
                                      history.observations[:, kept_steps])
    again = sweep.group_data(history, env, sweep.assignment_config(base, {"data.subsample": 2}), cache)
    assert again is cache[(2, int(base.train.seq_len))]  # built once per value
    # A sweep checks every group's data before training: k = 4 leaves one 50-step episode of
    # 4, too short for a 60-step window.
    config = tiny_config(tmp_path / "short")
    config.data.num_steps = 200
    config.train.seq_len = 60
    config.model.max_len = 60
    config.sweep.space.data = {"subsample": {"choice": [4]}}
    with pytest.raises(HistoryFormatError, match="shorter than the training window 60"):
        sweep.run_sweep(config)


@pytest.mark.parametrize("preset", ["quick_explorer", "quick_explorer_ad"])
def test_key_to_door_explorer_search_trains_the_train_recipe(preset):
    """Fig. 2's search at CPU scale searches `ad/key_to_door.py`'s recipe: outside the searched
    hyperparameters (and the positional table's size, unused past the 100-step window), every
    data, model, training and evaluation setting is the train preset's."""
    from icrl_jax.experiments.ad.key_to_door import get_config as train_config
    from icrl_jax.experiments.ngram.key_to_door import get_config as sweep_config

    def flat(tree, prefix=""):
        out = {}
        for key, value in tree.items():
            if isinstance(value, dict) and not key.endswith("kwargs"):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[prefix + key] = value
        return out

    search, train = sweep_config(preset), train_config(preset)
    searched = set(flat(search.sweep.space.to_dict()))
    searched = {key.rsplit(".", 1)[0] for key in searched}  # drop the distribution's name
    assert searched == {"train.learning_rate", "train.weight_decay", "model.embedding_dropout",
                        "model.residual_dropout", "model.label_smoothing"}
    assert search.train.seq_len <= search.model.max_len
    sections = ("data", "model", "train", "eval", "env")
    a = {k: v for k, v in flat(search.to_dict()).items() if k.split(".")[0] in sections}
    b = {k: v for k, v in flat(train.to_dict()).items() if k.split(".")[0] in sections}
    differ = {k for k in set(a) | set(b) if a.get(k, "missing") != b.get(k, "missing")}
    assert differ <= searched | {"model.max_len"}
    assert search.model.ngram_positions == train.model.ngram_positions
    assert search.data.num_train_tasks == 100 and search.data.num_test_tasks == 100
