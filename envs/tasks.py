"""Task ids and reproducible train/test splits.

Every environment maps an integer task id to its `EnvParams` deterministically (`env.task_params`),
so a task set is just an int array and a split is a seeded permutation of ids.
"""

from __future__ import annotations

import jax
import numpy as np


def split_tasks(num_tasks: int, num_train: int, seed: int = 0, num_test: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Split task ids `0..num_tasks-1` into disjoint train and test sets.

    The ids are shuffled by a seeded NumPy permutation (same seed -> same split on every machine),
    then the first `num_train` go to train and the next `num_test` (default: all the rest) to
    test; each part is returned sorted. The test set is a random sample of the held-out ids, not
    the lowest ones: in an environment whose ids enumerate its tasks in order (Key-to-Door's
    `key * 80 + door`), the lowest 100 ids would all have their key in the same two cells.

    Returns:
      `(train_ids, test_ids)`: int32 arrays of shapes `(num_train,)` and `(num_test,)`.
    """
    num_test = num_tasks - num_train if num_test is None else num_test
    if not 0 <= num_train <= num_tasks:
        raise ValueError(f"num_train={num_train} must be in [0, num_tasks={num_tasks}]")
    if not 0 <= num_test <= num_tasks - num_train:
        raise ValueError(f"num_test={num_test} must be in [0, num_tasks - num_train="
                         f"{num_tasks - num_train}]")
    perm = np.random.default_rng(seed).permutation(num_tasks).astype(np.int32)
    return np.sort(perm[:num_train]), np.sort(perm[num_train:num_train + num_test])


def task_key(seed: int | jax.Array, task_id: jax.Array) -> jax.Array:
    """The PRNG key that all randomness of task `task_id` is drawn from (vmappable over ids)."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), task_id)


def as_task_ids(task_ids, num_tasks: int | None) -> jax.Array:
    """Validate concrete ids against `num_tasks` and return them as an int32 array `(...)`."""
    ids = jax.numpy.asarray(task_ids, dtype=jax.numpy.int32)
    if num_tasks is not None and not isinstance(ids, jax.core.Tracer):
        host = np.asarray(ids)
        if host.size and (host.min() < 0 or host.max() >= num_tasks):
            raise ValueError(f"task ids must lie in [0, {num_tasks}), got range "
                             f"[{host.min()}, {host.max()}]")
    return ids
