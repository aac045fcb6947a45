"""The appendix comparison of a Uni[MASK] grid that has not finished: the best validation losses
each trained group saved so far (`<workdir>/grid/<group>/best.npz`), how far each group ran, and
`appendix_comparison` on the rows that have them.

    python reproductions/unimask/partial_table.py runs/unimask_paper_n500 paper_n500 [OUT]

With OUT, also the heatmaps of those rows there (`write_heatmaps`: raw, best-normalised).
"""

from __future__ import annotations

import os
import re
import sys
import warnings

import numpy as np

from icrl_jax.core.metrics import seed_mean_sem
from icrl_jax.pipeline.train import latest_checkpoint_step
from icrl_jax.experiments.unimask.doorkey import get_config
from icrl_jax.papers.unimask.appendix import FINETUNED, appendix_comparison
from icrl_jax.papers.unimask.grid_training import finetune_groups, group_configs
from icrl_jax.papers.unimask.masks import TASKS
from icrl_jax.papers.unimask.report import summarise, write_heatmaps


def _saved(workdir: str, name: str):
    """(best.npz contents, steps trained) of a group, or None before its first evaluation."""
    path = os.path.join(workdir, "grid", name, "best.npz")
    if not os.path.exists(path):  # a group trained before model.mlp_hidden joined the names
        name = re.sub(r"_mlp_hidden\d+", "", name)
        path = os.path.join(workdir, "grid", name, "best.npz")
    if not os.path.exists(path):
        return None
    return dict(np.load(path)), latest_checkpoint_step(os.path.join(workdir, "grid", name)) or 0


def _progress(row: str, name: str, done: int, total: int, steps) -> str:
    return (f"| {row} | {name} | {done:,} of {total:,} ({done / total:.0%}) | "
            f"{', '.join(f'{int(s):,}' for s in steps)} |")


def main(workdir: str, preset: str, out: str | None = None) -> None:
    config = get_config(preset)
    mean, sem, progress, losses = {}, {}, [], {}
    for name, cfg, regimes in group_configs(config):
        saved = _saved(workdir, name)
        if saved is None:
            continue
        (best, done), total = saved, int(cfg.train.num_steps)
        seeds = len(best["score"]) // len(regimes)  # replicas are regime-major
        for i, regime in enumerate(regimes):
            losses[regime] = best["losses"][i * seeds:(i + 1) * seeds]
            progress.append(_progress(regime, name, done, total,
                                      best["step"][i * seeds:(i + 1) * seeds]))
    # "random+finetune": each column from the model fine-tuned on that column's task.
    tuned = {}
    for name, cfg, tasks, _ in finetune_groups(config):
        saved = _saved(workdir, name)
        if saved is None:
            continue
        (best, done), total = saved, int(cfg.train.num_steps)
        seeds = len(best["score"]) // len(tasks)
        for j, task in enumerate(tasks):
            tuned[task] = best["losses"][j * seeds:(j + 1) * seeds, list(TASKS).index(task)]
            progress.append(_progress(f"{FINETUNED}: {task}", name, done, total,
                                      best["step"][j * seeds:(j + 1) * seeds]))
    if tuned:
        seeds = max(len(v) for v in tuned.values())
        row = np.full((seeds, len(TASKS)), np.nan)
        for task, values in tuned.items():
            row[:len(values), list(TASKS).index(task)] = values
        losses[FINETUNED] = row
    with warnings.catch_warnings():  # columns not fine-tuned yet are all NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        for row, values in losses.items():
            mean[row], sem[row] = (x.tolist() for x in seed_mean_sem(values))
    seeds = ", ".join(sorted({str(len(v)) for v in losses.values()}))
    print(appendix_comparison(mean, sem, int(config.data.num_train_tasks), seeds))
    print("| Row | group | steps trained (of the authors' budget) | best step per seed |\n"
          "|---|---|---|---|")
    print("\n".join(progress))
    if out:
        os.makedirs(out, exist_ok=True)
        write_heatmaps(summarise(losses, config), out)  # no wall time: the groups ran apart


if __name__ == "__main__":
    main(*sys.argv[1:4])
