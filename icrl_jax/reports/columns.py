"""`icrl-jax report` on a config with a `columns` section: one table of config variants x seeds.

Each column is a tuple of (dotted key, value) overrides of the config (e.g. GPT-DTMA's DT / DTMA / GPT-DT /
GPT-DTMA / GPT-DTMA-R, `experiments/gpt_dtma/`); a "{field}" in an override is replaced by
`report.<field>` (e.g. "{pretrained}": a language-model directory given at run time), and a
column listed in `report.optional_columns` is skipped while such a field is empty. Every column
trains `report.num_seeds` seeds on the one shared dataset, each in
`<workdir>/<column>/seed_<s>/` (resumable: a seed with an `eval.json` is not run again), and is
evaluated by the usual `run.evaluate`. The table reads `model@<highest target>_<metric>` for each
of `report.metrics` from the seeds' `eval.json`, and each of `report.run_metrics` (keys without
the target, e.g. a method's analysis readouts) where a seed has it (these fields:
`reports/fields.py`), and writes
`<workdir>/table.md` and `table.json` (mean, standard error, per-seed
values).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import ml_collections
import numpy as np

from icrl_jax.core.files import write_json, write_text
from icrl_jax.pipeline import run as run_pipeline
from icrl_jax.core.config import set_dotted
from icrl_jax.core.errors import UserError
from icrl_jax.core.metrics import seed_mean_sem
from icrl_jax.core.plots import plot_curves
from icrl_jax.core.registry import REPORTS
from icrl_jax.methods import method_class


def column_config(config, column: str, seed: int) -> ml_collections.ConfigDict:
    """The config of one column's seed: its overrides, seed and work directory, the shared
    dataset."""
    seeded = run_pipeline.seed_config(config, seed)
    seeded.unlock()
    for dotted, value in config.columns[column]:
        for field in _report_fields(value):
            if field not in config.report or not config.report[field]:
                raise UserError(f"column {column!r} starts from a language model: give its "
                                f"Hugging Face directory with --config.report.{field}=DIR "
                                "(e.g. the hf/ folder that `icrl-jax pretrain-lm` writes)")
            value = value.replace("{" + field + "}", str(config.report[field]))
        set_dotted(seeded, dotted, value)
    method_class(seeded.method).prepare_config(seeded)  # e.g. a column's LM's shape
    seeded.workdir = os.path.join(config.workdir, column, f"seed_{seed}")
    seeded.run.evaluate = True
    seeded.lock()
    return seeded


def _report_fields(value) -> list[str]:
    """The `report` fields a column override names as "{field}" (e.g. "{pretrained}")."""
    return re.findall(r"{(\w+)}", value) if isinstance(value, str) else []


def runnable_columns(config) -> list[str]:
    """The columns to run: all, less those in `report.optional_columns` whose "{field}"
    fields are empty (e.g. a column of a model whose weights were not given)."""
    optional = set(config.report.optional_columns)
    return [c for c in config.columns
            if c not in optional or all(f in config.report and config.report[f]
                                        for _, v in config.columns[c] for f in _report_fields(v))]


def _cell(values: list[float]) -> dict[str, Any]:
    values = [v for v in values if v is not None]
    if not values:
        return dict(mean=None, sem=None, seeds=[])
    mean, sem = seed_mean_sem(values)
    return dict(mean=float(mean), sem=float(sem), seeds=[float(v) for v in values])


def run_columns(config) -> dict[str, str]:
    """Train and evaluate every column's seeds (resuming), then write the table."""
    run_pipeline.generate(config, run_pipeline.build_env(config))
    target = f"model@{float(max(config.eval.target_returns)):g}"
    metrics = list(config.report.metrics)
    run_metrics = list(config.report.run_metrics)  # eval.json keys without the target prefix
    rows: dict[str, dict[str, Any]] = {}
    columns = runnable_columns(config)
    for skipped in [c for c in config.columns if c not in columns]:
        fields = [f"report.{f}" for _, v in config.columns[skipped] for f in _report_fields(v)]
        print(f"column {skipped} skipped: its model directory is not given ({', '.join(fields)})")
    curves: dict[str, list[list[float]]] = {}  # column -> per seed, metrics[0] by evaluation
    for column in columns:
        per_seed: dict[str, list] = {m: [] for m in metrics + run_metrics}
        for seed in range(int(config.report.num_seeds)):
            seeded = column_config(config, column, seed)
            os.makedirs(seeded.workdir, exist_ok=True)
            result_path = os.path.join(seeded.workdir, "eval.json")
            if not os.path.exists(result_path):
                run_pipeline.train(seeded)
            with open(result_path) as f:
                result = json.load(f)
            for metric in metrics:
                per_seed[metric].append(result.get(f"{target}_{metric}"))
            for metric in run_metrics:
                per_seed[metric].append(result.get(metric))
            curves.setdefault(column, []).append(
                _training_curve(seeded.workdir, f"{target}_{metrics[0]}"))
        rows[column] = {m: _cell(v) for m, v in per_seed.items()}
    table = dict(experiment=config.experiment, target=target,
                 seeds=int(config.report.num_seeds), rows=rows, curves=curves)
    if any(len(c) > 1 for seeds in curves.values() for c in seeds):
        _plot_training_curves(curves, os.path.join(config.workdir, "curves.png"),
                              ylabel=metrics[0], every=int(config.eval.every),
                              title=f"{config.experiment} ({target})")
    write_json(os.path.join(config.workdir, "table.json"), table, indent=1)
    path = os.path.join(config.workdir, "table.md")
    write_text(path, format_table(table, metrics))
    print(format_table(table, metrics))
    return dict(table=path)


def _training_curve(workdir: str, key: str) -> list[float]:
    """`key` of a run's evaluations in training order: those during training (`eval.every`,
    evals/step_*.json), then the final eval.json (NaN where a file lacks it)."""
    names = sorted(n for n in os.listdir(os.path.join(workdir, "evals")) if n.endswith(".json")
                   ) if os.path.isdir(os.path.join(workdir, "evals")) else []
    paths = [os.path.join(workdir, "evals", n) for n in names] + [
        os.path.join(workdir, "eval.json")]
    values = []
    for path in paths:
        with open(path) as f:
            value = json.load(f).get(key)
        values.append(float("nan") if value is None else float(value))
    return values


def _plot_training_curves(curves: dict[str, list[list[float]]], path: str, *, ylabel: str,
                          every: int, title: str) -> str:
    """The M-SAT paper's Fig. 3: each column's metric after each evaluation during training,
    mean and standard error over seeds (seeds with fewer evaluations padded with NaN)."""
    arrays = {}
    for column, seeds in curves.items():
        width = max(len(c) for c in seeds)
        arrays[column] = np.array([c + [np.nan] * (width - len(c)) for c in seeds])
    return plot_curves(arrays, path, xlabel=f"evaluation (every {every} updates)",
                       ylabel=ylabel, title=title)


def format_table(table: dict[str, Any], metrics: list[str]) -> str:
    """Markdown: a row per column, mean +- standard error over seeds per metric."""
    extra = [m for m in next(iter(table["rows"].values()), {}) if m not in metrics]
    show = metrics + [m for m in extra if any(r[m]["seeds"] for r in table["rows"].values())]
    lines = [f"{table['experiment']} ({table['target']}, {table['seeds']} seeds, mean ± s.e.m.)",
             "", "| column | " + " | ".join(show) + " |", "|---" * (len(show) + 1) + "|"]
    for column, cells in table["rows"].items():
        values = [("—" if cells[m]["mean"] is None else
                   f"{cells[m]['mean']:.3g} ± {cells[m]['sem']:.2g}") for m in show]
        lines.append(f"| {column} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


REPORTS.register("columns", run_columns)
