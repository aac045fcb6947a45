"""Sampling training windows from learning histories whose rows are split over devices.

    python benchmarks/bench_sampling.py [--devices 2] [--write]

`train.place_data` splits a dataset's rows (histories) over the devices, so a sampled window
lives on one device and the devices exchange what each sampled. `sample_windows` used to take a
window as `x[row]` and then a slice of it; XLA then gathers and all-reduces the whole rows,
`(batch, history length)` per array. `icrl_jax.data.train_data.window_at` slices the window
out of the whole array, so only `(batch, window)` moves. Both are compiled in this process
(`window_at` replaced by the reference for the first) and called in turn; the batches are
checked to be identical. Shapes: the main job's dataset and window, and a paper-scale one
(Dark Room / Key-to-Door histories of 10,000 steps, App. F; batch 1,024, context 200).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (label, histories, steps per history, batch, window)
CASES = (
    ("main job (`ad/darkroom.py:quick`): 480 histories x 600 steps, batch 64 x 100", 480, 600,
     64, 100),
    ("paper scale: 800 histories x 1,000 steps, batch 1,024 x 200", 800, 1000, 1024, 200),
    ("paper scale: 800 histories x 10,000 steps, batch 1,024 x 200", 800, 10_000, 1024, 200),
)
HEADING = "## Sampling windows from histories split over devices (window_at)"


def row_then_window(x, row, start, window):
    """A window as its row, then a slice of it (before `window_at`)."""
    import jax
    return jax.lax.dynamic_slice_in_dim(x[row], start, window, axis=0)


def measure(devices: int, rounds: int = 7, calls: int = 10) -> list[str]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    import icrl_jax.data.windows as dataset
    from icrl_jax.pipeline.train import data_mesh, place_data

    if jax.device_count() != devices:
        raise SystemExit(f"asked for {devices} devices, JAX has {jax.device_count()}")
    rows = []
    for label, histories, length, batch, window in CASES:
        rng = np.random.default_rng(0)
        ints = lambda high: jnp.asarray(rng.integers(0, high, (histories, length)), jnp.int32)
        data = dataset.StepWindows(ints(81), ints(6), jnp.asarray(
            rng.random((histories, length)), jnp.float32), ints(5), jnp.ones((histories, 5), bool))
        mesh = data_mesh(batch)
        data = place_data(data, mesh)
        batch_sharding = NamedSharding(mesh, P("data"))
        compiled = {}
        for name, take in (("row, then window", row_then_window), ("window_at", dataset.window_at)):
            original, dataset.window_at = dataset.window_at, take
            try:
                compiled[name] = jax.jit(lambda d, k: jax.lax.with_sharding_constraint(
                    dataset.sample_windows(d, k, batch, window), batch_sharding)).lower(
                    data, jax.random.key(0)).compile()
            finally:
                dataset.window_at = original
        batches = [jax.tree.leaves(f(data, jax.random.key(5))) for f in compiled.values()]
        identical = all(bool((a == b).all()) for a, b in zip(*batches))
        times = {name: [] for name in compiled}
        for _ in range(rounds):
            for name, f in compiled.items():
                start = time.perf_counter()
                for i in range(calls):
                    jax.block_until_ready(f(data, jax.random.key(i)))
                times[name].append((time.perf_counter() - start) / calls * 1e3)
        old, new = (float(np.median(t)) for t in times.values())
        rows.append(f"| {label} | {old:.2f} | {new:.2f} | {old / new:.1f}x | {identical} |")
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2,
                        help="CPU devices the rows are split over (1: one device, no exchange)")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    from benchmarks.harness import table_section
    rows = measure(args.devices)
    table_section(
        HEADING,
        f"Command: `python benchmarks/bench_sampling.py --devices {args.devices} --write`. "
        f"Device: {args.devices} CPU device(s) of one process, {os.cpu_count()} cores "
        f"({platform.machine()}); load average when it finished {os.getloadavg()[0]:.1f}. "
        "One jitted `sample_windows` of the dataset's four step arrays plus action masks, the "
        "batch sharded over the devices; median milliseconds per call of 7 rounds of 10 calls, "
        "the two versions called in turn. Identical: the same key gives the same batch.",
        ["dataset, batch", "row, then window (ms)", "window_at (ms)", "ratio", "identical"],
        rows, args.write)


if __name__ == "__main__":
    main()
