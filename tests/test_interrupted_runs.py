"""A run killed (SIGKILL) while it writes a file ends, once started again, as an uninterrupted
run does: result files are written whole or not at all (`core.files.atomic_write`). A damaged
histories.npz is set aside and made again; a dataset of another shape, and a missing simulator,
are one-line errors."""

from __future__ import annotations

import ast
import json
import math
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from icrl_jax import envs
from icrl_jax.core.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: A run of seconds (tests/test_one_core.py's TINY): 30 steps, a checkpoint every 10.
TINY = [
    "--config", "experiments/ad/darkroom.py:quick",
    "--config.data.num_train_tasks=8", "--config.data.num_test_tasks=4",
    "--config.data.num_steps=200", "--config.model.d_model=16", "--config.model.num_layers=1",
    "--config.model.num_heads=2", "--config.train.batch_size=4", "--config.train.seq_len=40",
    "--config.train.steps_per_call=10", "--config.train.log_every=10",
    "--config.train.checkpoint_every=10", "--config.train.num_steps=30",
    "--config.eval.num_steps=100", "--config.run.progress=False",
]

#: Runs `icrl-jax ARGS` in this process, killed with SIGKILL at one point of a file write:
#: "histories.npz" / "eval.json": half the file's bytes are in its temporary file; "checkpoint":
#: the second checkpoint's orbax save has started.
KILLER = textwrap.dedent('''
    import contextlib, os, signal, sys
    target, args = sys.argv[1], sys.argv[2:]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if target == "checkpoint":
        import orbax.checkpoint as ocp
        from icrl_jax.core import checkpoints
        saves = [0]
        original = checkpoints.Checkpointer.save

        def save(self, state):
            saves[0] += 1
            if saves[0] == 2:
                import numpy as np
                self.manager.save(int(np.max(np.asarray(state.step))),
                                  args=ocp.args.StandardSave(state))
                die()
            return original(self, state)

        checkpoints.Checkpointer.save = save
    else:
        from icrl_jax.core import files
        from icrl_jax.data import history
        original = files.atomic_write

        @contextlib.contextmanager
        def atomic_write(path, mode="w"):
            with original(path, mode) as f:
                yield f
                if os.path.basename(path) == target:
                    f.flush()
                    f.truncate(max(1, f.tell() // 2))
                    die()

        files.atomic_write = history.atomic_write = atomic_write
    sys.argv = ["icrl-jax", *args]
    from icrl_jax.pipeline import cli
    cli.main()
''')


def icrl_jax(*args):
    return subprocess.run(["icrl-jax", *args], cwd=ROOT, capture_output=True, text=True)


def killed_at(target, tmp_path, *args):
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    return subprocess.run([sys.executable, str(script), target, *args], cwd=ROOT,
                          capture_output=True, text=True)


def results(workdir):
    """eval.json's scores: timings and paths (which name the work directory) left out."""
    with open(os.path.join(workdir, "eval.json")) as f:
        saved = json.load(f)
    return {k: v for k, v in saved.items() if k != "eval_seconds" and not isinstance(v, str)}


def assert_same_results(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            assert sorted(x) == sorted(y), key
            for k in x:
                assert len(x[k]) == len(y[k]) and all(
                    math.isclose(p, q, rel_tol=1e-5, abs_tol=1e-6) for p, q in zip(x[k], y[k])), (key, k)
        elif isinstance(x, float):
            assert math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6), (key, x, y)
        else:
            assert x == y, (key, x, y)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    out = icrl_jax("train", *TINY, f"--config.workdir={workdir}")
    assert out.returncode == 0, out.stderr[-3000:]
    return results(workdir)


@pytest.mark.parametrize("target", ["histories.npz", "checkpoint", "eval.json"])
def test_a_run_killed_while_writing_ends_as_an_uninterrupted_one(tmp_path, uninterrupted, target):
    workdir = tmp_path / "run"
    args = ("train", *TINY, f"--config.workdir={workdir}")
    out = killed_at(target, tmp_path, *args)
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    if target != "checkpoint":  # nothing but a temporary file holds the half-written bytes
        assert not (workdir / target).exists()
        assert any(name.startswith(f".{target}.tmp-") for name in os.listdir(workdir))
    else:  # the first checkpoint is complete, the second was cut off
        assert (workdir / "checkpoints" / "10").is_dir()
    assert not (workdir / "eval.json").exists()
    out = icrl_jax(*args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_results(results(workdir), uninterrupted)


def test_a_checkpoint_of_another_activation_is_refused_in_one_line(tmp_path):
    """Same parameter shapes, another function: resuming with the backbone's activation changed
    exits 2 naming the setting, and leaves the checkpoints as they were."""
    workdir = tmp_path / "run"
    out = icrl_jax("train", *TINY, f"--config.workdir={workdir}")
    assert out.returncode == 0, out.stderr[-3000:]
    before = sorted(os.listdir(workdir / "checkpoints"))
    out = icrl_jax("train", *TINY, f"--config.workdir={workdir}", "--config.model.activation=relu",
                   "--config.train.num_steps=40")
    assert out.returncode == 2, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "written by a different model" in lines[0], out.stderr
    assert lines[0].endswith("differing fields: model.activation: None (checkpoint) vs 'relu' (now)"), lines[0]
    assert sorted(os.listdir(workdir / "checkpoints")) == before

# --- damaged and mismatched datasets, missing simulators (in process) ---------------------------

def tiny_config(workdir, **data):
    from icrl_jax.core.config import set_dotted
    from icrl_jax.experiments.ad.darkroom import get_config

    config = get_config("quick")
    for arg in TINY[2:]:
        key, value = arg.removeprefix("--config.").split("=")
        set_dotted(config, key, ast.literal_eval(value))
    config.workdir = str(workdir)
    for key, value in data.items():
        config.data[key] = value
    return config


def test_a_truncated_histories_file_is_set_aside_and_made_again(tmp_path, capfd):
    from icrl_jax.data import builders

    config = tiny_config(tmp_path, num_steps=50)
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    first = builders.open_dataset(config, env)
    path = tmp_path / "histories.npz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    capfd.readouterr()
    again = builders.open_dataset(config, env)
    err = capfd.readouterr().err
    assert f"dataset {path} is unreadable (BadZipFile" in err, err
    assert f"moved it to {path}.corrupt-1 and making it again" in err, err
    assert (tmp_path / "histories.npz.corrupt-1").read_bytes() == data[: len(data) // 2]
    assert (again.actions == first.actions).all()
    path.write_bytes(b"garbage")  # a second damaged copy goes next to the first
    builders.open_dataset(config, env)
    assert (tmp_path / "histories.npz.corrupt-2").read_bytes() == b"garbage"


def test_a_dataset_made_for_another_config_names_both_shapes(tmp_path):
    from icrl_jax.data import builders

    config = tiny_config(tmp_path, num_steps=50)
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    builders.open_dataset(config, env)
    other = tiny_config(tmp_path, num_steps=60)
    with pytest.raises(builders.DatasetShapeError,
                       match=r"holds 64 histories x 50 steps, but the config makes 64 x 60 "
                             r"\(.*data.num_steps=60\)"):
        builders.open_dataset(other, env)
    other = tiny_config(tmp_path, num_steps=50, histories_per_task=2)  # quick preset: 8 a task
    with pytest.raises(UserError, match=r"holds 64 histories x 50 steps, .* makes 16 x 50"):
        builders.open_dataset(other, env)


def test_a_dataset_made_by_another_source_is_refused_naming_the_key(tmp_path):
    """Same shapes, other data: refused with the key that differs; another seed is allowed."""
    from icrl_jax.data import builders

    config = tiny_config(tmp_path, num_steps=50)
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    made = builders.open_dataset(config, env)
    other = tiny_config(tmp_path, num_steps=50)
    other.data.source_kwargs.eps = 0.5
    with pytest.raises(builders.DatasetShapeError,
                       match=r"histories.npz was made with data.source_kwargs=\{'eps': 0.1\}, "
                             r"but the config asks for \{'eps': 0.5\}"):
        builders.open_dataset(other, env)
    other = tiny_config(tmp_path, num_steps=50, source="uniform_random")
    other.data.source_kwargs = {}
    with pytest.raises(UserError, match=r"made with data.source='grid_explorer', but the config "
                                        r"asks for 'uniform_random'"):
        builders.open_dataset(other, env)
    other = tiny_config(tmp_path, num_steps=50)
    other.seed = 3
    reused = builders.open_dataset(other, env)
    assert (reused.actions == made.actions).all()
