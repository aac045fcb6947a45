"""Helpers several test files share: the registered experiment configs, and running the CLI."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def experiment_modules():
    """(path, module) of every experiment config file under experiments/: each module that has a
    `get_config`, found by walking the folder (a new file cannot escape)."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "experiments", "**", "*.py"), recursive=True)):
        if path.endswith("__init__.py"):
            continue
        module = importlib.import_module(
            "icrl_jax." + os.path.relpath(path, ROOT)[:-3].replace(os.sep, "."))
        if hasattr(module, "get_config"):
            found.append((os.path.relpath(path, ROOT), module))
    return found


def offered_presets(module):
    """The presets `module.get_config` accepts, as the one-line error for an unknown preset lists
    them (`available: a, b; ...`), read without the module's `PRESETS`; None when
    `get_config` takes an unknown name or its error lists nothing."""
    from icrl_jax.core.errors import UnknownNameError
    try:
        module.get_config("no such preset")
    except UnknownNameError as error:
        match = re.search(r"available: ([^;)]*)", str(error))
        if match:
            return sorted(name for name in match.group(1).split(", ") if name)
    return None


def experiment_configs():
    """(file, preset, config) of every experiment config file under experiments/ and every preset
    its `get_config` offers or its `PRESETS` declares ("" is the file's paper-scale default)."""
    found = []
    for path, module in experiment_modules():
        presets = set(offered_presets(module) or ()) | set(getattr(module, "PRESETS", ()))
        for preset in [""] + sorted(presets):
            found.append((path, preset, module.get_config(preset)))
    return found


#: xminigrid's benchmark file that stands in for one a preset names and a user downloads.
XLAND_BENCHMARK_STAND_IN = os.path.join(ROOT, "tests", "fixtures", "xland_hdf5", "trivial_stand_in")
_ENVS = {}


def env_of(config):
    """The config's env, built once for every config that names the same env and arguments (a
    brax env takes seconds to build). An XLand benchmark file that is not here (a preset that
    trains on a download) is built on `XLAND_BENCHMARK_STAND_IN`, of the same format."""
    from icrl_jax import envs
    kwargs = config.env.kwargs.to_dict()
    benchmark = kwargs.get("benchmark")
    if config.env.name.startswith("XLand-MiniGrid") and benchmark is not None:
        from icrl_jax.envs import xland_rulesets
        if benchmark not in xland_rulesets.KINDS and not os.path.isfile(benchmark):
            kwargs["benchmark"] = XLAND_BENCHMARK_STAND_IN
    key = (config.env.name, repr(sorted(kwargs.items())))
    if key not in _ENVS:
        _ENVS[key] = envs.make(config.env.name, **kwargs)
    return _ENVS[key]


def some_action(env, params):
    """An available action of each task in `params` (batched): the first allowed discrete
    action, the zero vector for continuous actions, component 0 for multi-discrete ones."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    n = jax.tree.leaves(params)[0].shape[0]
    if env.continuous_actions:
        return jnp.zeros((n, env.action_dim), jnp.float32)
    return jnp.asarray(np.argmax(np.asarray(params.action_mask), axis=1), jnp.int32)


def check_env_contract(env, steps: int = 4):
    """The registered-env contract: 3 tasks reset and stepped `steps` times under one jitted
    `vmap` of a `scan`, each with `some_action`; the same keys give the same rollout, and shapes
    and dtypes are the spec's. Returns the first observations `(3, *obs)` and the per-step
    `(obs, reward, terminated, truncated, info)`, each `(3, steps, ...)`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from icrl_jax import envs
    params = env.task_params(jnp.arange(3))
    actions = some_action(env, params)

    def rollout(key, p, action):
        obs, state = env.reset(key, p)

        def body(state, k):
            obs, state, reward, terminated, truncated, info = env.step(k, state, action, p)
            return state, (obs, reward, terminated, truncated, info)

        return obs, jax.lax.scan(body, state, jax.random.split(key, steps))[1]

    run = jax.jit(jax.vmap(rollout))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    first, per_step = run(keys, params, actions)
    again = run(keys, params, actions)
    for a, b in zip(jax.tree.leaves((first, per_step)), jax.tree.leaves(again)):
        np.testing.assert_array_equal(a, b)  # the same key gives the same rollout
    obs, rewards, terminated, truncated, _ = per_step
    assert first.shape == (3, *env.observation_shape)
    assert obs.shape == (3, steps, *env.observation_shape)
    assert rewards.shape == (3, steps) and rewards.dtype == jnp.float32
    assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_
    assert env.scoring in (envs.REGRET, envs.RETURNS)
    return first, per_step


def load_script(relative_path: str, name: str):
    """A script that is not in a package (a benchmark's), loaded as module `name`."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relative_path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
