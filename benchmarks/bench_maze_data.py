"""Point maze Minari dataset generation: time and peak memory (engineer B, issue 16).

    python benchmarks/bench_maze_data.py [--preset quick|paper]

Builds the experiment's dataset exactly as `icrl-jax generate` does (`data.builder="minari"`,
experiments/continuous/point_maze.py) into a temporary workdir and reports: the on-device
rollout (waypoint controller, vmap over tasks x lax.scan over steps; includes its compile),
cutting into episodes plus the Minari (HDF5) write, the reference-score rollouts, the total
builder time, the dataset's size on disk and the process's peak resident memory
(`ru_maxrss`, whole process, JAX runtime included).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import tempfile
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="quick", choices=("quick", "paper"))
    args = parser.parse_args()
    import envs
    from experiments.continuous.point_maze import get_config
    from icrl_jax.data import builders
    from icrl_jax.data.minari_io import read_minari
    config = get_config("" if args.preset == "paper" else args.preset)
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    with tempfile.TemporaryDirectory() as tmp:
        config.workdir = tmp
        start = time.perf_counter()
        path = builders.generate(config, env)
        total = time.perf_counter() - start
        data = read_minari(path)
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
    rollout = data.metadata["generation_seconds"]
    steps = int(data.lengths.sum())
    print(f"| {args.preset} | {config.env.kwargs.layout} | "
          f"{config.data.num_train_tasks * config.data.histories_per_task} x "
          f"{config.data.num_steps} | {data.num_episodes} | {steps:,} | {rollout:.1f} | "
          f"{total:.1f} | {size / 2**20:.1f} | "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} |")
    print(f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
