"""Faults of a run's machine, each one line: a work directory in use by another run (an advisory
lock with the holder's pid and host; a stale one taken over), writes the file system refuses
(no space left, read-only, permission) during data generation and checkpoints, with resuming
after the fault; the checkpoint step `eval.json` records; a corrupt checkpoint signature."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from icrl_jax.core import checkpoints
from icrl_jax.core import files
from icrl_jax.core import workdir_lock
from icrl_jax.core.config import set_dotted
from icrl_jax.core.errors import UserError
from helpers import ROOT, assert_user_error, run_cli

DARKROOM = "experiments/ad/darkroom.py:quick"
#: The darkroom quick preset shrunk to seconds of work (as tests/test_cli.py's).
TINY = {
    "data.num_train_tasks": 8, "data.num_test_tasks": 4, "data.num_steps": 200,
    "model.d_model": 16, "model.num_layers": 1, "model.num_heads": 2, "train.num_steps": 20,
    "train.batch_size": 4, "train.seq_len": 40, "train.steps_per_call": 10,
    "train.log_every": 10, "train.checkpoint_every": 10, "eval.num_steps": 100,
    "eval.num_envs_per_task": 1, "run.progress": False,
}


def tiny_flags(**overrides) -> list[str]:
    return [f"--config.{k}={v}" for k, v in dict(TINY, **overrides).items()]


def tiny_config(workdir, **overrides):
    from icrl_jax.experiments.ad import darkroom
    from icrl_jax.pipeline import run as run_pipeline
    config = darkroom.get_config("quick")
    for key, value in dict(TINY, **overrides).items():
        set_dotted(config, key, value)
    config.workdir = str(workdir)
    return run_pipeline.resolve_config(config)


def _holder_process(workdir) -> subprocess.Popen:
    """A process holding `workdir`'s lock until its stdin closes."""
    code = ("import sys; from icrl_jax.core import workdir_lock\n"
            f"with workdir_lock.hold({str(workdir)!r}, 'train'):\n"
            "    print('held', flush=True); sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


# --- the work directory lock ---------------------------------------------------------------------

def test_a_directory_held_by_a_live_process_is_refused_naming_it(tmp_path):
    holder = _holder_process(tmp_path)
    try:
        with pytest.raises(workdir_lock.WorkdirInUseError) as info:
            workdir_lock.refuse_if_in_use(str(tmp_path))
        message = str(info.value)
        assert f"pid {holder.pid} on " in message and "icrl-jax train" in message, message
        assert "\n" not in message and "--config.workdir" in message
        with pytest.raises(workdir_lock.WorkdirInUseError, match=f"pid {holder.pid}"):
            with workdir_lock.hold(str(tmp_path), "evaluate"):
                pass
    finally:
        holder.stdin.close()
        holder.wait()
    # Released: free again, and the file names no holder (the next run says nothing).
    assert workdir_lock.holder_of(str(tmp_path)) is None
    assert (tmp_path / workdir_lock.LOCK_NAME).read_text() == ""


def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_notice(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names no live process (and it never held a flock)
    (tmp_path / workdir_lock.LOCK_NAME).write_text(json.dumps(
        {"pid": dead.pid, "host": "elsewhere", "command": "train", "since": 0}))
    assert workdir_lock.holder_of(str(tmp_path)) is None  # no live holder
    with workdir_lock.hold(str(tmp_path), "train"):
        notice = capsys.readouterr().err.strip().splitlines()
        assert len(notice) == 1 and f"pid {dead.pid} on elsewhere" in notice[0], notice
        assert "taking over" in notice[0]
        held = json.loads((tmp_path / workdir_lock.LOCK_NAME).read_text())
        assert held["pid"] == os.getpid() and held["command"] == "train"
        with workdir_lock.hold(str(tmp_path), "evaluate"):  # re-entrant within the process
            assert workdir_lock.holder_of(str(tmp_path)) is None
    with workdir_lock.hold(str(tmp_path), "train"):  # cleanly released: no notice
        assert capsys.readouterr().err == ""


def test_a_second_train_on_a_directory_in_use_is_refused_and_the_first_finishes(tmp_path):
    workdir = tmp_path / "run"
    first = subprocess.Popen(["icrl-jax", "train", "--config", DARKROOM,
                              f"--config.workdir={workdir}", *tiny_flags()], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = workdir / workdir_lock.LOCK_NAME
    while first.poll() is None and not (lock.exists() and lock.read_text()):
        time.sleep(0.2)
    assert first.poll() is None, first.communicate()
    os.kill(first.pid, signal.SIGSTOP)  # holds the lock while the second one asks
    try:
        for command in ("train", "evaluate"):
            second = run_cli(command, "--config", DARKROOM, f"--config.workdir={workdir}",
                             *tiny_flags(**{"train.num_steps": 40}))
            assert_user_error(second, f"work directory '{workdir}' is in use by icrl-jax train",
                              f"(pid {first.pid} on ")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate()
    assert first.returncode == 0, err[-3000:]
    # Unharmed: its own config, one row per logged step, its evaluation at its last step.
    assert json.loads((workdir / "config.json").read_text())["train"]["num_steps"] == 20
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if r["phase"] == "train"]
    assert train_steps == [10, 20]
    assert json.loads((workdir / "eval.json").read_text())["step"] == 20


# --- writes the file system refuses --------------------------------------------------------------

def _refuse(monkeypatch, module, name, code, when=lambda *a: True):
    original = getattr(module, name)

    def refused(*args, **kwargs):
        if when(*args):
            raise OSError(code, os.strerror(code))
        return original(*args, **kwargs)
    monkeypatch.setattr(module, name, refused)


@pytest.mark.parametrize("code, cause", [(errno.ENOSPC, "no space left on the device"),
                                         (errno.EROFS, "read-only file system"),
                                         (errno.EACCES, "permission denied")])
def test_a_refused_write_names_the_path_and_leaves_no_temporary(tmp_path, monkeypatch, code,
                                                                cause):
    _refuse(monkeypatch, os, "fsync", code)
    with pytest.raises(files.WriteError) as info:
        files.write_json(str(tmp_path / "eval.json"), {"a": 1})
    assert str(info.value) == f"cannot write {tmp_path / 'eval.json'}: {cause}"
    assert os.listdir(tmp_path) == []


def test_a_full_disk_while_writing_the_dataset_then_resuming(tmp_path, monkeypatch):
    workdir = tmp_path / "run"
    config = tiny_config(workdir, **{"run.evaluate": False})
    from icrl_jax.pipeline import run as run_pipeline
    _refuse(monkeypatch, os, "fsync", errno.ENOSPC)
    with pytest.raises(files.WriteError, match=f"cannot write {workdir}/histories.npz: no space left"):
        run_pipeline.train(config)
    assert sorted(os.listdir(workdir)) == [workdir_lock.LOCK_NAME, "config.json"]  # nothing half-written
    monkeypatch.undo()
    # A temporary a killed writer left behind goes at the next start.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = workdir / f".histories.npz.tmp-{dead.pid}-0"
    stale.write_bytes(b"half")
    run_pipeline.train(config)
    assert not stale.exists()
    assert checkpoints.Checkpointer(str(workdir / "checkpoints"), {}).latest_step() == 20


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_refused_checkpoint_write_then_resuming(tmp_path, monkeypatch, code):
    """Orbax writes through tensorstore, which states the OS error in its message: the failure
    is simulated as it reports it (the text of a real full tmpfs, as in `_orbax_text`)."""
    workdir = tmp_path / "run"
    config = tiny_config(workdir, **{"run.evaluate": False, "train.num_steps": 30})
    from icrl_jax.pipeline import run as run_pipeline

    def refused_save(self, step, *args, **kwargs):
        if step == 20:
            raise ValueError(_orbax_text(self.directory, step, code))
        return saving(self, step, *args, **kwargs)
    import orbax.checkpoint as ocp
    saving = ocp.CheckpointManager.save
    monkeypatch.setattr(ocp.CheckpointManager, "save", refused_save)
    with pytest.raises(files.WriteError) as info:
        run_pipeline.train(config)
    assert str(info.value) == (f"cannot write checkpoint {workdir}/checkpoints/20: "
                               f"{files.WRITE_CAUSES[code]}")
    monkeypatch.undo()
    run_pipeline.train(config)  # resumes from step 10 and ends where an uninterrupted run ends
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 20, 30]  # step 20 logged again after resuming
    assert checkpoints.Checkpointer(str(workdir / "checkpoints"), {}).latest_step() == 30


def _orbax_text(directory: str, step: int, code: int) -> str:
    return (f'RESOURCE_EXHAUSTED: Error writing "params/0.0" in OCDBT database at local file '
            f'"{directory}/{step}.orbax-checkpoint-tmp/default.orbax-checkpoint-tmp/ocdbt.'
            f'process_0/": Failed writing: "{directory}/d/3819": Failed to write 61528 bytes to '
            f"file 4: {os.strerror(code)} [os_error_code='{code}']")


def _tmpfs(path, size: str) -> bool:
    """Mount a tmpfs of `size` at `path` (root only); False where that is not possible."""
    os.makedirs(path, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True)
    return out.returncode == 0


def test_a_real_full_disk_during_a_checkpoint_is_one_line_and_resumes(tmp_path):
    """On a real 400 KiB tmpfs (where this process may mount one): the dataset fits, a
    checkpoint does not; then with room, the run resumes and ends."""
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "400k"):
        pytest.skip("mounting a tmpfs needs root")
    try:
        workdir = disk / "run"
        out = run_cli("train", "--config", DARKROOM, f"--config.workdir={workdir}", *tiny_flags())
        assert out.returncode == 2, out.stderr[-3000:]
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        last = out.stderr.strip().splitlines()[-1]
        # The first checkpoint that does not fit: 10, or 20 where 10 just fits (orbax's files
        # vary by some bytes between runs).
        assert re.fullmatch(rf"icrl-jax: cannot write checkpoint {re.escape(str(workdir))}"
                            rf"/checkpoints/(10|20): no space left on the device", last), \
            out.stderr[-3000:]
        subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        again = run_cli("train", "--config", DARKROOM, f"--config.workdir={workdir}",
                        *tiny_flags())
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads((workdir / "eval.json").read_text())["step"] == 20
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        refused = run_cli("train", "--config", DARKROOM, f"--config.workdir={workdir}",
                          *tiny_flags())
        assert_user_error(refused, f"cannot write {workdir}/config.json: read-only file system")
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_a_work_directory_under_a_file_or_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    for workdir in (tmp_path / "file", tmp_path / "file" / "run"):
        with pytest.raises(UserError, match="file") as info:
            tiny_config(workdir)
        assert str(workdir) in str(info.value) and "\n" not in str(info.value)


# --- what eval.json records; a corrupt signature -------------------------------------------------

def test_eval_json_names_the_checkpoint_it_evaluated(tmp_path, capsys):
    """A run stopped at step 10 of 20, then evaluated: eval.json records step 10 and says it
    is not train.num_steps."""
    from icrl_jax.pipeline import run as run_pipeline
    from icrl_jax.pipeline import train as trainer
    workdir = tmp_path / "run"
    config = tiny_config(workdir, **{"run.evaluate": False})
    stopped = trainer.train  # as a run killed after its step-10 checkpoint

    def until_10(*args, **kwargs):
        return stopped(*args, **dict(kwargs, stop_at=10))
    import unittest.mock
    with unittest.mock.patch.object(trainer, "train", until_10):
        run_pipeline.train(config)
    capsys.readouterr()
    run_pipeline.evaluate(config)
    results = json.loads((workdir / "eval.json").read_text())
    assert results["step"] == results["checkpoint_step"] == 10
    assert "step 10, not train.num_steps=20" in results["note"]
    assert "step 10, not train.num_steps=20" in capsys.readouterr().err
    run_pipeline.train(config)  # resumes to 20
    run_pipeline.evaluate(config)
    results = json.loads((workdir / "eval.json").read_text())
    assert results["step"] == 20 and "note" not in results


@pytest.mark.parametrize("damage", [b"{not json", b"\xff\xfe\x00", b"[1, 2]", b""])
def test_a_corrupt_signature_is_refused_naming_it(tmp_path, damage):
    import flax.struct
    import jax.numpy as jnp

    @flax.struct.dataclass
    class State:
        step: object
        params: object
    state = State(jnp.int32(10), {"w": jnp.ones((3,))})
    checkpointer = checkpoints.Checkpointer(str(tmp_path), {"model": "a"})
    checkpointer.save(state)
    (tmp_path / "signature.json").write_bytes(damage)
    for restore in (checkpointer.restore, checkpointer.restore_latest_intact):
        with pytest.raises(checkpoints.CorruptSignatureError) as info:
            restore(state)
        message = str(info.value)
        assert message.startswith(f"checkpoint signature {tmp_path}/signature.json is "
                                  f"unreadable (") and "\n" not in message, message
    checkpointer.close()
    assert sorted(os.listdir(tmp_path)) == ["10", "signature.json"]  # nothing moved aside


def test_a_corrupt_signature_is_one_line_in_train_and_evaluate(tmp_path):
    workdir = tmp_path / "run"
    flags = ["--config", DARKROOM, f"--config.workdir={workdir}", *tiny_flags()]
    assert run_cli("train", *flags, "--config.run.evaluate=False").returncode == 0
    signature = workdir / "checkpoints" / "signature.json"
    signature.write_text("{not json")
    for command in ("train", "evaluate"):
        out = run_cli(command, *flags, "--config.train.num_steps=30")
        assert_user_error(out, f"checkpoint signature {signature} is unreadable", "delete it")
