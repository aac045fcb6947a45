"""Maze layouts of D4RL's maze2d (the same cells as gymnasium-robotics' point maze maps).

Each layout is a tuple of equal-length rows, row 0 at the top: `#` a wall block, `.` a free cell,
`G` the free cell holding D4RL's fixed maze2d goal (`reset_target=False`). Sides are 5x5, 8x8 and
9x12 cells; `parse_layout` turns them into arrays.
"""

from __future__ import annotations

import numpy as np

UMAZE = (
    "#####",
    "#G..#",
    "###.#",
    "#...#",
    "#####",
)

MEDIUM = (
    "########",
    "#..##..#",
    "#..#...#",
    "##...###",
    "#..#...#",
    "#.#..#.#",
    "#...#.G#",
    "########",
)

LARGE = (
    "############",
    "#....#.....#",
    "#.##.#.#.#.#",
    "#......#...#",
    "#.####.###.#",
    "#..#.#.....#",
    "##.#.#.#.###",
    "#..#...#.G.#",
    "############",
)

#: Layout name -> rows.
LAYOUTS = {"umaze": UMAZE, "medium": MEDIUM, "large": LARGE}
#: D4RL maze2d-{umaze,medium,large}-v1 time limits (max_episode_steps).
EPISODE_LENGTHS = {"umaze": 300, "medium": 600, "large": 800}


def parse_layout(rows) -> tuple[np.ndarray, tuple[int, int] | None]:
    """Rows of `#`/`.`/`G` characters, or a 2-D array-like of 0 (free) / 1 (wall) ints, ->
    (walls bool `(H, W)`, goal cell `(row, col)` or None where no `G` is marked).

    Raises ValueError unless the map is rectangular, walled all round (the point must not leave
    it), and has at least two free cells (a start and a different goal).
    """
    if len(rows) and all(isinstance(r, str) for r in rows):
        if len({len(r) for r in rows}) != 1:
            raise ValueError("maze rows must all have the same length")
        bad = {c for r in rows for c in r} - set("#.G")
        if bad:
            raise ValueError(f"unknown maze characters {sorted(bad)}; use '#', '.' and 'G'")
        walls = np.array([[c == "#" for c in r] for r in rows], dtype=bool)
        goals = [(i, j) for i, r in enumerate(rows) for j, c in enumerate(r) if c == "G"]
        if len(goals) > 1:
            raise ValueError(f"a maze marks at most one goal 'G', got {len(goals)}")
        goal = goals[0] if goals else None
    else:
        grid = np.asarray(rows)
        if grid.ndim != 2 or not np.isin(grid, (0, 1)).all():
            raise ValueError("a maze map must be a 2-D array of 0 (free) and 1 (wall), "
                             f"got shape {grid.shape}")
        walls, goal = grid.astype(bool), None
    if walls.shape[0] < 3 or walls.shape[1] < 3:
        raise ValueError(f"a maze needs at least 3x3 cells, got {walls.shape}")
    border = np.concatenate([walls[0], walls[-1], walls[:, 0], walls[:, -1]])
    if not border.all():
        raise ValueError("the maze's outer rows and columns must all be walls")
    if (~walls).sum() < 2:
        raise ValueError("a maze needs at least two free cells")
    return walls, goal
