"""What the trainer reads: a dataset on device with its window sampler, or a loader from disk."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator


@dataclasses.dataclass
class TrainData:
    """Training data of one run, in one of two forms.

    Attributes:
      example: one batch (any batch size) of what `method.loss` takes; it fixes the parameter
        shapes at init.
      arrays: the whole dataset as arrays kept on device (`sample_fn` form), else None.
      sample_fn: `sample_fn(arrays, key, batch_size, window) -> batch`, traced inside the jitted
        train step, so sampling costs no host round trip.
      loader_fn: `loader_fn(start_step, shard=(0, 1)) -> iterator` of
        `steps_per_call * batch_size // shard[1]` windows per `next()` (data that does not fit on
        device: pixel stores), drawn from the part `shard = (index, count)` of the dataset (a
        process's own histories in a multi-process run); a resumed run starts a fresh, seeded
        stream at its step.
      num_rows: when `arrays` hold only this process's rows of the dataset (each process of a
        multi-process run made its own share), the dataset's total row count.
    """

    example: Any
    arrays: Any = None
    sample_fn: Callable[..., Any] | None = None
    loader_fn: Callable[..., Iterator[Any]] | None = None
    num_rows: int | None = None

    def __post_init__(self):
        if (self.sample_fn is None) == (self.loader_fn is None):
            raise ValueError("TrainData needs exactly one of sample_fn (with arrays) or loader_fn")


def on_device(arrays: Any, sample_fn: Callable[..., Any], window: int) -> TrainData:
    """`TrainData` of arrays sampled on device by `sample_fn` (its example: one window)."""
    import jax
    return TrainData(sample_fn(arrays, jax.random.key(0), 1, window), arrays=arrays,
                     sample_fn=sample_fn)


def window_at(x, row, start, window: int):
    """`x[row, start:start + window]` of a `(N, L, ...)` array -> `(window, ...)`; a start past
    `L - window` is clamped, as `lax.dynamic_slice` does.

    One slice of the whole array, not a row then a slice of it: under `vmap` it is one gather of
    the windows, so with rows split over devices (`train.place_data`) XLA gathers and all-reduces
    `(B, window, ...)`, not the `(B, L, ...)` rows they come from."""
    import jax
    return jax.lax.dynamic_slice(x, (row, start) + (0,) * (x.ndim - 2),
                                 (1, window) + x.shape[2:])[0]
