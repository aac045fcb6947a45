"""Turn a set of runs into the Headless-AD paper's Table 1 (markdown) and figures (PNG).

A run is a work directory holding `variants.json` (from `variants.evaluate_variants`), either
directly or in `seed_*/` subdirectories; every seed is one sample for the mean ± s.e.m. Rows are
run labels (the method plus its ablation switches), so runs of the same setting on different
environments (a bandit run and a darkroom run) fill one row.

Outputs in `out/`: `table1.md` (Table 1 analogue plus a per-variant table),
`bandit_regret.png` (cumulative regret per variant, e.g. per arm count) and
`darkroom_success.png` (success per action set and goal split).
"""

from __future__ import annotations

import glob
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from icrl_jax.core.files import write_text
from icrl_jax.core.config import saved_config  # noqa: E402
from icrl_jax.core.errors import UserError  # noqa: E402
from icrl_jax.core.metrics import format_mean_sem  # noqa: E402
from icrl_jax.methods import method_class  # noqa: E402

TABLE_ARMS = (20, 30, 40, 50)


def load_runs(paths: list[str]) -> list[dict]:
    """Every `variants.json` under the given run directories (or the files themselves)."""
    files = []
    for path in paths:
        if path.endswith(".json"):
            files.append(path)
        else:
            found = variants_files(path)
            if not found:
                kind = ("; it is a training run (eval.json): report training runs only among "
                        "themselves" if os.path.isfile(os.path.join(path, "eval.json")) else "")
                raise UserError(f"report --runs {path}: no variants.json there or in its seed_*/ "
                                f"(`icrl-jax report --config ...` writes them){kind}")
            files.extend(found)
    runs = []
    for file in files:
        with open(file) as f:
            run = json.load(f)
        if not run.get("label"):
            run["label"] = _label_from_config_json(os.path.dirname(file))
        runs.append(run)
    return runs


def variants_files(path: str) -> list[str]:
    """The `variants.json` files of a run directory: its own, or its `seed_*/` ones."""
    return sorted(glob.glob(os.path.join(path, "variants.json")) +
                  glob.glob(os.path.join(path, "seed_*", "variants.json")))


def _label_from_config_json(workdir: str) -> str:
    config = saved_config(workdir)
    return method_class(config.method).label(config)


def _family(env: str) -> str:
    return {"bernoulli_bandit": "Bandit", "contextual_bandit": "Contextual",
            "darkroom_composite": "Darkroom"}.get(env, env)


def collect(runs: list[dict]) -> dict:
    """label -> family -> {variant: [per-seed score]}, plus arms used and mean curves."""
    table = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    curves = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run in runs:
        home = _family(run["env"])
        for name, result in run["variants"].items():
            if not result.get("applicable", False):
                continue
            # A variant on another env (a transfer) is a family of its own: "Contextual -> Bandit".
            env = result.get("env", run["env"])
            family = home if env == run["env"] else f"{home} -> {_family(env)}"
            table[run["label"]][family][name].append((result["score"], result["arms_used"]))
            for policy, curve in result["curves"].items():
                key = run["label"] if policy == "model" else policy
                curves[family][name][key].append(np.asarray(curve))
    return dict(table=table, curves=curves)


def _fmt(values) -> str:
    return format_mean_sem(values)


def _seed_means(per_variant: dict, which: int, names=None) -> list[float]:
    """Per seed, the mean over variants (score: which=0, arms used: which=1)."""
    names = [n for n in (names or per_variant) if n in per_variant]
    if not names:
        return []
    seeds = min(len(per_variant[n]) for n in names)
    return [float(np.mean([per_variant[n][s][which] for n in names])) for s in range(seeds)]


def table1(collected: dict) -> str:
    """Markdown Table 1: bandit and darkroom averages over variants, arms used, per arm count."""
    families = sorted({f for rows in collected["table"].values() for f in rows})
    header = []
    for family in families:
        header += [family, f"{family}. Arms Used"]
    header += [f"Bandit. {n} Arms" for n in TABLE_ARMS]
    lines = ["| Setting | " + " | ".join(header) + " |", "|" + "---|" * (len(header) + 1)]
    for label, rows in sorted(collected["table"].items()):
        cells = []
        for family in families:
            per_variant = rows.get(family, {})
            cells += [_fmt(_seed_means(per_variant, 0)), _fmt(_seed_means(per_variant, 1))]
        bandit = rows.get("Bandit", {})
        cells += [_fmt([s for s, _ in bandit.get(f"arms_{n}", [])]) for n in TABLE_ARMS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def variant_table(collected: dict) -> str:
    """Markdown: score (normalised score / success) and arms used per variant, per label."""
    lines = []
    for family in sorted({f for rows in collected["table"].values() for f in rows}):
        variants = sorted({v for rows in collected["table"].values()
                           for v in rows.get(family, {})})
        lines += [f"\n**{family}** (score: {'success rate' if family == 'Darkroom' else 'normalised score'}; "
                  f"arms used in parentheses)\n",
                  "| Setting | " + " | ".join(variants) + " |", "|" + "---|" * (len(variants) + 1)]
        for label, rows in sorted(collected["table"].items()):
            per_variant = rows.get(family)
            if not per_variant:
                continue
            cells = []
            for v in variants:
                samples = per_variant.get(v, [])
                cells.append("n/a" if not samples else
                             f"{_fmt([s for s, _ in samples])} ({np.mean([a for _, a in samples]):.1f})")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_bandit_regret(collected: dict, family: str, path: str) -> str | None:
    """One panel per variant (arm count / reward distribution): mean cumulative regret."""
    variants = collected["curves"].get(family)
    if not variants:
        return None
    names = sorted(variants)
    cols = min(4, len(names))
    rows = int(np.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), dpi=110, squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        for label, samples in sorted(variants[name].items()):
            mean = np.mean(np.stack(samples), 0)
            style = dict(color="grey", ls="--") if label == "random" else (
                dict(color="black", ls=":") if label == "source" else {})
            ax.plot(np.arange(1, mean.size + 1), mean, label=label, **style)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.set_ylabel("cumulative regret")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_darkroom_success(collected: dict, path: str) -> str | None:
    """Grouped bars: success per (action set, goal split), one bar per label."""
    rows = {label: fams["Darkroom"] for label, fams in collected["table"].items()
            if "Darkroom" in fams}
    if not rows:
        return None
    variants = sorted({v for per_variant in rows.values() for v in per_variant})
    width = 0.8 / len(rows)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(variants)), 4), dpi=110)
    for i, (label, per_variant) in enumerate(sorted(rows.items())):
        means = [np.mean([s for s, _ in per_variant[v]]) if v in per_variant else np.nan
                 for v in variants]
        stds = [np.std([s for s, _ in per_variant[v]]) if v in per_variant else 0.0
                for v in variants]
        ax.bar(np.arange(len(variants)) + i * width, means, width, yerr=stds, label=label)
    ax.set_xticks(np.arange(len(variants)) + 0.4 - width / 2)
    ax.set_xticklabels([v.replace("__", "\n") for v in variants], fontsize=7)
    ax.set_ylabel("success rate (last `eval.final_window` episodes)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(paths: list[str], out: str) -> dict[str, str]:
    """Load the runs under `paths`, write `out/table1.md` and the PNGs; returns written paths."""
    collected = collect(load_runs(paths))
    os.makedirs(out, exist_ok=True)
    written = {}
    text = ("# Headless-AD: Table 1 analogue\n\nMean ± s.e.m. over seeds; bandit scores are "
            "normalised (random 0, source 1), darkroom scores are success rates; scores and "
            "arms used are averaged over each environment's evaluation variants.\n\n"
            + table1(collected) + "\n\n## Per variant\n" + variant_table(collected) + "\n")
    written["table"] = os.path.join(out, "table1.md")
    write_text(written["table"], text)
    for family in sorted(collected["curves"]):
        if family.split(" -> ")[-1] not in ("Bandit", "Contextual"):
            continue
        name = family.lower().replace(" -> ", "_to_")
        path = plot_bandit_regret(collected, family, os.path.join(out, f"{name}_regret.png"))
        if path:
            written[f"{name}_regret"] = path
    path = plot_darkroom_success(collected, os.path.join(out, "darkroom_success.png"))
    if path:
        written["darkroom_success"] = path
    print(text)
    return written
