"""MetricsLogger: JSONL and TensorBoard as before, optional Weights & Biases (offline) logging."""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest

from icrl_jax.core import logging_utils
from icrl_jax.core.errors import UserError
from icrl_jax.core.logging_utils import MetricsLogger, finish_wandb, wandb_run_id


def read_wandb_records(path: str):
    """The protobuf records of an offline run's `.wandb` file.

    The file is a LevelDB-style log (what `wandb sync` uploads): a 7-byte header (":W&B", a
    2-byte magic, a version byte), then 32 KiB blocks of chunks, each a 4-byte CRC, a 2-byte
    little-endian length and a type (1 full, 2 first, 3 middle, 4 last); a block tail under 7
    bytes is padding. wandb no longer ships a Python reader for it."""
    from wandb.proto import wandb_internal_pb2 as pb
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", data[:7]
    block, pos, pending = 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:  # zero padding after the last chunk of a block
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_history(path: str) -> list[dict]:
    rows = []
    for record in read_wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def wandb_config(path: str) -> dict:
    """The config of the run, as recorded by `wandb.init` (the run record) and later updates."""
    config = {}
    for record in read_wandb_records(path):
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else \
            record.config.update if kind == "config" else []
        for item in updates:
            config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return config


def read_jsonl(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_jsonl_and_tensorboard(tmp_path):
    logger = MetricsLogger(str(tmp_path), "train")
    logger.write(10, {"loss": 1.5, "accuracy": 0.25})
    logger.write(20, {"loss": 1.0, "accuracy": 0.5})
    logger.close()
    MetricsLogger(str(tmp_path), "eval").write(20, {"return": 3})  # appends
    assert read_jsonl(tmp_path) == [
        {"step": 10, "phase": "train", "loss": 1.5, "accuracy": 0.25},
        {"step": 20, "phase": "train", "loss": 1.0, "accuracy": 0.5},
        {"step": 20, "phase": "eval", "return": 3.0}]
    assert glob.glob(str(tmp_path / "tensorboard" / "events.out.tfevents.*"))
    assert not os.path.exists(tmp_path / "wandb")


def test_missing_wandb_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(UserError, match=r"log.wandb=True needs the optional extra: pip install 'icrl-jax\[wandb\]'"):
        MetricsLogger(str(tmp_path), "train", wandb=True)


def test_unknown_wandb_mode(tmp_path):
    with pytest.raises(UserError, match="did you mean 'offline'"):
        MetricsLogger(str(tmp_path), "train", wandb=True, wandb_mode="ofline")


def test_wandb_run_id_is_stable_per_workdir(tmp_path):
    a, b = str(tmp_path / "run a"), str(tmp_path / "run_b")
    assert wandb_run_id(a) == wandb_run_id(a + "/") == wandb_run_id(os.path.relpath(a))
    assert wandb_run_id(a) != wandb_run_id(b)
    assert wandb_run_id(a).startswith("run-a-") and wandb_run_id(b).startswith("run_b-")


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    yield
    finish_wandb()


def offline_run_file(workdir) -> str:
    files = glob.glob(os.path.join(workdir, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 1, files
    return files[0]


def test_wandb_offline(tmp_path, offline_wandb):
    workdir = str(tmp_path / "work")
    config = {"method": "ad", "model": {"d_model": 64}}
    train = MetricsLogger(workdir, "train", wandb=True, wandb_mode="offline", run_config=config)
    train.write(10, {"loss": 2.0, "accuracy": 0.25})
    train.write(20, {"loss": 1.0, "accuracy": 0.5})
    train.close()
    evaluate = MetricsLogger(workdir, "eval", wandb=True)  # the same run, not a second one
    evaluate.write(20, {"return": 7.0})
    evaluate.close()
    assert [r["phase"] for r in read_jsonl(workdir)] == ["train", "train", "eval"]
    finish_wandb()

    path = offline_run_file(workdir)
    assert os.path.basename(path) == f"run-{wandb_run_id(workdir)}.wandb"
    rows = {row["_step"]: row for row in wandb_history(path)}
    assert sorted(rows) == [10, 20]
    assert rows[10]["train/loss"] == 2.0 and rows[10]["train/accuracy"] == 0.25
    assert rows[20]["train/loss"] == 1.0 and rows[20]["eval/return"] == 7.0
    logged = wandb_config(path)
    assert logged["method"] == "ad" and logged["model"] == {"d_model": 64}


def test_wandb_switching_workdir_finishes_the_previous_run(tmp_path, offline_wandb):
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    MetricsLogger(first, "train", wandb=True).write(1, {"loss": 3.0})
    MetricsLogger(second, "train", wandb=True).write(1, {"loss": 4.0})
    assert logging_utils._wandb_run[0] == os.path.abspath(second)
    MetricsLogger(second, "eval", wandb=True).write(1, {"return": 5.0})
    finish_wandb()
    assert logging_utils._wandb_run is None
    # one run per workdir, each with only its own values
    first_rows, second_rows = (wandb_history(offline_run_file(w)) for w in (first, second))
    assert [{k: v for k, v in r.items() if not k.startswith("_")} for r in first_rows] == [
        {"train/loss": 3.0}]
    assert [{k: v for k, v in r.items() if not k.startswith("_")} for r in second_rows] == [
        {"train/loss": 4.0, "eval/return": 5.0}]
