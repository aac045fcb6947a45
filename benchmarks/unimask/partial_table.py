"""The appendix comparison of a Uni[MASK] grid that has not finished: the best validation losses
each trained group saved so far (`<workdir>/grid/<group>/best.npz`), how far each group ran, and
`appendix_comparison` on the rows that have them.

    python benchmarks/unimask/partial_table.py runs/unimask_paper_n500 paper_n500 [OUT]

With OUT, also the heatmaps of those rows there (`write_heatmaps`: raw, best-normalised).
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np

from icrl_jax.core.metrics import seed_mean_sem
from icrl_jax.core.train import latest_checkpoint_step
from icrl_jax.experiments.unimask.doorkey import get_config
from icrl_jax.papers.unimask import grid as G


def main(workdir: str, preset: str, out: str | None = None) -> None:
    config = get_config(preset)
    seeds = int(config.grid.num_seeds)
    mean, sem, progress, losses = {}, {}, [], {}
    for name, cfg, regimes in G._group_configs(config):
        path = os.path.join(workdir, "grid", name, "best.npz")
        if not os.path.exists(path):  # a group trained before model.mlp_hidden joined the names
            name = re.sub(r"_mlp_hidden\d+", "", name)
            path = os.path.join(workdir, "grid", name, "best.npz")
        if not os.path.exists(path):
            continue
        best = np.load(path)
        done = latest_checkpoint_step(os.path.join(workdir, "grid", name)) or 0
        total = int(cfg.train.num_steps)
        for i, regime in enumerate(regimes):
            rows = best["losses"][i * seeds:(i + 1) * seeds]
            losses[regime] = rows
            mean[regime], sem[regime] = (x.tolist() for x in seed_mean_sem(rows))
            steps = best["step"][i * seeds:(i + 1) * seeds].tolist()
            progress.append(f"| {regime} | {name} | {done:,} of {total:,} ({done / total:.0%}) | "
                            f"{', '.join(f'{s:,}' for s in steps)} |")
    print(G.appendix_comparison(mean, sem, int(config.data.num_train_tasks), seeds))
    print("| Row | group | steps trained (of the authors' budget) | best step per seed |\n"
          "|---|---|---|---|")
    print("\n".join(progress))
    if out:
        os.makedirs(out, exist_ok=True)
        G.write_heatmaps(G.summarise(losses, 0.0, config), out)




if __name__ == "__main__":
    main(*sys.argv[1:4])
