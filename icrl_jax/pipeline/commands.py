"""The shared CLI commands: generate, train, evaluate and report (`core.registry.COMMANDS`).

A paper package, or a tool such as the hyperparameter sweep, registers its own commands the same
way (e.g. a pretraining stage).
"""

from __future__ import annotations

from icrl_jax.pipeline import run as run_pipeline
from icrl_jax.core.distributed import is_main_process
from icrl_jax.core.registry import COMMANDS, Command


def generate(config):
    """With several processes: each makes its share, or process 0 all of it."""
    env = run_pipeline.build_env(config)
    rows = run_pipeline.process_share(config, env)
    if rows is None and not is_main_process():
        return None
    return run_pipeline.generate(config, env, force=True, rows=rows)


def aggregate_report(runs: list[str], out: str, labels: list[str]) -> None:
    del labels
    for name, path in run_pipeline.aggregate_runs(runs, out).items():
        print(f"{name}: {path}")


COMMANDS.register("generate", Command(
    "generate", generate, "learning histories (or the configured dataset) of the config's data "
    "source on its training tasks"))
COMMANDS.register("train", Command(
    "train", run_pipeline.train, "generate if missing, train (resuming), then evaluate unless "
    "--config.run.evaluate=False"))
COMMANDS.register("evaluate", Command(
    "evaluate", run_pipeline.evaluate, "in-context evaluation of the latest checkpoint on held-out tasks"))
COMMANDS.register("report", Command(
    "report", run_pipeline.report, "the config's `report.kind` (seeds, a paper's tables); with --runs DIR "
    "... --out DIR, one table of finished runs", aggregate=aggregate_report))
