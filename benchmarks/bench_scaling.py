"""Data-parallel training throughput over 1, 2, 4 and 8 devices, and over 1 and 2 processes.

Each configuration runs in its own subprocess (the device count is fixed when JAX starts): fake
CPU devices via `--xla_force_host_platform_device_count`, processes via `jax.distributed` on
localhost with gloo collectives (`icrl_jax.core.distributed`). The model is the quick presets' AD
transformer (2 layers x 64, batch 64 x 100 steps), trained by the one trainer's step builder
(`train.make_train_steps`) with the same global batch in every configuration.

On a 2-core CPU host these numbers measure the overhead of sharding and of the collectives, not a
speed-up: the fake devices share the same cores.

    python benchmarks/bench_scaling.py [--write]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALLS = 4  # timed jitted calls of 10 optimiser steps each, after one compiling call
LAYERS, D_MODEL, HEADS, BATCH, CONTEXT = 2, 64, 4, 64, 100


def worker(coordinator: str, num_processes: int, process_id: int) -> None:
    """Time CALLS train calls on every device of every process; process 0 prints tokens/s."""
    sys.path.insert(0, ROOT)
    from icrl_jax.core import distributed
    from icrl_jax.core.config import default_dist_config
    dist = default_dist_config()
    dist.update(dict(coordinator=coordinator, num_processes=num_processes, process_id=process_id,
                     timeout_s=120))
    distributed.initialize(dist if num_processes > 1 else None)
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from bench_train import benchmark_model, synthetic_data
    from icrl_jax.data.dataset import sample_windows
    from icrl_jax.data.train_data import on_device
    from icrl_jax.pipeline.train import data_mesh, init_state, make_optimizer, make_train_steps

    method, config = benchmark_model(LAYERS, D_MODEL, HEADS, BATCH, CONTEXT)
    mesh = data_mesh()
    replicated = NamedSharding(mesh, P())
    data = on_device(synthetic_data(t=1000), sample_windows, CONTEXT)
    optimizer = make_optimizer(config)
    build = lambda _: (method, optimizer)  # noqa: E731
    state = jax.jit(lambda k: init_state(build, data, k), out_shardings=replicated)(
        jax.random.key(0))
    arrays = jax.device_put(data.arrays, replicated)
    train_steps = make_train_steps(build, data, config, mesh)
    key = jax.random.key(1)
    state, metrics = train_steps(state, arrays, key, None)  # compile
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(CALLS):
        state, metrics = train_steps(state, arrays, key, None)
    loss = float(np.asarray(metrics["loss"]).mean())  # fetches: waits for the last call
    seconds = time.perf_counter() - start
    if jax.process_index() == 0:
        print(f"RESULT {CALLS * 10 * BATCH * CONTEXT / seconds:.1f} {loss:.4f}", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(devices_per_process: int, processes: int) -> tuple[float, float]:
    """(tokens/s, last loss) of one configuration."""
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}")
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", address, str(processes),
                               str(i)], env=env, stdout=subprocess.PIPE, text=True)
             for i in range(processes)]
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a worker failed: {outs}")
    line = next(l for l in outs[0].splitlines() if l.startswith("RESULT"))
    tokens, loss = line.split()[1:]
    return float(tokens), float(loss)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument("--worker", nargs=3, metavar=("COORDINATOR", "PROCESSES", "ID"))
    args = parser.parse_args()
    if args.worker:
        coordinator, processes, process_id = args.worker
        return worker(coordinator, int(processes), int(process_id))
    layouts = [(1, 1), (2, 1), (4, 1), (8, 1), (1, 2)]
    results = {layout: run(*layout) for layout in layouts}
    base = results[(1, 1)][0]
    rows = [f"| {p} | {d} | {d * p} | {t:,.0f} | {t / base:.2f} | {loss:.4f} |"
            for (d, p), (t, loss) in results.items()]
    print("\n".join(rows))
    section = "\n".join([
        "## Scaling: devices and processes (data-parallel training)",
        "",
        f"Host: {os.cpu_count()} CPU cores, no accelerator. Command: `python "
        "benchmarks/bench_scaling.py --write`. The quick presets' AD model (2 layers x 64, "
        f"batch {BATCH} x {CONTEXT} steps, float32), the same global batch in every row, sharded "
        "over fake CPU devices (`--xla_force_host_platform_device_count`) or over processes on "
        f"localhost (`jax.distributed`, gloo collectives); {CALLS} timed calls of 10 steps after "
        "a compiling one. On 2 cores the devices share the same cores, so this measures the "
        "overhead of sharding and of the collectives, not a speed-up; the loss column shows the "
        "rows train the same model. Load average when it finished: "
        f"{os.getloadavg()[0]:.1f} (other jobs share these cores).",
        "",
        "| processes | devices per process | devices | tokens/s | vs 1 device | loss after 50 steps |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ])
    print(section)
    if args.write:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from results import write_section
        write_section("## Scaling: devices and processes (data-parallel training)", section)


if __name__ == "__main__":
    main()
