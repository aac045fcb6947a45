"""Declared config constraints (core/validation.py): every experiment config and preset passes;
invalid overrides of every constrained field (drawn by hypothesis: wrong types, negatives, zeros,
out of range, unknown choices, broken relations) each give one `UserError` line naming the key,
whose suggested example fixes it; the CLI prints it as one line with exit status 2."""

from __future__ import annotations

import ast
import copy
import os
import re

import ml_collections
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from icrl_jax.core import config as core_config
from icrl_jax.core import validation
from icrl_jax.core.errors import UserError
from helpers import (assert_user_error, env_of, experiment_configs, experiment_modules, offered_presets,
                     run_cli)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


CONFIGS = experiment_configs()
IDS = [f"{path}:{preset}" for path, preset, _ in CONFIGS]
#: Single-field constraints, by key (a key may have several: a method's and a paper's); the
#: constructor arguments of parts (`when`: for one env or source) are tests/test_fuzz_inputs.py's.
FIELD_RULES = {}
for _, group in validation.CONSTRAINTS.items():
    for _c in group:
        if len(_c.keys) == 1 and not _c.needs and not _c.when:
            FIELD_RULES.setdefault(_c.keys[0], []).append(_c.rule)
#: (config index, key) for every constrained field each config has.
CASES = [(i, key) for i, (_, _, config) in enumerate(CONFIGS) for key in sorted(FIELD_RULES)
         if validation.Constraint((key,), "", bool, "").values(config) is not None]




@pytest.mark.parametrize("index", range(len(CONFIGS)), ids=IDS)
def test_every_experiment_config_and_preset_validates(index):
    _, _, config = CONFIGS[index]
    validation.validate(config)
    if config.method:
        validation.validate(config, env_of(config), num_devices=1)


MODULES = experiment_modules()


@pytest.mark.parametrize("path, module", MODULES, ids=[path for path, _ in MODULES])
def test_every_experiment_file_declares_the_presets_it_offers(path, module):
    """`PRESETS` names exactly what `get_config` offers (its unknown-preset error lists them), so
    the configs above, found without `PRESETS`, are every preset of every file."""
    offered = offered_presets(module)
    assert offered is not None, f"{path}: get_config takes an unknown preset without a UserError"
    assert hasattr(module, "PRESETS"), f"{path}: no PRESETS (it offers {offered})"
    assert sorted(module.PRESETS) == offered, path
    assert "" not in module.PRESETS, f"{path}: the paper-scale default is the file without a preset"


def _cited_in_a_results_table(preset: str, tables: str) -> bool:
    """`preset` named in a results table, as `preset`, `:preset` or `preset[_ad]`; an `_ad`
    preset is the AD twin of its base (the tables' convention; `ad` is the default's twin)."""
    if re.search(rf"[`:]{re.escape(preset)}(\[_ad\])?[`\s]", tables):
        return True
    base = "" if preset == "ad" else preset[:-3] if preset.endswith("_ad") else None
    return base == "" or (base is not None and _cited_in_a_results_table(base, tables))


def test_no_experiment_file_keeps_more_than_ten_presets_unless_each_is_cited():
    with open(os.path.join(ROOT, "experiments", "RESULTS.md")) as f:
        tables = f.read()
    for path, module in MODULES:
        presets = sorted(getattr(module, "PRESETS", ()))
        if len(presets) > 10:
            uncited = [p for p in presets if not _cited_in_a_results_table(p, tables)]
            assert not uncited, f"{path}: {len(presets)} presets, not cited by a results table: {uncited}"


def test_the_constraints_cover_the_fields_the_issue_names():
    keys = set(FIELD_RULES)
    for key in ("train.batch_size", "train.num_steps", "train.seq_len", "model.d_model",
                "model.num_layers", "model.num_heads", "data.histories_per_task",
                "data.num_train_tasks", "eval.num_steps", "eval.num_envs_per_task",
                "train.learning_rate", "model.attention_dropout", "eval.temperature",
                "train.compute_dtype", "eval.tasks", "train.checkpoint_every"):
        assert key in keys, key
    assert all(len(CASES_PER_CONFIG[i]) > 30 for i in range(len(CONFIGS)))


CASES_PER_CONFIG = {i: [k for j, k in CASES if j == i] for i in range(len(CONFIGS))}


# --- invalid values, by the rule their field declares --------------------------------------------

NOT_INT = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none(), st.booleans(),
                    st.text(max_size=5))
# (ml_collections casts a bool set on a float field to 1.0 / 0.0: not drawn.)
NOT_NUMBER = st.one_of(st.sampled_from([float("nan"), float("inf"), float("-inf")]), st.none(),
                       st.text(max_size=5))
NOT_BOOL = st.one_of(st.integers(), st.none(), st.text(max_size=5))


def invalid_values(rule: str):
    """A strategy of values that break `rule` (a rule text of core/validation.py)."""
    if rule == "must be a positive integer":
        return st.one_of(st.integers(max_value=0), NOT_INT)
    match = re.fullmatch(r"must be an integer >= (-?\d+)", rule)
    if match:
        return st.one_of(st.integers(max_value=int(match.group(1)) - 1), NOT_INT)
    if rule == "must be an integer":
        return NOT_INT
    match = re.fullmatch(r"must be a number (>=?) (\S+)", rule)
    if match:
        low = float(match.group(2))
        below = st.floats(max_value=low, exclude_max=match.group(1) == ">=", allow_nan=False)
        return st.one_of(below, NOT_NUMBER)
    match = re.fullmatch(r"must be a number in ([\[(])(\S+), (\S+)([\])])", rule)
    if match:
        low, high = float(match.group(2)), float(match.group(3))
        return st.one_of(st.floats(max_value=low, exclude_max=match.group(1) == "[",
                                   allow_nan=False),
                         st.floats(min_value=high, exclude_min=match.group(4) == "]",
                                   allow_nan=False), NOT_NUMBER)
    if rule == "must be a finite number":
        return NOT_NUMBER
    if rule == "must be True or False":
        return NOT_BOOL
    if rule == "must be a string":
        return st.one_of(st.integers(), st.none(), st.floats())
    match = re.fullmatch(r"must be one of (.+)", rule)
    if match:
        choices = match.group(1).split(", ")
        return st.one_of(st.text(max_size=8).filter(lambda s: s not in choices), st.integers(),
                         st.none())
    match = re.fullmatch(r"must be (a|a non-empty) tuple of integers >= (\d+)", rule)
    if match:
        low = int(match.group(2))
        bad = st.lists(st.integers(max_value=low - 1), min_size=1, max_size=3).map(tuple)
        return st.one_of(bad, st.just(("x",)), st.none(),
                         *([st.just(())] if match.group(1) != "a" else []))
    match = re.fullmatch(r"must be a tuple of distinct entries of \((.+)\)", rule)
    if match:
        choices = match.group(1).split(", ")
        return st.one_of(st.text(max_size=6).filter(lambda s: s not in choices).map(
            lambda s: (s,)), st.just((choices[0], choices[0])), st.none())
    match = re.fullmatch(r"must be 0 \(.+\) or an integer >= (\d+)", rule)
    if match:  # a size whose 0 means "the default"
        return st.one_of(st.integers(1, int(match.group(1)) - 1), st.integers(max_value=-1),
                         NOT_INT)
    if rule in ("must map source names to their kwargs", "must be a mapping of AD's model fields"):
        # A section field (a ConfigDict) takes any mapping as a new section, and refuses other
        # types while it is set; None is what a config file can set that the rule refuses.
        return st.none()
    raise AssertionError(f"the test draws no invalid value for the rule {rule!r}")


def test_every_declared_rule_has_invalid_values():
    for rules in FIELD_RULES.values():
        for rule in rules:
            invalid_values(rule)


def _override(config, key, value):
    """A copy of `config` with `key` set as `--config.key=value` / `set_dotted` would."""
    config = copy.deepcopy(config)
    core_config.set_dotted(config, key, value)
    return config


def _parse_value(text: str):
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and text[1:2] in "('\"{":
        text = text[1:-1]  # shell quotes around a tuple or a mapping
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _parse_examples(message: str) -> dict:
    """The settings of the message's `e.g. --config.KEY=VALUE [--config.KEY=VALUE]`."""
    assert "; e.g. --config." in message, message
    settings_ = message.split("; e.g. ", 1)[1].split(" --config.")
    pairs = [s.removeprefix("--config.").split("=", 1) for s in settings_]
    return {key: _parse_value(text) for key, text in pairs}


def _parse_example(message: str, key: str):
    """The (key, value) of the message's single `e.g. --config.KEY=VALUE`."""
    (pair,) = _parse_examples(message).items()
    return pair


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(CASES), data=st.data())
def test_an_invalid_field_is_one_line_naming_the_key(case, data):
    index, key = case
    _, _, config = CONFIGS[index]
    rule = data.draw(st.sampled_from(FIELD_RULES[key]))
    value = data.draw(invalid_values(rule))
    with pytest.raises(UserError) as info:
        validation.validate(_override(config, key, value))
    message = str(info.value)
    assert "\n" not in message and f"config {key}=" in message, message
    # The suggested setting is valid for the key (a relation with another field, or a rule
    # that holds only `when` another field has some value, may still fail on it).
    example_key, example = _parse_example(message, key)
    assert example_key == key
    fixed = _override(config, key, example)
    for _, group in validation.CONSTRAINTS.items():
        for constraint in group:
            if constraint.keys == (key,) and not constraint.needs and not constraint.when:
                assert constraint.violation(fixed) is None, (message, example)


def _has_effect(config, key, value) -> bool:
    """False where a declared `no_effect` rule refuses `key=value` in this config."""
    probe = _override(config, key, value)
    for _, group in validation.CONSTRAINTS.items():
        for constraint in group:
            if constraint.keys[:1] == (key,) and not constraint.needs:
                message = constraint.violation(probe)
                if message is not None and "has no effect" in message:
                    return False
    return True


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(index=st.sampled_from(range(len(CONFIGS))), data=st.data())
def test_valid_overrides_pass(index, data):
    _, _, config = CONFIGS[index]
    overrides = {
        "train.batch_size": st.integers(1, 4096), "train.learning_rate": st.floats(1e-8, 10.0),
        "train.seq_len": st.integers(1, 10_000), "model.residual_dropout": st.floats(0, 0.99),
        "model.attention_dropout": st.floats(0, 0.99), "eval.temperature": st.floats(1e-3, 1e3),
        "eval.tasks": st.sampled_from(["test", "train"]),
        "train.compute_dtype": st.sampled_from(["auto", "fp32", "bf16"]),
        "eval.num_envs_per_task": st.integers(1, 64), "eval.num_steps": st.integers(1, 10 ** 6),
        "data.histories_per_task": st.integers(1, 100), "model.num_layers": st.integers(12, 24),
    }
    chosen = data.draw(st.lists(st.sampled_from(sorted(overrides)), unique=True, max_size=5))
    config = copy.deepcopy(config)
    for key in chosen:
        value = data.draw(overrides[key])
        if not _has_effect(config, key, value):
            continue  # e.g. data.histories_per_task with one PPO run: refused, and rightly
        core_config.set_dotted(config, key, value)
    heads = config.model.num_heads
    config.model.d_model = heads * data.draw(st.integers(1, 64))  # divisible: valid
    validation.validate(config)


# --- relations between fields --------------------------------------------------------------------

def _broken_relations(config, draw):
    """(overrides, key the message names) that break each relation this config has."""
    out = []
    heads, d_model = config.model.num_heads, config.model.d_model
    if heads > 1:
        out.append(({"model.d_model": heads * draw(st.integers(1, 32)) + draw(
            st.integers(1, heads - 1))}, "model.d_model"))
    else:
        out.append(({"model.num_heads": d_model + 1}, "model.d_model"))
    steps = config.train.num_steps
    out.append(({"train.steps_per_call": steps + draw(st.integers(1, 1000))},
                "train.steps_per_call"))
    per_call = config.train.steps_per_call
    if per_call > 1:
        out.append(({"eval.every": per_call * draw(st.integers(0, 5)) + draw(
            st.integers(1, per_call - 1))}, "eval.every"))
    if "ngram_positions" in config.model:
        out.append(({"model.ngram_positions": (config.model.num_layers + draw(
            st.integers(1, 4)),)}, "model.ngram_positions"))
    if "vq" in config:
        out.append(({"vq.steps_per_call": config.vq.num_steps + 1}, "vq.steps_per_call"))
    return out


@settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(index=st.sampled_from(range(len(CONFIGS))), data=st.data())
def test_a_broken_relation_is_one_line_naming_the_keys(index, data):
    _, _, config = CONFIGS[index]
    for overrides, key in _broken_relations(config, data.draw):
        broken = copy.deepcopy(config)
        for dotted, value in overrides.items():
            core_config.set_dotted(broken, dotted, value)
        with pytest.raises(UserError) as info:
            validation.validate(broken)
        message = str(info.value)
        assert "\n" not in message and f"{key}=" in message and "e.g. --config." in message, \
            (overrides, message)


#: Configs whose env has a finite task set (built once each: JAX envs build in milliseconds).
FINITE = [i for i, (_, _, config) in enumerate(CONFIGS)
          if config.method and (env_of(config).num_tasks or 0) > 1]


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(index=st.sampled_from(FINITE), extra=st.integers(1, 1000))
def test_more_tasks_than_the_env_has_is_one_line(index, extra):
    _, _, config = CONFIGS[index]
    env = env_of(config)
    broken = _override(config, "data.num_test_tasks",
                       env.num_tasks - config.data.num_train_tasks + extra)
    with pytest.raises(UserError, match=f"the {env.num_tasks} tasks the env has") as info:
        validation.validate(broken, env)
    assert "data.num_test_tasks=" in str(info.value) and "\n" not in str(info.value)
    fixed = copy.deepcopy(broken)
    for key, value in _parse_examples(str(info.value)).items():
        core_config.set_dotted(fixed, key, value)
    validation.validate(fixed, env)


def test_batch_size_must_divide_over_the_devices_of_several_processes():
    _, _, config = CONFIGS[IDS.index("experiments/ad/darkroom.py:quick")]
    validation.validate(_override(config, "train.batch_size", 16), num_devices=4)
    broken = _override(config, "train.batch_size", 4 * 3 + 1)
    with pytest.raises(UserError, match=r"train.batch_size=13: train.batch_size must divide over "
                                        r"the devices.*e\.g\. --config\.train\.batch_size=12"):
        validation.validate(broken, num_devices=4)
    validation.validate(broken, num_devices=None)  # one process: any batch (data_mesh takes a divisor)


def test_a_value_of_another_type_is_a_user_error_naming_the_key():
    _, _, config = CONFIGS[IDS.index("experiments/ad/darkroom.py:quick")]
    with pytest.raises(UserError, match=r"config train.batch_size='many' must be a int"):
        core_config.set_dotted(copy.deepcopy(config), "train.batch_size", "many")


# --- the command line ----------------------------------------------------------------------------

def test_cli_bad_values_are_one_line_with_exit_status_2(tmp_path):
    bandit = "experiments/ad/bernoulli_bandit.py:quick"
    workdir = f"--config.workdir={tmp_path / 'run'}"
    assert_user_error(run_cli("train", "--config", bandit, "--config.train.batch_size=-4", workdir),
                    "config train.batch_size=-4 must be a positive integer",
                    "e.g. --config.train.batch_size=64")
    assert_user_error(run_cli("train", "--config", "experiments/ad/darkroom.py:quick", workdir,
                            "--config.data.num_test_tasks=100"),
                    "data.num_test_tasks=100", "tasks the env has")
    assert not (tmp_path / "run").exists()  # nothing built, nothing written


def test_cli_evaluate_without_a_checkpoint_is_one_line(tmp_path):
    out = run_cli("evaluate", "--config", "experiments/ad/bernoulli_bandit.py:quick",
                  f"--config.workdir={tmp_path}")
    assert_user_error(out, f"no checkpoint to evaluate in {tmp_path}/checkpoints", "train first")
    assert not (tmp_path / "histories.npz").exists()  # found before any data is made


def test_a_config_section_in_a_message_is_one_line():
    section = ml_collections.ConfigDict({"ucb": {"bonus": 1.0}, "lcb": {}})
    assert validation.show_value(section) == "{'lcb': {}, 'ucb': {'bonus': 1.0}}"
    config = ml_collections.ConfigDict({"dpt": {"comparisons": section}})
    with pytest.raises(UserError) as error:
        core_config.set_dotted(config, "dpt.comparisons", 3)
    assert "\n" not in str(error.value) and "{'lcb': {}" in str(error.value)
