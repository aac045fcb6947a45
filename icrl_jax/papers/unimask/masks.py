"""Uni[MASK]'s masking schemes (Carroll et al. 2022, App. B and C): which tokens of a snippet of k
timesteps the model sees, and which it must predict.

A snippet has, per timestep t in [0, k), a state token s_t and an action token a_t, plus one
return-to-go token for the whole snippet (its first: App. D). A `Mask` holds, bool:
state_in `(k,)`, action_in `(k,)`, rtg_in `()` (visible inputs) and state_pred `(k,)`,
action_pred `(k,)` (tokens in the loss). Index conventions follow the authors' batch classes:

* behaviour cloning, index i in [0, k-1]: s_0..s_i and a_0..a_{i-1} visible; predict a_i.
* reward-conditioned: the same, with the return-to-go visible.
* goal-conditioned, i in [0, k-2]: behaviour cloning plus the last state s_{k-1}.
* waypoint-conditioned: behaviour cloning plus the states at t = 0, k//3, 2k//3, k-1.
* future inference, i in [0, k-1]: the inputs of behaviour cloning; predict every later state
  and every action from a_i on.
* past inference, i in [1, k]: s_i.. and a_i.. visible; predict s_0..s_{i-1}, a_0..a_{i-1}.
* forward dynamics, i in [0, k-2]: s_i, a_i visible; predict s_{i+1}.
* inverse dynamics (the paper's name for backwards dynamics), i in [1, k-1]: s_i, a_{i-1}
  visible; predict s_{i-1}. The authors' batch class draws i in [0, k-2] and builds its masks
  before shifting i, so i = 0 wraps round (s_0, a_{k-1} visible; predict s_{k-1}):
  `task_set("authors")` has that task instead, for comparing with their numbers.
* ALL: one of the eight above, uniformly, per snippet (`all_per="snippet"`), or one task for a
  whole batch (`all_per="batch"`: the authors' trainer switches the task between batches).
* random: p ~ U[0, 1] per snippet; each state and action token hidden with probability p; the
  return-to-go visible with probability 1/2; predict every hidden state and action.

Every function is pure and jittable (k static, the index or key traced); `sample_mask` draws a
training mask, `evaluation_masks` enumerates a task's indices (its validation loss is then the
exact expectation over the uniform index).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from icrl_jax.core.errors import UserError, unknown_name


class Mask(NamedTuple):
    """Visible inputs and predicted tokens of one snippet (see the module docstring)."""

    state_in: jax.Array
    action_in: jax.Array
    rtg_in: jax.Array
    state_pred: jax.Array
    action_pred: jax.Array


def _t(k: int) -> jax.Array:
    return jnp.arange(k)


def _none(k: int) -> jax.Array:
    return jnp.zeros(k, bool)


def behaviour_cloning(i, k: int) -> Mask:
    t = _t(k)
    return Mask(t <= i, t < i, jnp.bool_(False), _none(k), t == i)


def reward_conditioned(i, k: int) -> Mask:
    return behaviour_cloning(i, k)._replace(rtg_in=jnp.bool_(True))


def goal_conditioned(i, k: int) -> Mask:
    mask = behaviour_cloning(i, k)
    return mask._replace(state_in=mask.state_in | (_t(k) == k - 1))


def waypoints(k: int) -> tuple[int, ...]:
    """The always-visible waypoint timesteps (the authors' choice)."""
    return tuple(sorted({0, k // 3, (2 * k) // 3, k - 1}))


def waypoint_conditioned(i, k: int) -> Mask:
    mask = behaviour_cloning(i, k)
    shown = jnp.isin(_t(k), jnp.asarray(waypoints(k)))
    return mask._replace(state_in=mask.state_in | shown)


def future_inference(i, k: int) -> Mask:
    t = _t(k)
    return Mask(t <= i, t < i, jnp.bool_(False), t > i, t >= i)


def past_inference(i, k: int) -> Mask:
    t = _t(k)
    return Mask(t >= i, t >= i, jnp.bool_(False), t < i, t < i)


def forward_dynamics(i, k: int) -> Mask:
    t = _t(k)
    return Mask(t == i, t == i, jnp.bool_(False), t == i + 1, _none(k))


def inverse_dynamics(i, k: int) -> Mask:
    t = _t(k)
    return Mask(t == i, t == i - 1, jnp.bool_(False), t == i - 1, _none(k))


def inverse_dynamics_wrapped(i, k: int) -> Mask:
    """The authors' inverse dynamics for i in [0, k-2]: i >= 1 is `inverse_dynamics`; i = 0
    shows s_0 and a_{k-1} and predicts s_{k-1} (their index -1)."""
    t, prev = _t(k), (i - 1) % k
    return Mask(t == i, t == prev, jnp.bool_(False), t == prev, _none(k))


class Task(NamedTuple):
    """A single-task scheme: `mask(i, k)` for i in [low, k + high_offset]."""

    mask: Callable[..., Mask]
    low: int
    high_offset: int

    def indices(self, k: int) -> jax.Array:
        return jnp.arange(self.low, k + self.high_offset + 1)


#: The eight evaluation tasks, in the heatmap's column order.
TASKS: dict[str, Task] = {
    "behaviour_cloning": Task(behaviour_cloning, 0, -1),
    "reward_conditioned": Task(reward_conditioned, 0, -1),
    "goal_conditioned": Task(goal_conditioned, 0, -2),
    "waypoint_conditioned": Task(waypoint_conditioned, 0, -1),
    "past_inference": Task(past_inference, 1, 0),
    "future_inference": Task(future_inference, 0, -1),
    "forward_dynamics": Task(forward_dynamics, 0, -2),
    "inverse_dynamics": Task(inverse_dynamics, 1, -1),
}
#: Training regimes: every task alone, ALL (multi-task) and random masking.
REGIMES: tuple[str, ...] = tuple(TASKS) + ("all", "random")
#: `model.inverse_dynamics_index`: "ours" (i in [1, k-1]) or "authors" (their wrap-round).
INVERSE_DYNAMICS_INDEX = ("ours", "authors")


def task_set(inverse_dynamics_index: str = "ours") -> dict[str, Task]:
    """The eight evaluation tasks (`TASKS`' names and order) with the given inverse dynamics."""
    if inverse_dynamics_index not in INVERSE_DYNAMICS_INDEX:
        raise UserError(f"model.inverse_dynamics_index must be one of {INVERSE_DYNAMICS_INDEX}, "
                        f"got {inverse_dynamics_index!r}")
    if inverse_dynamics_index == "ours":
        return TASKS
    return dict(TASKS, inverse_dynamics=Task(inverse_dynamics_wrapped, 0, -2))


def _sample_task(task: Task, key, k: int) -> Mask:
    return task.mask(jax.random.randint(key, (), task.low, k + task.high_offset + 1), k)


def random_mask(key, k: int) -> Mask:
    """Random masking: the number of hidden state tokens (and of action tokens) is uniform on
    [0, k], not binomial (App. C)."""
    p_key, s_key, a_key, r_key = jax.random.split(key, 4)
    p_mask = jax.random.uniform(p_key)
    state_hidden = jax.random.uniform(s_key, (k,)) < p_mask
    action_hidden = jax.random.uniform(a_key, (k,)) < p_mask
    return Mask(~state_hidden, ~action_hidden, jax.random.bernoulli(r_key), state_hidden,
                action_hidden)


def all_tasks_mask(key, k: int, tasks: dict[str, Task] = TASKS) -> Mask:
    """ALL: one task uniformly at random, then its index uniformly."""
    pick, index = jax.random.split(key)
    branches = [lambda kk, task=task: _sample_task(task, kk, k) for task in tasks.values()]
    return jax.lax.switch(jax.random.randint(pick, (), 0, len(tasks)), branches, index)


def regime_index(name: str) -> int:
    if name not in REGIMES:
        raise unknown_name("masking scheme", name, REGIMES)
    return REGIMES.index(name)


def min_snippet_len() -> int:
    """The shortest snippet every evaluation task has an index for (2: a transition)."""
    return max(task.low - task.high_offset for task in TASKS.values())


def check_snippet_len(k: int) -> None:
    """A UserError (before any training) for snippets too short for some evaluation task."""
    short = [name for name, task in TASKS.items() if k + task.high_offset < task.low]
    if short:
        raise UserError(f"train.seq_len={k}: snippets of at least {min_snippet_len()} steps are "
                        f"needed by {', '.join(short)}")


def sample_mask(regime, key, k: int, tasks: dict[str, Task] = TASKS) -> Mask:
    """One training mask of regime `regime` (a name, or its index in `REGIMES`, may be traced:
    replicas of different regimes train side by side under `vmap`); `tasks`: `task_set(...)`."""
    if isinstance(regime, str):
        regime = regime_index(regime)
    branches = [lambda kk, task=task: _sample_task(task, kk, k) for task in tasks.values()]
    branches += [lambda kk: all_tasks_mask(kk, k, tasks), lambda kk: random_mask(kk, k)]
    return jax.lax.switch(jnp.asarray(regime, jnp.int32), branches, key)


#: How ALL picks its task (`sample_batch_masks`).
ALL_PER = ("snippet", "batch")


def sample_batch_masks(regime, key, k: int, batch: int, all_per: str = "snippet",
                       tasks: dict[str, Task] = TASKS) -> Mask:
    """Training masks of a batch of `batch` snippets, fields `(batch, k)` (rtg_in `(batch,)`):
    each snippet's own draw of `sample_mask`, except that ALL with `all_per="batch"` draws one
    task for the whole batch (each snippet then draws its own index)."""
    if all_per not in ALL_PER:
        raise UserError(f"model.all_per must be one of {ALL_PER}, got {all_per!r}")
    if isinstance(regime, str):
        regime = regime_index(regime)
    task_key, mask_key = jax.random.split(key)
    keys = jax.random.split(mask_key, batch)
    if all_per == "snippet":
        return jax.vmap(lambda kk: sample_mask(regime, kk, k, tasks))(keys)
    specs = list(tasks.values())

    def one_task(kk, task_index):
        branches = [lambda kq, task=task: _sample_task(task, kq, k) for task in specs]
        return jax.lax.switch(task_index, branches, kk)

    task_of_batch = jax.random.randint(task_key, (), 0, len(specs))
    regime = jnp.asarray(regime, jnp.int32)
    # Single tasks keep their own; ALL takes the batch's task; random masking is drawn as usual.
    chosen = jnp.where(regime == REGIMES.index("all"), task_of_batch, jnp.minimum(regime, len(tasks) - 1))
    per_task = jax.vmap(lambda kk: one_task(kk, chosen))(keys)
    random = jax.vmap(lambda kk: random_mask(kk, k))(keys)
    is_random = regime == REGIMES.index("random")
    return jax.tree.map(lambda a, b: jnp.where(is_random, a, b), random, per_task)


def evaluation_masks(task: str, k: int, tasks: dict[str, Task] = TASKS) -> Mask:
    """Every mask of evaluation task `task`, stacked along a leading axis (one per index)."""
    if task not in tasks:
        raise unknown_name("evaluation task", task, tasks)
    spec = tasks[task]
    if k + spec.high_offset < spec.low:
        raise UserError(f"{task} needs snippets of at least {spec.low - spec.high_offset} "
                        f"steps, got k={k}")
    return jax.vmap(lambda i: spec.mask(i, k))(spec.indices(k))
