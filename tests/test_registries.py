"""Contract tests over the registries: every registered JAX env and method meets the
interface shared code relies on. A new registration is picked up without editing this file.

* Envs: reset and step under `jit` and `vmap`, with the shapes and dtypes its spec declares,
  deterministically for a key.
* Methods: each trains two steps and evaluates a short rollout through the one pipeline, on the
  quick preset of an experiment config that uses it (found by scanning `experiments/`), shrunk to
  a tiny model. A method that no experiment config uses fails here: give it one.
"""

from __future__ import annotations

import json
import math
import os

import pytest

from icrl_jax import envs
from icrl_jax.pipeline import run as run_pipeline
from icrl_jax.core.config import check_key, set_dotted
from icrl_jax.core.registry import COMMANDS, REPORTS
from icrl_jax.methods import METHODS
from helpers import check_env_contract, env_of, experiment_configs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: The MJX envs, whose contract test_mjx_locomotion.py checks (`check_env_contract`, on hopper_v5:
#: the three share their wrapper and differ only in their MuJoCo model) beside their physics (an
#: MJX rollout is among the slowest programs of the suite to compile on a CPU).
MJX_ENVS = ("hopper_v5", "walker2d_v5", "halfcheetah_v5")


#: xminigrid's envs other than these two: one adapter (envs/xland.py) over xminigrid's own step,
#: so the contract is checked on one XLand and one MiniGrid env (test_xland.py checks that every
#: id is registered); each compiles for seconds on a CPU.
XMINIGRID_CHECKED = ("XLand-MiniGrid-R1-9x9", "MiniGrid-DoorKey-5x5")


def jax_env_names() -> list[str]:
    """Registered envs that run in JAX (host simulators have their own tests, test_host.py)."""
    from icrl_jax.envs.xland import ENV_IDS as XMINIGRID_IDS
    return [name for name in envs.REGISTRY.names()
            if not envs.make(name).host and name not in MJX_ENVS
            and (name not in XMINIGRID_IDS or name in XMINIGRID_CHECKED)]


@pytest.mark.parametrize("name", jax_env_names())
def test_every_jax_env_steps_under_jit_and_vmap_as_its_spec_declares(name):
    check_env_contract(envs.make(name))


CONFIGS = experiment_configs()

#: Overrides that make any experiment's run tiny (set where the config has the key).
TINY = {"model.d_model": 16, "model.num_layers": 1, "model.num_heads": 2,
        "model.mlp_width": 16,
        "train.num_steps": 2, "train.steps_per_call": 2, "train.batch_size": 2,
        "train.log_every": 2, "train.checkpoint_every": 2, "train.warmup_steps": 1,
        "data.num_train_tasks": 4, "data.num_test_tasks": 2, "data.histories_per_task": 1,
        "eval.num_envs_per_task": 1, "eval.baselines": ("random",), "eval.every": 0,
        "run.progress": False}


def cheapest_config(method: str):
    """The quick preset (else any preset) of the first experiment config that trains `method` on
    a JAX env with data made in seconds (not a PPO-trained locomotion dataset)."""
    usable = [(path, preset, config) for path, preset, config in CONFIGS
              if config.method == method and not env_of(config).host
              and config.data.builder != "locomotion"]
    usable.sort(key=lambda c: (c[1] != "quick", c[0], c[1]))
    return usable[0] if usable else None


@pytest.mark.parametrize("method", METHODS.names())
def test_every_method_trains_two_steps_and_evaluates(method, tmp_path):
    found = cheapest_config(method)
    assert found is not None, f"no experiment config trains method {method!r} on a JAX env"
    path, preset, config = found
    config.unlock()
    for dotted, value in TINY.items():
        try:
            check_key(config, dotted, free_form_kwargs=False)
        except ValueError:
            continue
        set_dotted(config, dotted, value)
    config.eval.num_steps = min(int(config.eval.num_steps), 200)
    config.workdir = str(tmp_path)
    config = run_pipeline.resolve_config(config)
    run_pipeline.train(config)
    with open(tmp_path / "eval.json") as f:
        result = json.load(f)
    scores = {k: v for k, v in result.items() if k.startswith("model") and isinstance(v, float)}
    assert scores, f"{path}:{preset}: no model score in eval.json"
    assert any(math.isfinite(v) for v in scores.values()), (path, preset, scores)


def test_every_report_kind_and_command_is_callable():
    for name in REPORTS.names():
        assert callable(REPORTS.get(name)), name
    for name in COMMANDS.names():
        command = COMMANDS.get(name)
        assert command.name == name and callable(command.run) and command.doc


def test_papers_outside_the_repository_register_through_an_entry_point(monkeypatch):
    import importlib.metadata

    from icrl_jax.core import registry

    loaded = []

    class EntryPoint:
        def load(self):
            loaded.append("my_paper.plugin")

    def entry_points(group):
        return [EntryPoint()] if group == registry.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry, "_loaded", False)
    registry.load_plugins()
    assert loaded == ["my_paper.plugin"]
