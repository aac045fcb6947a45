"""The documentation runs as written: the README's Python block, the examples, every config,
module and script the docs name, and the MkDocs site (`mkdocs build --strict`)."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import itertools
import json
import os
import re
import runpy
import subprocess
import sys

import pytest

from icrl_jax.core.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")

#: What a reader is pointed at: the README, the site's own pages (not the archive, a verbatim
#: record), the results files and the changelog.
DOC_FILES = sorted(
    [README, os.path.join(ROOT, "CHANGELOG.md"), os.path.join(ROOT, "experiments", "RESULTS.md"),
     os.path.join(ROOT, "benchmarks", "RESULTS.md")]
    + [p for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
       if os.sep + "archive" + os.sep not in p])


def python_blocks(path: str) -> list[str]:
    with open(path) as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)


def expand(text: str) -> list[str]:
    """Shell-style `{a,b}` and the docs' optional `[x]` suffixes, expanded: `a{1,2}[_ad]` ->
    a1, a1_ad, a2, a2_ad."""
    parts = re.split(r"(\{[^{}]*\}|\[[^\[\]]*\])", text)
    choices = [(p[1:-1].split(",") if p.startswith("{") else ["", p[1:-1]] if p.startswith("[")
                else [p]) for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def test_readme_is_short_and_opens_with_the_two_commands():
    data = open(README, "rb").read()
    assert len(data) <= 15 * 1024, f"README.md is {len(data)} bytes"
    first = re.search(r"^```bash\n(.*?)^```", data.decode(), flags=re.S | re.M).group(1)
    assert first.splitlines() == [
        'pip install -e ".[test]" && icrl-jax train --config experiments/ad/darkroom.py:quick',
        "python -m pytest -q"]


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the example writes runs/ under the working directory
    blocks = python_blocks(README)
    assert len(blocks) == 1
    namespace: dict = {"__name__": "readme"}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    results = namespace["results"]
    workdir = tmp_path / "runs" / "api_example"
    saved = json.loads((workdir / "eval.json").read_text())
    config = json.loads((workdir / "config.json").read_text())
    # The override reached the run, the evaluation is the one written, and it is printed.
    assert config["train"]["num_steps"] == 100 and config["preset"] == "quick"
    assert saved["step"] == 100 and saved["normalised_score"] == pytest.approx(
        results["normalised_score"])
    assert results["num_envs"] == 80  # 20 held-out goals x 4 rollouts
    assert f"normalised score {results['normalised_score']:.2f}" in capsys.readouterr().out


def test_example_trains_ad_on_bandits_and_plots_its_curve(tmp_path, monkeypatch, capsys):
    workdir, out = tmp_path / "run", tmp_path / "regret.png"
    monkeypatch.setattr(sys, "argv", ["ad_bandit_curve.py", "--workdir", str(workdir),
                                      "--num-steps", "100", "--num-histories", "200",
                                      "--out", str(out)])
    runpy.run_path(os.path.join(ROOT, "examples", "ad_bandit_curve.py"), run_name="__main__")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    results = json.loads((workdir / "eval.json").read_text())
    assert results["step"] == 100
    # The printed final regrets are the curves' last points, which eval.json also holds.
    for name in ("model", "source", "random"):
        assert f"{name} {results['curves'][name][-1]:.1f}" in printed
    assert results["random_final_regret"] > results["source_final_regret"]


def _references(pattern: str) -> set[str]:
    found = set()
    for path in DOC_FILES:
        with open(path) as f:
            found.update(m.group(1) for m in re.finditer(pattern, f.read()))
    return found


def test_every_config_and_preset_the_docs_name_exists():
    configs = _references(r"(experiments/[\w/{},]+\.py(?::[\w{},\[\]]+)?)")
    assert "experiments/ad/darkroom.py:quick" in configs
    missing = []
    for reference in sorted(configs):
        for one in expand(reference):
            path, _, preset = one.partition(":")
            if not os.path.isfile(os.path.join(ROOT, path)):
                missing.append(f"{reference}: no file {path}")
                continue
            if not preset or re.match(r"[A-Z]+(_|$)", preset):  # none, or a placeholder (PRESET)
                continue
            module = importlib.import_module("icrl_jax." + path[:-3].replace("/", "."))
            if not hasattr(module, "get_config"):
                missing.append(f"{reference}: {path} is not a config file")
                continue
            try:  # an unknown preset is the UserError that names the nearest one
                module.get_config(preset)
            except UserError as e:
                missing.append(f"{reference}: {e}")
    assert not missing, "\n".join(missing)


def test_every_module_and_script_the_docs_name_exists():
    modules = _references(r"python -m (icrl_jax[\w.]+)")
    scripts = _references(r"((?:benchmarks|examples|tests)/[\w/]+\.py)")
    assert modules and scripts
    missing = [m for m in sorted(modules) if importlib.util.find_spec(m) is None]
    missing += [s for s in sorted(scripts) if not os.path.isfile(os.path.join(ROOT, s))]
    assert not missing, missing


def test_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs and mkdocstrings are not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-5000:]
    # The API reference was collected from the code, and the papers' pages include the results.
    api = (site / "api" / "core" / "index.html").read_text()
    assert "resolve_config" in api and "UserError" in api
    paper = (site / "papers" / "headless-ad" / "index.html").read_text()
    assert "darkroom.py:quick" in paper
