"""The command line end to end on a tiny config, and its errors on bad input."""

import json
import os
import subprocess

import numpy as np
import pytest

from icrl_jax.core.config import apply_preset, set_dotted
from icrl_jax.core.errors import UserError
from helpers import assert_user_error

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = [
    "--config.data.num_train_tasks=8", "--config.data.num_test_tasks=4",
    "--config.data.num_steps=200", "--config.model.d_model=16", "--config.model.num_layers=1",
    "--config.model.num_heads=2", "--config.train.num_steps=20", "--config.train.batch_size=4",
    "--config.train.seq_len=40", "--config.train.steps_per_call=10", "--config.train.log_every=10",
    "--config.train.checkpoint_every=10", "--config.eval.num_steps=100",
    "--config.eval.num_envs_per_task=1", "--config.run.progress=False",
]


def run_cli(*args, check=True, cwd=ROOT):
    """The installed `icrl-jax` console script, as a user runs it (README's first command)."""
    return subprocess.run(["icrl-jax", *args], cwd=cwd, capture_output=True, text=True,
                          check=check)


def test_train_writes_the_whole_work_directory(tmp_path):
    workdir = tmp_path / "run"
    run_cli("train", "--config", "experiments/ad/darkroom.py:quick", f"--config.workdir={workdir}",
            *TINY)
    for name in ("config.json", "histories.npz", "metrics.jsonl", "eval.json",
                 "in_context_curves.png", "checkpoints", "tensorboard"):
        assert (workdir / name).exists(), name
    config = json.loads((workdir / "config.json").read_text())
    assert config["train"]["num_steps"] == 20 and config["preset"] == "quick"
    results = json.loads((workdir / "eval.json").read_text())
    assert results["num_envs"] == 4
    # 100 steps of 50-step episodes: two complete episodes per environment.
    assert len(results["curves"]["model"]) == 2
    # Per rollout (one per held-out task): each policy's episode returns, and the task ids.
    rollouts = np.load(workdir / "eval_rollouts.npz")
    assert rollouts["model_returns"].shape == rollouts["source_returns"].shape == (4, 2)
    assert rollouts["model_returns"][:, -1].mean() == pytest.approx(
        results["model_last_episode_return"])
    assert len(set(rollouts["task_ids"].tolist())) == 4
    phases = {json.loads(line)["phase"] for line in (workdir / "metrics.jsonl").read_text().splitlines()}
    assert phases == {"train", "eval"}
    # Running train again resumes from the final checkpoint: no training steps left to do.
    again = run_cli("train", "--config", "experiments/ad/darkroom.py:quick",
                    f"--config.workdir={workdir}", *TINY, "--config.run.evaluate=False")
    train_lines = [l for l in (workdir / "metrics.jsonl").read_text().splitlines()
                   if '"train"' in l]
    assert len(train_lines) == 2, again.stderr[-2000:]
    # The finished run reports as one seed of its method (`report --runs`, no --config).
    run_cli("report", "--runs", str(workdir), "--out", str(tmp_path / "seeds"))
    table = (tmp_path / "seeds" / "seeds.md").read_text()
    assert f"| darkroom: AD | 0 | **{results['model_first_episode_return']:.3f} ± 0.000**" in table


def test_report_trains_the_seeds_and_writes_their_table(tmp_path):
    workdir = tmp_path / "report"
    out = run_cli("report", "--config", "experiments/ad/darkroom.py:quick",
                  f"--config.workdir={workdir}", *TINY, "--config.report.num_seeds=2", check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    for seed in (0, 1):  # each seed a run of its own, as `train` writes one
        assert json.loads((workdir / f"seed_{seed}" / "config.json").read_text())["seed"] == seed
        assert json.loads((workdir / f"seed_{seed}" / "eval.json").read_text())["step"] == 20
    assert "| darkroom: AD | 0, 1 |" in (workdir / "report" / "seeds.md").read_text()


def test_config_files_load_from_any_directory(tmp_path):
    # Configs import shared builders from the `experiments` package; that must not depend on cwd.
    out = run_cli("generate", "--config", os.path.join(ROOT, "experiments/ad/darkroom.py:quick"),
                  f"--config.workdir={tmp_path / 'run'}", "--config.data.num_steps=100",
                  "--config.data.histories_per_task=1", cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "run" / "histories.npz").exists()


def test_unknown_config_key_is_named():
    out = run_cli("generate", "--config", "experiments/ad/darkroom.py:quick",
                  "--config.train.nun_steps=3", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "'train.nun_steps'; did you mean 'train.num_steps'?" in out.stderr


def test_unknown_preset_and_command():
    out = run_cli("train", "--config", "experiments/ad/darkroom.py:qiuck", check=False)
    assert out.returncode == 2 and "unknown preset 'qiuck'" in out.stderr
    out = run_cli("trian", "--config", "experiments/ad/darkroom.py:quick", check=False)
    assert out.returncode == 2 and "did you mean 'train'" in out.stderr


def test_set_dotted_refuses_missing_keys():
    from icrl_jax.experiments.ad.darkroom import get_config
    config = get_config("quick")
    with pytest.raises(UserError, match="trian"):
        set_dotted(config, "trian.num_steps", 1)
    with pytest.raises(UserError, match="num_stepz"):
        apply_preset(config, {"p": {"train.num_stepz": 1}}, "p")


def test_evaluations_during_training_are_kept_per_step_and_not_redone(tmp_path):
    """`eval.every`: an evaluation at each multiple of it (the M-SAT paper's per-epoch curve)
    in evals/, logged at its step; the final one is eval.json; a rerun does not redo them."""
    workdir = tmp_path / "run"
    args = ["train", "--config", "experiments/ad/darkroom.py:quick", f"--config.workdir={workdir}",
            *TINY, "--config.train.num_steps=30", "--config.eval.every=10"]
    run_cli(*args)
    during = sorted(p.name for p in (workdir / "evals").iterdir())
    assert during == ["step_00000010.json", "step_00000020.json"]
    assert sorted(p.name for p in (workdir / "eval_rollouts").iterdir()) == [
        "step_00000010.npz", "step_00000020.npz"]
    assert json.loads((workdir / "evals" / during[0]).read_text())["step"] == 10
    assert json.loads((workdir / "eval.json").read_text())["step"] == 30

    def eval_steps():
        lines = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
        return [l["step"] for l in lines if l["phase"] == "eval"]

    assert eval_steps() == [10, 20, 30]
    run_cli(*args)  # finished: only the final evaluation runs again
    assert eval_steps() == [10, 20, 30, 30]
    out = run_cli(*args[:-1], "--config.eval.every=15", check=False)
    assert out.returncode == 2 and "multiple of train.steps_per_call=10" in out.stderr


def test_experiment_paths_resolve_to_the_installed_files_from_any_directory(tmp_path):
    # From outside the repository the README's `experiments/...` path is the installed file:
    # the preset's own error (not "file not found") shows that it was read.
    out = run_cli("train", "--config", "experiments/ad/darkroom.py:quikc", cwd=tmp_path, check=False)
    assert_user_error(out, "unknown preset 'quikc'", "did you mean 'quick'")
    out = run_cli("train", "--config=experiments/ad/nope.py", cwd=tmp_path, check=False)
    assert_user_error(out, "config file 'experiments/ad/nope.py' not found")
