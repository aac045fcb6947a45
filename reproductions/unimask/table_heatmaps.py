"""The heatmaps of a Uni[MASK] grid drawn again from its committed appendix-comparison table
(the markdown `appendix_comparison` writes: `appendix / ours ± s.e.m. / ratio` per cell), for a
grid whose work directories are gone. The values are the table's (three figures).

    python reproductions/unimask/table_heatmaps.py docs/papers/unimask.md 500 OUT

Writes OUT/heatmap_raw.png, OUT/heatmap_best.png (each column over its best row, the paper's
form) and OUT/heatmap.json.
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.papers.unimask.masks import TASKS
from icrl_jax.papers.unimask.report import listed, write_heatmaps

#: A compared cell: the appendix's value, ours and its s.e.m. (a row not run: "- / -").
CELL = re.compile(r"^\s*\S+ / (\S+) ± (\S+) / ")


def read_table(path: str, size: int) -> dict:
    """{row: (mean (8,), sem (8,))} and the seed count of the first table captioned with `size`
    trajectories in `path`; cells without a value are NaN."""
    with open(path) as f:
        lines = f.read().splitlines()
    caption = re.compile(rf"^Uni\[MASK\] DoorKey, {size} trajectories, (\d+) seeds:")
    start = next((i for i, line in enumerate(lines) if caption.match(line)), None)
    if start is None:
        raise UserError(f"{path}: no table captioned 'Uni[MASK] DoorKey, {size} trajectories'")
    seeds = int(caption.match(lines[start]).group(1))
    rows = {}
    for line in lines[start + 4:]:  # caption, blank line, header, separator
        if not line.startswith("|"):
            break
        name, *cells = [c.strip() for c in line.strip("|").split("|")]
        parsed = [CELL.match(c) for c in cells]
        rows[name] = tuple(np.array([float(m.group(k)) if m else np.nan for m in parsed])
                           for k in (1, 2))
    return dict(rows=rows, seeds=seeds)


def main(path: str, size: str, out: str) -> None:
    table = read_table(path, int(size))
    rows = {r: v for r, v in table["rows"].items() if not np.isnan(v[0]).all()}
    result = dict(tasks=list(TASKS), rows=list(rows), seeds=table["seeds"],
                  num_train_trajectories=int(size),
                  mean={r: listed(m) for r, (m, _) in rows.items()},
                  sem={r: listed(s) for r, (_, s) in rows.items()})
    os.makedirs(out, exist_ok=True)
    write_heatmaps(result, out)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("usage: python reproductions/unimask/table_heatmaps.py PAGE.md SIZE OUT", file=sys.stderr)
        sys.exit(2)
    try:
        main(*sys.argv[1:4])
    except (UserError, OSError, ValueError) as e:  # bad input: one line, exit 2
        print(f"table_heatmaps: {e}", file=sys.stderr)
        sys.exit(2)
