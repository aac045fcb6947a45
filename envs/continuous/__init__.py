"""JAX-native environments with continuous actions (float32 vectors of `action_dim`)."""

from icrl_jax.envs.continuous.maps import EPISODE_LENGTHS, LAYOUTS, parse_layout
from icrl_jax.envs.continuous.point_maze import (PointMaze, PointMazeParams, PointMazeState,
                                        check_continuous_action, next_cell_table)

__all__ = ["PointMaze", "PointMazeParams", "PointMazeState", "check_continuous_action",
           "next_cell_table", "LAYOUTS", "EPISODE_LENGTHS", "parse_layout"]
