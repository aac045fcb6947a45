"""Env steps/s through the JAX bridge (`host_rollout`, one io_callback per step inside lax.scan)
vs stepping the same `HostVectorEnv` from a plain Python loop with random actions.

    python -m benchmarks.bench_bridge [--sims vizdoom miniworld] [--envs 1 2 4 8 16] [--steps 200]

Prints a markdown table (the "## Host-simulator bridge" section of benchmarks/RESULTS.md).
The policy is uniform random in both cases; the first (compiling) rollout is not timed.

    python -m benchmarks.bench_bridge --pools [--tasks 24] [--workers 8] [--steps 400]

Dataset generation on more tasks than workers (the Miniworld dark room, the noisy oracle): a fresh
pool (and a fresh compile) per group of `workers` tasks, as the driver did before, vs the driver
now (`run_policies`: one pool whose workers are given each group's tasks, one compiled rollout).
Both make the same data (checked), and run in turns, twice each, in one process.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import jax
import numpy as np

from icrl_jax.envs.host.bridge import HostVectorEnv, RandomPolicy, host_rollout


def make_pool(sim: str, n: int) -> HostVectorEnv:
    if sim == "vizdoom":
        from icrl_jax.envs.host import vizdoom as vd
        return HostVectorEnv([functools.partial(vd.make_doom, "deadly_corridor")] * n)
    from icrl_jax.envs.host import miniworld as mw
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


def generate_fresh_pools(env, policy, tasks, workers, steps, key):
    """The driver before pools were reused: a new pool, and so a new compile, per group."""
    parts = []
    for group, start in enumerate(range(0, len(tasks), workers)):
        pool = env.make_bridge(tasks[start:start + workers])
        try:
            parts.append(jax.device_get(host_rollout(pool, policy, steps,
                                                     jax.random.fold_in(key, group), seed=group)))
        finally:
            pool.close()
    return {k: np.concatenate([p[k] for p in parts]) for k in ("actions", "rewards")}


def bench_pools(num_tasks: int, workers: int, steps: int) -> None:
    from icrl_jax import envs
    from icrl_jax.data.rollout import run_policies
    env = envs.make("miniworld_darkroom")
    tasks = env.tasks()[:num_tasks]
    policy = env.oracle(steps)
    key = jax.random.PRNGKey(0)
    print(f"cpu cores: {os.cpu_count()}; Miniworld dark room, noisy oracle, {num_tasks} tasks x "
          f"{steps} steps, {workers} workers\n")
    print("| driver | round | seconds | frames/s |")
    print("| --- | ---: | ---: | ---: |")
    times: dict[str, list[float]] = {"fresh pool per group": [], "one pool, envs rebuilt": []}
    for round_ in (1, 2):
        t = time.perf_counter()
        fresh = generate_fresh_pools(env, policy, tasks, workers, steps, key)
        times["fresh pool per group"].append(time.perf_counter() - t)
        t = time.perf_counter()
        reused = run_policies(env, {"oracle": policy}, tasks, steps, key, workers=workers)["oracle"]
        times["one pool, envs rebuilt"].append(time.perf_counter() - t)
        for k in ("actions", "rewards"):
            np.testing.assert_array_equal(fresh[k], reused[k])  # the same data either way
        for name, ts in times.items():
            print(f"| {name} | {round_} | {ts[-1]:.1f} | {num_tasks * steps / ts[-1]:,.0f} |",
                  flush=True)
    fresh_s, reused_s = (sum(ts) for ts in times.values())
    print(f"\nfresh / reused time: {fresh_s / reused_s:.2f}x")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", nargs="+", default=["vizdoom", "miniworld"])
    ap.add_argument("--envs", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pools", action="store_true", help="pool reuse across task groups")
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args(argv)
    if args.pools:
        return bench_pools(args.tasks, args.workers, args.steps)
    print(f"cpu cores: {os.cpu_count()}, steps per rollout: {args.steps}\n")
    print("| simulator | envs | bridge steps/s | plain loop steps/s | loop / bridge |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for sim in args.sims:
        for n in args.envs:
            bridge, loop = bench(sim, n, args.steps)
            print(f"| {sim} | {n} | {bridge:,.0f} | {loop:,.0f} | {loop / bridge:.2f} |", flush=True)


if __name__ == "__main__":
    main()
