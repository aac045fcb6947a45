"""`icrl-jax COMMAND --config experiments/<paper>/<exp>.py[:preset] [--config.x.y=v]`

The commands come from the registry (`core.registry.COMMANDS`): the shared ones (generate,
train, evaluate, report, sweep: `pipeline/commands.py`) and those a paper package registers (e.g.
pretrain-lm, pretrain-vq). `icrl-jax --help` lists them with their lines. Every command with
--config runs through `core.run` (`resolve_config`, then `run`); `report` and `sweep` also take
`--runs DIR ... --out DIR` to combine finished runs.

A run whose work directory already holds checkpoints resumes from the latest one.

Bad input (an unknown command, config key, preset, method, environment or data source, a config
value breaking its declared constraint (`core/validation.py`), a missing config file or one that
does not load, a work directory holding another experiment or in use by another run, nothing
trained to evaluate) and faults of the machine (a write the file system refuses, out of memory)
print one line, `icrl-jax: <what is wrong>`, and exit with status 2 (README "Errors" lists what
is checked); any other exception is a bug: it keeps its traceback, says so in a last line, and
exits with status 1.
"""

from __future__ import annotations

import os
import re
import sys
import traceback

from absl import app, flags, logging
from ml_collections import config_flags

from icrl_jax.core.config import check_key
from icrl_jax.core.cpu_devices import use_one_device_per_core
from icrl_jax.models.fields import use_memory_scheduler
from icrl_jax.core.errors import UserError, did_you_mean
from icrl_jax.core.host_memory import reexec_with_huge_pages
from icrl_jax.core.registry import COMMANDS


def usage() -> str:
    names = COMMANDS.names()
    combining = [n for n in names if COMMANDS.get(n).aggregate is not None]
    lines = [f"icrl-jax {{{'|'.join(names)}}} --config FILE[:preset] [--config.key=value ...], "
             f"or icrl-jax {{{'|'.join(combining)}}} --runs DIR [--runs DIR ...] --out DIR"]
    lines += [f"  {n}: {COMMANDS.get(n).doc}" for n in names]
    return "\n".join(lines)

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file, optionally with ':preset' (e.g. "
    "experiments/ad/darkroom.py:quick).", lock_config=True)


_RUNS = flags.DEFINE_multi_string("runs", [], "report/sweep: run directories to aggregate.")
_OUT = flags.DEFINE_string("out", "", "report/sweep: output directory of the aggregate.")
_LABELS = flags.DEFINE_multi_string("labels", [], "sweep: legend labels of the --runs sweeps.")

# config_flags wraps an exception raised while loading the config file in a flag error whose
# message starts with this (and holds the file's traceback).
_CONFIG_FILE_FAILED = "Error whilst parsing config file"


def _aggregate(command) -> None:
    """`<command> --runs DIR ... --out DIR`: combine finished runs without training."""
    if not _RUNS.value or not _OUT.value:
        raise UserError(f"{command.name} needs --config FILE[:preset], or --runs DIR ... "
                        f"--out DIR")
    command.aggregate(list(_RUNS.value), _OUT.value, list(_LABELS.value))


def _run(argv: list[str]) -> None:
    # orbax and jax log every checkpoint step at INFO; the progress bars and summaries say enough.
    logging.set_verbosity(logging.WARNING)
    args = argv[1:]
    if len(args) != 1:
        raise UserError(f"expected one command, got {args or 'none'}; usage: "
                        f"{usage().splitlines()[0]}")
    if _CONFIG.value is None:
        command = COMMANDS.get(args[0])  # an unknown one fails naming the nearest
        if command.aggregate is not None:
            return _aggregate(command)
        raise UserError(f"{command.name} needs --config FILE[:preset], e.g. "
                        f"--config experiments/ad/darkroom.py:quick")
    if _RUNS.value or _OUT.value or _LABELS.value:
        raise UserError("--runs, --out and --labels aggregate finished runs and take no --config; "
                        "with --config the outputs go to the config's workdir")
    # Before anything touches a device: on a CPU remat saves memory only under this scheduler.
    use_memory_scheduler(_CONFIG.value)
    from icrl_jax.core import distributed
    # A multi-process run joins before anything touches a device: looking a command up imports
    # the modules that register commands, and gymnax computes on import.
    distributed.initialize(_CONFIG.value.dist)
    command = COMMANDS.get(args[0])
    from icrl_jax.pipeline import run as run_pipeline
    config = run_pipeline.resolve_config(_CONFIG.value)
    run_pipeline.run(config, command.name)
    return None  # app.run exits with a returned value as the status


def _config_arg(argv: list[str]) -> str | None:
    """The value of `--config FILE[:preset]` (or `--config=...`) in argv, None if absent."""
    for i, arg in enumerate(argv):
        match = re.fullmatch(r"--?config(=(.*))?", arg, re.DOTALL)
        if match and match.group(1):
            return match.group(2)
        if match and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _installed_experiments(argv: list[str]) -> list[str]:
    """argv with `--config experiments/...` pointing at the installed experiment files
    (`icrl_jax.experiments`) when no such path exists here: the README's commands then work
    from any directory, as after `pip install icrl-jax`."""
    value = _config_arg(argv)
    prefix = "experiments" + os.sep
    if value is None or os.path.exists(value.split(":", 1)[0]) or not value.startswith(prefix):
        return argv
    import importlib.util
    spec = importlib.util.find_spec("icrl_jax.experiments")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        return argv
    installed = os.path.join(list(spec.submodule_search_locations)[0], value[len(prefix):])
    if not os.path.isfile(installed.split(":", 1)[0]):
        return argv
    out = list(argv)
    for i, arg in enumerate(out):
        if re.fullmatch(r"--?config=.*", arg, re.DOTALL):
            out[i] = arg.split("=", 1)[0] + "=" + installed
            break
        if re.fullmatch(r"--?config", arg) and i + 1 < len(out):
            out[i + 1] = installed
            break
    return out


def _check_config_file(argv: list[str]) -> None:
    """A missing config file is a user error (config_flags defers it to an OSError traceback)."""
    value = _config_arg(argv)
    if value is None:
        return
    path = value.split(":", 1)[0]
    if os.path.isfile(path):
        return
    folder = os.path.dirname(path)
    nearby = ([os.path.join(folder, f) for f in os.listdir(folder or ".") if f.endswith(".py")]
              if os.path.isdir(folder or ".") else [])
    raise UserError(f"config file {path!r} not found (in {os.getcwd()})"
                    f"{did_you_mean(path, nearby)}")


def _override_error(argv: list[str]) -> UserError | None:
    """The error for the first `--config.a.b=v` naming a key the config lacks, None if all exist.

    Loads the config the way config_flags does (same file, preset and lock).
    """
    value = _config_arg(argv)
    overrides = [m.group(1) for m in (re.match(r"--?(?:no)?config\.([^=]+)", a) for a in argv) if m]
    if value is None or not overrides:
        return None
    config = flags.FLAGS["config"].parser.parse(value)
    for dotted in overrides:
        try:
            # The command line cannot add keys, not even to kwargs dicts: the config is locked.
            check_key(config, dotted, free_form_kwargs=False)
        except UserError as e:
            return e
    return None


def _user_error_in(error: BaseException) -> UserError | None:
    """The innermost `UserError` that `error` was raised from (config_flags and absl re-wrap a
    config file's exceptions, with the file's traceback in the wrapper's message)."""
    found, seen = None, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, UserError):
            found = error
        error = error.__cause__ or error.__context__
    return found


def _frames(error: BaseException):
    """(file, line) of each frame of `error`'s traceback, outermost first."""
    tb = error.__traceback__
    while tb is not None:
        yield tb.tb_frame.f_code.co_filename, tb.tb_lineno
        tb = tb.tb_next


def _config_file_error(error: BaseException, argv: list[str]) -> UserError | None:
    """One line for a config file that does not load (a syntax error, a failing import, an
    exception inside it, no `get_config`), naming the file and the line; None when `error` did
    not come from the config file."""
    value = _config_arg(argv)
    if value is None:
        return None
    path = value.split(":", 1)[0]
    target = os.path.abspath(path)
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    for error in reversed(chain):  # the innermost first: the wrappers repeat its traceback
        text = str(error).strip().splitlines()
        what = f"{type(error).__name__}: {text[0] if text else ''}"
        if isinstance(error, SyntaxError) and error.filename and \
                os.path.abspath(error.filename) == target:
            return UserError(f"config file {path} line {error.lineno}: {type(error).__name__}: "
                             f"{error.msg}")
        lines = [line for file, line in _frames(error) if os.path.abspath(file) == target]
        if lines:
            return UserError(f"config file {path} line {lines[-1]}: {what}")
        if isinstance(error, AttributeError) and "attribute 'get_config'" in str(error):
            return UserError(f"config file {path} defines no get_config(preset='') function")
        if isinstance(error, TypeError) and "get_config()" in str(error):
            return UserError(f"config file {path}: {what} (get_config takes the preset)")
    return None


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with bad input on the command line raised as a `UserError`.

    config_flags loads the config file while parsing `--config`, then applies the overrides; an
    override of a key the locked config lacks escapes as a bare AttributeError or KeyError from
    ml_collections, and a `UserError` from the config file (an unknown preset) as a flag error.
    Those become `UserError`s; anything else (a bug in a config file) is raised unchanged.
    """
    argv = _installed_experiments(argv)
    _check_config_file(argv)
    try:
        return flags.FLAGS(argv)
    except (AttributeError, KeyError, flags.Error) as e:
        user = _user_error_in(e) or _config_file_error(e, argv)
        from_config_file = isinstance(e, flags.Error) and _CONFIG_FILE_FAILED in str(e)
        if user is None and not from_config_file:
            user = _override_error(argv)
            if user is None and isinstance(e, flags.Error):
                # A value that does not parse as its key's type, an unknown flag, ...
                user = UserError(str(e))
        if user is None:
            raise
        raise user from None
    except Exception as e:  # a config file that does not load: a syntax error, an import, ...
        user = _user_error_in(e) or _config_file_error(e, argv)
        if user is None:
            raise
        raise user from None


def _fault(error: BaseException) -> str | None:
    """One line for a fault of the machine rather than the code, None for anything else: a
    write the file system refused (`core.files.WRITE_CAUSES`) that no layer named, or XLA out of
    memory outside the stages that name their settings (`pipeline/resources.py`)."""
    from icrl_jax.core.files import WRITE_CAUSES, write_failure
    failed = write_failure(error)
    if failed is not None:
        where = f" {failed.filename}" if failed.filename else ""
        return f"the file system refused{where}: {WRITE_CAUSES[failed.errno]}"
    from icrl_jax.pipeline.resources import asked_for, out_of_memory
    message = out_of_memory(error)
    if message is not None:
        size = asked_for(message)
        return (f"out of memory: the device could not make an allocation{' of ' + size if size else ''}; "
                f"lower the batch size (train.batch_size), the model width (model.d_model) or the "
                f"number of environments (eval.num_envs_per_task, data.num_train_tasks)")
    return None


def main() -> None:
    if len(sys.argv) == 1 or sys.argv[1] in ("-h", "--help", "help"):
        print(f"usage: {usage()}\n\nflags: --config FILE[:preset], --config.KEY=VALUE, --runs DIR, "
              f"--out DIR, --labels NAME (`icrl-jax --helpfull` lists every flag)")
        return
    reexec_with_huge_pages()  # first: glibc reads the tunable at start (icrl_jax/core/host_memory.py)
    try:
        use_one_device_per_core()  # before JAX starts (icrl_jax/core/cpu_devices.py)
    except ValueError as e:
        print(f"icrl-jax: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        app.run(_run, flags_parser=_parse_flags)
    except UserError as e:
        print(f"icrl-jax: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # not bad input: a bug, reported with its traceback
        fault = _fault(e)
        if fault is not None:
            print(f"icrl-jax: {fault}", file=sys.stderr)
            sys.exit(2)
        traceback.print_exc()
        print(f"icrl-jax: internal error {type(e).__name__} (a bug, not your input: please report "
              f"it with the command line and the traceback above)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
