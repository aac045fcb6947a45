"""The one core's shared pieces: one metric definition for pipeline and sweep, the method
registry, and the trainer's reliability (NaN stop, damaged checkpoints) as a user meets it."""

import json
import os
import subprocess

import jax
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.core import metrics as core_metrics
from icrl_jax.tools import sweep
from icrl_jax.core.errors import UnknownNameError
from icrl_jax.methods import build_method, method_class, method_names
from icrl_jax.pipeline.run import rollout_and_score

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--config.data.num_train_tasks=8", "--config.data.num_test_tasks=4",
    "--config.data.num_steps=200", "--config.model.d_model=16", "--config.model.num_layers=1",
    "--config.model.num_heads=2", "--config.train.batch_size=4", "--config.train.seq_len=40",
    "--config.train.steps_per_call=10", "--config.train.log_every=10",
    "--config.train.checkpoint_every=10", "--config.eval.num_steps=100",
    "--config.run.progress=False",
]


def icrl_jax(*args):
    return subprocess.run(["icrl-jax", *args], cwd=ROOT, capture_output=True, text=True)


def test_last_episode_return_is_each_rollouts_own_last_episode():
    """Rollouts that complete different numbers of episodes (Key-to-Door ends episodes early):
    the score averages every rollout's own last complete episode, not the last column."""
    rewards = np.zeros((2, 6), np.float32)
    dones = np.zeros((2, 6), bool)
    rewards[0, [1, 3, 5]] = [1.0, 2.0, 3.0]  # three 2-step episodes, last return 3
    dones[0, [1, 3, 5]] = True
    rewards[1, 2] = 7.0  # one 3-step episode (return 7), then an unfinished one
    dones[1, 2] = True
    metrics, _ = core_metrics.policy_metrics("returns", dict(rewards=rewards, dones=dones), 6)
    assert metrics["last_episode_return"] == pytest.approx((3.0 + 7.0) / 2)
    assert metrics["first_episode_return"] == pytest.approx((1.0 + 7.0) / 2)
    assert metrics["episodes"] == pytest.approx(2.0)


def test_sweep_and_pipeline_give_the_same_score_on_key_to_door(tmp_path):
    """The sweep's scores and the pipeline's come from one metric definition: on Key-to-Door,
    where episodes end early, the same rollouts give the same model and source scores."""
    from icrl_jax.experiments.ad.key_to_door import get_config
    from icrl_jax.core.config import finalize

    config = get_config("quick")
    config.model.update(dict(d_model=16, num_layers=1, num_heads=2))
    config.data.source = "noisy_oracle"  # reaches the door in some episodes: early ends
    config.eval.num_steps = 300
    config.eval.baselines = ("source", "random")
    config.workdir = str(tmp_path)
    config = finalize(config)
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    method = build_method(config, env)
    test_ids = np.arange(100, 108, dtype=np.int32)
    example = jax.tree.map(lambda x: x[:, :config.train.seq_len], _probe_windows(env, test_ids))
    params = method.init(jax.random.PRNGKey(0), example)
    baselines = sweep._baselines(config, env, test_ids)
    from_sweep = sweep.evaluate_params(config, env, method, params, test_ids, baselines)
    from_pipeline, _, rollouts = rollout_and_score(config, env, method, params,
                                                   env.task_params(test_ids),
                                                   jax.random.PRNGKey(config.eval.seed))
    counts = rollouts["source"]["dones"].sum(1)
    assert counts.min() != counts.max()  # rollouts differ in their numbers of episodes
    for key in ("model_last_episode_return", "model_first_episode_return"):
        assert from_sweep[key] == pytest.approx(from_pipeline[key])
    for key in ("source_last_episode_return", "random_last_episode_return"):
        assert baselines[key] == pytest.approx(from_pipeline[key])
    # Each rollout's own last episode: not the column of the longest rollouts.
    returns = np.asarray(core_metrics.episode_returns(rollouts["source"]["rewards"],
                                           rollouts["source"]["dones"], 300))
    own_last = returns[np.arange(len(returns)), counts - 1]
    assert from_pipeline["source_last_episode_return"] == pytest.approx(own_last.mean())


def _probe_windows(env, task_ids):
    from icrl_jax.data.windows import to_step_windows
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import uniform_random
    return to_step_windows(generate_histories(env, uniform_random(), env.task_params(task_ids),
                                              60, jax.random.PRNGKey(1)))


def test_methods_register_themselves_and_unknown_names_suggest():
    assert {"ad", "ad_permuted", "headless_ad", "dt", "msat", "mat"} <= set(method_names())
    assert method_class("msat").name == "msat"
    with pytest.raises(UnknownNameError, match="did you mean 'msat'"):
        method_class("mstat")


def test_training_blow_up_stops_with_the_step_and_keeps_the_last_checkpoint(tmp_path):
    workdir = str(tmp_path / "run")
    base = ["--config", "experiments/ad/darkroom.py:quick", f"--config.workdir={workdir}", *TINY,
            "--config.run.evaluate=False"]
    out = icrl_jax("train", *base, "--config.train.num_steps=20")
    assert out.returncode == 0, out.stderr[-2000:]
    out = icrl_jax("train", *base, "--config.train.num_steps=60",
                   "--config.train.learning_rate=1e9")
    assert out.returncode != 0
    assert "diverged at step" in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "step 20" in out.stderr  # the last good checkpoint is named
    steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints"))
                   if d.isdigit())
    assert steps[-1] == 20
    # The kept checkpoint still evaluates.
    out = icrl_jax("evaluate", *base, "--config.train.num_steps=20")
    assert out.returncode == 0, out.stderr[-2000:]


def test_damaged_checkpoint_is_named_and_training_resumes_from_an_intact_one(tmp_path):
    workdir = tmp_path / "run"
    base = ["--config", "experiments/ad/darkroom.py:quick", f"--config.workdir={workdir}", *TINY,
            "--config.run.evaluate=False"]
    assert icrl_jax("train", *base, "--config.train.num_steps=20").returncode == 0
    latest = workdir / "checkpoints" / "20"
    damaged = 0
    for path in latest.rglob("*"):  # overwrite the array data, as a failing disk would
        if path.is_file() and "metadata" not in path.name and path.stat().st_size > 0:
            path.write_bytes(b"\x00garbage" * 8)
            damaged += 1
    assert damaged
    out = icrl_jax("evaluate", *base, "--config.train.num_steps=20")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert f"{workdir}/checkpoints/20" in out.stderr and "unreadable" in out.stderr
    out = icrl_jax("train", *base, "--config.train.num_steps=30")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "checkpoints/20 is unreadable" in out.stderr and "resuming from" in out.stderr
    lines = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if line["phase"] == "train"][-1] == 30


def test_every_experiment_config_loads_without_model_code():
    """Configs import only config builders: loading all of them, with each of their presets
    (whose dotted keys `apply_preset` checks), imports no jax, flax or orbax."""
    script = (
        "import glob, importlib, os, sys\n"
        "loaded = 0\n"
        "for path in sorted(glob.glob('experiments/*/*.py')):\n"
        "    if 'def get_config' in open(path).read():  # a config file (not a script)\n"
        "        module = importlib.import_module(path[:-3].replace(os.sep, '.'))\n"
        "        for preset in [''] + sorted(getattr(module, 'PRESETS', {})):\n"
        "            loaded += bool(module.get_config(preset))\n"
        "print(loaded, sorted(m for m in ('jax', 'flax', 'orbax.checkpoint') if m in sys.modules))\n")
    out = subprocess.run(["python", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded, modules = out.stdout.strip().split(" ", 1)
    assert int(loaded) > 100 and modules == "[]", out.stdout
