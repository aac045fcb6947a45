"""Hyperparameter-sweep throughput: assignments trained per hour, one by one vs vmapped replicas.

The workload is a preset of `experiments/ngram/darkroom.py` (`--preset`; by default `quick`:
AD + 1-gram layer after block 1, d=32, 2 blocks, batch 16, context 100) on random
Dark-Room-shaped data; each assignment is `--steps` updates with its own learning rate, weight
decay, dropouts and label smoothing. "one by one" trains K assignments in sequence through one
compiled single-replica program (hyperparameters are traced, so it compiles once); "vmapped"
trains the same K side by side in one program. Compilation is timed separately (first call)
and excluded from the rate. Like `icrl-jax`, it runs one XLA CPU device per core
(`icrl_jax/core/cpu_devices.py`; `ICRL_JAX_CPU_DEVICES=1` for one).

    python benchmarks/bench_sweep.py [--preset quick] [--steps 200] [--replicas 4 8] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from icrl_jax.core import cpu_devices  # noqa: E402  (before JAX starts its backend)

cpu_devices.use_one_device_per_core()

import jax  # noqa: E402
import numpy as np  # noqa: E402

import envs  # noqa: E402
from icrl_jax.data.windows import sample_windows  # noqa: E402
from icrl_jax.data.train_data import on_device  # noqa: E402
from icrl_jax.tools import sweep as S  # noqa: E402
from icrl_jax.data.windows import to_step_windows  # noqa: E402
from icrl_jax.data.history import History  # noqa: E402
from icrl_jax.experiments.ngram.darkroom import get_config  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "RESULTS.md")
SECTION = "## Hyperparameter sweep throughput"


def workload(steps: int, preset: str = "quick"):
    config = get_config(preset)
    config.unlock()
    config.train.num_steps = steps
    config.train.steps_per_call = min(steps, 100)
    config.lock()
    rng = np.random.default_rng(0)
    n, t = 80, 2000
    history = History(observations=rng.integers(0, 81, (n, t)).astype(np.int32),
                      actions=rng.integers(0, 5, (n, t)).astype(np.int32),
                      rewards=rng.integers(0, 2, (n, t)).astype(np.float32),
                      dones=np.zeros((n, t), bool), task_ids=np.arange(n, dtype=np.int32),
                      action_mask=np.ones((n, 5), bool))
    return config, envs.make("darkroom"), on_device(jax.device_put(to_step_windows(history)),
                                                    sample_windows, config.train.seq_len)


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def measure(config, env, data, assignments, vmapped: bool) -> dict:
    seeds = list(range(len(assignments)))
    tic = time.perf_counter()
    scratch = tempfile.mkdtemp()  # the trainer checkpoints replicas: a fresh directory each run
    programs = {}  # the timed call reuses the first call's compiled program
    S.train_assignments(config, env, data, assignments[:len(assignments) if vmapped else 1],
                        seeds, os.path.join(scratch, "compile"), vmapped=vmapped,
                        programs=programs)
    first = time.perf_counter() - tic
    tic, cpu = time.perf_counter(), cpu_seconds()
    S.train_assignments(config, env, data, assignments, seeds, os.path.join(scratch, "run"),
                        vmapped=vmapped, programs=programs)
    wall, cpu = time.perf_counter() - tic, cpu_seconds() - cpu
    return dict(first=first, wall=wall, cpu=cpu, per_hour=3600 * len(assignments) / wall,
                per_cpu_hour=3600 * len(assignments) / cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="updates per assignment")
    ap.add_argument("--replicas", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--preset", default="quick", help="a preset of experiments/ngram/darkroom.py")
    args = ap.parse_args()
    config, env, data = workload(args.steps, args.preset)
    space = S.flatten_space(config.sweep.space)
    rows = []
    load_before = os.getloadavg()[0]
    for k in args.replicas:
        assignments = [S.sample_assignment(space, 0, i) for i in range(k)]
        for vmapped in (False, True):
            r = measure(config, env, data, assignments, vmapped)
            r.update(k=k, mode=f"vmapped (K={k} in one program)" if vmapped else "one by one")
            rows.append(r)
            print(r, flush=True)
    load_after = os.getloadavg()[0]
    lines = [SECTION, "",
             f"Command: `python benchmarks/bench_sweep.py --preset {args.preset} --steps "
             f"{args.steps} --replicas {' '.join(map(str, args.replicas))}`. Hardware: "
             f"{platform.machine()}, {os.cpu_count()} CPU cores, {len(jax.devices())} XLA CPU "
             f"devices (load average {load_before:.1f} before, "
             f"{load_after:.1f} after; above ~1 means other jobs shared the cores), "
             f"jax {jax.__version__} CPU, float32. "
             f"Workload: `experiments/ngram/darkroom.py:{args.preset}` (d={config.model.d_model}, "
             f"{config.model.num_layers} blocks, n-gram layers after {tuple(config.model.ngram_positions)}, "
             f"batch {config.train.batch_size}, context {config.train.seq_len}) on random "
             f"Dark-Room-shaped data, {args.steps} updates per assignment; rates exclude the "
             "first call (compilation), timed separately. CPU time is user+system of this "
             "process (less inflated by other jobs than wall time).", "",
             "| K assignments | mode | compile + first run (s) | wall (s) | CPU (s) | "
             "assignments / hour (wall) | assignments / CPU-hour | speed-up (wall) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {}
    for r in rows:
        if r["mode"] == "one by one":
            base[r["k"]] = r["wall"]
        lines.append(f"| {r['k']} | {r['mode']} | {r['first']:.1f} | {r['wall']:.1f} | "
                     f"{r['cpu']:.1f} | {r['per_hour']:.0f} | {r['per_cpu_hour']:.0f} | "
                     f"{base[r['k']] / r['wall']:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        old = open(RESULTS).read() if os.path.exists(RESULTS) else "# Benchmark results\n"
        pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
        new = (pattern.sub(lambda m: text + "\n", old, count=1) if pattern.search(old)
               else old.rstrip("\n") + "\n\n" + text)
        with open(RESULTS, "w") as f:
            f.write(new)


if __name__ == "__main__":
    main()
