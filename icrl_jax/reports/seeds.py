"""Seeds of in-context runs side by side: `icrl-jax report --runs DIR ... --out DIR` on runs that
hold an `eval.json` (`icrl-jax train`/`evaluate` of AD-style methods).

Runs are grouped by environment and method label (e.g. "AD" and "AD + n-gram"); every run is one
seed. Outputs in `out/`:

* `seeds.md`: per group, the model's scores as mean ± s.e.m. over seeds (sample standard
  deviation, n - 1) with each seed's value; per environment, the baselines (source, random)
  averaged over its runs;
* `seeds.json`: the same numbers, and the curves;
* `seeds_curves.png`: the model's return per in-context episode (cumulative regret per step on
  bandits), mean ± s.e.m. over seeds, one line per group, with the baselines dashed and dotted.

A point of an `eval.json` curve averages the rollouts that reached that episode (at least half
of them; `metrics.policy_metrics`), so the plot stops at the shortest curve of any run: later
points would average only the fastest rollouts of some seeds.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # headless: CI and remote machines have no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from icrl_jax.core.files import write_json, write_text
from icrl_jax.pipeline import run as run_pipeline  # noqa: E402
from icrl_jax.core.config import saved_config  # noqa: E402
from icrl_jax.core.errors import UserError  # noqa: E402
from icrl_jax.core.registry import REPORTS  # noqa: E402
from icrl_jax.methods import method_class  # noqa: E402
from icrl_jax.core.metrics import seed_mean_sem  # noqa: E402

BASELINES = ("source", "random")
#: eval.json scalars reported per seed, in table order (those every run of a group has).
SCORES = (("model_first_episode_return", "first episode"),
          ("model_last_episode_return", "last episode"),
          ("model_final_regret", "final regret"),
          ("normalised_score", "normalised (random 0, source 1)"))


def load_seed_runs(paths: list[str]) -> list[dict]:
    """Each run's `eval.json` with `env`, `group` ("<env>: <label>"), `seed` and `path` added."""
    runs = []
    for path in paths:
        missing = [name for name in ("eval.json", "config.json")
                   if not os.path.isfile(os.path.join(path, name))]
        if missing:
            raise UserError(f"report --runs {path}: no {' or '.join(missing)} there; give run "
                            f"directories of `icrl-jax train` that finished their evaluation")
        with open(os.path.join(path, "eval.json")) as f:
            result = json.load(f)
        config = saved_config(path)
        label, env = method_class(config.method).label(config), config.env.name
        runs.append(dict(result, env=env, group=f"{env}: {label}", seed=config.seed,
                         path=path))
    return runs


def _baseline_scores(members: list[dict], policy: str, length: int) -> dict:
    """A baseline policy's scores and curve, averaged over runs."""
    scores = {}
    for key, _ in SCORES:
        name = f"{policy}_{key[len('model_'):]}"
        if key.startswith("model_") and all(name in m for m in members):
            scores[key] = float(np.mean([m[name] for m in members]))
    scores["curve"] = np.mean([m["curves"][policy][:length] for m in members], 0).tolist()
    return scores


def summarise_seeds(runs: list[dict]) -> dict:
    """`groups`: group -> {env, seeds, runs, scores: {key: {mean, sem, per_seed}}, curve:
    {mean, sem}}; `baselines`: env -> policy -> {key: mean over runs, curve}; `episodes`: the
    common curve length."""
    groups, by_env = defaultdict(list), defaultdict(list)
    for run in runs:
        groups[run["group"]].append(run)
        by_env[run["env"]].append(run)
    length = min(len(curve) for run in runs for curve in run["curves"].values())
    summary = dict(episodes=length, groups={}, baselines={
        env: {policy: _baseline_scores(members, policy, length) for policy in BASELINES
              if all(policy in m["curves"] for m in members)}
        for env, members in sorted(by_env.items())})
    for group, members in sorted(groups.items()):
        scores = {}
        for key, _ in SCORES:
            values = [m.get(key) for m in members]
            if all(isinstance(v, (int, float)) for v in values):
                mean, sem = seed_mean_sem(values)
                scores[key] = dict(mean=float(mean), sem=float(sem), per_seed=values)
        mean, sem = seed_mean_sem([m["curves"]["model"][:length] for m in members])
        summary["groups"][group] = dict(
            env=members[0]["env"], seeds=[m["seed"] for m in members],
            runs=[m["path"] for m in members], scores=scores,
            curve=dict(mean=mean.tolist(), sem=sem.tolist()))
    return summary


def seeds_table(summary: dict) -> str:
    """Markdown: one row per group (mean ± s.e.m., then each seed), then the baselines."""
    keys = [(k, name) for k, name in SCORES
            if any(k in g["scores"] for g in summary["groups"].values())]
    lines = ["| Runs | seeds | " + " | ".join(name for _, name in keys) + " |",
             "|" + "---|" * (len(keys) + 2)]
    for group, g in summary["groups"].items():
        cells = []
        for key, _ in keys:
            s = g["scores"].get(key)
            cells.append("-" if s is None else f"**{s['mean']:.3f} ± {s['sem']:.3f}** ("
                         + " / ".join(f"{v:.3f}" for v in s["per_seed"]) + ")")
        lines.append(f"| {group} | {', '.join(map(str, g['seeds']))} | " + " | ".join(cells)
                     + " |")
    for env, policies in summary["baselines"].items():
        for policy, values in policies.items():
            lines.append(f"| {env}: {policy} | - | " + " | ".join(
                f"{values[k]:.3f}" if k in values else "-" for k, _ in keys) + " |")
    return "\n".join(lines)


def plot_seed_curves(summary: dict, path: str, *, regret: bool) -> str:
    """Mean ± s.e.m. over seeds of each group's model curve; baselines dashed and dotted."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    x = np.arange(1, summary["episodes"] + 1)
    for i, (group, g) in enumerate(summary["groups"].items()):
        mean, sem = np.asarray(g["curve"]["mean"]), np.asarray(g["curve"]["sem"])
        ax.plot(x, mean, color=f"C{i}", label=f"{group} ({len(g['seeds'])} seeds)")
        ax.fill_between(x, mean - sem, mean + sem, color=f"C{i}", alpha=0.25)
    for j, (env, policies) in enumerate(summary["baselines"].items()):
        for policy, style in zip(BASELINES, ("--", ":")):
            if policy in policies:
                ax.plot(x, policies[policy]["curve"], ls=style, color=("black", "grey")[j % 2],
                        lw=1, label=f"{env}: {policy}")
    ax.set_xlabel("step" if regret else "in-context episode")
    ax.set_ylabel("cumulative regret" if regret else "return")
    ax.set_title("model: mean ± s.e.m. over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_seed_report(paths: list[str], out: str) -> dict[str, str]:
    """Load the runs, write `seeds.md`, `seeds.json` and `seeds_curves.png` to `out`; returns
    the written paths."""
    summary = summarise_seeds(load_seed_runs(paths))
    os.makedirs(out, exist_ok=True)
    written = dict(table=os.path.join(out, "seeds.md"), json=os.path.join(out, "seeds.json"),
                   curves=os.path.join(out, "seeds_curves.png"))
    text = (f"# Seeds side by side\n\nMean ± s.e.m. over seeds (each seed's value in "
            f"parentheses); baselines averaged over the runs. Curves over the first "
            f"{summary['episodes']} points (every run reached them).\n\n"
            + seeds_table(summary) + "\n")
    write_text(written["table"], text)
    write_json(written["json"], summary, indent=1)
    regret = any("model_final_regret" in g["scores"] for g in summary["groups"].values())
    plot_seed_curves(summary, written["curves"], regret=regret)
    print(text)
    return written


def report_seeds(config) -> dict[str, str]:
    """The default report (`report.kind="seeds"`): `report.num_seeds` seeds trained and
    evaluated (resuming, on one shared dataset), then their table and curves in
    `<workdir>/report`."""
    return write_seed_report(run_pipeline.train_seeds(config), os.path.join(config.workdir, "report"))


REPORTS.register("seeds", report_seeds)
REPORTS.register("runs:seeds", write_seed_report)
