"""Waypoint controller for the point maze: D4RL maze2d's data-collection policy.

A PD controller steers to the next cell centre on a breadth-first shortest path to the goal's cell
(the goal itself once there), with Gaussian action noise of std `noise_scale` added before the
clip to [-1, 1], as D4RL generated maze2d (`envs/continuous/point_maze.py: waypoint_action`).
Pure and per-history: the rollout driver vmaps it over envs and scans over steps on device.
"""

from __future__ import annotations

from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.core.errors import UserError
from icrl_jax.envs.continuous.point_maze import PointMaze


#: What `data.source_kwargs` take (core/validation.py `kwargs_of`).
KWARGS = (validation.non_negative("noise_scale", 0.0),
          validation.env_requirement("needs the point maze", lambda env: isinstance(env, PointMaze)))


def waypoint_controller(env, noise_scale: float = 0.0) -> "sources.Source":
    """Source acting with `env.waypoint_action` plus N(0, noise_scale^2) noise; float32 `(2,)`
    actions. State: `()`. Needs a continuous-action env with a waypoint expert (the point maze)."""
    if not isinstance(env, PointMaze):
        raise UserError(f"source waypoint needs the point maze (a continuous env with a waypoint "
                        f"controller), got {type(env).__name__}")
    if not noise_scale >= 0:
        raise UserError(f"waypoint noise_scale must be >= 0, got {noise_scale}")
    noise = float(noise_scale)

    def init(key, params):
        return ()

    def act(key, state, obs, env_state, params):
        if noise == 0.0:
            return env.waypoint_action(env_state, params), state
        return env.waypoint_action(env_state, params, key, noise), state

    def update(key, state, transition, params):
        return state

    return sources.Source(init, act, update, name="waypoint")
