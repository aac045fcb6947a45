"""Bad input is reported as one line with exit status 2, bugs keep their tracebacks; configs load
without model code; a traced invalid action is a documented no-op in `ICRLEnv.step`."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icrl_jax import envs
from icrl_jax.core import config as core_config
from icrl_jax.core.errors import UnknownNameError, UserError
from helpers import assert_user_error, run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DARKROOM = "experiments/ad/darkroom.py:quick"


# --- the command line ---------------------------------------------------------------------------

def test_unknown_config_key_names_it_and_the_nearest_key():
    out = run_cli("train", "--config", DARKROOM, "--config.train.nonexistent=1")
    assert_user_error(out, "config has no key 'train.nonexistent'",
                      "did you mean 'train.num_steps'?")
    out = run_cli("train", "--config", DARKROOM, "--config.seed=3", "--config.trian.num_steps=1")
    assert_user_error(out, "config has no key 'trian'", "did you mean 'train'?")


def test_keys_cannot_be_added_from_the_command_line():
    # Even kwargs dicts are locked there; the message says where such keys go.
    out = run_cli("generate", "--config", DARKROOM, "--config.env.kwargs.size=5")
    assert_user_error(out, "'env.kwargs.size'", "config file")
    out = run_cli("generate", "--config", DARKROOM, "--config.train.num_steps.x=1")
    assert_user_error(out, "'train.num_steps'", "not a section")


def test_unparsable_value_is_a_user_error():
    out = run_cli("train", "--config", DARKROOM, "--config.train.num_steps=many")
    assert_user_error(out, "--config.train.num_steps=many")


def test_unknown_preset_command_and_config_file():
    assert_user_error(run_cli("train", "--config", "experiments/ad/darkroom.py:qiuck"),
                      "unknown preset 'qiuck'", "did you mean 'quick'?")
    assert_user_error(run_cli("trian", "--config", DARKROOM),
                      "unknown command 'trian'", "did you mean 'train'?", "available: evaluate, generate")
    assert_user_error(run_cli("train", "--config", "experiments/ad/darkrom.py:quick"),
                      "'experiments/ad/darkrom.py' not found",
                      "did you mean 'experiments/ad/darkroom.py'?")
    assert_user_error(run_cli("evaluate"), "evaluate needs --config")
    assert_user_error(run_cli("report", "--config", DARKROOM, "--runs", "runs/x"), "--runs")


def test_report_of_a_directory_holding_no_run_is_one_line(tmp_path):
    out = run_cli("report", "--runs", str(tmp_path), "--out", str(tmp_path / "out"))
    assert_user_error(out, f"report --runs {tmp_path}: no config.json there")


def test_user_error_raised_by_a_config_file_is_one_line(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("from icrl_jax.core.errors import unknown_name\n"
                    "def get_config(preset=''):\n"
                    "    raise unknown_name('action set', 'trian', ['train', 'test'])\n")
    assert_user_error(run_cli("train", "--config", str(path)),
                      "unknown action set 'trian'", "did you mean 'train'?")


@pytest.mark.parametrize("text, line, what", [
    ("def get_config(preset=''):\n    raise TypeError('a bug')\n", 2, "TypeError: a bug"),
    ("def get_config(preset=''):\n    return {}.no_such_attribute\n", 2,
     "AttributeError: 'dict' object has no attribute 'no_such_attribute'"),
    ("def get_config(preset=''):\n    x = (\n", 2, "SyntaxError: '(' was never closed"),
    ("import no_such_module_here\n", 1, "No module named 'no_such_module_here'"),
])
def test_a_config_file_that_does_not_load_names_the_file_and_line(tmp_path, text, line, what):
    path = tmp_path / "cfg.py"
    path.write_text(text)
    # With an override too: the CLI reloads the config to name a bad key and must not hide this.
    out = run_cli("train", "--config", str(path), "--config.seed=1")
    assert_user_error(out, f"config file {path} line {line}: ", what)


def test_a_config_file_without_get_config_is_one_line(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("X = 1\n")
    assert_user_error(run_cli("train", "--config", str(path)),
                      f"config file {path} defines no get_config(preset='') function")


# --- config.py ----------------------------------------------------------------------------------

def darkroom_config():
    from icrl_jax.experiments.ad.darkroom import get_config
    return get_config("quick")


def test_set_dotted_and_apply_preset_suggest_the_nearest_name():
    config = darkroom_config()
    with pytest.raises(UnknownNameError, match=r"'train\.num_stepz'.*did you mean 'train\.num_steps'"):
        core_config.set_dotted(config, "train.num_stepz", 1)
    with pytest.raises(UnknownNameError, match="unknown preset 'qiuck'; did you mean 'quick'"):
        core_config.apply_preset(config, {"quick": {}}, "qiuck")
    # kwargs dicts take new keys in a config file (checked when the env or source is built) ...
    core_config.set_dotted(config, "env.kwargs.size", 7)
    assert config.env.kwargs.size == 7
    # ... but not below a missing kwargs dict, and not when the caller forbids it.
    with pytest.raises(UnknownNameError, match="'env.kwargz'"):
        core_config.set_dotted(config, "env.kwargz.size", 7)
    with pytest.raises(UnknownNameError, match="'env.kwargs.episode_length'"):
        core_config.check_key(config, "env.kwargs.episode_length", free_form_kwargs=False)


def write_run(workdir, config):
    workdir.mkdir(exist_ok=True)
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=1, sort_keys=True))


def test_check_workdir_refuses_another_experiments_run(tmp_path):
    config = darkroom_config()
    config.workdir = str(tmp_path / "run")
    core_config.check_workdir(config)  # no run there yet
    write_run(tmp_path / "run", config)
    config.train.num_steps += 1  # the same run with other hyperparameters: resume / redo
    core_config.check_workdir(config)
    for key, value in (("experiment", "ad_key_to_door"), ("method", "headless_ad"),
                       ("env.name", "key_to_door")):
        other = darkroom_config()
        other.workdir = config.workdir
        core_config.set_dotted(other, key, value)
        with pytest.raises(UserError, match="--config.workdir") as info:
            core_config.check_workdir(other)
        message = str(info.value)
        assert repr(value) in message and "'darkroom'" in message and config.workdir in message


def test_check_workdir_refuses_an_unreadable_config_json(tmp_path):
    config = darkroom_config()
    config.workdir = str(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="unreadable config.json"):
        core_config.check_workdir(config)


def test_config_defaults_without_model_or_training_code():
    code = ("import sys, icrl_jax.core.config as c; c.base_config(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'flax', 'orbax', 'optax'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    log = core_config.base_config().log
    assert (log.wandb, log.wandb_project, log.wandb_mode) == (False, "icrl-jax", "offline")


# --- invalid actions inside jit -----------------------------------------------------------------

def mid_episode(env, params, moves):
    """A state a few steps into an episode (so "unchanged" differs from the reset state)."""
    key = jax.random.PRNGKey(1)
    obs, state = env.reset(key, params)
    for i, a in enumerate(moves):
        obs, state, *_ = env.step(jax.random.fold_in(key, i), state, a, params)
    return obs, state


CASES = {
    # env, params, moves to reach a mid-episode state, a valid action, invalid actions
    "bandit_fewer_arms": (lambda: envs.BernoulliBandit(arms=3, max_arms=5), [1], 2, [3, 4, 5, -1]),
    "contextual_bandit": (lambda: envs.ContextualBandit(arms=(2, 2), max_arms=4), [0], 1, [2, 9]),
    "composite_darkroom_train": (lambda: envs.CompositeDarkRoom(actions="train"), [0, 1], 3,
                                 [50, 124, 125]),
    "darkroom": (lambda: envs.DarkRoom(), [0, 3], 1, [5, -3]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_action_under_jit_is_a_no_op(case):
    make, moves, valid, invalid = CASES[case]
    env = make()
    params = env.default_params
    obs, state = mid_episode(env, params, moves)
    step = jax.jit(env.step)
    key = jax.random.PRNGKey(7)
    for action in invalid:
        o, s, r, term, trunc, info = step(key, state, jnp.int32(action), params)
        jax.tree.map(np.testing.assert_array_equal, s, state)
        np.testing.assert_array_equal(o, obs)
        np.testing.assert_array_equal(info["final_observation"], obs)
        assert float(r) == 0.0 and not bool(term) and not bool(trunc)
        assert bool(info["invalid_action"]) and not bool(info["terminated"])
        with pytest.raises(envs.InvalidActionError):
            env.step(key, state, action, params)
    jitted = step(key, state, jnp.int32(valid), params)
    eager = env.step(key, state, valid, params)
    assert not bool(jitted[-1]["invalid_action"]) and not bool(eager[-1]["invalid_action"])
    jax.tree.map(np.testing.assert_allclose, jitted, eager)


def test_invalid_action_does_not_end_the_episode_under_vmap():
    # On the last step an invalid action must neither truncate nor reset; a valid one does both.
    env = envs.DarkRoom(episode_length=3)
    params = env.default_params
    obs, state = mid_episode(env, params, [0, 0])
    actions = jnp.array([2, 7], jnp.int32)
    o, s, r, term, trunc, info = jax.vmap(env.step, in_axes=(None, None, 0, None))(
        jax.random.PRNGKey(0), state, actions, params)
    np.testing.assert_array_equal(info["invalid_action"], [False, True])
    np.testing.assert_array_equal(trunc, [True, False])
    np.testing.assert_array_equal(s.time, [0, 2])  # the valid step reset the episode
    np.testing.assert_array_equal(o[1], obs)


def test_float_actions_are_refused_while_tracing():
    env = envs.DarkRoom()
    params = env.default_params
    _, state = env.reset(jax.random.PRNGKey(0), params)
    with pytest.raises(envs.InvalidActionError, match="integer"):
        jax.jit(env.step)(jax.random.PRNGKey(0), state, jnp.float32(1.0), params)
