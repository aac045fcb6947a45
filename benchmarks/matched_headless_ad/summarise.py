"""The matched comparison as a markdown table, from what theirs.py and ours.py wrote.

    python benchmarks/matched_headless_ad/summarise.py --data runs/matched_headless_ad

Score: the cumulative (expected) regret after the evaluation horizon, averaged over the 100
held-out bandits, per seed; the table gives its mean over seeds +- the standard error of that
mean (s.e.m., n - 1 in the variance). Wall times are per seed: training (updates only, JAX's
compilation included) and the in-context evaluation, with their means over seeds and the
ratio of theirs to ours.
"""

from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np

ROWS = (("theirs", "authors' code (PyTorch, CPU port)"),
        ("ours_reference", "ours, `model.layout=reference`"),
        ("ours_ours", "ours, default layout"))


def load(data: str, name: str) -> list[dict]:
    paths = sorted(glob.glob(os.path.join(data, name, "seed_*.json")))
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    return results


def mean_sem(values) -> tuple[float, float]:
    values = np.asarray(values, np.float64)
    sem = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return float(values.mean()), float(sem)


def summarise(data: str) -> str:
    runs = {name: load(data, name) for name, _ in ROWS}
    theirs_train = np.mean([r["train_seconds"] for r in runs["theirs"]]) if runs["theirs"] else None
    lines = ["| implementation | seeds | final regret (mean +- s.e.m.) | per-seed regrets "
             "| train s / seed | train speed-up vs theirs | eval s / seed | load (1 min) |",
             "|---|---|---|---|---|---|---|---|"]
    baselines = {}
    for name, label in ROWS:
        results = runs[name]
        if not results:
            lines.append(f"| {label} | 0 | not run | | | | | |")
            continue
        mean, sem = mean_sem([r["final_regret"] for r in results])
        train = np.mean([r["train_seconds"] for r in results])
        evaluation = np.mean([r["eval_seconds"] for r in results])
        ratio = f"{theirs_train / train:.1f}x" if theirs_train and name != "theirs" else ""
        loads = "/".join(f"{r['load_average'][0]:.0f}" for r in results)
        per_seed = ", ".join(f"{r['final_regret']:.2f}" for r in results)
        lines.append(f"| {label} | {len(results)} | {mean:.2f} +- {sem:.2f} | {per_seed} "
                     f"| {train:.0f} | {ratio} | {evaluation:.0f} | {loads} |")
        for key in ("random_final_regret", "source_final_regret"):
            if key in results[0]:
                baselines[key] = results[0][key]
    crossed = {}
    for path in glob.glob(os.path.join(data, "cross_eval", "seed_*_eval_*.json")):
        with open(path) as f:
            result = json.load(f)
        crossed.setdefault(result["eval_seed"] == 1000 + result["seed"], []).append(result)
    if crossed.get(True):  # their weights under our evaluation, at the seeds ours.py uses
        mean, sem = mean_sem([r["final_regret"] for r in crossed[True]])
        per_seed = ", ".join(f"{r['final_regret']:.2f}" for r in sorted(crossed[True],
                                                                         key=lambda r: r["seed"]))
        lines.append(f"| their trained weights, our evaluation | {len(crossed[True])} "
                     f"| {mean:.2f} +- {sem:.2f} | {per_seed} | | | | |")
    if baselines:
        lines.append("")
        lines.append(f"Baselines on the same bandits (our rollouts): Thompson sampling (the data's "
                     f"source) {baselines.get('source_final_regret', float('nan')):.2f}, uniform "
                     f"random {baselines.get('random_final_regret', float('nan')):.2f}.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="runs/matched_headless_ad")
    args = parser.parse_args(argv)
    print(summarise(args.data))


if __name__ == "__main__":
    main()
