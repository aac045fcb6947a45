"""Minari's hosted D4RL format through `data.minari_id` (experiments/continuous/d4rl.py).

The dataset is recorded here the way the hosted `mujoco/hopper/*-v0` ones were: gymnasium's
`Hopper-v5` wrapped in Minari's own `DataCollector`, written with `create_dataset` and reference
scores, under `MINARI_DATASETS_PATH`. A DT trains on it for a few updates and is evaluated on the
MJX hopper; its reported score must be D4RL's normalisation with the dataset's own references.
"""

import json
import os
import subprocess

import gymnasium as gym
import ml_collections
import numpy as np
import pytest

from helpers import ROOT, assert_user_error
from icrl_jax.pipeline.run import best_of_evaluations
from icrl_jax.data.minari_io import normalized_score, read_minari, write_minari

minari = pytest.importorskip("minari", reason="needs 'icrl-jax[continuous]'")
pytest.importorskip("mujoco.mjx", reason="needs 'icrl-jax[continuous]'")

DATASET = "mujoco/hopper/tiny-v0"
REF_MIN, REF_MAX = -20.0, 3000.0
CONFIG = "experiments/continuous/d4rl.py"


@pytest.fixture(scope="module")
def datasets_root(tmp_path_factory):
    """A Minari root holding DATASET: 6 random-torque episodes of Hopper-v5."""
    root = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        env = minari.DataCollector(gym.make("Hopper-v5"))
        rng = np.random.default_rng(0)
        for episode in range(6):
            env.reset(seed=episode)
            done = False
            while not done:
                _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 3).astype(np.float32))
                done = terminated or truncated
        env.create_dataset(dataset_id=DATASET, algorithm_name="uniform random torques",
                           ref_min_score=REF_MIN, ref_max_score=REF_MAX,
                           description="a tiny dataset in the hosted D4RL format, for tests")
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH")
        else:
            os.environ["MINARI_DATASETS_PATH"] = old
    return str(root)


def cli(root, *args):
    env = {**os.environ, "MINARI_DATASETS_PATH": root}
    return subprocess.run(["icrl-jax", *args], cwd=ROOT, capture_output=True, text=True, env=env)


def test_reads_the_hosted_format(datasets_root):
    episodes = read_minari(os.path.join(datasets_root, DATASET))
    assert episodes.env_spec_id == "Hopper-v5"
    assert (episodes.ref_min_score, episodes.ref_max_score) == (REF_MIN, REF_MAX)
    assert episodes.observations.shape[-1] == 11 and episodes.actions.shape[-1] == 3
    assert episodes.num_episodes == 6 and episodes.terminations[episodes.mask].sum() == 6


def test_dt_trains_on_minari_id_and_reports_d4rl_scores(datasets_root, tmp_path):
    before = sorted(os.listdir(datasets_root))
    out = cli(datasets_root, "train", "--config", CONFIG, f"--config.workdir={tmp_path}",
              f"--config.data.minari_id={DATASET}", "--config.train.num_steps=4",
              "--config.train.batch_size=4", "--config.train.steps_per_call=2",
              "--config.train.warmup_steps=1", "--config.train.log_every=2",
              "--config.train.checkpoint_every=4", "--config.model.d_model=16",
              "--config.model.num_layers=1", "--config.data.num_test_tasks=2",
              "--config.eval.num_steps=60", "--config.eval.target_returns=(300.0,)",
              "--config.eval.baselines=()")
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.load(open(tmp_path / "eval.json"))
    ret = results["model@300_first_episode_return"]
    assert results["model@300_d4rl_score"] == pytest.approx(
        float(normalized_score(ret, REF_MIN, REF_MAX)), rel=1e-5)
    # The only evaluation is both the last and the best.
    assert results["model@300_d4rl_score_best"] == results["model@300_d4rl_score"]
    assert results["model@300_d4rl_score_best_step"] == 4
    assert sorted(os.listdir(datasets_root)) == before  # read where it is, nothing written


def test_best_and_last_evaluations_are_named_apart(tmp_path):
    config = ml_collections.ConfigDict(dict(workdir=str(tmp_path), train=dict(num_steps=30)))
    os.makedirs(tmp_path / "evals")
    for step, score in ((10, 40.0), (20, 55.0)):
        with open(tmp_path / "evals" / f"step_{step:08d}.json", "w") as f:
            json.dump({"model_d4rl_score": score, "random_d4rl_score": 0.5}, f)
    final = {"model_d4rl_score": 50.0, "random_d4rl_score": 0.5}
    out = best_of_evaluations(config, final, ["model_d4rl_score", "random_d4rl_score"])
    assert out == {"model_d4rl_score_best": 55.0, "model_d4rl_score_best_step": 20,
                   "random_d4rl_score_best": 0.5, "random_d4rl_score_best_step": 10}  # ties: earliest


def test_a_dataset_of_another_env_or_none_is_refused_in_one_line(datasets_root, tmp_path):
    out = cli(datasets_root, "train", "--config", CONFIG, f"--config.workdir={tmp_path / 'a'}",
              f"--config.data.minari_id={DATASET}", "--config.env.name=hopper")
    assert_user_error(out, "recorded on gymnasium's Hopper-v5", "env.name='hopper_v5'")
    out = cli(datasets_root, "train", "--config", CONFIG, f"--config.workdir={tmp_path / 'b'}",
              "--config.data.minari_id=mujoco/hopper/absent-v0")
    assert_user_error(out, "data.minari_id='mujoco/hopper/absent-v0'",
                      "minari download mujoco/hopper/absent-v0")
    assert not any(os.path.exists(tmp_path / d / "checkpoints") for d in "ab")


def test_our_writer_records_the_gymnasium_env_as_the_hosted_datasets_do(tmp_path):
    rng = np.random.default_rng(0)
    episode = dict(observations=rng.normal(size=(4, 11)).astype(np.float32),
                   actions=rng.uniform(-1, 1, (3, 3)).astype(np.float32),
                   rewards=np.ones(3, np.float32), terminations=np.array([0, 0, 1], bool),
                   truncations=np.zeros(3, bool))
    space = gym.make("Hopper-v5")
    path = write_minari(tmp_path, "mujoco/hopper/ours-v0", [episode], space.observation_space,
                        space.action_space, "hopper_v5", ref_min_score=REF_MIN,
                        ref_max_score=REF_MAX, env_spec="Hopper-v5")
    episodes = read_minari(path)
    assert episodes.env_spec_id == "Hopper-v5" and episodes.env_name == "hopper_v5"
    np.testing.assert_array_equal(episodes.actions[0], episode["actions"])
