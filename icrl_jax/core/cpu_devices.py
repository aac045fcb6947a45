"""One XLA CPU device per core, so that a CPU host trains data-parallel.

XLA's CPU backend splits every operation of a device's step over one pool of threads. With one
CPU device per core, `train.data_mesh` splits each batch over the devices instead: each device
runs the whole step on its share, and XLA adds one all-reduce of the gradients per step. The
model is the same (up to float rounding in the gradient sum). The quick models' steps gain
most, paper-scale ones little (`benchmarks/RESULTS.md`, "Kept changes"). Our reading, not
verified: the small operations of the quick models gain most from not being split over the
cores one by one.
The gradient all-reduce costs per parameter leaf, not per byte, on CPU devices (a small share
of the small model's step; `benchmarks/RESULTS.md`).
Evaluation rollouts and generated histories are sharded over the same devices.

JAX fixes its CPU device count when its backend starts, so `icrl-jax` calls
`use_one_device_per_core` first thing. `ICRL_JAX_CPU_DEVICES=N` asks for N devices instead (1:
JAX's default of one). A count set through JAX itself (`JAX_NUM_CPU_DEVICES`, or
`--xla_force_host_platform_device_count` in `XLA_FLAGS`) is left alone. On a GPU or TPU host the
accelerators stay the default devices and the CPU devices go unused.
"""

from __future__ import annotations

import os
from typing import Mapping

ENV = "ICRL_JAX_CPU_DEVICES"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def cpu_device_count(environ: Mapping[str, str]) -> int | None:
    """How many CPU devices to ask JAX for: `ICRL_JAX_CPU_DEVICES`, else one per usable core;
    None where JAX is told elsewhere. Raises ValueError for a count that is not a positive
    integer."""
    if ("JAX_NUM_CPU_DEVICES" in environ
            or "xla_force_host_platform_device_count" in environ.get("XLA_FLAGS", "")):
        return None
    value = environ.get(ENV)
    if value is None:
        return usable_cores()
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{ENV} must be a positive number of CPU devices, got {value!r}")
    return count


def use_one_device_per_core(environ: Mapping[str, str] = os.environ) -> int | None:
    """Set JAX's CPU device count (`cpu_device_count`) before its backend starts; returns the
    count set, or None where nothing was set. Call it before any JAX computation."""
    count = cpu_device_count(environ)
    if count is None:
        return None
    import jax
    jax.config.update("jax_num_cpu_devices", count)
    return count
