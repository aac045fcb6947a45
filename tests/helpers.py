"""Helpers several test files share: the registered experiment configs, and running the CLI."""

from __future__ import annotations

import glob
import importlib
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def experiment_configs():
    """(file, preset, config) of every experiment config file and preset under experiments/."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "experiments", "**", "*.py"), recursive=True)):
        if path.endswith("__init__.py"):
            continue
        module = importlib.import_module(
            "icrl_jax." + os.path.relpath(path, ROOT)[:-3].replace(os.sep, "."))
        if hasattr(module, "get_config"):
            for preset in [""] + sorted(getattr(module, "PRESETS", {})):
                found.append((os.path.relpath(path, ROOT), preset, module.get_config(preset)))
    return found


def run_cli(*args, cwd=ROOT):
    return subprocess.run(["icrl-jax", *args], cwd=cwd, capture_output=True, text=True)


def assert_user_error(out, *fragments):
    """Exit status 2 and a single `icrl-jax: ...` line on stderr holding every fragment."""
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("icrl-jax: "), out.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def fixture_config(directory):
    """The `config.json` a fixture script wrote beside its weights and outputs."""
    import json
    with open(os.path.join(directory, "config.json")) as f:
        return json.load(f)


def fixture_outputs(directory):
    """A fixture's `outputs.safetensors` as JAX arrays."""
    import jax.numpy as jnp
    from safetensors.numpy import load_file
    return {k: jnp.asarray(v) for k, v in load_file(os.path.join(directory, "outputs.safetensors")).items()}
