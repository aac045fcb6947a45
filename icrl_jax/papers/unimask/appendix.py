"""The Uni[MASK] appendix's DoorKey validation losses (Figs. 10, 12, 14) and our grid's
comparison with them.
"""

from __future__ import annotations

import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.papers.unimask.masks import TASKS

#: The heatmap row of "random mask + finetune": each column from the random-mask model
#: fine-tuned on that column's task.
FINETUNED = "random+finetune"

#: The appendix's raw validation losses (Figs. 10, 12, 14), by data size and row, in `TASKS`'
#: column order.
APPENDIX_RAW = {
    500: {
        "behaviour_cloning": (1.08, 1.08, 1.1, 1.12, 7.25, 6.9, 5.64, 5.66),
        "reward_conditioned": (1.12, 1.07, 1.14, 1.17, 7.19, 6.94, 5.59, 5.63),
        "goal_conditioned": (1.26, 1.27, 1, 1.07, 7.47, 7.39, 5.98, 5.99),
        "waypoint_conditioned": (1.36, 1.36, 1.08, 0.871, 7.61, 7.67, 6.02, 6.08),
        "past_inference": (1.53, 1.53, 1.49, 1.48, 4.8, 7.36, 4.44, 3.64),
        "future_inference": (1.1, 1.1, 1.12, 1.15, 8.19, 4.58, 3.33, 4.67),
        "forward_dynamics": (1.54, 1.55, 1.54, 1.55, 19, 17.4, 0.000794, 9.51),
        "inverse_dynamics": (1.51, 1.5, 1.53, 1.53, 11.9, 9.38, 4.43, 1.05),
        "all": (1.09, 1.08, 1.02, 0.999, 4.98, 4.69, 0.638, 1.49),
        "random": (1.17, 1.09, 0.944, 0.727, 4.55, 4.44, 0.164, 1.15),
        FINETUNED: (1.11, 1.04, 0.909, 0.697, 4.52, 4.38, 0.000304, 1),
    },
    50: {
        "behaviour_cloning": (1.17, 1.17, 1.18, 1.2, 7.24, 6.97, 5.66, 5.7),
        "reward_conditioned": (1.19, 1.19, 1.19, 1.21, 7.24, 6.96, 5.65, 5.69),
        "goal_conditioned": (1.2, 1.21, 1.21, 1.21, 7.39, 7.28, 5.93, 5.94),
        "waypoint_conditioned": (1.2, 1.2, 1.2, 1.19, 7.4, 7.3, 5.97, 6),
        "past_inference": (1.46, 1.47, 1.42, 1.41, 5.57, 6.57, 4.58, 4.37),
        "future_inference": (1.23, 1.24, 1.24, 1.25, 6.92, 5.73, 4.54, 4.96),
        "forward_dynamics": (1.53, 1.54, 1.53, 1.54, 14.7, 13.1, 0.444, 7.46),
        "inverse_dynamics": (1.5, 1.5, 1.51, 1.51, 10, 9.13, 4.56, 1.9),
        "all": (1.2, 1.2, 1.19, 1.19, 5.66, 5.77, 3.8, 3.95),
        "random": (1.2, 1.2, 1.17, 1.15, 5.32, 5.44, 2.41, 2.93),
        FINETUNED: (1.2, 1.19, 1.16, 1.14, 5.19, 5.33, 0.461, 1.86),
    },
    1000: {
        "behaviour_cloning": (1.08, 1.08, 1.1, 1.13, 7.26, 6.89, 5.62, 5.66),
        "reward_conditioned": (1.1, 1.03, 1.14, 1.16, 7.16, 6.9, 5.58, 5.63),
        "goal_conditioned": (1.34, 1.34, 0.92, 1.1, 7.5, 7.36, 5.98, 5.98),
        "waypoint_conditioned": (1.27, 1.27, 0.999, 0.704, 7.48, 7.63, 6.04, 6.06),
        "past_inference": (1.55, 1.54, 1.51, 1.49, 4.77, 7.38, 4.41, 3.62),
        "future_inference": (1.09, 1.09, 1.11, 1.14, 8.59, 4.43, 3.1, 4.45),
        "forward_dynamics": (1.54, 1.53, 1.54, 1.54, 19.1, 17.5, 0.000454, 9.64),
        "inverse_dynamics": (1.5, 1.5, 1.54, 1.52, 12.3, 9.99, 4.51, 1.04),
        "all": (1.08, 1.06, 0.995, 0.978, 4.97, 4.66, 0.583, 1.43),
        "random": (1.11, 1.01, 0.899, 0.658, 4.49, 4.32, 0.0693, 1.05),
        FINETUNED: (1.08, 0.987, 0.868, 0.63, 4.48, 4.3, 8.26e-05, 0.972),
    },
}
#: Rows whose models never predict states: their state columns (past / future inference,
#: both dynamics) are the untrained state head's initial scale, in both codes.
ACTION_ONLY_ROWS = ("behaviour_cloning", "reward_conditioned", "goal_conditioned",
                    "waypoint_conditioned")
STATE_COLUMNS = ("past_inference", "future_inference", "forward_dynamics", "inverse_dynamics")


def appendix_comparison(mean: dict, sem: dict, size: int, seeds: int) -> str:
    """Markdown: per row and task, the appendix's raw loss, ours (mean ± s.e.m.) and ours /
    theirs; cells of `ACTION_ONLY_ROWS` x `STATE_COLUMNS` are marked (untrained head) and left
    out of the count of cells within 15%."""
    paper = APPENDIX_RAW.get(int(size))
    if paper is None:
        raise UserError(f"the appendix has raw losses at 50, 500 and 1000 trajectories, not {size}")
    tasks = list(TASKS)
    lines = [f"Uni[MASK] DoorKey, {size} trajectories, {seeds} seeds: appendix value / ours ± "
             f"s.e.m. / ratio (ours / appendix). *u*: untrained state head (excluded).", "",
             "| Row | " + " | ".join(t.replace("_", " ") for t in tasks) + " |",
             "|---|" + "---|" * len(tasks)]
    within = total = 0
    for row, theirs in paper.items():
        if row not in mean:
            lines.append(f"| {row} | " + " | ".join(f"{v:.3g} / - / -" for v in theirs) + " |")
            continue
        cells = []
        for j, task in enumerate(tasks):
            ours, err = mean[row][j], sem[row][j]
            if ours is None or not np.isfinite(ours):
                cells.append(f"{theirs[j]:.3g} / - / -")
                continue
            ratio = ours / theirs[j]
            untrained = row in ACTION_ONLY_ROWS and task in STATE_COLUMNS
            if not untrained:
                total += 1
                within += bool(abs(ratio - 1) <= 0.15)
            cells.append(f"{theirs[j]:.3g} / {ours:.3g} ± {err:.2g} / {ratio:.2f}"
                         + (" *u*" if untrained else ""))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines += ["", f"Cells within 15% of the appendix: {within} of {total} compared "
              f"(untrained-head cells excluded)."]
    return "\n".join(lines) + "\n"
