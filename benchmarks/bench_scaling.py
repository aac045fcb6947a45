"""Data-parallel training throughput over 1, 2, 4 and 8 devices, and over 1 and 2 processes.

Each configuration runs in its own subprocess (the device count is fixed when JAX starts): fake
CPU devices via `--xla_force_host_platform_device_count`, processes via `jax.distributed` on
localhost with gloo collectives (`icrl_jax.core.distributed`). The model is the quick presets' AD
transformer (2 layers x 64, batch 64 x 100 steps), trained by the one trainer's step builder
(`train.make_train_steps`) with the same global batch in every configuration.

On a 2-core CPU host these numbers measure the overhead of sharding and of the collectives, not a
speed-up: the fake devices share the same cores.

    python -m benchmarks scaling [--write]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

from benchmarks import harness

HEADING = "## Scaling: devices and processes (data-parallel training)"
CALLS = 4  # timed jitted calls of 10 optimiser steps each, after one compiling call
LAYERS, D_MODEL, HEADS, BATCH, CONTEXT = 2, 64, 4, 64, 100


def worker(coordinator: str, num_processes: int, process_id: int) -> None:
    """Time CALLS train calls on every device of every process; process 0 prints tokens/s."""
    from icrl_jax.core import distributed
    from icrl_jax.core.config import default_dist_config
    dist = default_dist_config()
    dist.update(dict(coordinator=coordinator, num_processes=num_processes, process_id=process_id,
                     timeout_s=120))
    distributed.initialize(dist if num_processes > 1 else None)
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from benchmarks.bench_train import benchmark_model
    from benchmarks.training import synthetic_windows
    from icrl_jax.data.windows import sample_windows
    from icrl_jax.data.train_data import on_device
    from icrl_jax.pipeline.train import data_mesh, init_state, make_optimizer, make_train_steps

    method, config = benchmark_model(LAYERS, D_MODEL, HEADS, BATCH, CONTEXT)
    mesh = data_mesh()
    replicated = NamedSharding(mesh, P())
    data = on_device(synthetic_windows(t=1000), sample_windows, CONTEXT)
    optimizer = make_optimizer(config)
    build = lambda _: (method, optimizer)  # noqa: E731
    state = jax.jit(lambda k: init_state(build, data, k), out_shardings=replicated)(
        jax.random.key(0))
    arrays = jax.device_put(data.arrays, replicated)
    train_steps = make_train_steps(build, data, config, mesh)
    key = jax.random.key(1)
    last = {}

    def step(state):
        state, last["metrics"] = train_steps(state, arrays, key, None)
        return state, last["metrics"]

    # one compiling call, then one round of CALLS calls: 50 steps in all
    timing, _ = harness.time_stateful(step, state, calls=CALLS, rounds=1)
    loss = float(np.asarray(last["metrics"]["loss"]).mean())
    if jax.process_index() == 0:
        print(f"RESULT {timing.rate(10 * BATCH * CONTEXT):.1f} {loss:.4f}", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(devices_per_process: int, processes: int) -> tuple[float, float]:
    """(tokens/s, last loss) of one configuration."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}")
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.bench_scaling", "--worker", address,
                               str(processes), str(i)], cwd=harness.ROOT, env=env, stdout=subprocess.PIPE,
                              text=True)
             for i in range(processes)]
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a worker failed: {outs}")
    line = next(l for l in outs[0].splitlines() if l.startswith("RESULT"))
    tokens, loss = line.split()[1:]
    return float(tokens), float(loss)


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument("--worker", nargs=3, metavar=("COORDINATOR", "PROCESSES", "ID"),
                        help="one process of a layout (what the layouts run)")
    parser.add_argument("--layouts", default="1x1,2x1,4x1,8x1,1x2",
                        help="DEVICESxPROCESSES, comma-separated")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        coordinator, processes, process_id = args.worker
        return worker(coordinator, int(processes), int(process_id))
    layouts = [tuple(int(n) for n in layout.split("x")) for layout in args.layouts.split(",")]
    results = {layout: run(*layout) for layout in layouts}
    base = results[layouts[0]][0]
    rows = [[p, d, d * p, f"{t:,.0f}", f"{t / base:.2f}", f"{loss:.4f}"]
            for (d, p), (t, loss) in results.items()]
    harness.table_section(
        HEADING,
        f"Host: {harness.cpu_model()}, {os.cpu_count()} CPU cores, no accelerator. Command: "
        f"`{harness.command_line('scaling')}`. The quick presets' AD model (2 layers x 64, "
        f"batch {BATCH} x {CONTEXT} steps, float32), the same global batch in every row, sharded "
        "over fake CPU devices (`--xla_force_host_platform_device_count`) or over processes on "
        f"localhost (`jax.distributed`, gloo collectives); {CALLS} timed calls of 10 steps after "
        "a compiling one. On 2 cores the devices share the same cores, so this measures the "
        "overhead of sharding and of the collectives, not a speed-up; the loss column shows the "
        f"rows train the same model. Load average when it finished: {harness.load_average():.1f} "
        "(other jobs share these cores).",
        ["processes", "devices per process", "devices", "tokens/s", f"vs {layouts[0][0]} device",
         "loss after 50 steps"], rows, args.write)


if __name__ == "__main__":
    sys.exit(main())
