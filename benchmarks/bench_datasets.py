"""Continuous-control Minari dataset generation: time, size and peak memory (issue 16).

    python benchmarks/bench_datasets.py --experiment point_maze|hopper|walker2d|halfcheetah \
        [--preset quick|paper]

Builds the experiment's dataset(s) exactly as `icrl-jax generate` does (`experiments/continuous/
<experiment>.py`) into a temporary workdir and prints one table row per dataset written:
episodes, steps, the on-device part (`generation_seconds` in the dataset's metadata: the
waypoint-controller rollout for the maze; PPO training plus the reference, medium and expert
rollouts for locomotion, compiles included), the whole builder's time (plus episode cutting and
the Minari HDF5 writes), the size on disk and the process's peak resident memory (`ru_maxrss`,
JAX runtime included). The locomotion builder writes medium, medium-replay and medium-expert in
one go, so their rows share the times.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import tempfile
import time

from benchmarks.harness import cpu_model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--experiment", default="point_maze",
                        choices=("point_maze", "hopper", "walker2d", "halfcheetah"))
    parser.add_argument("--preset", default="quick", choices=("quick", "paper"))
    args = parser.parse_args()
    from icrl_jax import envs
    from icrl_jax.data import builders
    from icrl_jax.data.minari_io import dataset_dir, read_minari
    module = importlib.import_module(f"experiments.continuous.{args.experiment}")
    config = module.get_config("" if args.preset == "paper" else args.preset)
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    builder = builders.builder_of(config)
    ids = (builder.ids(config.data.dataset_id).values() if hasattr(builder, "ids")
           else [config.data.dataset_id])
    with tempfile.TemporaryDirectory() as tmp:
        config.workdir = tmp
        start = time.perf_counter()
        builders.generate(config, env)
        total = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        for dataset_id in ids:
            path = dataset_dir(builder.root(config), dataset_id)
            data = read_minari(path)
            size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path)
                       for f in fs)
            print(f"| {args.preset} | {dataset_id} | {data.num_episodes} | "
                  f"{int(data.lengths.sum()):,} | {data.metadata['generation_seconds']:.1f} | "
                  f"{total:.1f} | {size / 2**20:.1f} | {peak:.2f} |")
    print(f"host: {cpu_model()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
