"""docs/figures/make_figures.py: its table reading on hand-written cells, and the figures it writes
from a small results folder; a missing table is one line and exit 2."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys

import pytest

from helpers import ROOT

SCRIPT = os.path.join(ROOT, "docs", "figures", "make_figures.py")

EXPERIMENTS = "\n".join([
    "# Experiment results", "", "## Headless-AD", "",
    "| experiment | paper | ours | seeds | command | wall time |",
    "| --- | --- | --- | --- | --- | --- |",
    "| Table 1: Bernoulli bandits with 4-20 arms, scored on 20 / 30 arms | 0.97 / 0.98 "
    "| **0.86 / 0.91** (25 arms 0.88) | 0 | `icrl-jax report` | 2 h |",
    "| Table 1 ablations: 20 / 30 arms | each ablation lower | Headless-AD 0.50 ± 0.02 / 0.64 ± 0.04; "
    "prompt 0.55 ± 0.01 / 0.60 ± 0.04; **MSE loss -0.07 / -0.06** (one arm) | 0, 1, 2 | `for P` | 2 h |",
    "", "## M-SAT", "",
    "| experiment | paper | ours: DT / M-SAT / M-SAT no-PE / MAT | seeds | command | wall time |",
    "| --- | --- | --- | --- | --- | --- |",
    "| **Table 2, My Way Home, mixed** | M-SAT 0.964, no-PE 0.863, MAT 0.747 | 0.69 ± 0.07 (0.77) / "
    "0.68 ± 0.06 (0.78) / 0.85 ± 0.07 (0.94) / 0.63 ± 0.13 (0.73): close | 0, 1, 2 | x | y |",
    "| Table 2, Deadly Corridor, mixed | no-PE 16.17, M-SAT 14.88, MAT 12.28 | 3.05 ± 0.42 / "
    "3.22 ± 0.40 / 3.50 ± 0.67 / 3.58 ± 0.74 | 0, 1, 2 | x | y |", ""])

BENCHMARKS = """# Benchmark results

## Environment steps per second

| env | N | T | steps/s | vs gymnax | peak RSS (MiB) |
| --- | ---: | ---: | ---: | ---: | ---: |
| gymnax:BernoulliBandit-misc | 1 | 20000 | 400,622 | 1.00x | 407 |
| gymnax:BernoulliBandit-misc | 16 | 20000 | 2,427,844 | 1.00x | 439 |
| bernoulli_bandit | 1 | 20000 | 680,325 | 1.70x | 419 |
| bernoulli_bandit | 16 | 20000 | 5,909,815 | 2.43x | 466 |

## Context length: AD at XLand-100B's size, dense and blockwise attention

| context | attention | steps/s | tokens/s | MFU | peak RSS (GiB) | notes |
| --- | --- | --- | --- | --- | --- | --- |
| 512 | blockwise + remat | 0.027 | 110 | 62% | 2.70 | x |
| 1,024 | blockwise + remat | 0.0147 | 120 | 76% | 4.21 | x |
| 512 | blockwise + remat, default CPU scheduler | 0.0175 | 72 | 62% | 3.16 | x |

### Against the authors' model, in one run

| batch | attention dropout | implementation | s/step | peak RSS (GB) | speed-up vs theirs | RSS vs theirs |
|---|---|---|---|---|---|---|
| 32 | 0 | authors' code (PyTorch, CPU port) | 19.01 | 5.70 | | |
| 32 | 0 | ours | 22.82 | 5.57 | 0.8x | 0.98x |
| 4 | 0.22 | ours, memory-minimising CPU scheduler | 4.17 | 1.26 | 2.7x | 0.20x |
"""

DPT = "\n".join([
    "# DPT results", "", "| claim | paper | ours | command | wall time |", "| --- | --- | --- | --- | --- |",
    "| bandits online: regret | DPT ≈ TS | **partly**: regret DPT 8.67 ± 0.33 (8.87 / 9.11 / 8.02), TS 6.13, "
    "UCB 6.97, empirical mean 6.18, source 31.38, random 32.85 | x | y |",
    "| Dark Room, held-out goals, online: goal | few episodes | **partly**: return 0.6 ± 0.4 (episode 1), "
    "6.9 ± 2.9 (2), 41.3 ± 7.3 (10); reached 13% / 31% / 62%; the data's source (the explorer) 14.3, "
    "37.3, 48.7 | x | y |",
    "| DPT against AD | DPT learns | **shows**: bandits AD 32.34 ± 0.79; Dark Room AD returns 13.7 ± 3.1 "
    "(episode 1), 6.7 ± 0.7 (10): it does not improve | x | |", ""])

CURVES = {"title": "a tiny run", "curves": {
    policy: {"mean": [1.0 + k, 2.0 + k, 4.0 + k], "sem": [0.1, 0.2, 0.1]}
    for k, policy in enumerate(("random", "model", "source"))}}


def png_size(path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("make_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_figures"] = module  # its dataclass looks its own module up
    spec.loader.exec_module(module)
    return module


def test_cells_read_as_written(figures):
    assert figures.numbers("**0.86 / 0.91** (25 arms 0.88)") == [0.86, 0.91, 25, 0.88]
    assert figures.numbers("1,234 / -0.07 / 2e-05") == [1234, -0.07, 2e-05]
    assert figures.mean_sem("**1.385 ± 0.033** (1.45 / 1.36)") == (1.385, 0.033)
    mean, sem = figures.mean_sem("0.935")
    assert mean == 0.935 and sem != sem  # NaN: no error bar
    # A name inside a longer one does not count: DT is not GPT-DT's, GPT-DT not GPT-DTMA's.
    values = figures.named_values("GPT-DTMA 46.8 ± 0.7, DT 48.8 ± 1.1, GPT-DT 46.4",
                                  ["DT", "GPT-DT", "GPT-DTMA", "MAT"])
    assert values["DT"] == (48.8, 1.1) and values["GPT-DTMA"] == (46.8, 0.7)
    assert values["GPT-DT"][0] == 46.4 and "MAT" not in values
    assert figures.seed_values("1.053 ± 0.009 (1.065 / 1.06 / 1.035)") == [1.065, 1.06, 1.035]
    assert figures.seed_values("DT 20.3 ± 1.6 (18.6, 23.4, 18.8)") == [18.6, 23.4, 18.8]
    assert figures.seed_values("0.49 (training goals 0.67)") == []
    assert figures.episode_points("0.6 ± 0.4 (episode 1), 6.9 ± 2.9 (2); 13% (3)") == (
        [1, 2], [0.6, 6.9], [0.4, 2.9])


def test_tables_found_by_heading_and_row(figures, tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(EXPERIMENTS)
    tables = figures.read_tables(str(path))
    assert [t.section for t in tables] == ["Headless-AD", "M-SAT"]
    assert len(tables[0].rows) == 2 and len(tables[1].header) == 6
    row = figures.find_row(str(path), tables[1], r"Table 2, My Way Home")
    assert row["paper"].startswith("M-SAT 0.964")
    with pytest.raises(figures.FigureInputError, match="no row matching 'Table 9'"):
        figures.find_row(str(path), tables[1], r"Table 9")


def test_writes_each_figure_from_a_small_results_folder(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "RESULTS.md").write_text(EXPERIMENTS)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "RESULTS.md").write_text(BENCHMARKS)
    data = tmp_path / "docs" / "figures" / "data"
    data.mkdir(parents=True)
    (data / "ad_darkroom_quick.json").write_text(json.dumps(CURVES))
    (tmp_path / "experiments" / "dpt").mkdir()
    (tmp_path / "experiments" / "dpt" / "RESULTS.md").write_text(DPT)
    out = tmp_path / "img"
    result = subprocess.run([sys.executable, SCRIPT, "--root", str(tmp_path), "--out", str(out),
                             "--only", "curves,headless_ad,msat,dpt,bench_envs,long_contexts"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == ["ad_darkroom_curves.png", "bench_env_steps.png", "dpt_claims.png",
                       "headless_ad_table1.png", "long_contexts.png", "msat_table2.png"]
    assert result.stdout.split() == [os.path.join("img", n) for n in
                                     ("ad_darkroom_curves.png", "headless_ad_table1.png",
                                      "msat_table2.png", "dpt_claims.png", "bench_env_steps.png",
                                      "long_contexts.png")]
    for name in written:
        width, height = png_size(out / name)
        assert width > 300 and height > 200 and (out / name).stat().st_size > 10_000


def test_a_missing_table_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "RESULTS.md").write_text("# Experiment results\n\nno tables yet\n")
    result = subprocess.run([sys.executable, SCRIPT, "--root", str(tmp_path), "--out", str(tmp_path),
                             "--only", "gpt_dtma"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"make_figures: {tmp_path / 'experiments' / 'RESULTS.md'}: no table under a heading 'GPT-DTMA'"]
    result = subprocess.run([sys.executable, SCRIPT, "--only", "nope"], capture_output=True, text=True)
    assert result.returncode == 2 and "unknown figure 'nope'" in result.stderr
