"""float32 vs bfloat16 products on the CPU, at the training step's shapes (why `train.compute_dtype`
"auto" stays float32 on a CPU).

A model computing in bf16 (`train.compute_dtype=bf16`, flax's `dtype`) multiplies bf16 by bf16
into bf16. The CPU's bf16 instructions (AVX512-BF16) accumulate in float32, so a product that
asks for a float32 result (`preferred_element_type`) is the one they serve. This script times,
per shape, a jitted float32 product against the same product with its float32 operands cast to
bf16 inside the jitted function (the cast counted), once with a float32 result and once with a
bf16 one. Every product runs on the first of the CPU devices `icrl-jax` makes (one per core,
`icrl_jax.core.cpu_devices`), at one device's share of a training batch; XLA's CPU thread pool may
still spread one product over both cores.

    python benchmarks/bench_bf16_products.py [--write]
"""

from __future__ import annotations

import argparse

from icrl_jax.core.cpu_devices import use_one_device_per_core  # noqa: E402

use_one_device_per_core()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.harness import cpu_model, table_section, time_call  # noqa: E402

#: (what, tokens, K, M, kind): `(tokens, K) @ (K, M)`, or for "contract" rows the sum over
#: tokens `(tokens, K)^T (tokens, M)` (a kernel gradient); tokens per device (half a batch).
SHAPES = (
    ("small model: feed-forward in", 3200, 64, 256, "rows"),
    ("small model: feed-forward out", 3200, 256, 64, "rows"),
    ("small model: qkv", 3200, 64, 192, "rows"),
    ("small model: feed-forward kernel gradient", 3200, 64, 256, "contract"),
    ("Headless-AD paper scale: feed-forward in", 600, 512, 2048, "rows"),
    ("Headless-AD paper scale: qkv", 600, 512, 1536, "rows"),
    ("4096 x 4096 (`bench_train.py`'s peak)", 4096, 4096, 4096, "rows"),
)


def products(kind: str, out_dtype):
    """The jitted product of float32 operands in float32 (`out_dtype` None) or cast to bf16 with
    an `out_dtype` result."""
    dims = (((0,), (0,)), ((), ())) if kind == "contract" else (((1,), (0,)), ((), ()))

    def product(a, b):
        if out_dtype is not None:
            a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
        return jax.lax.dot_general(a, b, dims, preferred_element_type=out_dtype)
    return jax.jit(product)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    devices = jax.devices()
    rng = np.random.default_rng(0)
    rows = []
    for what, tokens, k, m, kind in SHAPES:
        a = rng.standard_normal((tokens, k)).astype(np.float32)
        b = rng.standard_normal((tokens if kind == "contract" else k, m)).astype(np.float32)
        a, b = jax.device_put(a, devices[0]), jax.device_put(b, devices[0])
        calls = 3 if tokens == 4096 else 50
        seconds = [time_call(products(kind, dtype), a, b, calls=calls, rounds=5).seconds
                   for dtype in (None, jnp.float32, jnp.bfloat16)]
        flops = 2 * tokens * k * m
        rows.append(f"| {what} | {tokens} x {k} x {m} | "
                    + " | ".join(f"{flops / s / 1e9:,.0f}" for s in seconds)
                    + f" | {seconds[0] / seconds[1]:.2f}x | {seconds[0] / seconds[2]:.2f}x |")
    prose = (f"Command: `python benchmarks/bench_bf16_products.py --write`. Host CPU {cpu_model()}, "
             f"{len(devices)} CPU devices (one per core). Each product jitted alone; the bf16 "
             "columns cast the float32 operands inside the jitted function (the cast is "
             "counted); every product on the first device, at one device's share of a batch. "
             "GFLOP/s = 2·tokens·K·M / best time of 5 "
             "runs; ratios are float32 time over bf16 time (above 1: bf16 faster).")
    table_section("## float32 vs bfloat16 products on the CPU", prose,
                  ["product", "tokens x K x M", "float32 GFLOP/s", "bf16 -> float32 GFLOP/s",
                   "bf16 -> bf16 GFLOP/s", "bf16 -> float32 vs float32", "bf16 -> bf16 vs float32"],
                  rows, args.write)


if __name__ == "__main__":
    main()
