"""Grid explorer: an in-context learner for Dark Room and Key-to-Door that reads only what it sees.

It remembers, across the episodes of its history, which cells it has visited and which cell paid.
An episode has phases: Dark Room one (find the goal), Key-to-Door two (find the key, then, holding
it, find the door; a reward moves it to the next phase). In each phase it walks to the phase's
remembered cell if it knows one, else to the nearest cell it has not yet visited in that phase
(Manhattan distance; the first such cell in cell order). With probability `eps` it takes a
uniformly random available action instead.

So its first episodes search the grid and every later one goes straight to what it found: a
learning history that improves only through its own context. The noisy oracle's histories
improve too, but because its noise decays while it reads the task from the env state; what a
model distils from them cannot find a key it has not been shown. This one's can, in principle.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from envs.darkroom import DarkRoom, KeyToDoor
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import first_argmax, uniform_pick


@flax.struct.dataclass
class ExplorerState:
    """visited: bool `(P, n)` cells seen in each phase; target: int32 `(P,)` the cell that paid
    in each phase (-1: not found yet); phase: int32 `()` this episode's phase."""

    visited: jax.Array
    target: jax.Array
    phase: jax.Array


def grid_explorer(env, eps: float = 0.1) -> "sources.Source":
    """The grid explorer (module docstring) for a Dark Room or Key-to-Door `env` with cell-id
    observations and atomic moves."""
    if not isinstance(env, (DarkRoom, KeyToDoor)) or not env.discrete_observations:
        raise ValueError(f"grid_explorer needs Dark Room or Key-to-Door with cell observations; "
                         f"got {type(env).__name__}")
    phases = 2 if env.key_flag else 1
    n = env.num_observations
    cell_positions = env.position(jnp.arange(n))  # (n, 2)
    far = jnp.iinfo(jnp.int32).max

    def init(key, params):
        return ExplorerState(visited=jnp.zeros((phases, n), bool),
                             target=jnp.full((phases,), -1, jnp.int32), phase=jnp.int32(0))

    def act(key, s, obs, env_state, params):
        pos = env.position(obs)
        seen = s.visited[s.phase].at[obs].set(True)
        distance = jnp.abs(cell_positions - pos).sum(-1)
        frontier = first_argmax(-jnp.where(seen, far, distance))
        goal = jnp.where(s.target[s.phase] >= 0, s.target[s.phase], frontier)
        ends = jax.vmap(lambda a: env.move(pos, a))(jnp.arange(params.action_mask.shape[0]))
        scores = jnp.abs(ends - cell_positions[goal]).sum(-1)
        greedy = first_argmax(-jnp.where(params.action_mask, scores, far))
        u = jax.random.uniform(key, (2,))
        return jnp.where(u[0] < eps, uniform_pick(u[1], params.action_mask), greedy), s

    def update(key, s, tr, params):
        visited = s.visited.at[s.phase, tr.obs].set(True).at[s.phase, tr.next_obs].set(True)
        paid = tr.reward > 0
        target = s.target.at[s.phase].set(jnp.where(paid, tr.next_obs, s.target[s.phase]))
        phase = jnp.where(paid, jnp.minimum(s.phase + 1, phases - 1), s.phase)
        phase = jnp.where(tr.terminated | tr.truncated, 0, phase)
        return ExplorerState(visited=visited, target=target, phase=phase.astype(jnp.int32))

    return sources.Source(init, act, update, name="grid_explorer")
