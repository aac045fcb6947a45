"""The matched comparison as a markdown table, from what theirs.py and ours.py wrote.

    python reproductions/matched_headless_ad/summarise.py --data runs/matched_headless_ad

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
import re

import numpy as np

ROWS = (("theirs", "authors' code (PyTorch, CPU port)"),
        ("ours_reference", "ours, `model.layout=reference`"),
        ("ours_ours", "ours, default layout"))


def load(data: str, name: str, evaluations: bool = False) -> list[dict]:
    """The runs' `seed_<s>.json`, or with `evaluations` their `seed_<s>_eval_<e>.json`."""
    pattern = r"seed_\d+_eval_\d+\.json" if evaluations else r"seed_\d+\.json"
    paths = sorted(p for p in glob.glob(os.path.join(data, name, "seed_*.json"))
                   if re.fullmatch(pattern, os.path.basename(p)))
    results = []
    for path in paths:
        with open(path) as f:
            results.append(json.load(f))
    return results


#: Models evaluated with several evaluation seeds (theirs.py / ours.py / cross_eval.py
#: --eval-seeds), and the deviations measured one at a time: (name, with, without) where
#: "with" is the run that has the deviation from the authors' code and "without" the one that
#: does not (the rest equal).
EVALUATED = (("theirs", "authors' code, their evaluation"),
             ("cross_eval", "authors' trained weights, our evaluation"),
             ("ours_reference", "ours, `model.layout=reference`"),
             ("ours_ours", "ours, default layout"),
             ("ours_ours_causal_prompt", "ours, `model.prompt_order=causal`"),
             ("ours_ours_llama_blocks", "ours, RMSNorm + SwiGLU blocks"),
             ("theirs_replacement", "authors' code, batches drawn with replacement"))
DEVIATIONS = (
    ("prompt: an order-free set (bidirectional) vs their ordered causal prompt",
     "ours_ours", "ours_ours_causal_prompt"),
    ("blocks: LayerNorm + GELU MLP vs RMSNorm (eps 1e-5) + SwiGLU without MLP biases, bf16 RoPE "
     "tables (both flax's init)", "ours_ours", "ours_ours_llama_blocks"),
    ("sampling: batches with replacement vs shuffled epochs (measured on their code)",
     "theirs_replacement", "theirs"),
    ("the whole layout: ours vs `model.layout=reference` (the authors' tokens, prompt, blocks, "
     "init, loss)", "ours_ours", "ours_reference"),
)


def over_evaluations(results: list[dict]) -> dict | None:
    """Per training seed the mean over its evaluations (`results`: one per evaluation), then
    mean +- s.e.m. over training seeds (so the bars hold both training and evaluation noise),
    and the mean over training seeds of the s.d. across evaluations (evaluation noise alone)."""
    by_seed: dict[int, list[float]] = {}
    for r in results:
        by_seed.setdefault(int(r["seed"]), []).append(float(r["final_regret"]))
    if not by_seed:
        return None
    means = [float(np.mean(v)) for _, v in sorted(by_seed.items())]
    mean, sem = mean_sem(means)
    spread = [float(np.std(v, ddof=1)) for v in by_seed.values() if len(v) > 1]
    return dict(mean=mean, sem=sem, per_seed=means, seeds=len(by_seed),
                evals=sorted({len(v) for v in by_seed.values()}),
                eval_sd=float(np.mean(spread)) if spread else float("nan"))


def evaluation_tables(data: str) -> str:
    # Every evaluation of a model: the training run's own (evaluation seed 1000 + seed) and the
    # --eval-seeds ones.
    stats = {name: over_evaluations(load(data, name) + load(data, name, evaluations=True))
             for name, _ in EVALUATED}
    lines = ["| model | training seeds x evaluation seeds | final regret (mean +- s.e.m. over "
             "training seeds) | per training seed (mean over its evaluations) "
             "| s.d. across evaluation seeds |", "|---|---|---|---|---|"]
    for name, label in EVALUATED:
        st = stats[name]
        if st is None:
            lines.append(f"| {label} | not run | | | |")
            continue
        evals = "/".join(str(e) for e in st["evals"])
        lines.append(f"| {label} | {st['seeds']} x {evals} | {st['mean']:.2f} +- {st['sem']:.2f} "
                     f"| {', '.join(f'{m:.2f}' for m in st['per_seed'])} | {st['eval_sd']:.2f} |")
    lines += ["", "| deviation | ours with it | ours without | effect (with - without, +- "
              "combined s.e.m.) |", "|---|---|---|---|"]
    for label, with_it, without in DEVIATIONS:
        a, b = stats[with_it], stats[without]
        if a is None or b is None:
            lines.append(f"| {label} | | | not measured |")
            continue
        effect, error = a["mean"] - b["mean"], float(np.hypot(a["sem"], b["sem"]))
        lines.append(f"| {label} | {a['mean']:.2f} +- {a['sem']:.2f} | {b['mean']:.2f} +- "
                     f"{b['sem']:.2f} | {effect:+.2f} +- {error:.2f} |")
    return "\n".join(lines) + "\n"


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
    print(evaluation_tables(args.data))


if __name__ == "__main__":
    main()
