"""`python -m benchmarks`: the suites' list, and the accelerator suite at `--tiny` sizes on the
CPU, whose JSON must hold every row, measured, with positive numbers."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"), **kwargs)


def test_no_suite_lists_the_suites():
    done = run()
    assert done.returncode == 0, done.stderr
    from benchmarks.__main__ import SUITES
    for name in SUITES:
        assert f"  {name} " in done.stdout
    assert "time:" in done.stdout


def test_an_unknown_suite_is_one_error():
    done = run("no_such_suite")
    assert done.returncode == 2
    assert "unknown suite 'no_such_suite'" in done.stderr


def test_accelerator_tiny_measures_every_row(tmp_path):
    done = run("accelerator", "--tiny", "--device", "cpu", "--out", str(tmp_path), "--budget", "3600")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "accelerator.json").read_text())
    from benchmarks.accelerator import select_rows
    expected = [row.name for row in select_rows(None, tiny=True)]
    assert [r["name"] for r in result["rows"]] == expected and not result["waiting"]
    groups = {name.split("/")[0] for name in expected}
    assert groups == {"train", "eval", "envs", "histories"}
    assert "envs/gymnax:BernoulliBandit-misc" in expected
    for row in result["rows"]:
        assert row["status"] == "ok", row
        rate = row.get("tokens_per_s") or row.get("env_steps_per_s")
        assert rate > 0 and row["compile_s"] > 0 and row["seconds_per_call"] > 0, row
        assert row["host_peak_rss_mib"] > 0
        if row["name"].startswith("train/"):
            assert 0 < row["mfu"] and row["model_flops_per_s"] > 0 and row["params"] > 0, row
    assert result["device"]["platform"] == "cpu"
    table = (tmp_path / "accelerator.md").read_text()
    assert table.startswith("## Accelerator suite") and all(f"| {name} |" in table for name in expected)


def test_gpu_attention_rows_use_the_accelerator_suites_models(monkeypatch):
    """Each diagnostic row trains what the accelerator suite's row of its model and precision
    trains: the same experiment config (tiny and full size), steps a call and AD sizes."""
    from benchmarks import accelerator, gpu_attention, training

    class Captured(Exception):
        pass

    def capture(*args, **kwargs):
        raise Captured(args, kwargs)

    monkeypatch.setattr(training, "measure_experiment", capture)
    monkeypatch.setattr(training, "measure_ad", capture)
    specs = {(s.model, s.precision) for s in gpu_attention.SPECS}
    assert specs == {("main_job", "bf16"), ("main_job", "fp32"), ("xland_4096", "fp32"),
                     ("xland_4096", "bf16"), ("headless_ad_paper", "bf16")}
    for tiny in (True, False):
        for model, precision in specs:
            row = "ad_xland_size_4096" if model == "xland_4096" else model
            try:
                accelerator.measure_training(f"train/{row}/{precision}", tiny, 60.0)
            except Captured as e:
                args, kwargs = e.args
            steps = gpu_attention.steps_per_call(model, tiny)
            assert kwargs["steps_per_call"] == steps, (model, tiny)
            if model == "xland_4096":
                assert tuple(args[:5]) == gpu_attention.xland_sizes(tiny) and args[5] == precision
            else:
                config = args[0]
                config.train.steps_per_call = steps
                expected = gpu_attention.experiment_config(model, precision, tiny)
                expected.train.steps_per_call = steps
                assert config.to_dict() == expected.to_dict(), (model, precision, tiny)


def test_gpu_attention_probe_counts_the_kernels_that_ran(monkeypatch):
    import jax
    import numpy as np

    from benchmarks.gpu_attention import AttentionProbe
    from icrl_jax.models import attention
    for name in AttentionProbe.KERNELS:  # put back after the test
        monkeypatch.setattr(attention, name, getattr(attention, name))
    probe = AttentionProbe()
    q = jax.numpy.asarray(np.random.default_rng(0).standard_normal((1, 8, 2, 4)), jax.numpy.float32)
    mask = np.tril(np.ones((8, 8), bool))[None, None]
    attention.dot_product_attention(q, q, q, mask, causal_from=0, implementation="dense")
    attention.dot_product_attention(q, q, q, mask, causal_from=0, implementation="blockwise")
    attention.dot_product_attention(q, q, q, mask, causal_from=0, implementation="blockwise")
    assert probe.take() == "blockwise x2, dense x1"
    assert probe.take() == "none"


def test_reference_speed_settings_are_read_as_config_values():
    from benchmarks.bench_reference_speed import parse_settings
    assert parse_settings(["model.remat=true", "model.attention_block_size=128",
                           "model.attention_impl=dense"]) == {
        "model.remat": True, "model.attention_block_size": 128, "model.attention_impl": "dense"}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_settings(["model.remat"])
