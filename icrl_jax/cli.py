"""`icrl-jax generate|train|evaluate --config experiments/<paper>/<exp>.py[:preset] [--config.x.y=v]`

* generate: learning histories of the configured source algorithm on the training tasks.
* train: generate (if the dataset is missing), train, then evaluate (unless `--config.run.evaluate=False`).
  A run whose work directory already holds checkpoints resumes from the latest one.
* evaluate: in-context evaluation of the latest checkpoint on held-out tasks.
* report: with --config, train `config.report.num_seeds` seeds (resuming) and evaluate each on the
  experiment's `variants`, then write Table 1 and figures to `<workdir>/report`; with --runs DIR
  (repeatable) and --out DIR, only aggregate existing runs into one table (e.g. Headless-AD, its
  ablations and AD baselines side by side).
* sweep: with --config, the random hyperparameter search of `config.sweep` (resuming: finished
  assignments are skipped), results and EMP in the workdir; with --runs DIR (repeatable) and --out
  DIR, only plot the EMP of several finished sweeps together (labels: --labels, repeatable).
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

COMMANDS = ("generate", "train", "evaluate", "report", "sweep")

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file, optionally with ':preset' (e.g. "
    "experiments/ad/darkroom.py:quick).", lock_config=True)


_RUNS = flags.DEFINE_multi_string("runs", [], "report: run directories to aggregate.")
_OUT = flags.DEFINE_string("out", "", "report: output directory (default <workdir>/report).")
_LABELS = flags.DEFINE_multi_string("labels", [], "sweep: legend labels of the --runs sweeps.")


def _sweep() -> None:
    from icrl_jax import pipeline, sweep

    if _CONFIG.value is not None:
        config = pipeline.resolve_config(_CONFIG.value)
        sweep.run_sweep(config)
        print(f"results: {config.workdir}/results.jsonl, EMP: {config.workdir}/emp.png")
        return
    if not _RUNS.value or not _OUT.value:
        raise app.UsageError("sweep needs --config FILE[:preset], or --runs DIR ... --out DIR")
    summary = sweep.compare_sweeps(_RUNS.value, _OUT.value, _LABELS.value or None)
    print(json.dumps(summary, indent=1))


def _report() -> None:
    from icrl_jax import pipeline, report

    runs = list(_RUNS.value)
    out = _OUT.value
    if _CONFIG.value is not None:
        config = pipeline.resolve_config(_CONFIG.value)
        pipeline.run_seeds(config)
        runs.append(config.workdir)
        out = out or f"{config.workdir}/report"
    if not runs or not out:
        raise app.UsageError("report needs --config FILE[:preset], or --runs DIR ... --out DIR")
    for name, path in report.write_report(runs, out).items():
        print(f"{name}: {path}")


def _run(argv: list[str]) -> None:
    # orbax and jax log every checkpoint step at INFO; the progress bars and summaries say enough.
    logging.set_verbosity(logging.WARNING)
    from icrl_jax import pipeline

    commands = [a for a in argv[1:]]
    if len(commands) != 1 or commands[0] not in COMMANDS:
        raise app.UsageError(f"usage: icrl-jax {{{'|'.join(COMMANDS)}}} --config FILE[:preset] "
                             f"[--config.key=value ...]; got {commands or 'no command'}")
    if commands[0] == "sweep":
        return _sweep()
    if commands[0] == "report":
        return _report()
    if _CONFIG.value is None:
        raise app.UsageError("--config is required, e.g. --config experiments/ad/darkroom.py:quick")
    config = pipeline.resolve_config(_CONFIG.value)
    command = commands[0]
    if config.get("runner"):  # an experiment with its own stages (host simulators: Miniworld)
        import importlib
        importlib.import_module(config.runner).run(config, command)
        return None  # app.run exits with a returned value as the status
    if config.method in pipeline.DT_METHOD_NAMES and command in ("generate", "train", "evaluate"):
        pipeline.run_dt(config, command)
    elif command == "generate":
        pipeline.generate(config, force=True)
    elif command == "train":
        pipeline.train(config)
    else:
        pipeline.evaluate(config)


def _import_root_of_config(argv: list[str]) -> None:
    """Make the package that holds the config file importable (configs import shared builders
    such as `experiments.ad.grid_common`), whatever directory the command runs from."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--config=") else (
            argv[i + 1] if arg == "--config" and i + 1 < len(argv) else None)
        if value is None:
            continue
        directory = os.path.dirname(os.path.abspath(value.split(":", 1)[0]))
        while os.path.exists(os.path.join(directory, "__init__.py")):
            directory = os.path.dirname(directory)
        if directory not in sys.path:
            sys.path.insert(0, directory)


def main() -> None:
    _import_root_of_config(sys.argv)
    try:
        app.run(_run)
    except KeyError as e:  # unknown --config.* key: ml_collections raises KeyError
        print(f"icrl-jax: configuration error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
