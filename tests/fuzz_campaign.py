"""A fuzz campaign over every experiment file: how many invalid inputs are refused in one
`icrl-jax:` line with exit status 2, before anything is built (a measurement, not a test;
tests/test_fuzz_inputs.py is the test).

    python tests/fuzz_campaign.py make cases.json        # the invalid inputs (seeded)
    python tests/fuzz_campaign.py run cases.json         # in process: resolve_config on each
    python tests/fuzz_campaign.py cli cli_out.json       # the command line, a fixed sample
    (an older checkout: PYTHONPATH=<it> FUZZ_CWD=<it> python tests/fuzz_campaign.py ...)

`make` draws, for each experiment file (its `quick` preset, else its first), invalid values of
its declared fields and constructor arguments (env and source kwargs) and breaks the relations
between fields (`_relation_breakers` of the test). `run` needs only `get_config`, `set_dotted`
and `resolve_config`, so it also runs against an older checkout (put it first on PYTHONPATH) to
count what that one refused up front. An input counts as refused when `resolve_config` (or
setting the value) raises a one-line `UserError` and nothing was generated or built.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def _encode(value):
    if isinstance(value, tuple):
        return {"tuple": [_encode(v) for v in value]}
    if isinstance(value, float) and value != value:
        return {"float": "nan"}
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return {"float": "inf" if value > 0 else "-inf"}
    if isinstance(value, dict):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    return value


def _decode(value):
    if isinstance(value, dict) and "tuple" in value:
        return tuple(_decode(v) for v in value["tuple"])
    if isinstance(value, dict) and "float" in value:
        return float(value["float"])
    if isinstance(value, dict) and "dict" in value:
        return {k: _decode(v) for k, v in value["dict"].items()}
    return value


def experiment_files() -> list[tuple[str, str]]:
    """(module, preset) of every experiment file: its `quick` preset, else its first."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "experiments", "**", "*.py"), recursive=True)):
        if path.endswith("__init__.py"):
            continue
        module = "icrl_jax." + os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        loaded = importlib.import_module(module)
        if not hasattr(loaded, "get_config"):
            continue
        presets = sorted(getattr(loaded, "PRESETS", {}))
        out.append((module, "quick" if "quick" in presets else (presets[0] if presets else "")))
    return out


def make(path: str, per_file: int = 5, seed: int = 0) -> None:
    """Write the campaign's invalid inputs: `per_file` fields or arguments, and two broken
    relations, per experiment file."""
    from hypothesis import find, settings
    import test_fuzz_inputs as fuzz_inputs

    rng = random.Random(seed)
    quiet = settings(database=None, derandomize=True, max_examples=200)
    cases = []
    for module, preset in experiment_files():
        config = importlib.import_module(module).get_config(preset)
        rules = fuzz_inputs.field_rules(config)
        if config.method:
            rules.update(fuzz_inputs.argument_rules(config))
        rules.pop("workdir", None)
        arguments = sorted(k for k in rules if ".kwargs." in k)
        fields = sorted(k for k in rules if ".kwargs." not in k)
        chosen = arguments[:per_file - 2] if len(arguments) > per_file - 2 else arguments
        chosen = rng.sample(chosen, len(chosen)) + rng.sample(fields, per_file - len(chosen))
        for key in chosen:
            rule = rng.choice(rules[key])
            salt = rng.randrange(4)  # a different invalid value each time, found deterministically
            try:
                value = find(fuzz_inputs.invalid_values(rule), lambda v, s=salt: zlib.crc32(
                    repr(v).encode()) % 4 == s, settings=quiet)
            except Exception:  # a strategy of fewer values: its simplest one
                value = find(fuzz_inputs.invalid_values(rule), lambda v: True, settings=quiet)
            cases.append(dict(module=module, preset=preset, overrides={key: _encode(value)},
                              kind="argument" if ".kwargs." in key else "field"))
        if config.method:
            env = fuzz_inputs._env(config)
            breakers = fuzz_inputs._relation_breakers(config, env)
            for overrides, _ in rng.sample(breakers, min(2, len(breakers))):
                cases.append(dict(module=module, preset=preset, kind="relation",
                                  overrides={k: _encode(v) for k, v in overrides.items()}))
    with open(path, "w") as f:
        json.dump(cases, f, indent=1)
    print(f"{len(cases)} cases over {len({c['module'] for c in cases})} experiment files -> {path}")


class Built(Exception):
    pass


def run(path: str) -> None:
    """Apply each case in process and classify what `resolve_config` does with it."""
    os.environ.setdefault("HYPOTHESIS_NO_PLUGINS", "1")
    from icrl_jax.core.config import set_dotted
    from icrl_jax.core.errors import UserError
    from icrl_jax import methods
    from icrl_jax.data import builders
    from icrl_jax.pipeline import run as run_pipeline

    def built(*args, **kwargs):
        raise Built()
    for module, name in ((builders, "generate"), (run_pipeline, "generate"), (methods, "build_method"),
                         (run_pipeline, "build_method")):
        setattr(module, name, built)
    with open(path) as f:
        cases = json.load(f)
    counts: dict[str, int] = {}
    examples: dict[str, list] = {}
    for case in cases:
        try:
            config = importlib.import_module(case["module"]).get_config(case["preset"])
        except (ImportError, UserError):  # an older checkout without that file or preset
            counts["not in this checkout"] = counts.get("not in this checkout", 0) + 1
            continue
        config.workdir = tempfile.mkdtemp(prefix="fuzz-")
        os.rmdir(config.workdir)
        outcome = "accepted"
        try:
            config.unlock()
            for key, value in case["overrides"].items():
                value = _decode(value)
                if isinstance(value, dict):
                    section, name = key.split(".")
                    config[section][name] = value
                else:
                    set_dotted(config, key, value)
            run_pipeline.resolve_config(config)
        except UserError as e:
            outcome = "one line" if "\n" not in str(e) else "several lines"
            if outcome == "one line" and os.path.exists(config.workdir):
                outcome = "one line, after writing"
        except Built:
            outcome = "built before refusing"
        except Exception as e:  # a traceback on the command line
            outcome = f"crash ({type(e).__name__})"
        counts[outcome] = counts.get(outcome, 0) + 1
        examples.setdefault(outcome, []).append((case["module"], case["preset"],
                                                 case["overrides"]))
    print(json.dumps(dict(total=len(cases), counts=counts), indent=1))
    for outcome, cases_ in sorted(examples.items()):
        if outcome != "one line":
            for module, preset, overrides in cases_[:40]:
                print(f"  {outcome}: {module}:{preset} {overrides}")


#: The command-line sample: (config, extra flags, what it probes). `{file}` is an existing
#: file, `{bad}` a folder of broken config files, `{ro}` a read-only folder.
CLI_CASES = [
    ("experiments/ad/bernoulli_bandit.py:quick", ["--config.env.kwargs.arms=0"], "env argument"),
    ("experiments/headless_ad/darkroom.py:quick", ["--config.env.kwargs.max_actions=0"],
     "env argument"),
    ("experiments/ad/key_to_door.py:quick", ["--config.env.kwargs.start=middle"], "env argument"),
    ("experiments/headless_ad/contextual_bandit.py:quick", ["--config.env.kwargs.noise_std=-1.0"],
     "env argument"),
    ("experiments/continuous/point_maze.py:quick", ["--config.env.kwargs.layout=huge"],
     "env argument"),
    ("experiments/ad/darkroom.py:quick", ["--config.data.source_kwargs.eps=2.0"],
     "source argument"),
    ("experiments/ad/key_to_door.py:qlearning_cpu", ["--config.data.source_kwargs.lr=0.0"],
     "source argument"),
    ("experiments/ad/darkroom.py:quick", ["--config.data.num_test_tasks=0"], "relation"),
    ("experiments/continuous/point_maze.py:quick", ["--config.eval.target_returns=()"],
     "method setting"),
    ("experiments/ad/darkroom.py:quick", ["--config.train.num_steps=120"], "relation"),
    ("experiments/ad/darkroom.py:quick", ["--config.model.d_model=70"], "relation"),
    ("experiments/ad/bernoulli_bandit.py:quick", ["--config.model.d_model=1000000"],
     "resource size"),
    ("experiments/ad/bernoulli_bandit.py:quick", ["--config.train.batch_size=100000000"],
     "resource size"),
    ("{bad}/syntax.py", [], "config file"),
    ("{bad}/no_get_config.py", [], "config file"),
    ("{bad}/raises.py", [], "config file"),
    ("experiments/ad/bernoulli_bandit.py:quick", ["--config.workdir={file}"], "work directory"),
    ("experiments/ad/bernoulli_bandit.py:quick", ["--config.workdir={file}/run"],
     "work directory"),
    ("experiments/ad/bernoulli_bandit.py:quick", ["--config.workdir={ro}/run"], "read-only"),
    ("experiments/ad/bernoulli_bandit.py:quick", ["sweep"], "command"),
]


def cli(out_path: str, timeout: float = 150.0) -> None:
    """Run `CLI_CASES` with the `icrl-jax` on PATH (or `python -m icrl_jax.pipeline.cli`
    under PYTHONPATH); an input counts when it exits with status 2 after one `icrl-jax:` line
    on stderr and no traceback, within `timeout` seconds."""
    scratch = tempfile.mkdtemp(prefix="fuzz-cli-")
    bad = os.path.join(scratch, "bad")
    os.makedirs(bad)
    for name, text in {"syntax.py": "def get_config(preset=''):\n    x = (\n",
                       "no_get_config.py": "X = 1\n",
                       "raises.py": "def get_config(preset=''):\n    return {}.missing\n"}.items():
        with open(os.path.join(bad, name), "w") as f:
            f.write(text)
    file = os.path.join(scratch, "a_file")
    open(file, "w").close()
    ro = os.path.join(scratch, "ro")
    os.makedirs(ro)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", ro],
                             capture_output=True).returncode == 0
    results = []
    try:
        for i, (config, flags, what) in enumerate(CLI_CASES):
            command = "sweep" if "sweep" in flags else "train"
            flags = [f.format(file=file, ro=ro) for f in flags if f != "sweep"]
            if not any(f.startswith("--config.workdir") for f in flags):
                flags.append(f"--config.workdir={os.path.join(scratch, f'run{i}')}")
            argv = [*(["icrl-jax"] if "PYTHONPATH" not in os.environ else
                      [sys.executable, "-m", "icrl_jax.pipeline.cli"]),
                    command, "--config", config.format(bad=bad), *flags]
            if what == "read-only" and not mounted:
                continue
            start = time.time()
            try:
                out = subprocess.run(argv, cwd=os.environ.get("FUZZ_CWD", ROOT),
                                     capture_output=True, text=True, timeout=timeout)
                code, err = out.returncode, out.stderr
            except subprocess.TimeoutExpired as e:
                code, err = "timeout", (e.stderr or b"").decode(errors="replace")
            lines = [line for line in err.strip().splitlines() if line.strip()]
            errors = [line for line in lines if line.startswith("icrl-jax: ")]
            ok = code == 2 and "Traceback" not in err and len(errors) == 1
            results.append(dict(config=config, flags=flags, what=what, code=code, ok=ok,
                                seconds=round(time.time() - start, 1),
                                last=lines[-1][:300] if lines else "",
                                stderr_lines=len(lines)))
            print(f"{'ok ' if ok else 'BAD'} {code!s:7} {results[-1]['seconds']:6}s {what:15} "
                  f"{config} {' '.join(flags)}\n      {results[-1]['last']}", flush=True)
    finally:
        if mounted:
            subprocess.run(["umount", ro], capture_output=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print(f"{sum(r['ok'] for r in results)} of {len(results)} gave one icrl-jax: line and exit 2")


if __name__ == "__main__":
    action, path = sys.argv[1], sys.argv[2]
    {"make": make, "run": run, "cli": cli}[action](path)
