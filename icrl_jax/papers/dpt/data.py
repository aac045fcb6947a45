"""DPT's training data: learning histories of any source, labelled with the optimal action at
every step, and on-device sampling of (in-context dataset, query, label) triples.

The builder `dpt_histories` runs `data.source` on the training tasks exactly as the shared
`histories` builder does (same tasks, same keys: the same histories), writes them to the same
`histories.npz` (which AD reads as it is: DPT and AD can train on the same transitions) and
beside it `<name>.dpt_labels.npz`: each step's next observation (before an auto-reset replaces
it) and the env oracle's action at that step, recorded while the histories are made (the oracle
of `sources.noisy_oracle`: the best arm of a bandit, the env's own expert where it has one,
the shortest way to the goal in the Dark Room family).

A training example (`sample_contexts`) is one history's window of `train.seq_len` consecutive
transitions (s, a, s', r), shuffled when `model.shuffle_context` (the authors' `--shuffle`),
with a query: the observation at a uniformly drawn step of the same history, and its label.
"""

from __future__ import annotations

import os
import time

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.files import atomic_write
from icrl_jax.data import sources
from icrl_jax.data.builders import BUILDERS, DatasetShapeError, Histories, task_split
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.history import History, HistoryFormatError, load_history, save_history
from icrl_jax.data.train_data import window_at


@flax.struct.dataclass
class LabelledHistory(History):
    """A `History` with, per step, what DPT reads beside it.

    Attributes (beside `History`'s):
      next_observations: `(N, T, *obs_shape)` the observation each step led to (an episode's
        last one included, before the auto-reset).
      optimal_actions: int32 `(N, T)` the oracle's action at each step's observation.
    """

    next_observations: jax.Array
    optimal_actions: jax.Array


@flax.struct.dataclass
class ContextBatch:
    """B training examples: in-context datasets of L transitions, a query each, its label.

    query_observations: `(B, *obs_shape)`; observations, next_observations `(B, L, *obs_shape)`;
    actions int32 `(B, L)`; rewards float32 `(B, L)`; labels int32 `(B,)` the optimal action at
    the query; action_mask bool `(B, A)`.
    """

    query_observations: jax.Array
    observations: jax.Array
    actions: jax.Array
    next_observations: jax.Array
    rewards: jax.Array
    labels: jax.Array
    action_mask: jax.Array


def labelling(source: sources.Source, oracle: sources.Source, num_steps: int,
              observation: jax.Array) -> sources.Source:
    """`source`, acting exactly as it does (same keys), whose state also records each step's
    oracle action and next observation (read from `generate_histories(..., with_state=True)`).
    `observation`: an example observation (shape and dtype)."""

    def init(key, params):
        return dict(inner=source.init(key, params), t=jnp.int32(0),
                    labels=jnp.zeros(num_steps, jnp.int32),
                    next=jnp.zeros((num_steps,) + observation.shape, observation.dtype))

    def act(key, state, obs, env_state, params):
        action, inner = source.act(key, state["inner"], obs, env_state, params)
        label, _ = oracle.act(key, oracle.init(key, params), obs, env_state, params)
        labels = state["labels"].at[state["t"]].set(jnp.asarray(label, jnp.int32))
        return action, dict(state, inner=inner, labels=labels)

    def update(key, state, transition, params):
        next_obs = state["next"].at[state["t"]].set(transition.next_obs.astype(observation.dtype))
        return dict(state, inner=source.update(key, state["inner"], transition, params),
                    next=next_obs, t=state["t"] + 1)

    return sources.Source(init, act, update, name=f"labelled[{source.name}]")


def labels_path(path: str) -> str:
    """Where the labels of the histories at `path` go."""
    root, _ = os.path.splitext(path)
    return f"{root}.dpt_labels.npz"


class LabelledHistories(Histories):
    """`data.builder="dpt_histories"` (module docstring); made whole by one process (not in
    per-process parts)."""

    #: The builder that reads the same file as plain histories (the AD counterpart's).
    plain_builder = "histories"

    def exists(self, path: str, env, rows=None) -> bool:
        return os.path.exists(path) and os.path.exists(labels_path(path))

    def build(self, config, env, path: str, rows=None) -> None:
        if rows is not None:
            raise UserError("data.builder='dpt_histories' is made by one process; make it first "
                            "(icrl-jax generate), then train with several")
        if env.host:
            raise UserError(f"data.builder='dpt_histories' labels histories of JAX envs; "
                            f"{config.env.name} runs on the host")
        train_ids, _ = task_split(env, config)
        tasks = np.repeat(train_ids, config.data.histories_per_task, axis=0)
        keys = jax.random.split(jax.random.PRNGKey(config.seed), len(tasks))
        num_steps = int(config.data.num_steps)
        source = sources.build_source(config.data.source, env, num_steps,
                                      config.data.source_kwargs.to_dict())
        oracle = sources.noisy_oracle(env, num_steps, 0.0, 0.0)
        params = env.task_params(tasks)
        observation = jax.eval_shape(lambda p: env.reset(jax.random.key(0), p)[0],
                                     jax.tree.map(lambda x: x[0], params))
        start = time.perf_counter()
        history, info = generate_histories(
            env, labelling(source, oracle, num_steps, jnp.zeros(observation.shape, observation.dtype)),
            params, num_steps, keys, task_ids=tasks, with_state=True)
        state = jax.device_get(info["policy_state"])
        seconds = time.perf_counter() - start
        save_history(path, history, metadata=dict(
            env=config.env.name, env_kwargs=config.env.kwargs.to_dict(),
            source=config.data.source, source_kwargs=config.data.source_kwargs.to_dict(),
            seed=config.seed, generation_seconds=seconds, rows=None, labels="dpt_labels"))
        with atomic_write(labels_path(path), "wb") as f:
            np.savez(f, next_observations=state["next"], optimal_actions=state["labels"])
        print(f"generated {history.num_histories} labelled histories x {history.length} steps of "
              f"{config.data.source} in {seconds:.1f}s -> {path}")

    def open(self, config, env, path: str) -> LabelledHistory:
        history = load_history(path)[0]
        if not os.path.exists(labels_path(path)):
            raise HistoryFormatError(f"{path} has no labels ({labels_path(path)}): it was made by "
                                     f"another builder; delete it to make it again with DPT's")
        with np.load(labels_path(path)) as f:
            extra = {name: np.asarray(f[name]) for name in ("next_observations", "optimal_actions")}
        return LabelledHistory(**{name: getattr(history, name) for name in
                                  ("observations", "actions", "rewards", "dones", "task_ids",
                                   "action_mask")}, **extra)

    def check(self, config, env, dataset, path: str, rows=None) -> None:
        super().check(config, env, dataset, path)
        if (np.shape(dataset.optimal_actions) != np.shape(dataset.actions)
                or np.shape(dataset.next_observations) != np.shape(dataset.observations)):
            raise DatasetShapeError(f"{labels_path(path)} holds labels of shape "
                                    f"{np.shape(dataset.optimal_actions)} for histories of shape "
                                    f"{np.shape(dataset.actions)}; delete both files to make them "
                                    "again")


BUILDERS.register("dpt_histories", LabelledHistories())


def sample_contexts(data: LabelledHistory, key: jax.Array, batch_size: int, window: int,
                    shuffle: bool = True) -> ContextBatch:
    """`batch_size` examples (module docstring), on device: a history, a window of `window`
    consecutive steps of it (its order permuted when `shuffle`), and a query step of it."""
    num_histories, length = data.actions.shape
    if length < window:
        raise UserError(f"train.seq_len={window} transitions per in-context dataset, but the "
                        f"histories have {length} steps (data.num_steps)")
    row_key, start_key, query_key, order_key = jax.random.split(key, 4)
    rows = jax.random.randint(row_key, (batch_size,), 0, num_histories)
    starts = jax.random.randint(start_key, (batch_size,), 0, length - window + 1)
    queries = jax.random.randint(query_key, (batch_size,), 0, length)
    orders = jax.random.split(order_key, batch_size)

    def one(row, start, query, order_key):
        order = (jax.random.permutation(order_key, window) if shuffle
                 else jnp.arange(window))

        def context(x):
            return window_at(x, row, start, window)[order]

        return ContextBatch(
            query_observations=window_at(data.observations, row, query, 1)[0],
            observations=context(data.observations), actions=context(data.actions),
            next_observations=context(data.next_observations), rewards=context(data.rewards),
            labels=window_at(data.optimal_actions, row, query, 1)[0].astype(jnp.int32),
            action_mask=data.action_mask[row])

    return jax.vmap(one)(rows, starts, queries, orders)

