"""`python -m benchmarks`: the suites' list, and the accelerator suite at `--tiny` sizes on the
CPU, whose JSON must hold every row, measured, with positive numbers."""

import json
import os
import subprocess
import sys

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
