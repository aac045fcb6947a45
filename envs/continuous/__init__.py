"""JAX-native environments with continuous actions (float32 vectors of `action_dim`)."""

from envs.continuous.maps import EPISODE_LENGTHS, LAYOUTS, parse_layout
from envs.continuous.point_maze import (PointMaze, PointMazeParams, PointMazeState,
                                        check_continuous_action, next_cell_table)

__all__ = ["PointMaze", "PointMazeParams", "PointMazeState", "check_continuous_action",
           "next_cell_table", "LAYOUTS", "EPISODE_LENGTHS", "parse_layout"]
