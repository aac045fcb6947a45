"""The DPT paper's claims over training seeds (`report.kind="dpt_claims"`).

`report.num_seeds` DPT seeds are trained and evaluated on one shared dataset (`train_seeds`);
with `dpt.compare_ad`, AD is trained on the same histories file (the same tasks and
transitions, the same updates and batch, its context as many steps as DPT's has transitions;
`model.position="learned"`, AD's own default, and `dpt.ad_model`'s fields) in `<workdir>/ad`
and evaluated on the same tasks.
Every number is the mean over seeds of the mean over evaluation rollouts, ± the standard error
over seeds (`metrics.seed_mean_sem`; the comparison algorithms and baselines do not depend on
the training seed, so theirs is 0).

Bandits (scored by regret): each policy's cumulative regret after the last pull (online), and
the offline policies' suboptimality: their per-pull regret (they pick from a fixed dataset and
never change their choice). Episodic envs: each policy's mean return per in-context episode,
and the share of rollouts that have reached the goal (a return > 0) by each episode.

Writes `<workdir>/report/claims.md` and `claims.json`.
"""

from __future__ import annotations

import json
import os
import warnings

import ml_collections
import numpy as np

from icrl_jax.core.files import write_json, write_text
from icrl_jax.core.metrics import seed_mean_sem
from icrl_jax.core.registry import REPORTS
from icrl_jax.data.builders import builder_of, dataset_path
from icrl_jax.methods.fields import ad_model_fields
from icrl_jax.pipeline import run as run_pipeline

#: How many in-context episodes the episodic table shows (then the last one).
EPISODES_SHOWN = (1, 2, 3, 5, 10)


def ad_counterpart(config) -> ml_collections.ConfigDict:
    """AD on DPT's histories (module docstring), in `<workdir>/ad`."""
    ad = ml_collections.ConfigDict(config.to_dict())
    ad.method = "ad"
    for key, value in ad_model_fields().items():
        if key not in ad.model:
            ad.model[key] = value
    ad.model.position = "learned"
    ad.model.update(config.dpt.ad_model.to_dict())
    ad.data.builder = builder_of(config).plain_builder
    ad.data.path = dataset_path(config, run_pipeline.build_env(config))
    ad.workdir = os.path.join(config.workdir, "ad")
    ad.report.label = ""
    ad.eval.baselines = ()  # the same baselines ran beside DPT on the same tasks
    return run_pipeline.resolve_config(ad)


def seed_results(workdirs: list[str]) -> list[tuple[dict, dict]]:
    """Each seed's `eval.json` and `eval_rollouts.npz` arrays."""
    out = []
    for workdir in workdirs:
        with open(os.path.join(workdir, "eval.json")) as f:
            results = json.load(f)
        with np.load(os.path.join(workdir, "eval_rollouts.npz")) as f:
            out.append((results, {k: f[k] for k in f.files}))
    return out


def _stat(values) -> dict:
    mean, sem = seed_mean_sem(np.asarray(values, np.float64))
    return dict(mean=float(mean), sem=float(sem), per_seed=[float(v) for v in values])


def regret_rows(seeds: list[tuple[dict, dict]], prefix: str = "") -> dict[str, dict]:
    """Per policy: `final_regret` (cumulative), and for offline policies `suboptimality`."""
    names = sorted(seeds[0][0]["curves"])
    rows = {}
    for name in names:
        regrets = [results[f"{name}_final_regret"] for results, _ in seeds]
        row = dict(final_regret=_stat(regrets))
        if name.endswith("_offline"):
            row["suboptimality"] = _stat([r / results["num_steps"]
                                          for r, (results, _) in zip(regrets, seeds)])
        rows[prefix + name] = row
    return rows


def return_rows(seeds: list[tuple[dict, dict]], prefix: str = "") -> dict[str, dict]:
    """Per policy: mean return at each in-context episode, and the share of rollouts that
    have had a return > 0 by then."""
    rows = {}
    for name in sorted(seeds[0][0]["curves"]):
        per_seed = [arrays[f"{name}_returns"] for _, arrays in seeds]
        episodes = min(r.shape[1] for r in per_seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            returns = [np.nanmean(r[:, :episodes], 0) for r in per_seed]
            reached = [np.mean(np.maximum.accumulate(np.nan_to_num(r[:, :episodes]) > 0, 1), 0)
                       for r in per_seed]
        rows[prefix + name] = dict(
            returns=[_stat([r[e] for r in returns]) for e in range(episodes)],
            reached=[_stat([r[e] for r in reached]) for e in range(episodes)])
    return rows


def _cell(stat: dict, digits: int = 3) -> str:
    return f"{stat['mean']:.{digits}f} ± {stat['sem']:.{digits}f}"


def regret_table(rows: dict[str, dict], steps: int) -> str:
    lines = ["| policy | cumulative regret after the last pull | suboptimality (offline) |",
             "| --- | --- | --- |"]
    for name, row in rows.items():
        lines.append(f"| {name} | {_cell(row['final_regret'], 2)} | "
                     f"{_cell(row['suboptimality']) if 'suboptimality' in row else '-'} |")
    return f"{steps} pulls per rollout.\n\n" + "\n".join(lines)


def return_table(rows: dict[str, dict]) -> str:
    # Policies run different numbers of episodes in the same steps (XLand's end at the goal):
    # the columns are those every policy has.
    episodes = min(len(row["returns"]) for row in rows.values())
    shown = [e for e in EPISODES_SHOWN if e < episodes] + [episodes]
    head = " | ".join(f"episode {e}" for e in shown)
    lines = [f"| policy | {head} |", "|---" * (len(shown) + 1) + "|"]
    for name, row in rows.items():
        lines.append(f"| {name}: return | " + " | ".join(
            _cell(row["returns"][e - 1], 2) for e in shown) + " |")
        lines.append(f"| {name}: reached the goal | " + " | ".join(
            _cell(row["reached"][e - 1], 2) for e in shown) + " |")
    return "\n".join(lines)


def report_claims(config) -> dict[str, str]:
    """`report.kind="dpt_claims"` (module docstring)."""
    env = run_pipeline.build_env(config)
    dpt = seed_results(run_pipeline.train_seeds(config))
    seeds = {"": dpt}
    if config.dpt.compare_ad:
        seeds["AD: "] = seed_results(run_pipeline.train_seeds(ad_counterpart(config)))
    regret = env.scoring == "regret"
    rows = {}
    for prefix, results in seeds.items():
        rows.update((regret_rows if regret else return_rows)(results, prefix))
    if config.dpt.compare_ad:  # AD's baselines are the same policies on the same tasks
        rows = {k: v for k, v in rows.items() if not k.startswith("AD: ") or k == "AD: model"}
    table = regret_table(rows, int(config.eval.num_steps)) if regret else return_table(rows)
    out = os.path.join(config.workdir, "report")
    os.makedirs(out, exist_ok=True)
    written = dict(table=os.path.join(out, "claims.md"), json=os.path.join(out, "claims.json"))
    text = (f"# {config.experiment}: DPT's claims over {len(dpt)} training seeds\n\n"
            f"Mean over seeds ± s.e.m. over seeds; \"model\" is DPT online, \"model_offline\" DPT "
            f"on a fixed dataset, \"AD: model\" AD on the same histories.\n\n{table}\n")
    write_text(written["table"], text)
    write_json(written["json"], dict(rows=rows, seeds=len(dpt), env=config.env.name), indent=1)
    print(text)
    return written


REPORTS.register("dpt_claims", report_claims)
