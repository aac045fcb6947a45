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

With `memory=W` it remembers only its last W steps: a cell counts as visited, and a paying cell
as found, only if it was seen within them. A model whose context holds W steps then sees all
that the explorer's next action depends on; with unbounded memory, a history whose key was found
more than W steps ago (or whose searched cells lie further back) asks the model for what its
context no longer holds.

With `lapse=p` each episode is, with probability p, played uniformly at random (its memory
still records what it sees): the histories then hold failed episodes and what the explorer does
after them, as a model's own rollouts do.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from icrl_jax.envs.darkroom import DarkRoom, KeyToDoor
from icrl_jax.core import validation
from icrl_jax.data import sources
from icrl_jax.data.sources.uniform import first_argmax, uniform_pick


#: The step at which a cell was "last seen" before it ever is: older than any memory.
_NEVER = -(2 ** 30)


@flax.struct.dataclass
class ExplorerState:
    """seen_at: int32 `(P, n)` the step at which each cell was last seen in each phase;
    target: int32 `(P,)` the cell that paid in each phase (-1: not found yet) and found_at int32
    `(P,)` the step it was seen at (`_NEVER` before either); phase: int32 `()` this episode's
    phase; clock: int32 `()` the step being acted on (0 at the first observation); lapsed: bool
    `()` this episode is played at random."""

    seen_at: jax.Array
    target: jax.Array
    found_at: jax.Array
    phase: jax.Array
    clock: jax.Array
    lapsed: jax.Array


#: What `data.source_kwargs` take (core/validation.py `kwargs_of`).
KWARGS = (
    validation.number("eps", 0.1, low=0, high=1), validation.optional(validation.positive_int("memory", 500)),
    validation.number("lapse", 0.0, low=0, high=1),
    validation.env_requirement("needs Dark Room or Key-to-Door with cell-id observations",
                      lambda env: isinstance(env, (DarkRoom, KeyToDoor))
                      and env.discrete_observations),
)


def grid_explorer(env, eps: float = 0.1, memory: int | None = None, lapse: float = 0.0
                  ) -> "sources.Source":
    """The grid explorer (module docstring) for a Dark Room or Key-to-Door `env` with cell-id
    observations and atomic moves; `memory`: the steps it remembers (None: all); `lapse`: the
    probability that an episode is played at random."""
    if not isinstance(env, (DarkRoom, KeyToDoor)) or not env.discrete_observations:
        raise ValueError(f"grid_explorer needs Dark Room or Key-to-Door with cell observations; "
                         f"got {type(env).__name__}")
    if memory is not None and int(memory) < 1:
        raise ValueError(f"grid_explorer memory must be a positive number of steps, got {memory}")
    if not 0.0 <= lapse <= 1.0:
        raise ValueError(f"grid_explorer lapse must be a probability, got {lapse}")
    phases = 2 if env.key_flag else 1
    n = env.num_observations
    cell_positions = env.position(jnp.arange(n))  # (n, 2)
    far = jnp.iinfo(jnp.int32).max

    def init(key, params):
        return ExplorerState(seen_at=jnp.full((phases, n), _NEVER, jnp.int32),
                             target=jnp.full((phases,), -1, jnp.int32),
                             found_at=jnp.full((phases,), _NEVER, jnp.int32),
                             phase=jnp.int32(0), clock=jnp.int32(0),
                             lapsed=jax.random.bernoulli(key, lapse))

    def act(key, s, obs, env_state, params):
        # Remembered: seen at one of the last `memory` steps (this one included), or ever.
        oldest = s.clock - int(memory) if memory is not None else jnp.int32(_NEVER)
        pos = env.position(obs)
        seen = (s.seen_at[s.phase] > oldest).at[obs].set(True)
        distance = jnp.abs(cell_positions - pos).sum(-1)
        frontier = first_argmax(-jnp.where(seen, far, distance))
        found = (s.target[s.phase] >= 0) & (s.found_at[s.phase] > oldest)
        goal = jnp.where(found, s.target[s.phase], frontier)
        ends = jax.vmap(lambda a: env.move(pos, a))(jnp.arange(params.action_mask.shape[0]))
        scores = jnp.abs(ends - cell_positions[goal]).sum(-1)
        greedy = first_argmax(-jnp.where(params.action_mask, scores, far))
        u = jax.random.uniform(key, (2,))
        random = (u[0] < eps) | s.lapsed
        return jnp.where(random, uniform_pick(u[1], params.action_mask), greedy), s

    def update(key, s, tr, params):
        # The cell stepped into counts as seen at the next step, also when an episode ends
        # there (the next observation is then the auto-reset's cell).
        seen_at = s.seen_at.at[s.phase, tr.obs].set(s.clock).at[s.phase, tr.next_obs].set(
            s.clock + 1)
        paid = tr.reward > 0
        target = s.target.at[s.phase].set(jnp.where(paid, tr.next_obs, s.target[s.phase]))
        found_at = s.found_at.at[s.phase].set(jnp.where(paid, s.clock + 1, s.found_at[s.phase]))
        phase = jnp.where(paid, jnp.minimum(s.phase + 1, phases - 1), s.phase)
        ends = tr.terminated | tr.truncated
        phase = jnp.where(ends, 0, phase)
        lapsed = jnp.where(ends, jax.random.bernoulli(key, lapse), s.lapsed)
        return ExplorerState(seen_at=seen_at, target=target, found_at=found_at,
                             phase=phase.astype(jnp.int32), clock=s.clock + 1, lapsed=lapsed)

    return sources.Source(init, act, update, name="grid_explorer")
