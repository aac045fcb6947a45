"""Packaging: the core install imports no optional package, the extras of `pyproject.toml` cover
every optional module the code looks up, and a part whose extra is missing says which one to
install, as one line (exit 2), not an ImportError.

The wheel itself, installed without extras in a fresh virtualenv, is `.ci/wheel`'s job.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

import icrl_jax
from icrl_jax.core import extras
from icrl_jax.core.registry import Registry

from helpers import ROOT, assert_user_error

#: The optional packages (top-level modules) and the extra each comes with.
OPTIONAL = {"vizdoom": "vizdoom", "miniworld": "miniworld", "brax": "continuous",
            "mujoco": "continuous", "minari": "continuous", "wandb": "wandb",
            "gguf": "gpt-dtma", "tokenizers": "gpt-dtma"}
#: Packages that only the optional ones pull in, or that no part of the project needs.
NEVER_IN_THE_CORE = ["vizdoom", "miniworld", "brax", "mujoco", "mujoco.mjx", "minari", "wandb",
                     "gguf", "tokenizers", "gymnasium_robotics", "pyglet", "pygame", "flask",
                     "torch"]

with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    PYPROJECT = tomllib.load(f)["project"]


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def _expanded(extra: str) -> set[str]:
    """The distributions `extra` installs, through the extras it names (`icrl-jax[a,b]`)."""
    out = set()
    for requirement in PYPROJECT["optional-dependencies"][extra]:
        if _name(requirement) == "icrl-jax":
            for other in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                out |= _expanded(other.strip())
        else:
            out.add(_name(requirement))
    return out


def test_importing_and_resolving_the_main_job_imports_no_optional_package(tmp_path):
    # A fresh interpreter: what `icrl-jax train --config experiments/ad/darkroom.py:quick` does
    # before it trains, and every registry listed in full (as `icrl-jax --help` does).
    script = f"""
import importlib.util, json, sys
import icrl_jax, icrl_jax.pipeline.cli
from icrl_jax.pipeline import run as run_pipeline
from icrl_jax.core.registry import COMMANDS, REPORTS, HOOKS
from icrl_jax import envs
from icrl_jax.methods import METHODS, build_method
from icrl_jax.data.sources import SOURCES
from icrl_jax.data.builders import BUILDERS
spec = importlib.util.spec_from_file_location("config", {os.path.join(ROOT, "experiments/ad/darkroom.py")!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
config = module.get_config("quick")
config.workdir = {str(tmp_path / "run")!r}
config = run_pipeline.resolve_config(config)
method = build_method(config, run_pipeline.build_env(config))
names = [n for r in (COMMANDS, REPORTS, HOOKS, envs.REGISTRY, METHODS, SOURCES, BUILDERS) for n in r.names()]
print(json.dumps(dict(method=type(method).__name__, parts=len(names),
                      optional=[m for m in {NEVER_IN_THE_CORE!r} if m in sys.modules],
                      deferred=[m for m in ("pandas", "scipy.stats") if m in sys.modules])))
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["optional"] == []
    assert result["deferred"] == []  # gymnax's seaborn import is deferred (envs/__init__.py)
    assert result["method"] and result["parts"] > 30
    assert (tmp_path / "run" / "config.json").exists()


def test_a_deferred_module_loads_on_its_first_attribute_read(tmp_path, monkeypatch):
    (tmp_path / "deferred_probe.py").write_text("import sys\nsys.deferred_probe_loads += 1\nVALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "deferred_probe_loads", 0, raising=False)
    monkeypatch.delitem(sys.modules, "deferred_probe", raising=False)
    extras.defer_import("deferred_probe")
    import deferred_probe as probe  # the import statement alone does not load it
    assert sys.deferred_probe_loads == 0
    assert probe.VALUE == 7 and sys.deferred_probe_loads == 1
    from deferred_probe import VALUE  # the real module is in sys.modules now; loaded once
    assert VALUE == 7 and sys.deferred_probe_loads == 1
    assert sys.modules["deferred_probe"] is not probe and sys.modules["deferred_probe"].VALUE == 7
    sys.modules.pop("deferred_probe")
    extras.defer_import("no_such_module_anywhere")  # not installed: nothing is put in its place
    assert "no_such_module_anywhere" not in sys.modules


def test_the_core_dependencies_name_no_optional_package():
    core = {_name(r) for r in PYPROJECT["dependencies"]}
    assert not core & {m.replace("_", "-") for m in NEVER_IN_THE_CORE}


def test_all_is_every_runtime_extra_and_test_adds_the_docs_and_tools():
    runtime = set(PYPROJECT["optional-dependencies"]) - {"all", "docs", "test"}
    assert runtime == {"vizdoom", "miniworld", "continuous", "wandb", "gpt-dtma", "xland"}
    assert _expanded("all") == set().union(*(_expanded(e) for e in runtime))
    assert _expanded("test") >= _expanded("all") | _expanded("docs") | {
        "pytest", "pytest-xdist", "hypothesis", "ruff", "build", "gymnasium-robotics", "mujoco"}


@pytest.mark.parametrize("module, extra", sorted(OPTIONAL.items()))
def test_each_optional_module_is_installed_by_its_extra(module, extra):
    # The installed metadata's extras are pyproject's (the message reads them from there).
    assert extras.extra_of(module) == extra
    listed = _expanded(extra)
    providers = {_name(d) for d in importlib.metadata.packages_distributions().get(module, [])}
    assert providers & listed, f"{module} comes from {providers}, {extra} lists {listed}"


def test_the_version_is_one_number():
    assert "version" in PYPROJECT["dynamic"] and "version" not in PYPROJECT
    assert importlib.metadata.version("icrl-jax") == icrl_jax.__version__, \
        "the installed metadata is stale: pip install -e . again"


def test_a_module_no_extra_lists_names_its_own_package():
    error = extras.missing_extra("not_a_package.sub", "part 'x'")
    assert str(error) == ("part 'x' needs the Python package 'not_a_package': pip install "
                          "'not_a_package' (no Python module 'not_a_package.sub')")


def test_require_and_import_refuse_a_missing_module_naming_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "brax", None)  # installed here, but `import brax` fails
    expected = ("environment 'hopper' needs the optional extra: pip install "
                "'icrl-jax[continuous]' (no Python module 'brax')")
    with pytest.raises(extras.MissingExtraError) as error:
        extras.require_extra("brax", "environment 'hopper'")
    assert str(error.value) == expected
    with pytest.raises(extras.MissingExtraError, match=re.escape(expected)):
        extras.require_extra("brax.envs", "environment 'hopper'")  # the parent package is missing
    with pytest.raises(extras.MissingExtraError) as error:
        extras.import_extra("brax", "environment 'hopper'")
    assert str(error.value) == expected
    assert extras.import_extra("json", "x") is json
    with pytest.raises(extras.MissingExtraError, match=re.escape(  # a package that is nowhere
            "x needs the Python package 'not_a_package': pip install 'not_a_package' (no Python "
            "module 'not_a_package')")):
        extras.import_extra("not_a_package.sub", "x")


def test_a_registered_part_needing_a_missing_package_names_its_extra(monkeypatch):
    registry = Registry("environment")
    registry.register("sim", object, needs=("vizdoom",))
    registry.register("plain", int)
    assert registry.needs("sim") == ("vizdoom",) and registry.needs("plain") == ()
    assert registry.get("sim") is object
    monkeypatch.setitem(sys.modules, "vizdoom", None)
    with pytest.raises(extras.MissingExtraError, match=re.escape(
            "environment 'sim' needs the optional extra: pip install 'icrl-jax[vizdoom]'")):
        registry.get("sim")
    assert registry.get("plain") is int and "sim" in registry and "sim" in registry.names()


@pytest.mark.parametrize("name, module", [("vizdoom", "vizdoom"), ("miniworld_darkroom", "miniworld"),
                                          ("hopper", "brax"), ("hopper_v5", "mujoco")])
def test_every_simulator_env_declares_its_package(monkeypatch, name, module):
    from icrl_jax import envs
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(extras.MissingExtraError, match=re.escape(
            f"environment {name!r} needs the optional extra: pip install "
            f"'icrl-jax[{OPTIONAL[module]}]'")):
        envs.make(name)


@pytest.mark.parametrize("cls, module", [("ViZDoom", "vizdoom"), ("MiniworldRoom", "miniworld")])
def test_a_host_simulator_built_directly_names_its_extra(monkeypatch, cls, module):
    from icrl_jax.envs.host import specs
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(specs.MissingSimulatorError, match=re.escape(f"pip install 'icrl-jax[{module}]'")):
        getattr(specs, cls)()


def test_minari_datasets_wandb_and_gguf_name_their_extras(monkeypatch, tmp_path):
    from icrl_jax.core.logging_utils import MetricsLogger
    from icrl_jax.data.builders import BUILDERS
    from icrl_jax.data.minari_io import read_minari
    from icrl_jax.models.llama import load_gguf_llama
    from icrl_jax.models.pretrained import pretrained_architecture

    for module in ("minari", "wandb", "gguf"):
        monkeypatch.setitem(sys.modules, module, None)
    cases = [(lambda: BUILDERS.get("minari"), "data builder 'minari'", "continuous"),
             (lambda: BUILDERS.get("locomotion"), "data builder 'locomotion'", "continuous"),
             (lambda: read_minari(tmp_path), "reading a Minari dataset", "continuous"),
             (lambda: MetricsLogger(str(tmp_path), "train", wandb=True), "log.wandb=True", "wandb"),
             (lambda: pretrained_architecture(str(tmp_path / "m.gguf")), "a GGUF model file", "gpt-dtma"),
             (lambda: load_gguf_llama(str(tmp_path / "m.gguf")), "a GGUF model file", "gpt-dtma")]
    for call, what, extra in cases:
        with pytest.raises(extras.MissingExtraError, match=re.escape(
                f"{what} needs the optional extra: pip install 'icrl-jax[{extra}]'")):
            call()


#: Blocks the given modules (as if not installed), then runs the CLI as the console script does.
_CLI_WITHOUT = ("import sys; sys.modules.update(dict.fromkeys({blocked!r})); "
                "sys.argv = ['icrl-jax'] + {args!r}; from icrl_jax.pipeline.cli import main; main()")


def test_the_cli_names_the_missing_extra_in_one_line(tmp_path):
    # One simulator stands for all: each env's package is checked where `envs.make` looks it up
    # (test_every_simulator_env_declares_its_package), and the CLI prints any UserError so.
    args = ["train", "--config", "experiments/dt/dt_my_way_home.py", f"--config.workdir={tmp_path / 'run'}"]
    out = subprocess.run([sys.executable, "-c", _CLI_WITHOUT.format(blocked=["vizdoom"], args=args)],
                         cwd=ROOT, capture_output=True, text=True)
    assert_user_error(out, "environment 'vizdoom' needs the optional extra: pip install 'icrl-jax[vizdoom]'",
                      "(no Python module 'vizdoom')")
    assert not (tmp_path / "run").exists()  # refused before anything was written
