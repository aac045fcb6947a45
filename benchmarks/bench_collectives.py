"""The gradient all-reduce of data-parallel training on CPU devices: many buffers vs one.

    python benchmarks/bench_collectives.py [--write]

With one CPU device per core (`icrl_jax.core.cpu_devices`), XLA all-reduces the gradients once a
step. Its combiner makes that one all-reduce of a tuple, one buffer per parameter leaf (the
small AD model has 37). This times, in one process on two CPU devices, a loop of steps whose
only communication is that all-reduce, once with the gradient as the small model's leaves and
once as one flat buffer of the same total size, called in turn. The difference is what a step
of the quick models pays for the buffers being separate.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADING = "## Gradient all-reduce on CPU devices: one buffer per leaf vs one flat buffer"


def small_model_leaves():
    """The parameter shapes of the `train` suite's small row (2x64 AD, 81 observations)."""
    import jax
    import jax.numpy as jnp
    from benchmarks.bench_train import benchmark_model
    from benchmarks.training import synthetic_windows
    from icrl_jax.data.windows import sample_windows
    method, _ = benchmark_model(2, 64, 4, 64, 100)
    example = sample_windows(jax.tree.map(jnp.asarray, synthetic_windows(t=1000)),
                             jax.random.key(0), 1, 100)
    return [x.shape for x in jax.tree.leaves(method.init(jax.random.key(0), example))]


def measure(shapes, steps: int = 50, rounds: int = 9):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
    sizes = [int(np.prod(s)) for s in shapes]
    total = sum(sizes)
    # Each device's half of x makes its partial gradient; the sum over x's sharded axis is the
    # all-reduce, the rest is an elementwise update.
    x = jax.device_put(jnp.ones((2, total)), NamedSharding(mesh, P("data")))

    def flat(x):
        def step(w, _):
            return w - 1e-3 * jnp.sum(x * w[None], 0), None
        return jax.lax.scan(step, jnp.ones(total), None, length=steps)[0]

    def per_leaf(x):
        parts = jnp.split(x, np.cumsum(sizes)[:-1], axis=1)

        def step(ws, _):
            return [w - 1e-3 * jnp.sum(p * w.ravel()[None], 0).reshape(w.shape)
                    for p, w in zip(parts, ws)], None
        return jax.lax.scan(step, [jnp.ones(s) for s in shapes], None, length=steps)[0]

    compiled = {}
    for name, fn in (("one buffer per leaf", per_leaf), ("one flat buffer", flat)):
        compiled[name] = jax.jit(fn, out_shardings=NamedSharding(mesh, P())).lower(x).compile()
        jax.block_until_ready(compiled[name](x))
    times = {name: [] for name in compiled}
    for _ in range(rounds):
        for name, f in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(f(x))
            times[name].append((time.perf_counter() - start) / steps * 1e3)
    return {name: float(np.median(t)) for name, t in times.items()}, total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    from benchmarks.harness import table_section
    shapes = small_model_leaves()
    ms, total = measure(shapes)
    leaves, flat = ms["one buffer per leaf"], ms["one flat buffer"]
    table_section(
        HEADING,
        f"Command: `python benchmarks/bench_collectives.py --write`. Two CPU devices of one "
        f"process, {os.cpu_count()} cores ({platform.machine()}); load average when it finished "
        f"{os.getloadavg()[0]:.1f}. The small AD model's {len(shapes)} parameter leaves "
        f"({total:,} floats): a scan of 50 steps, each an all-reduce of the partial gradients "
        "and an elementwise update; median of 9 calls, the two programs called in turn. Both "
        "compile to one all-reduce instruction (a tuple of the leaves, or one buffer).",
        ["gradient as", "ms per step", "vs one flat buffer"],
        [f"| {len(shapes)} buffers (one per leaf) | {leaves:.3f} | {leaves / flat:.1f}x |",
         f"| one flat buffer | {flat:.3f} | 1.0x |"], args.write)


if __name__ == "__main__":
    main()
