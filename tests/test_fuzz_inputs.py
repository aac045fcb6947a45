"""Every invalid input is refused up front, in one line: hypothesis draws invalid values for
every declared field and constructor argument (env and source kwargs, `core/validation.py`
`kwargs_of`) of every registered experiment config and preset, and for the relations between
them, and checks that `resolve_config` raises a one-line `UserError` before any data or model
is built. The strategies are derived from the declarations themselves, so a new field, env or
source is fuzzed without editing this file; a constructor argument nobody declared fails
`test_every_constructor_argument_is_declared`. A slower sample runs the CLI for the one-line,
exit-status-2 contract."""

from __future__ import annotations

import copy
import inspect
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from icrl_jax import envs
from icrl_jax.core import config as core_config
from icrl_jax.core import validation
from icrl_jax.core.errors import UserError
from icrl_jax.data import sources
from helpers import assert_user_error, env_of, experiment_configs, run_cli
from test_validation import NOT_INT, invalid_values as field_values

CONFIGS = [c for c in experiment_configs() if c[2].method]
IDS = [f"{path}:{preset}" for path, preset, _ in CONFIGS]

#: Arguments the source builders pass themselves (`data/sources/__init__.py`): not the user's.
SUPPLIED_SOURCE_ARGS = {"env", "num_steps", "num_episodes", "context_dim", "action_dim"}


# --- invalid values, by the rule a declaration states --------------------------------------------

def invalid_values(rule: str):
    """A strategy of values breaking `rule`: the config fields' rules (tests/test_validation.py)
    and those of constructor arguments."""
    match = re.fullmatch(r"must be None or (.+)", rule)
    if match:
        return invalid_values(f"must be {match.group(1)}").filter(lambda v: v is not None)
    match = re.fullmatch(r"must be an integer in \[(-?\d+), (-?\d+)\]", rule)
    if match:
        low, high = int(match.group(1)), int(match.group(2))
        return st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1), NOT_INT)
    match = re.fullmatch(r"must be an integer >= (\d+) or a pair \(low, high\) of them with "
                         r"low <= high", rule)
    if match:
        low = int(match.group(1))
        return st.one_of(st.integers(max_value=low - 1),
                         st.tuples(st.integers(low + 1, 50), st.integers(low, 50)).filter(
                             lambda p: p[0] > p[1]),
                         st.just((low, low, low)), st.just("x"), st.none())
    if rule.startswith("must be one of") and " or a map " in rule:
        return st.one_of(st.text(max_size=6).filter(lambda s: s not in ("umaze", "medium",
                                                                         "large")),
                         st.integers(), st.just(()))
    if rule.startswith("must be None, the name of an action set"):
        return st.one_of(st.integers(), st.floats(), st.just((-1,)), st.just((0.5,)))
    if rule.startswith("must be a Beta prior"):
        return st.one_of(st.tuples(st.floats(-10, 0.99), st.floats(1, 10)), st.just((1.0,)),
                         st.just("x"), st.none())
    if rule.startswith("must be None or a (row, column) pair") or rule.startswith(
            "must be a (row, column) pair"):
        return st.one_of(st.just((-1, 0)), st.just((1,)), st.just("x"), st.floats())
    return field_values(rule)


def _single(constraint) -> bool:
    return len(constraint.keys) == 1 and not constraint.needs and constraint.message is None


def argument_rules(config) -> dict[str, list[str]]:
    """The rules of the constructor arguments that apply to `config`: its env's kwargs, and its
    source's (on a host simulator, its oracle's, declared as the source it names), by full key;
    set or not."""
    rules: dict[str, list[str]] = {}
    for part, name in (("env", config.env.name), ("source", config.data.source)):
        group = dict(validation.CONSTRAINTS.items()).get(f"{part}:{name}", ())
        for constraint in group:
            if _single(constraint):
                rules.setdefault(constraint.keys[0], []).append(constraint.rule)
    return rules


def field_rules(config) -> dict[str, list[str]]:
    """The rules of the config's own declared fields it has (no `when`)."""
    rules: dict[str, list[str]] = {}
    for _, group in validation.CONSTRAINTS.items():
        for constraint in group:
            if _single(constraint) and not constraint.when and \
                    constraint.values(config) is not None:
                rules.setdefault(constraint.keys[0], []).append(constraint.rule)
    return rules


_HOST = {}


def _is_host(config) -> bool:
    name = config.env.name
    if name not in _HOST:
        cls = _env_class(name)
        _HOST[name] = isinstance(cls, type) and issubclass(cls, envs.HostEnv)
    return _HOST[name]


#: (config index, key, rules) of every declared field and constructor argument of every config
#: (but `workdir`, which each example sets to its own temporary directory).
TARGETS = [(i, key, tuple(rules)) for i, (_, _, config) in enumerate(CONFIGS)
           for key, rules in sorted({**field_rules(config), **argument_rules(config)}.items())
           if key != "workdir"]


def _override(config, key, value):
    config = copy.deepcopy(config)
    config.unlock()  # an argument not set yet is added, as `set_dotted` adds kwargs keys
    core_config.set_dotted(config, key, value)
    return config


class Built(AssertionError):
    """Raised where data or a model would be built before the input was refused."""


@pytest.fixture
def nothing_built(monkeypatch):
    """Data generation and model building raise `Built` while the test runs."""
    from icrl_jax import methods
    from icrl_jax.data import builders
    from icrl_jax.pipeline import run as run_pipeline

    def built(*args, **kwargs):
        raise Built("data or a model was built before the input was refused")
    for module, name in ((builders, "generate"), (run_pipeline, "generate"), (run_pipeline, "dataset_of"),
                         (methods, "build_method"), (run_pipeline, "build_method")):
        monkeypatch.setattr(module, name, built)
    return run_pipeline


def refused(run_pipeline, config, tmp_path) -> str:
    """The one-line message with which `resolve_config` refuses `config`."""
    config.workdir = str(tmp_path / "run")
    with pytest.raises(UserError) as info:
        run_pipeline.resolve_config(config)
    message = str(info.value)
    assert "\n" not in message, message
    assert not (tmp_path / "run").exists(), message  # nothing written either
    return message


# --- completeness: nothing can go undeclared -----------------------------------------------------

def test_every_constructor_argument_is_declared():
    """Each registered env and source declares every argument its constructor takes from the
    config (and no other), so each one is checked and fuzzed."""
    missing = []
    for name in envs.REGISTRY.names():
        constructor = envs.REGISTRY._parts[name]
        if isinstance(constructor, type) or hasattr(constructor, "func"):
            takes = _parameters(constructor)
        else:  # a factory of a class: Hopper(**kwargs) -> Locomotion("hopper", ...)
            takes = set(validation.declared_kwargs("env", name) or ())
        if set(validation.declared_kwargs("env", name) or ()) != takes or \
                validation.declared_kwargs("env", name) is None:
            missing.append(f"env {name}: takes {sorted(takes)}, declares "
                           f"{validation.declared_kwargs('env', name)}")
    for name in sources.SOURCES.names():
        declared = validation.declared_kwargs("source", name)
        if declared is None:
            missing.append(f"source {name}: declares nothing (data.sources.register)")
    for name in envs.REGISTRY.names():  # a host simulator's oracle: data.source_kwargs
        env_class = _env_class(name)
        if isinstance(env_class, type) and issubclass(env_class, envs.HostEnv):
            takes = _parameters(env_class.oracle) - {"num_steps"}
            declared = validation.declared_kwargs("source", env_class.ORACLE_SOURCE)
            if set(declared or ()) != takes or {c.keys[0] for c in env_class.ORACLE_KWARGS} != takes:
                missing.append(f"oracle of env {name}: takes {sorted(takes)}, declares {declared} "
                               f"as source {env_class.ORACLE_SOURCE!r}")
    assert not missing, "\n".join(missing)
    function_of = {"thompson_sampling": sources.thompson_sampling, "linucb": sources.linucb,
                   "q_learning": sources.q_learning, "noisy_oracle": sources.noisy_oracle,
                   "episode_replay": sources.episode_replay, "grid_explorer": sources.grid_explorer,
                   "uniform_random": sources.uniform_random, "noisy_expert": sources.noisy_expert,
                   "waypoint": sources.waypoint_controller, "noisy_rational": sources.noisy_rational}
    for name, function in function_of.items():
        takes = _parameters(function) - SUPPLIED_SOURCE_ARGS
        assert set(validation.declared_kwargs("source", name)) == takes, (name, takes)
    from icrl_jax.data.sources.ppo import PPOConfig
    import dataclasses
    ppo = {f.name for f in dataclasses.fields(PPOConfig)} | (
        _parameters(sources.ppo_source) - SUPPLIED_SOURCE_ARGS - {"config"})
    assert set(validation.declared_kwargs("source", "ppo")) == ppo


def _env_class(name: str):
    constructor = envs.REGISTRY.get(name)
    return constructor.func if hasattr(constructor, "func") else constructor


def test_a_host_simulator_refuses_a_source_other_than_its_oracle():
    """A host simulator's data is its own oracle's: a config naming another source is refused in
    one line naming the oracle's source, before anything is built."""
    hosts = [c for _, _, c in CONFIGS if _is_host(c)]
    assert hosts
    for config in hosts:
        oracle = _env_class(config.env.name).ORACLE_SOURCE
        assert config.data.source == oracle
        broken = copy.deepcopy(config)
        core_config.set_dotted(broken, "data.source", "thompson_sampling")
        with pytest.raises(UserError, match=f"data.source='thompson_sampling' has no effect "
                                            f"with env.name='{config.env.name}'.*{oracle}"):
            validation.validate(broken)


def _parameters(constructor) -> set[str]:
    bound = set()
    if hasattr(constructor, "func"):  # functools.partial
        names = list(inspect.signature(constructor.func).parameters)
        bound = set(names[:len(constructor.args)]) | set(constructor.keywords)
        constructor = constructor.func
    params = inspect.signature(constructor).parameters
    return {n for n, p in params.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - bound - {"self"}


def test_every_rule_has_invalid_values():
    for _, _, rules in TARGETS:
        for rule in rules:
            invalid_values(rule)
    assert len({key for _, key, _ in TARGETS if "kwargs." in key}) > 40  # env and source


# --- in process, without training ----------------------------------------------------------------

@settings(max_examples=250, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(target=st.sampled_from(TARGETS), data=st.data())
def test_an_invalid_field_or_argument_is_refused_before_anything_is_built(
        target, data, nothing_built, tmp_path_factory):
    index, key, rules = target
    value = data.draw(invalid_values(data.draw(st.sampled_from(rules))), label=key)
    try:
        config = _override(CONFIGS[index][2], key, value)
    except UserError as e:  # the value's type is not the field's: refused while setting it
        assert "\n" not in str(e) and key in str(e)
        return
    message = refused(nothing_built, config, tmp_path_factory.mktemp("fuzz"))
    assert key in message or key.rsplit(".", 1)[0] in message, (key, value, message)


def _relation_breakers(config, env) -> list[tuple[dict, str]]:
    """(overrides, what the message names) breaking a relation or requirement the config has."""
    out = [({"env.kwargs.no_such_argument": 1}, "env.kwargs.no_such_argument"),
           ({"train.steps_per_call": config.train.num_steps + 1}, "train.steps_per_call")]
    if config.train.steps_per_call > 1:
        out.append(({"train.num_steps": config.train.steps_per_call * 3 + 1}, "train.num_steps"))
    if config.eval.tasks == "test" and not (env.host and env.num_tasks == 1):
        out.append(({"data.num_test_tasks": 0}, "data.num_test_tasks"))
    if "timestep_encoding" in config.model:
        out.append(({"eval.target_returns": ()}, "eval.target_returns"))
        out.append(({"eval.context_caches": 2}, "has no effect"))  # a setting nothing reads
    if "grid_observations" in config.model:  # AD's: caches split the context
        out.append(({"eval.context_caches": config.train.seq_len + 1}, "eval.context_caches"))
    if config.model.get("ngram_positions") == ():
        out.append(({"model.ngram_max": 3}, "has no effect"))
        out.append(({"model.ngram_latest": True}, "model.ngram_latest=True has no effect"))
    if config.data.builder == "locomotion":
        out.append(({"data.histories_per_task": 4}, "has no effect"))
    if config.env.name in ("bernoulli_bandit", "contextual_bandit"):
        arms = config.env.kwargs.get("arms", (4, 20))
        most = arms if isinstance(arms, int) else arms[1]
        if most > 1:
            out.append(({"env.kwargs.max_arms": most - 1}, "env.kwargs.max_arms"))
    if env.host:  # its data is its own oracle's
        out.append(({"data.source": "thompson_sampling", "data.source_kwargs": {}}, "data.source"))
    else:
        source = "thompson_sampling" if env.kind != "bandit" else "grid_explorer"
        out.append(({"data.source": source, "data.source_kwargs": {}}, "data.source"))
        if validation.declared_kwargs("source", config.data.source) is not None:
            out.append(({"data.source_kwargs.no_such_argument": 1},
                        "data.source_kwargs.no_such_argument"))
    return out




def test_an_ngram_setting_without_ngram_layers_is_named():
    """Each n-gram setting a user sets on a config without n-gram layers (plain AD, the n-gram
    papers' `_ad` twins) is refused as having no effect, naming the setting; with layers it is
    taken."""
    without = [c for _, _, c in CONFIGS if c.get("model", {}).get("ngram_positions") == ()]
    assert without
    for config in without:
        for key, value in (("model.ngram_latest", True), ("model.ngram_match", "observation"),
                           ("model.ngram_max", 2), ("model.ngram_shuffle", True)):
            broken = copy.deepcopy(config)
            core_config.set_dotted(broken, key, value)
            with pytest.raises(UserError, match=f"{key}=.* has no effect without n-gram layers"):
                validation.validate(broken)
            core_config.set_dotted(broken, "model.ngram_positions", (1,))
            validation.validate(broken)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(index=st.sampled_from(range(len(CONFIGS))), data=st.data())
def test_a_broken_relation_or_requirement_is_refused_before_anything_is_built(
        index, data, nothing_built, tmp_path_factory):
    config = CONFIGS[index][2]
    breakers = _relation_breakers(config, env_of(config))
    overrides, named = data.draw(st.sampled_from(breakers))
    broken = copy.deepcopy(config)
    broken.unlock()
    for key, value in overrides.items():
        if isinstance(value, dict):
            broken[key.split(".")[0]][key.split(".")[1]] = value
        else:
            core_config.set_dotted(broken, key, value)
    message = refused(nothing_built, broken, tmp_path_factory.mktemp("fuzz"))
    assert named in message, (overrides, message)


# --- the command line: one line, exit status 2 ---------------------------------------------------

CLI_CASES = [
    ("experiments/ad/bernoulli_bandit.py:quick", ["--config.env.kwargs.arms=0"],
     "env.kwargs.arms=0"),
    ("experiments/headless_ad/darkroom.py:quick", ["--config.env.kwargs.max_actions=0"],
     "env.kwargs.max_actions=0"),
    ("experiments/ad/darkroom.py:quick", ["--config.data.source_kwargs.eps=2.0"],
     "data.source_kwargs.eps=2.0"),
    ("experiments/ad/darkroom.py:quick", ["--config.data.num_test_tasks=0"],
     "data.num_test_tasks"),
    ("experiments/continuous/point_maze.py:quick", ["--config.eval.target_returns=()"],
     "eval.target_returns=()"),
    ("experiments/ad/darkroom.py:quick", ["--config.train.num_steps=120"],
     "train.num_steps=120"),
]


@pytest.mark.parametrize("config, flags, fragment", CLI_CASES, ids=[c[1][0] for c in CLI_CASES])
def test_the_cli_refuses_in_one_line_with_exit_status_2(config, flags, fragment, tmp_path):
    out = run_cli("train", "--config", config, f"--config.workdir={tmp_path / 'run'}", *flags)
    assert_user_error(out, fragment)
    assert not (tmp_path / "run").exists()


def test_sweep_without_a_sweep_section_is_one_line(tmp_path):
    out = run_cli("sweep", "--config", "experiments/ad/bernoulli_bandit.py:quick",
                  f"--config.workdir={tmp_path / 'run'}")
    assert_user_error(out, "sweep needs a config with a `sweep` section")


def test_out_of_memory_names_the_settings_that_sized_it():
    from icrl_jax.pipeline.resources import OutOfMemoryError, sized_by
    _, _, config = CONFIGS[IDS.index("experiments/ad/darkroom.py:quick")]
    import jax
    import jax.numpy as jnp
    with pytest.raises(OutOfMemoryError) as info:
        with sized_by("training", config):
            jax.jit(lambda: jnp.ones((10 ** 6, 10 ** 6)))()  # 4 TB: XLA refuses it at once
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith("out of memory in training: the device could not make an "
                              "allocation of 3.6 TiB, sized by train.batch_size="), message
    assert f"model.d_model={config.model.d_model}" in message
    # What XLA:CPU says when the allocation fails while dispatching (d_model=10**6 on a CPU).
    from icrl_jax.pipeline.resources import asked_for, out_of_memory
    dispatch = RuntimeError("INTERNAL: Error dispatching computation: Out of memory allocating "
                            "16000000000000 bytes.")
    assert out_of_memory(dispatch) and asked_for(str(dispatch)) == "14.6 TiB"
    # A full disk under orbax says RESOURCE_EXHAUSTED too: not memory.
    assert out_of_memory(ValueError("RESOURCE_EXHAUSTED: Error writing local file: No space "
                                    "left on device [os_error_code='28']")) is None
