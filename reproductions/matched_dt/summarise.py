"""The matched-DT table: scores (mean +- s.e.m. over seeds) and wall times of both sides.

    python reproductions/matched_dt/summarise.py runs/matched_dt

Reads `<data>/ours/seed_<s>/eval.json` (and `<data>/ours_real_ends/...`,
`<data>/ours_corl_init/...`, the diagnostics of the former ours_real_ends.py, whose sampler is now
the default, and of ours_corl_init.py, where all their seeds ran), `<data>/corl/seed_<s>.json` and `<data>/timings.json`
(run_both.py's). Per seed and side, over the 20 held-out episodes:
the fraction that reached the goal, the mean episode length (a failed episode counts its 300
steps), and the mean return of the episodes that reached the goal (our `first_episode_return`:
an unfinished episode has no return). Prints a markdown table.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys

import numpy as np


def ours_seed(workdir: str) -> dict:
    with open(os.path.join(workdir, "eval.json")) as f:
        ev = json.load(f)
    policy = [k[: -len("_goal_reached")] for k in ev if k.endswith("_goal_reached")][0]
    return dict(goal_reached=ev[f"{policy}_goal_reached"], episode_length=ev[f"{policy}_episode_length"],
                success_return=ev[f"{policy}_first_episode_return"])


def corl_seed(path: str) -> dict:
    with open(path) as f:
        r = json.load(f)
    returns, successes = np.asarray(r["returns"]), np.asarray(r["successes"], bool)
    return dict(goal_reached=float(successes.mean()), episode_length=float(np.mean(r["lengths"])),
                success_return=float(returns[successes].mean()) if successes.any() else float("nan"))


def mean_sem(values) -> str:
    v = np.asarray(values, np.float64)
    sem = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
    return f"{v.mean():.3f} ± {sem:.3f}"


def main(data: str) -> None:
    seeds = sorted(int(re.search(r"seed_(\d+)", p).group(1))
                   for p in glob.glob(os.path.join(data, "corl", "seed_*.json")))
    seeds = [s for s in seeds if os.path.exists(os.path.join(data, "ours", f"seed_{s}", "eval.json"))]
    rows = {"ours": [ours_seed(os.path.join(data, "ours", f"seed_{s}")) for s in seeds]}
    for name in ("ours_real_ends", "ours_corl_init"):  # the diagnostics, where they ran
        variant = [os.path.join(data, name, f"seed_{s}") for s in seeds]
        if all(os.path.exists(os.path.join(v, "eval.json")) for v in variant):
            rows[name] = [ours_seed(v) for v in variant]
    rows["corl"] = [corl_seed(os.path.join(data, "corl", f"seed_{s}.json")) for s in seeds]
    labels = {"ours": "ours (JAX)",
              "ours_real_ends": "ours, windows ending at real steps (the old diagnostic; now the default)",
              "ours_corl_init": "ours, CORL's initialisation (measured with the old sampler)",
              "corl": "CORL's dt.py (torch)"}
    path = os.path.join(data, "timings.json")
    timings = json.load(open(path)) if os.path.exists(path) else {}
    print(f"seeds {seeds}\n")
    print("| side | goal reached | episode length | return (goal reached) | wall s per run | "
          "CPU s per run | load (1 min) |")
    print("|---|---|---|---|---|---|---|")
    walls = {}
    for side in rows:
        label = labels[side]
        t = [timings.get(f"{side}/seed_{s}") for s in seeds]
        have = all(t)
        walls[side] = [x["wall_seconds"] for x in t] if have else None
        time_cols = (f"{mean_sem([x['wall_seconds'] for x in t])} | "
                     f"{mean_sem([x['cpu_seconds'] for x in t])} | "
                     f"{min(x['load_before'] for x in t):.1f}-{max(x['load_after'] for x in t):.1f}"
                     if have else "- | - | -")
        print(f"| {label} | " + " | ".join(mean_sem([r[k] for r in rows[side]]) for k in
                                          ("goal_reached", "episode_length", "success_return"))
              + f" | {time_cols} |")
    if walls["ours"] and walls["corl"]:
        print(f"\nwall time CORL / ours: {np.mean(walls['corl']) / np.mean(walls['ours']):.2f}")
    for side in rows:
        print(f"{side} per seed: " + "; ".join(
            f"{s}: {r['goal_reached']:.2f} / {r['episode_length']:.1f} / {r['success_return']:.3f}"
            for s, r in zip(seeds, rows[side])))


if __name__ == "__main__":
    main(sys.argv[1])
