"""The docs' guides run as written: every ```python block of a guide, in order, in one namespace
(so a guide cannot drift from the code)."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_blocks(path: str) -> list[str]:
    with open(path) as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)


def test_adding_a_paper_guide_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the guide writes runs/ under the working directory
    blocks = python_blocks(os.path.join(ROOT, "docs", "guides", "adding-a-paper.md"))
    assert len(blocks) == 6
    namespace: dict = {"__name__": "adding_a_paper"}
    for block in blocks:
        exec(compile(block, "adding-a-paper.md", "exec"), namespace)
    table = (tmp_path / "runs" / "toy_greedy_ad" / "table.md").read_text()
    assert "| greedy_ad | " in table and " ± " in table  # two seeds: mean ± s.e.m.
    assert "| greedy_ad |" in capsys.readouterr().out
    for seed in (0, 1):
        assert (tmp_path / "runs" / "toy_greedy_ad" / f"seed_{seed}" / "eval.json").exists()
