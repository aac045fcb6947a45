"""A Uni[MASK] grid's results: means, standard errors and the paper's claims (`summarise`), its
heatmaps (`write_heatmaps`), and the report across data sizes of several grids
(`data_size_report`, `icrl-jax report --runs`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.files import write_json, write_text
from icrl_jax.core.metrics import seed_mean_sem
from icrl_jax.papers.unimask.appendix import APPENDIX_RAW, FINETUNED, appendix_comparison
from icrl_jax.papers.unimask.masks import TASKS


def summarise(rows: dict[str, np.ndarray], config, seconds: float | None = None) -> dict[str, Any]:
    """Means, standard errors, normalised values and the paper's claims of a grid's losses;
    `wall_seconds` when `seconds` (the grid's training time) is given."""
    tasks = list(TASKS)
    stats = {r: seed_mean_sem(v) for r, v in rows.items()}
    mean = {r: s[0] for r, s in stats.items()}
    sem = {r: s[1] for r, s in stats.items()}
    result: dict[str, Any] = dict(
        tasks=tasks, rows=list(rows), seeds=int(config.grid.num_seeds),
        num_train_trajectories=int(config.data.num_train_tasks),
        num_validation_trajectories=int(config.data.num_test_tasks),
        **({} if seconds is None else {"wall_seconds": round(seconds, 1)}),
        losses={r: listed(v) for r, v in rows.items()},
        mean={r: listed(v) for r, v in mean.items()},
        sem={r: listed(v) for r, v in sem.items()})
    if FINETUNED in mean:
        ref = mean[FINETUNED]
        result["normalised"] = {r: listed(v / ref) for r, v in mean.items()}
    single = [t for t in tasks if t in mean]
    claims = {}
    if "random" in mean and single:
        best_single = np.min([mean[t] for t in single], axis=0)
        ratio = mean["random"] / best_single
        claims["random_within_15pct_of_best_single_task"] = dict(
            ratio_per_task=dict(zip(tasks, np.round(ratio, 3).tolist())),
            holds=bool((ratio <= 1.15).all()))
        if "behaviour_cloning" in mean:
            hard = ["past_inference", "future_inference", "forward_dynamics", "inverse_dynamics"]
            idx = [tasks.index(t) for t in hard]
            bc_ratio = mean["behaviour_cloning"][idx] / mean["random"][idx]
            claims["bc_several_times_worse_than_random_on_dynamics_and_inference"] = dict(
                ratio_per_task=dict(zip(hard, np.round(bc_ratio, 2).tolist())),
                # The paper's own ratios (Fig. 10, 500 trajectories): 1.6x and 1.55x on the
                # inference tasks, 34x and 4.9x on the dynamics tasks.
                paper_ratio_per_task=dict(zip(hard, (1.59, 1.55, 34.4, 4.92))),
                holds=bool((bc_ratio >= 2.0).all()),
                holds_on_dynamics=bool((bc_ratio[2:] >= 2.0).all()))
    if FINETUNED in mean and single:
        own = {t: (mean[FINETUNED][j], mean[t][j]) for j, t in enumerate(tasks) if t in mean}
        claims["finetune_at_least_as_good_as_single_task"] = dict(
            finetune_vs_single={t: [round(float(a), 4), round(float(b), 4)]
                                for t, (a, b) in own.items()},
            # "at least as good": not worse by more than two standard errors
            holds=bool(all(a <= b + 2 * max(float(sem[FINETUNED][tasks.index(t)]),
                                            float(sem[t][tasks.index(t)]))
                           for t, (a, b) in own.items())))
    result["claims"] = claims
    return result


def best_normalised(mean: dict) -> dict:
    """The paper's normalised heatmap (Figs. 9, 11, 13): each column over its best (lowest)
    value across the rows."""
    rows = list(mean)
    grid = np.array([_array(mean[r]) for r in rows])
    best = np.nanmin(grid, axis=0)
    return {r: listed(grid[i] / best) for i, r in enumerate(rows)}


def listed(values: np.ndarray) -> list:
    """Nested lists with None for NaN (cells a row is not evaluated on), valid JSON."""
    return np.where(np.isnan(values), None, np.asarray(values, object)).tolist()


def _array(values) -> np.ndarray:
    return np.array(values, dtype=float)  # None -> nan


def write_heatmaps(result: dict[str, Any], workdir: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result["normalised_best"] = best_normalised(result["mean"])
    write_json(os.path.join(workdir, "heatmap.json"), result, indent=1)
    if int(result["num_train_trajectories"]) in APPENDIX_RAW:
        write_text(os.path.join(workdir, "appendix_comparison.md"),
                   appendix_comparison(result["mean"], result["sem"],
                                       result["num_train_trajectories"], result["seeds"]))
    tasks, rows = result["tasks"], result["rows"]
    for kind, values, fname in (("normalised", result.get("normalised"), "heatmap.png"),
                                ("best", result["normalised_best"], "heatmap_best.png"),
                                ("raw", result["mean"], "heatmap_raw.png")):
        if values is None:
            continue
        grid = np.array([_array(values[r]) for r in rows])
        fig, ax = plt.subplots(figsize=(1.3 * len(tasks) + 3, 0.55 * len(rows) + 2))
        shown = np.log(np.clip(grid, 1e-6, None)) if kind == "raw" else np.clip(grid, 0, 2)
        if kind == "best":  # the paper's colour scale: log of the ratio, clipped at 1.5
            shown = np.log(np.clip(grid, 1.0, 1.5))
        ax.imshow(shown, cmap="viridis_r", aspect="auto")
        for i, r in enumerate(rows):
            for j in range(len(tasks)):
                if np.isnan(grid[i, j]):
                    continue
                scale = {"normalised": lambda: _array(result["mean"][FINETUNED])[j],
                         "best": lambda: np.nanmin([_array(result["mean"][q])[j] for q in rows]),
                         "raw": lambda: 1.0}[kind]()
                sem = _array(result["sem"][r])[j] / scale
                ax.text(j, i, f"{grid[i, j]:.3g}\n±{sem:.2g}", ha="center", va="center",
                        fontsize=7, color="w" if shown[i, j] > np.nanmedian(shown) else "k")
        ax.set_xticks(range(len(tasks)), [t.replace("_", "\n") for t in tasks], fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_xlabel("evaluation task")
        ax.set_ylabel("training regime")
        title = {"normalised": "validation loss / random mask + finetune",
                 "best": "validation loss / the column's best (the paper's form)",
                 "raw": "validation loss (raw)"}[kind]
        ax.set_title(f"{title}; mean ± s.e.m. over {result['seeds']} seeds, "
                     f"{result['num_train_trajectories']} trajectories", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(workdir, fname), dpi=120)
        plt.close(fig)


#: Rows of the data-size figure (Figs. 11-14 across data sizes): (label, heatmap row); the
#: single-task row of a column is that column's own task.
SIZE_ROWS = (("single-task (own task)", None), ("BC model", "behaviour_cloning"),
             ("ALL", "all"), ("random mask", "random"), ("random + finetune", FINETUNED),
             ("(MLP) random", "(MLP) random"))


def load_heatmaps(paths: list[str]) -> list[dict[str, Any]]:
    """The `heatmap.json` of each run directory (or the files themselves), by data size."""
    results = []
    for path in paths:
        file = path if path.endswith(".json") else os.path.join(path, "heatmap.json")
        if not os.path.isfile(file):
            raise UserError(f"no heatmap.json in {path}; run `icrl-jax report --config "
                            f"experiments/unimask/doorkey.py[:quick]` there first")
        with open(file) as f:
            results.append(dict(json.load(f), path=file))
    sizes = [r["num_train_trajectories"] for r in results]
    if len(set(sizes)) != len(sizes):
        raise UserError(f"the runs {[r['path'] for r in results]} repeat a data size ({sizes}); "
                        f"give one run per number of training trajectories")
    return sorted(results, key=lambda r: r["num_train_trajectories"])


def data_size_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per `SIZE_ROWS` label and task: the mean and s.e.m. of the validation loss at each data
    size (None where a run lacks the row or cell), and each run's checked claims."""
    tasks = results[0]["tasks"]
    rows = {}
    for label, row in SIZE_ROWS:
        per_task = {}
        for j, task in enumerate(tasks):
            name = task if row is None else row
            mean = [r["mean"].get(name, [None] * len(tasks))[j] for r in results]
            sem = [r["sem"].get(name, [None] * len(tasks))[j] for r in results]
            per_task[task] = dict(mean=mean, sem=sem)
        rows[label] = per_task
    return dict(tasks=tasks, sizes=[r["num_train_trajectories"] for r in results],
                seeds=[r["seeds"] for r in results], rows=rows,
                claims={str(r["num_train_trajectories"]): r["claims"] for r in results})


def data_size_report(paths: list[str], out: str) -> dict[str, str]:
    """`icrl-jax report --runs DIR ... --out DIR` on Uni[MASK] grids of different data sizes:
    `data_sizes.png` (validation loss against the number of training trajectories, one panel
    per evaluation task, mean ± s.e.m. over seeds), `data_sizes.json` and `data_sizes.md`
    (the paper's three claims per size). Returns the written paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    table = data_size_table(load_heatmaps(paths))
    os.makedirs(out, exist_ok=True)
    written = dict(json=os.path.join(out, "data_sizes.json"),
                   figure=os.path.join(out, "data_sizes.png"),
                   table=os.path.join(out, "data_sizes.md"))
    write_json(written["json"], table, indent=1)
    tasks, sizes = table["tasks"], np.asarray(table["sizes"], float)
    fig, axes = plt.subplots(2, 4, figsize=(16, 7), squeeze=False)
    for ax, task in zip(axes.ravel(), tasks):
        for i, (label, row) in enumerate(SIZE_ROWS):
            if row == "behaviour_cloning" and task == "behaviour_cloning":
                continue  # the BC model is this column's single-task model
            cell = table["rows"][label][task]
            mean, sem = _array(cell["mean"]), _array(cell["sem"])
            if np.isnan(mean).all():
                continue
            ax.errorbar(sizes * (1 + 0.03 * (i - 2.5)), mean, yerr=sem, marker="o", ms=3,
                        capsize=2, label=label, color=f"C{i}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xticks(sizes, [str(int(s)) for s in sizes])
        ax.set_title(task.replace("_", " "), fontsize=9)
        ax.set_xlabel("training trajectories", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("validation loss")
    axes[1, 0].set_ylabel("validation loss")
    axes[0, 1].legend(fontsize=7)  # the behaviour-cloning panel has no separate BC model
    fig.suptitle(f"Uni[MASK] DoorKey: validation loss vs data size (mean ± s.e.m. over "
                 f"{'/'.join(map(str, table['seeds']))} seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(written["figure"], dpi=110)
    plt.close(fig)
    text = _data_size_markdown(table)
    write_text(written["table"], text)
    print(text)
    return written


def _data_size_markdown(table: dict[str, Any]) -> str:
    tasks, sizes = table["tasks"], table["sizes"]

    def cells(label):
        out = []
        for task in tasks:
            c = table["rows"][label][task]
            out.append(" / ".join("-" if m is None else f"{m:.3g} ± {s:.1g}"
                                  for m, s in zip(c["mean"], c["sem"])))
        return out

    lines = [f"# Uni[MASK] DoorKey across data sizes ({' / '.join(map(str, sizes))} "
             f"trajectories)\n", "Validation loss, mean ± s.e.m. over seeds, per data size:\n",
             "| Row | " + " | ".join(tasks) + " |", "|" + "---|" * (len(tasks) + 1)]
    lines += [f"| {label} | " + " | ".join(cells(label)) + " |" for label, _ in SIZE_ROWS]
    lines += ["", "Claims (ratios per task; `holds` as checked in each heatmap.json):", ""]
    for size, claims in table["claims"].items():
        for name, claim in claims.items():
            ratios = claim.get("ratio_per_task") or claim.get("finetune_vs_single")
            shown = ", ".join(f"{task} " + (" vs ".join(f"{v:.3g}" for v in value)
                                            if isinstance(value, list) else f"{value:.3g}")
                              for task, value in ratios.items())
            lines.append(f"- {size} trajectories, {name}: holds={claim['holds']}; {shown}")
    return "\n".join(lines) + "\n"
