"""Env steps/s through the JAX bridge (`host_rollout`, one io_callback per step inside lax.scan)
vs stepping the same `HostVectorEnv` from a plain Python loop with random actions.

    python -m benchmarks.bench_bridge [--sims vizdoom miniworld] [--envs 1 2 4 8 16] [--steps 200]

Prints a markdown table (the "## Host-simulator bridge" section of benchmarks/RESULTS.md).
The policy is uniform random in both cases; the first (compiling) rollout is not timed.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import jax
import numpy as np

from envs.host.bridge import HostVectorEnv, RandomPolicy, host_rollout


def make_pool(sim: str, n: int) -> HostVectorEnv:
    if sim == "vizdoom":
        from envs.host import vizdoom as vd
        return HostVectorEnv([functools.partial(vd.make_doom, "deadly_corridor")] * n)
    from envs.host import miniworld as mw
    goals = mw.darkroom_goals()[:n]
    return HostVectorEnv([functools.partial(mw.make_darkroom, int(g)) for g in goals])


def bench(sim: str, n: int, steps: int) -> tuple[float, float]:
    pool = make_pool(sim, n)
    try:
        policy = RandomPolicy(pool.single_action_space)
        host_rollout(pool, policy, steps, jax.random.PRNGKey(0), seed=0)  # compile
        t = time.perf_counter()
        host_rollout(pool, policy, steps, jax.random.PRNGKey(1), seed=1)
        bridge = n * steps / (time.perf_counter() - t)
        pool.reset(seed=1)
        t = time.perf_counter()
        for _ in range(steps):
            pool.step(pool.action_space.sample())
        loop = n * steps / (time.perf_counter() - t)
    finally:
        pool.close()
    return bridge, loop


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", nargs="+", default=["vizdoom", "miniworld"])
    ap.add_argument("--envs", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args(argv)
    print(f"cpu cores: {os.cpu_count()}, steps per rollout: {args.steps}\n")
    print("| simulator | envs | bridge steps/s | plain loop steps/s | loop / bridge |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for sim in args.sims:
        for n in args.envs:
            bridge, loop = bench(sim, n, args.steps)
            print(f"| {sim} | {n} | {bridge:,.0f} | {loop:,.0f} | {loop / bridge:.2f} |", flush=True)


if __name__ == "__main__":
    main()
