"""More than one process: JAX's own distributed runtime, set up from the config or the cluster.

The same command runs on one CPU, one GPU, a multi-GPU host, several hosts or a TPU slice. Each
process runs the same program over one global device mesh (`train.data_mesh`): the trainer
shards every batch over all processes' devices and XLA all-reduces the gradients; parameters,
optimiser state and metrics are replicated, so every process holds the same state.

How a run becomes multi-process (`config.dist`, or the usual environment variables):

* `dist.coordinator=HOST:PORT`, `dist.num_processes=N`, `dist.process_id=I` (or
  `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`): process I of N;
  process 0 hosts the coordinator at that address.
* `dist.cluster=True`: JAX detects the cluster (SLURM, Open MPI, Kubernetes, Cloud TPU) and
  fills in all three.
* Neither: one process (nothing to initialise).

On the CPU the collectives go through gloo (`jax_cpu_collectives_implementation`), so two
processes on localhost are a real test of the multi-process path.

What each process does: it makes only the rows of the learning histories its devices train on
(`run.process_share`; other datasets: process 0 makes the file and all read it) and holds only
those (`train.place_data`), or streams windows of its own part of a pixel store into its share
of each batch (`train._process_loader`); all sample the same global batch and train; process 0
alone writes `config.json`, metrics, TensorBoard, W&B,
progress bars, evaluation files and the checkpoint signature; orbax writes each checkpoint once,
coordinating the processes itself.
"""

from __future__ import annotations

import os
import socket
import time

import jax

from icrl_jax.core.config import default_dist_config
from icrl_jax.core.errors import UserError


class CoordinatorUnreachableError(UserError):
    """The coordinator of a multi-process run did not answer."""


def _setting(dist, key: str, env_var: str):
    """`dist.<key>` when set away from its default, else the environment variable `env_var`,
    else the default."""
    unset = default_dist_config()[key]
    value = dist[key]
    return os.environ.get(env_var, unset) if value == unset else value


def _wait_for_coordinator(address: str, timeout_s: float) -> None:
    """Return once `address` accepts TCP connections; `CoordinatorUnreachableError` naming it
    after `timeout_s`. (A process whose coordinator never answers is otherwise aborted by the
    runtime's C++ check, with no Python error to catch.)"""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"dist.coordinator must be HOST:PORT, got {address!r}")
    deadline = time.monotonic() + timeout_s
    last_error: OSError | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, timeout_s)):
                return
        except OSError as e:
            last_error = e
            time.sleep(0.5)
    raise CoordinatorUnreachableError(
        f"the coordinator {address} did not answer within {timeout_s:g} s ({last_error}); start "
        f"process 0 first, or check dist.coordinator / JAX_COORDINATOR_ADDRESS and the firewall")


def initialize(dist) -> bool:
    """Join the multi-process run that `dist` (the config's `dist` section; None: its defaults)
    or the environment describes; returns whether this is a multi-process run. Idempotent."""
    if jax.distributed.is_initialized():
        return True
    dist = default_dist_config() if dist is None else dist
    timeout_s = float(dist.timeout_s)
    if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if dist.cluster:
        jax.distributed.initialize(initialization_timeout=int(timeout_s))
        return True
    coordinator = str(_setting(dist, "coordinator", "JAX_COORDINATOR_ADDRESS"))
    if not coordinator:
        return False
    num_processes = int(_setting(dist, "num_processes", "JAX_NUM_PROCESSES"))
    process_id = int(_setting(dist, "process_id", "JAX_PROCESS_ID"))
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise UserError(f"a multi-process run needs dist.num_processes >= 1 and 0 <= "
                        f"dist.process_id < num_processes; got {num_processes} and {process_id}")
    if num_processes == 1:
        return False
    if process_id > 0:
        _wait_for_coordinator(coordinator, timeout_s)
    jax.distributed.initialize(coordinator, num_processes, process_id,
                               initialization_timeout=int(timeout_s))
    return True


def is_main_process() -> bool:
    """Process 0 writes the run's files; the others compute the same state."""
    return jax.process_index() == 0


__all__ = ["CoordinatorUnreachableError", "initialize", "is_main_process"]
