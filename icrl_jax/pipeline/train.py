"""The one trainer: optimiser, jitted train steps, replicas, checkpoints with resume, NaN checks.

`train` runs one model; `train_replicas` runs K models side by side, `vmap` over their
parameters, optimiser states, seeds and the hyperparameters that change no shape
(`REPLICA_HYPERPARAMETERS`, a traced pytree): a random search is that, and a single run is the
same step builder without the vmap. Both go through `_fit`, which owns resume, checkpoints
(orbax), logging (JSONL, TensorBoard, optionally Weights & Biases), progress and the NaN check.

Every step's randomness is `fold_in(seed_key, step)`, so the result of a run does not depend on
how many steps run per jitted call, on the number of devices or processes, or on where it was
interrupted.

Devices: batches are sharded over a 1-d mesh of all devices of all processes (`data_mesh`;
multi-process runs: `icrl_jax.core.distributed`; a CPU host has one device per core,
`icrl_jax.core.cpu_devices`); replicas are sharded over it too. In one process, a batch or replica
count that does not divide over every device uses the most devices it divides over.
`train.compute_dtype` "bf16" computes in bfloat16 with float32 parameters, optimiser state,
logits and loss; "auto" picks it on accelerators with fast bf16 (GPUs from Ampere on, TPUs) and
float32 on the CPU.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from icrl_jax.core.checkpoints import (Checkpointer, CheckpointMismatchError,  # noqa: F401 (re-export)
                                      MissingCheckpointError)
from icrl_jax.core.config import TRACED_HYPERPARAMETERS
from icrl_jax.data.train_data import TrainData
from icrl_jax.core.distributed import is_main_process
from icrl_jax.core.errors import UserError
from icrl_jax.core.host_memory import release_freed_memory
from icrl_jax.core.logging_utils import MetricsLogger, progress

#: Hyperparameters that never change a shape: traced in replica training, hence vmappable.
REPLICA_HYPERPARAMETERS = TRACED_HYPERPARAMETERS


class TrainingDivergedError(UserError):
    """The loss or the gradients became NaN or infinite (a user error: the usual cause is the
    configuration, e.g. the learning rate; the CLI reports it in one line)."""


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any


def make_optimizer(config, hyper: dict[str, jax.Array] | None = None,
                   trainable: Callable | None = None) -> optax.GradientTransformation:
    """AdamW with linear warmup, cosine decay and global-norm gradient clipping.

    `trainable(params) -> pytree of bool` (a method's `trainable`, None = all): parameters
    marked False are frozen, neither updated nor weight-decayed (GPT-DT(part)).

    With `hyper` (traced `train.learning_rate` / `train.weight_decay`): optax's schedules branch
    on the peak value in Python, so the schedule is built for a peak of 1 and the update scaled
    by the learning rate afterwards; warmup and cosine decay are linear in the peak, so this is
    the same optimiser.
    """
    peak = 1.0 if hyper is not None else config.learning_rate
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak,
        warmup_steps=max(1, min(config.warmup_steps, config.num_steps - 1)),
        decay_steps=max(config.num_steps, 2), end_value=peak * config.min_lr_ratio)
    weight_decay = config.weight_decay if hyper is None else hyper["train.weight_decay"]
    chain = [optax.clip_by_global_norm(config.grad_clip),
             optax.adamw(schedule, b1=config.b1, b2=config.b2, weight_decay=weight_decay)]
    if hyper is not None:
        chain.append(optax.scale(hyper["train.learning_rate"]))
    if trainable is None:
        return optax.chain(*chain)
    labels = lambda params: jax.tree.map(lambda t: "train" if t else "frozen", trainable(params))
    return optax.multi_transform({"train": optax.chain(*chain), "frozen": optax.set_to_zero()},
                                 labels)


def data_mesh(split: int | None = None) -> Mesh:
    """A 1-d mesh over all devices of all processes; batches (or replicas) are split along its
    `data` axis. In one process, `split` (the batch size, or the replica count) takes the most
    devices it divides over: batch 63 on 2 CPU devices (`icrl_jax.core.cpu_devices`) trains on one,
    not a padded or replicated two. Several processes keep every device (their batch must
    divide over them all)."""
    devices = jax.devices()
    if split and jax.process_count() == 1:
        devices = devices[:max(n for n in range(1, len(devices) + 1) if split % n == 0)]
    return Mesh(np.array(devices), ("data",))


PRECISIONS = ("auto", "fp32", "bf16")


def compute_dtype(precision: str = "auto") -> jnp.dtype:
    """The dtype the model computes in for `train.compute_dtype` (see the module docstring)."""
    if precision not in PRECISIONS:
        raise UserError(f"unknown train.compute_dtype {precision!r} (one of {', '.join(PRECISIONS)})")
    if precision == "auto":
        device = jax.devices()[0]
        fast_bf16 = device.platform == "tpu" or (
            device.platform == "gpu" and float(getattr(device, "compute_capability", 0)) >= 8.0)
        precision = "bf16" if fast_bf16 else "fp32"
    return jnp.bfloat16 if precision == "bf16" else jnp.float32


def _cast_floats(tree, dtype):
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating)
                        else x, tree)


def gradient_step(method, optimizer: optax.GradientTransformation, state: TrainState, batch,
                  dropout_key: jax.Array, dtype=jnp.float32
                  ) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimiser step of `method.loss` on `batch`, computed in `dtype` (bf16: the float32
    parameters and the batch's floats are cast on the way in, so the gradients and the update
    stay float32; losses take their logits in float32)."""
    def loss(params):
        if dtype != jnp.float32:
            return method.loss(_cast_floats(params, dtype), _cast_floats(batch, dtype),
                               dropout_key)
        return method.loss(params, batch, dropout_key)

    (_, metrics), grads = jax.value_and_grad(loss, has_aux=True)(state.params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = dict(metrics, grad_norm=optax.tree.norm(grads))
    return TrainState(state.step + 1, params, opt_state), metrics


def make_train_steps(build: Callable, data: TrainData, config, mesh: Mesh,
                     replicas: bool = False, num_replicas: int = 0) -> Callable:
    """Build `train_steps(state, data, seed_key, hyper) -> (state, metrics)`, jitted.

    `build(hyper) -> (method, optimizer)`. One call runs `config.steps_per_call` optimiser
    steps; metrics are stacked over them, `{name: (steps_per_call,)}` (`(K, steps_per_call)`
    with replicas).

    * On-device data (`data.sample_fn`): the steps run in one `lax.scan`; each samples its
      windows on device and shards them over the mesh's `data` axis; parameters stay
      replicated, so XLA inserts the gradient all-reduce. The same code runs on 1 or N devices.
    * Loader data: `data` is the loader's next item, `steps_per_call * batch_size` windows,
      taken as consecutive batches. These steps are unrolled at trace time, never inside an XLA
      while loop: XLA:CPU runs convolution gradients (pixel encoders) inside one many times
      slower than in straight-line code (benchmarks/RESULTS.md). Compile time grows with
      `steps_per_call`; keep it small.
      With several processes the item is `(steps_per_call, batch_size, ...)` (`_process_loader`).
    * `replicas`: `vmap` over the leading K axis of `state`, `seed_key` and `hyper` (the data
      is shared); the replicas are sharded over the mesh (`state_sharding`).
    """
    batch_size, window, steps = config.batch_size, config.seq_len, config.steps_per_call
    num_devices = mesh.devices.size
    if batch_size % num_devices and not replicas:
        raise UserError(f"train.batch_size={batch_size} does not divide over the {num_devices} "
                        f"devices; use a multiple of {num_devices}")
    sharding = None if replicas else NamedSharding(mesh, P("data"))
    stepped = data.loader_fn is not None and jax.process_count() > 1
    dtype = compute_dtype(config.compute_dtype)

    def constrain(batch):
        return batch if sharding is None else jax.lax.with_sharding_constraint(batch, sharding)

    def train_steps(state: TrainState, arrays, seed_key: jax.Array, hyper):
        method, optimizer = build(hyper)
        if data.sample_fn is None:
            metrics = []
            for i in range(steps):
                batch = constrain(jax.tree.map(  # (steps, batch) from several processes
                    lambda x: x[i] if stepped else x[i * batch_size:(i + 1) * batch_size],
                    arrays))
                _, dropout_key = jax.random.split(jax.random.fold_in(seed_key, state.step))
                state, step_metrics = gradient_step(method, optimizer, state, batch, dropout_key,
                                                    dtype)
                metrics.append(step_metrics)
            return state, jax.tree.map(lambda *m: jnp.stack(m), *metrics)

        def one_step(state, _):
            sample_key, dropout_key = jax.random.split(jax.random.fold_in(seed_key, state.step))
            batch = constrain(data.sample_fn(arrays, sample_key, batch_size, window))
            return gradient_step(method, optimizer, state, batch, dropout_key, dtype)

        return jax.lax.scan(one_step, state, None, length=steps,
                            unroll=config.scan_unroll)

    if replicas:
        train_steps = jax.vmap(train_steps, in_axes=(0, None, 0, 0))
    out = state_sharding(mesh, replicas, num_replicas)
    return jax.jit(train_steps, out_shardings=(out, out), donate_argnums=0)


def state_sharding(mesh: Mesh, replicas: bool = False, num_replicas: int = 0) -> NamedSharding:
    """Where a training state lives: replicated on every device; K replicas split over the
    devices when K divides over them (each device trains its own replicas, no communication),
    else replicated. (Splitting one model's optimiser state over the devices, ZeRO stage 1, was
    slower on CPU devices: benchmarks/RESULTS.md.)"""
    if replicas and num_replicas and num_replicas % mesh.devices.size == 0:
        return NamedSharding(mesh, P("data"))
    return NamedSharding(mesh, P())


def process_rows(num_rows: int, mesh: Mesh | None = None) -> np.ndarray | None:
    """The rows of an `num_rows`-row dataset that `place_data` puts on this process's devices,
    int `(num_rows / process_count,)` in increasing order; None when the rows do not divide
    over the devices (every device then holds them all)."""
    mesh = mesh or data_mesh()
    if num_rows % mesh.devices.size:
        return None
    shards = NamedSharding(mesh, P("data")).addressable_devices_indices_map((num_rows,))
    return np.unique(np.concatenate([np.arange(num_rows)[i] for i in shards.values()]))


def place_data(arrays, mesh: Mesh, num_rows: int | None = None):
    """Put on-device training data on the mesh: arrays whose leading axis is the dataset's rows
    (histories, trajectories) are split over the devices when the rows divide over them, the
    rest replicated. Each device then holds 1/D of the data; sampling indexes the global array,
    which XLA turns into a local gather and one all-reduce of the sampled rows, so batches (and
    results) do not depend on the device or process count.

    `num_rows`: `arrays` hold only this process's rows (`process_rows`) of a dataset of that
    many rows, which each process made alone; they become the global arrays' local shards."""
    leaves = [x for x in jax.tree.leaves(arrays) if np.ndim(x) > 0]
    rows = max({np.shape(x)[0] for x in leaves}, key=lambda n: sum(
        np.shape(x)[0] == n for x in leaves)) if leaves else 0
    split = rows > 0 and (num_rows is not None or rows % mesh.devices.size == 0)

    def put(x):
        host = np.asarray(x)
        is_row = split and host.ndim > 0 and host.shape[0] == rows
        if is_row and num_rows is not None:
            return jax.make_array_from_process_local_data(
                NamedSharding(mesh, P("data")), host, (num_rows,) + host.shape[1:])
        spec = P("data") if is_row else P()
        return jax.make_array_from_callback(host.shape, NamedSharding(mesh, spec),
                                            lambda index: host[index])
    return jax.tree.map(put, arrays)


def init_state(build: Callable, data: TrainData, key: jax.Array, hyper=None) -> TrainState:
    """Fresh parameters (from `data.example`'s shapes) and optimiser state."""
    method, optimizer = build(hyper)
    params = method.init(key, jax.tree.map(jnp.asarray, data.example))
    return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))


def compile_first(jitted: Callable, *args) -> None:
    """Compile `jitted` for `args` ahead of its first call, then return the memory the compiler
    freed to the system before that call allocates the program's buffers (else a process's
    peak holds both: `core/host_memory.release_freed_memory`). The call then reuses the
    program."""
    jitted.lower(*args).compile()
    release_freed_memory()


def check_step_config(config) -> None:
    if config.num_steps % config.steps_per_call:
        raise ValueError(f"train.num_steps={config.num_steps} must be a multiple of "
                         f"train.steps_per_call={config.steps_per_call}")
    for name in ("log_every", "checkpoint_every"):
        if config[name] % config.steps_per_call:
            raise ValueError(f"train.{name}={config[name]} must be a multiple of "
                             f"train.steps_per_call={config.steps_per_call}")


def _check_finite(metrics: dict[str, np.ndarray], first_step: int, good_step: int | None) -> None:
    """Raise `TrainingDivergedError` naming the first step whose loss or gradient norm is not
    finite (`metrics`: `(steps,)` or `(K, steps)` arrays of one call starting at `first_step`)."""
    for name in ("loss", "grad_norm"):
        values = np.asarray(metrics[name]).reshape(-1, np.shape(metrics[name])[-1])
        bad = ~np.isfinite(values)
        if bad.any():
            replica, offset = np.argwhere(bad)[0]
            where = f" in replica {replica}" if values.shape[0] > 1 else ""
            kept = (f"the last good checkpoint (step {good_step}) is intact" if good_step
                    else "no checkpoint was written")
            raise TrainingDivergedError(
                f"training diverged at step {first_step + int(offset) + 1}{where}: {name} is "
                f"{values[replica, offset]}; {kept}. Lower train.learning_rate or check the data.")


def _fit(build: Callable, data: TrainData, config, workdir: str, signature: dict[str, Any],
         seed_keys: jax.Array, hyper, replicas: bool, show_progress: bool, stop_at: int | None,
         log, programs: dict | None = None, cache_key=None
         ) -> tuple[TrainState, dict[str, np.ndarray] | None]:
    """The loop shared by `train` and `train_replicas` (see the module docstring); returns the
    final state and the last call's metrics averaged over its steps (`(K,)` with replicas).
    The compiled (init, train_steps) are kept in the caller's `programs` under `cache_key` and
    reused from there; without `programs` they are compiled for this call alone."""
    check_step_config(config)
    mesh = data_mesh(len(seed_keys) if replicas else config.batch_size)
    num_replicas = len(seed_keys) if replicas else 0
    placed = state_sharding(mesh, replicas, num_replicas)
    init_keys = jax.vmap(lambda k: jax.random.fold_in(k, 2**31 - 1))(seed_keys) if replicas \
        else jax.random.fold_in(seed_keys, 2**31 - 1)
    if programs is None or cache_key not in programs:
        init = jax.vmap(lambda k, h: init_state(build, data, k, h)) if replicas else \
            (lambda k, h: init_state(build, data, k, h))
        compiled = (jax.jit(init, out_shardings=placed),
                    make_train_steps(build, data, config, mesh, replicas, num_replicas))
        if programs is not None:
            programs[cache_key] = compiled
    init, train_steps = compiled if programs is None else programs[cache_key]
    state = init(init_keys, hyper)
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), signature,
                                config.keep_checkpoints)
    restored, good_step, _ = checkpointer.restore_latest_intact(state)
    if restored is not None:
        state = jax.device_put(restored, placed)
    arrays = None if data.arrays is None else place_data(data.arrays, mesh, data.num_rows)
    step = int(np.max(state.step))
    loader = None if data.loader_fn is None else _process_loader(data.loader_fn, step, mesh,
                                                                 config.steps_per_call)
    wandb = dict(wandb=True, wandb_project=log.wandb_project, wandb_mode=log.wandb_mode,
                 run_config=signature) if log is not None and log.wandb else {}
    main = is_main_process()  # the other processes compute the same state and write nothing
    logger = MetricsLogger(workdir, "train", **wandb) if main else None
    bar = progress(total=config.num_steps, initial=step, desc="train",
                   disable=not (show_progress and main))
    end = config.num_steps if stop_at is None else min(stop_at, config.num_steps)
    last = None
    try:
        while step < end:
            batch = arrays if loader is None else next(loader)
            if last is None:
                compile_first(train_steps, state, batch, seed_keys, hyper)
            state, metrics = train_steps(state, batch, seed_keys, hyper)
            metrics = jax.device_get(metrics)
            _check_finite(metrics, step, good_step)  # before anything of this call is saved
            step = int(np.max(state.step))
            last = {k: np.asarray(v).mean(-1) for k, v in metrics.items()}
            bar.update(config.steps_per_call)
            if step % config.log_every == 0 and logger is not None:
                means = {k: float(np.mean(v)) for k, v in metrics.items()}
                logger.write(step, means)
                bar.set_postfix(loss=f"{means['loss']:.3f}", **(  # not every model has one
                    {"acc": f"{means['accuracy']:.2f}"} if "accuracy" in means else {}))
            if step % config.checkpoint_every == 0 or step in (config.num_steps, end):
                checkpointer.save(state)
                good_step = step
    finally:
        bar.close()
        if logger is not None:
            logger.close()
        checkpointer.close()
        if loader is not None:
            loader.close()
    return _fetch(state), last


def _process_loader(loader_fn: Callable, start_step: int, mesh: Mesh, steps: int):
    """The loader of `loader_fn` from `start_step`. With several processes, each reads its own
    part of the store (`shard`) and yields its share of every step's batch; they are joined
    into global `(steps_per_call, batch_size, ...)` arrays, the batch axis split over the devices
    (`make_train_steps` reads those per step)."""
    count = jax.process_count()
    if count == 1:
        return loader_fn(start_step)
    loader = loader_fn(start_step, (jax.process_index(), count))
    sharding = NamedSharding(mesh, P(None, "data"))

    def join(x):
        local = np.asarray(x).reshape((steps, -1) + np.shape(x)[1:])
        return jax.make_array_from_process_local_data(
            sharding, local, (steps, local.shape[1] * count) + local.shape[2:])

    class Joined:
        def __next__(self):
            return jax.tree.map(join, next(loader))

        def close(self):
            loader.close()
    return Joined()


def _fetch(tree):
    """Host copies of a state's arrays: addressable ones directly; a multi-process array
    sharded over replicas is gathered from all processes first."""
    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            from jax.experimental import multihost_utils
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)
    return jax.tree.map(one, tree)


def train(method, data: TrainData, config: ml_collections.ConfigDict, workdir: str,
          signature: dict[str, Any], seed: int = 0, show_progress: bool = True,
          stop_at: int | None = None, log=None, programs: dict | None = None) -> TrainState:
    """Train `method` on `data`, resuming from the newest intact checkpoint in `workdir`.

    `stop_at` ends the run early at that step, after checkpointing it, as a preempted job
    would; running again with the same config resumes and ends where an uninterrupted run ends.
    `log`: the config's `log` section (Weights & Biases switch; None: off). Writes metrics to
    `workdir/metrics.jsonl` and TensorBoard, checkpoints to `workdir/checkpoints`. Raises
    `TrainingDivergedError` on a NaN/inf loss or gradient (the last good checkpoint is kept).
    `programs`: a dict the caller keeps across calls with the same method, data and config
    (the segments of one run between `stop_at`s): the compiled steps are kept there and reused,
    where each call would otherwise compile them again.
    Returns the final state (fetched to host).
    """
    optimizer = make_optimizer(config, trainable=method.trainable)
    return _fit(lambda hyper: (method, optimizer), data, config, workdir, signature,
                jax.random.key(seed), None, False, show_progress, stop_at, log, programs)[0]


class _Mapping(dict):
    """A dict read by attribute too: a model config whose rates may be traced arrays."""

    __getattr__ = dict.__getitem__


def replica_hyperparameters(config, assignments: Sequence[dict[str, Any]]) -> dict[str, jax.Array]:
    """float32 `(K,)` per `REPLICA_HYPERPARAMETERS` key the config has (a method's own, such as
    AD's label smoothing, only where its config declares it): the assignment's value, else the
    config's."""
    def value(a, dotted):
        section, key = dotted.split(".")
        return a.get(dotted, config[section][key])
    present = [k for k in REPLICA_HYPERPARAMETERS if k.split(".")[1] in config[k.split(".")[0]]]
    return {k: jnp.asarray([value(a, k) for a in assignments], jnp.float32) for k in present}


def replica_builder(build_method: Callable, config) -> Callable:
    """`build(hyper) -> (method, optimiser)` of one replica: `build_method(model_config)` on
    the config's model with its `model.*` hyperparameters replaced by the traced `hyper`."""
    def build(h):
        model = _Mapping(config.model.to_dict())
        model.update({k.split(".", 1)[1]: v for k, v in h.items() if k.startswith("model.")})
        method = build_method(model)
        return method, make_optimizer(config.train, h, method.trainable)
    return build


def train_replicas(build_method: Callable, config, data: TrainData, workdir: str,
                   signature: dict[str, Any], seeds: Sequence[int],
                   hyper: dict[str, jax.Array], show_progress: bool = False,
                   programs: dict | None = None, stop_at: int | None = None
                   ) -> tuple[TrainState, dict[str, np.ndarray] | None]:
    """Train K replicas of one model side by side (`vmap`), replica k from seed `seeds[k]` with
    the hyperparameters `hyper[name][k]`; resumable like `train` (checkpoints of the stacked
    state in `workdir`). `build_method(model_config)` builds the method from a model config
    whose replica hyperparameters are traced. Returns the stacked final state and the last
    call's metrics per replica (None when no step was left to train). `programs`: a dict the
    caller keeps across calls with one env and data (the chunks of a sweep group, the segments
    between early-stopping evaluations): compiled programs are kept there by replica count and
    config, and reused. `stop_at` pauses at that step with a checkpoint (a later call resumes),
    for evaluations in between."""
    build = replica_builder(build_method, config)
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    train = ml_collections.ConfigDict(config.train.to_dict())
    # A search logs in whole calls and checkpoints each group once, at its end: it resumes by
    # finished assignments (results.jsonl), and a save per call would cost more than it saves.
    train.log_every = min(-(-train.log_every // train.steps_per_call) * train.steps_per_call,
                          train.num_steps)
    train.checkpoint_every = train.num_steps
    # The whole config is in the key: a program compiled for other settings trains their model.
    key = (len(seeds), config.to_json(sort_keys=True))
    return _fit(build, data, train, workdir, signature, keys, hyper, True, show_progress,
                stop_at, None, programs, key)


def restore_params(method, data: TrainData, config, workdir: str, signature: dict[str, Any]):
    """The parameters of the newest checkpoint in `workdir` (a clear error if there is none,
    it belongs to another model, or it is unreadable)."""
    checkpointer = Checkpointer(os.path.join(workdir, "checkpoints"), signature)
    try:
        if checkpointer.latest_step() is None:
            raise MissingCheckpointError(f"no checkpoint to evaluate in {workdir}/checkpoints; "
                                         f"train first (icrl-jax train with the same --config)")
        like = init_state(lambda _: (method, make_optimizer(config, trainable=method.trainable)),
                          data, jax.random.key(0))
        return checkpointer.restore(like).params
    finally:
        checkpointer.close()


def latest_checkpoint_step(workdir: str) -> int | None:
    """The step of the newest checkpoint in `workdir` (None without one)."""
    import orbax.checkpoint as ocp
    directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    if not os.path.isdir(directory):
        return None
    with ocp.CheckpointManager(directory) as manager:
        return manager.latest_step()


__all__ = ["TrainState", "TrainingDivergedError", "make_optimizer", "data_mesh",
           "gradient_step", "make_train_steps", "init_state", "train", "train_replicas",
           "replica_builder", "replica_hyperparameters", "restore_params",
           "latest_checkpoint_step", "MissingCheckpointError", "REPLICA_HYPERPARAMETERS"]
