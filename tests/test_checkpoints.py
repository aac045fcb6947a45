"""Checkpointer: round trip, model mismatch, damaged checkpoints, resuming past them."""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax.core.checkpoints import Checkpointer, CheckpointMismatchError, CorruptCheckpointError
from icrl_jax.core.errors import UserError


@flax.struct.dataclass
class State:
    step: jax.Array
    params: Any
    opt_state: Any


def make_state(step: int, width: int = 64) -> State:
    # w is over orbax's 1 KiB inline limit, so it lands in the OCDBT data files; the rest is
    # stored inline in the index.
    return State(step=jnp.asarray(step, jnp.int32),
                 params={"w": jnp.arange(16 * width, dtype=jnp.float32).reshape(16, width) + step,
                         "b": jnp.full((3,), float(step))},
                 opt_state=(jnp.zeros(5), {"mu": jnp.full((4,), 0.5 * step)}))


def assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def two_checkpoints(directory) -> Checkpointer:
    checkpointer = Checkpointer(str(directory), {"model": "a"}, keep=2)
    for step in (100, 200):
        checkpointer.save(make_state(step))
    return checkpointer


def files(step_dir, pattern="**"):
    return [p for p in glob.glob(os.path.join(step_dir, pattern), recursive=True)
            if os.path.isfile(p)]


def not_metadata(path):
    return "METADATA" not in os.path.basename(path)


def overwrite(paths):
    rng = np.random.default_rng(0)
    for p in paths:
        size = max(os.path.getsize(p), 16)
        with open(p, "wb") as f:
            f.write(rng.integers(0, 256, size, dtype=np.uint8).tobytes())


def truncate(paths, fraction):
    for p in paths:
        with open(p, "r+b") as f:
            f.truncate(int(os.path.getsize(p) * fraction))


def delete(paths):
    assert paths
    for p in paths:
        os.remove(p)


def empty(step_dir):
    shutil.rmtree(step_dir)
    os.makedirs(step_dir)


DATA = "default/ocdbt.process_0/d/*"
DAMAGE = {
    # (a) garbage bytes
    "garbage_all_but_metadata": lambda d: overwrite(filter(not_metadata, files(d))),
    "garbage_array_data": lambda d: overwrite(files(d, DATA)),
    "garbage_metadata": lambda d: overwrite(files(d, "default/_METADATA")),
    # (b) truncated files
    "truncated_all_but_metadata": lambda d: truncate(filter(not_metadata, files(d)), 0.5),
    "truncated_array_data": lambda d: truncate(files(d, DATA), 0.5),
    "zero_length_array_data": lambda d: truncate(files(d, DATA), 0.0),
    "truncated_metadata": lambda d: truncate(files(d, "default/_METADATA"), 0.5),
    # (c) deleted files
    "deleted_array_data": lambda d: delete(files(d, DATA)),
    "deleted_manifest": lambda d: delete(files(d, "default/manifest.ocdbt")),
    "deleted_metadata": lambda d: delete(files(d, "default/_METADATA")),
    # (d) nothing left of the step but its directory
    "empty_step_directory": empty,
}


def test_round_trip(tmp_path):
    checkpointer = Checkpointer(str(tmp_path / "ckpt"), {"model": "a"})
    assert checkpointer.latest_step() is None
    state = make_state(7)
    checkpointer.save(state)
    assert checkpointer.latest_step() == 7
    restored = checkpointer.restore(make_state(0))
    assert isinstance(restored, State)
    assert_same(restored, state)
    checkpointer.close()
    # a new Checkpointer (a new process) reads it too
    again = Checkpointer(str(tmp_path / "ckpt"), {"model": "a"})
    assert_same(again.restore(make_state(0), step=7), state)
    again.close()


def test_replica_states_save_under_their_common_step(tmp_path):
    checkpointer = Checkpointer(str(tmp_path), {"model": "a"})
    stacked = jax.tree.map(lambda *x: jnp.stack(x), make_state(30), make_state(30))
    checkpointer.save(stacked)
    assert checkpointer.latest_step() == 30
    assert_same(checkpointer.restore(stacked), stacked)


def test_signature_mismatch(tmp_path):
    two_checkpoints(tmp_path).close()
    with pytest.raises(CheckpointMismatchError, match="model: 'a' \\(checkpoint\\) vs 'b'"):
        Checkpointer(str(tmp_path), {"model": "b"}).restore(make_state(0))
    with pytest.raises(CheckpointMismatchError, match=r"parameter \['w'\]: \[16, 64\]"):
        Checkpointer(str(tmp_path), {"model": "a"}).restore(make_state(0, width=32))
    assert issubclass(CheckpointMismatchError, UserError)
    assert issubclass(CorruptCheckpointError, UserError)


def test_mismatch_is_not_skipped_when_resuming(tmp_path):
    two_checkpoints(tmp_path).close()
    other = Checkpointer(str(tmp_path), {"model": "b"})
    with pytest.raises(CheckpointMismatchError):
        other.restore_latest_intact(make_state(0))
    assert other.manager.all_steps() == [100, 200]
    assert not os.path.exists(tmp_path / "corrupt")


def test_restore_of_a_missing_step(tmp_path):
    checkpointer = two_checkpoints(tmp_path)
    with pytest.raises(FileNotFoundError, match="300"):
        checkpointer.restore(make_state(0), step=300)


def test_no_checkpoint_resumes_nothing(tmp_path):
    checkpointer = Checkpointer(str(tmp_path), {"model": "a"})
    assert checkpointer.restore_latest_intact(make_state(0)) == (None, None, [])
    with pytest.raises(FileNotFoundError):
        checkpointer.restore(make_state(0))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_newest_checkpoint(tmp_path, capsys, damage):
    checkpointer = two_checkpoints(tmp_path)
    checkpointer.close()
    DAMAGE[damage](str(tmp_path / "200"))

    checkpointer = Checkpointer(str(tmp_path), {"model": "a"}, keep=2)
    with pytest.raises(CorruptCheckpointError, match=f"checkpoint {tmp_path}/200 is unreadable"):
        checkpointer.restore(make_state(0))  # the newest, as evaluation restores
    assert_same(checkpointer.restore(make_state(0), step=100), make_state(100))
    capsys.readouterr()

    state, step, skipped = checkpointer.restore_latest_intact(make_state(0))
    assert step == 100
    assert_same(state, make_state(100))
    assert [s for s, _ in skipped] == [200]
    assert f"{tmp_path}/200 is unreadable" in skipped[0][1]
    err = capsys.readouterr().err
    assert f"checkpoint {tmp_path}/200 is unreadable" in err and "resuming from 100" in err
    assert os.path.isdir(tmp_path / "corrupt" / "200") and not os.path.exists(tmp_path / "200")

    # The resumed run saves step 200 again (orbax would silently skip it if the damaged 200
    # were still there), then keeps the newest two intact ones.
    checkpointer.save(make_state(200).replace(params={"w": make_state(200).params["w"] * 2,
                                                      "b": make_state(200).params["b"]}))
    checkpointer.save(make_state(300))
    assert checkpointer.manager.all_steps() == [200, 300]
    checkpointer.close()
    fresh = Checkpointer(str(tmp_path), {"model": "a"}, keep=2)
    np.testing.assert_array_equal(fresh.restore(make_state(0), step=200).params["w"],
                                  make_state(200).params["w"] * 2)
    state, step, skipped = fresh.restore_latest_intact(make_state(0))
    assert (step, skipped) == (300, [])
    assert_same(state, make_state(300))


def test_every_checkpoint_damaged(tmp_path):
    two_checkpoints(tmp_path).close()
    DAMAGE["garbage_array_data"](str(tmp_path / "200"))
    DAMAGE["empty_step_directory"](str(tmp_path / "100"))
    checkpointer = Checkpointer(str(tmp_path), {"model": "a"})
    with pytest.raises(CorruptCheckpointError, match=r"no readable checkpoint .*/200 .*/100 "):
        checkpointer.restore_latest_intact(make_state(0))
    # nothing is moved aside when there is nothing to resume from
    assert checkpointer.manager.all_steps() == [100, 200]
    assert not os.path.exists(tmp_path / "corrupt")


def test_two_damaged_checkpoints_are_both_skipped(tmp_path, capsys):
    checkpointer = Checkpointer(str(tmp_path), {"model": "a"}, keep=3)
    for step in (100, 200, 300):
        checkpointer.save(make_state(step))
    DAMAGE["deleted_array_data"](str(tmp_path / "300"))
    DAMAGE["truncated_metadata"](str(tmp_path / "200"))
    state, step, skipped = checkpointer.restore_latest_intact(make_state(0))
    assert step == 100 and [s for s, _ in skipped] == [300, 200]
    assert capsys.readouterr().err.count("resuming from 100") == 2
    assert checkpointer.manager.all_steps() == [100]
    checkpointer.save(make_state(200))
    assert checkpointer.latest_step() == 200


def test_save_not_newer_than_the_newest_raises(tmp_path):
    checkpointer = two_checkpoints(tmp_path)
    with pytest.raises(RuntimeError, match="did not save checkpoint .*/150"):
        checkpointer.save(make_state(150))


def test_other_restore_errors_propagate(tmp_path, monkeypatch):
    """An error that says nothing about the files (here out of memory) is neither a corrupt
    checkpoint (which resuming would skip) nor a mismatch."""
    checkpointer = two_checkpoints(tmp_path)

    def fail(*args, **kwargs):
        raise MemoryError("RESOURCE_EXHAUSTED: out of memory")

    monkeypatch.setattr(checkpointer.manager, "restore", fail)
    with pytest.raises(MemoryError):
        checkpointer.restore_latest_intact(make_state(0))
    assert checkpointer.manager.all_steps() == [100, 200]
