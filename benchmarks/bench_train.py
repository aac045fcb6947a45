"""Training throughput of the AD transformer: tokens/s, model FLOP/s, and MFU on a GPU.

FLOPs per token use the Kaplan et al. (2020) convention, 6N + 12·L·d·T (N = non-embedding
parameters, L layers, width d, context T), the same as `icrl_jax.models.transformer.flops_per_token`.
MFU divides achieved model FLOP/s by the device's dense peak for the dtype we train in (float32
matmuls run as TF32 on NVIDIA GPUs by JAX's default precision), so it is only reported where the
peak is known.

    python benchmarks/bench_train.py [--quick] [--write] [--device cpu|gpu|tpu] [--precision fp32|bf16]

With `--precision bf16` the model computes in bfloat16 (float32 parameters, as `train.compute_dtype`)
and MFU is against the bf16 dense peak.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

def _device_from_argv() -> None:
    # The platform must be chosen before JAX starts.
    if "--device" in sys.argv:
        os.environ["JAX_PLATFORMS"] = sys.argv[sys.argv.index("--device") + 1]


_device_from_argv()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from results import write_section  # noqa: E402  # benchmarks/results.py (this script's directory)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from icrl_jax.data.dataset import to_step_windows  # noqa: E402
from icrl_jax.data.history import History  # noqa: E402
from icrl_jax.methods.ad import AD  # noqa: E402
from icrl_jax.models.transformer import count_params, default_transformer_config, flops_per_token  # noqa: E402
from icrl_jax.data.dataset import sample_windows  # noqa: E402
from icrl_jax.data.train_data import on_device  # noqa: E402
from icrl_jax.train import (data_mesh, default_train_config, init_state, make_optimizer,  # noqa: E402
                            make_train_steps)

# Dense tensor-core peaks (FLOP/s), from the vendors' datasheets (without sparsity): TF32 (what
# float32 matmuls run as under JAX's default precision) and bf16.
PEAK_TF32 = {"H100": 494e12, "H200": 494e12, "A100": 156e12}
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "TPU v4": 275e12,
             "TPU v5 lite": 197e12, "TPU v5p": 459e12}

SIZES = {  # name: (layers, d_model, heads, batch, context)
    "small (quick presets)": (2, 64, 4, 64, 100),
    "medium": (4, 256, 8, 64, 200),
    "paper darkroom (n-gram)": (4, 512, 8, 128, 200),
}


def synthetic_data(num_actions=5, num_obs=81, n=256, t=1000):
    rng = np.random.default_rng(0)
    obs = rng.integers(0, num_obs, (n, t)).astype(np.int32)
    return to_step_windows(History(obs, rng.integers(0, num_actions, (n, t)).astype(np.int32),
                                   rng.random((n, t)).astype(np.float32), np.zeros((n, t), bool),
                                   np.arange(n, dtype=np.int32), np.ones((n, num_actions), bool)))


def matmul_peak(size: int = 4096, calls: int = 5, dtype=np.float32) -> float:
    """FLOP/s of a jitted `size x size` matmul on the default device: the measured peak that
    CPU MFU divides by (a CPU's datasheet peak assumes every core at full vector width)."""
    a = jax.device_put(np.random.default_rng(0).standard_normal((size, size)).astype(dtype))
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    start = time.perf_counter()
    for _ in range(calls):
        out = f(a)
    jax.block_until_ready(out)
    return 2 * size ** 3 * calls / (time.perf_counter() - start)


def benchmark_model(layers, d_model, heads, batch, context, precision="fp32"):
    """The benchmarked AD model on 81 observations and 5 actions, and its train config."""
    config = default_transformer_config()
    config.update(dict(num_layers=layers, d_model=d_model, num_heads=heads, max_len=context,
                       label_smoothing=0.0))
    train_config = default_train_config()
    train_config.update(dict(num_steps=10_000, batch_size=batch, seq_len=context, steps_per_call=10,
                             compute_dtype=precision))
    return AD(config, 5, 81), train_config


def measure(layers, d_model, heads, batch, context, calls, precision="fp32"):
    method, train_config = benchmark_model(layers, d_model, heads, batch, context, precision)
    mesh = data_mesh()
    train_data = on_device(jax.device_put(synthetic_data(t=max(1000, context))), sample_windows,
                           context)
    data = train_data.arrays
    optimizer = make_optimizer(train_config)
    build = lambda _: (method, optimizer)  # noqa: E731
    state = jax.device_put(init_state(build, train_data, jax.random.PRNGKey(0)),
                           jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    train_steps = make_train_steps(build, train_data, train_config, mesh)
    key = jax.random.PRNGKey(1)

    def step(state, data, key):
        return train_steps(state, data, key, None)

    state, metrics = step(state, data, key)  # compile
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(calls):
        state, metrics = step(state, data, key)
    jax.block_until_ready(metrics)
    seconds = time.perf_counter() - start
    tokens = calls * 10 * batch * context
    params = state.params
    embedding = sum(int(np.size(x)) for path, x in jax.tree_util.tree_leaves_with_path(params)
                    if "position_embedding" in jax.tree_util.keystr(path)
                    or "table" in jax.tree_util.keystr(path) or "'action'" in jax.tree_util.keystr(path))
    n_nonembedding = count_params(params) - embedding
    flops = flops_per_token(n_nonembedding, layers, d_model, context)
    return dict(tokens_per_s=tokens / seconds, steps_per_s=calls * 10 / seconds,
                params=count_params(params), flops_per_token=flops,
                model_flops_per_s=tokens / seconds * flops)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the small model, fewer calls")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument("--all-sizes", action="store_true",
                        help="also the paper-size model on a CPU (hours on 2 cores)")
    parser.add_argument("--device", choices=("cpu", "gpu", "tpu"),
                        help="the JAX platform to measure (default: JAX's default)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    device = jax.devices()[0]
    kind = device.device_kind
    peaks = PEAK_BF16 if args.precision == "bf16" else PEAK_TF32
    peak = next((v for k, v in peaks.items() if k in kind), None)
    peak_source = "datasheet dense peak"
    if device.platform == "cpu":  # measured in this process, just before the models
        peak, peak_source = matmul_peak(), "a jitted 4096x4096 float32 matmul, measured here"
        print(f"CPU matmul peak: {peak / 1e9:.1f} GFLOP/s", flush=True)
    rows = []
    for name, (layers, d, heads, batch, context) in SIZES.items():
        if args.quick and name != "small (quick presets)":
            continue
        if device.platform == "cpu" and name.startswith("paper") and not args.all_sizes:
            continue
        calls = (3 if name.startswith("small") else 1) if device.platform == "cpu" else 20
        r = measure(layers, d, heads, batch, context, calls, args.precision)
        mfu = f"{100 * r['model_flops_per_s'] / peak:.0f}%" if peak else "n/a (no known peak)"
        rows.append(f"| {name} | {layers}x{d}, {heads} heads | {batch}x{context} | {r['params']:,} "
                    f"| {r['tokens_per_s']:,.0f} | {r['steps_per_s']:.2f} "
                    f"| {r['model_flops_per_s'] / 1e9:,.1f} | {mfu} |")
        print(rows[-1], flush=True)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    section = "\n".join([
        "## Training throughput (AD transformer)",
        "",
        f"Device: {device.platform} `{kind}` x{jax.device_count()}; host CPU {cpu}, "
        f"{os.cpu_count()} cores. Command: `python benchmarks/bench_train.py"
        f"{' --quick' if args.quick else ''}{' --precision bf16' if args.precision == 'bf16' else ''}"
        f" --write`. Float32 parameters; {'bfloat16' if args.precision == 'bf16' else 'float32'} "
        "activations; "
        "10 optimiser steps per jitted call; compile time excluded. FLOPs per token = "
        "6N + 12·L·d·T (Kaplan convention, N = non-embedding parameters). Peak host memory "
        f"(ru_maxrss) {peak_mib:,.0f} MiB. Load average when it finished: "
        f"{os.getloadavg()[0]:.1f} (other jobs share these cores; compare rows, not runs). "
        f"MFU = model FLOP/s / peak, peak {peak / 1e9 if peak else 0:,.1f} GFLOP/s "
        f"({peak_source}).",
        "",
        "| model | layers x width | batch x context | params | tokens/s | steps/s | model GFLOP/s | MFU |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ])
    print(section)
    if args.write:
        write_section("## Training throughput (AD transformer)", section)


if __name__ == "__main__":
    main()
