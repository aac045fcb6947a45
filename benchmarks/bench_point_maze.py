"""Point maze env steps per second: JAX (`jit(scan(vmap(step)))`) vs gymnasium-robotics' MuJoCo.

    python benchmarks/bench_point_maze.py [--layout medium] [--cores 1] [--quick]

JAX side: for N in 1, 256, 4,096 tasks (`task_params(arange(N))`, random_goal mode so episodes
end and auto-reset), one jitted program scans T steps of `vmap(env.step)` with the noiseless
waypoint controller choosing every action; rewards and successes are summed into the carry so
XLA keeps all the work. Compile time is excluded (one warm-up call); the time is the best of 3
calls, each ended by `block_until_ready`.

gymnasium-robotics side, in the same process: its `PointMazeEnv` class on the same layout
(continuing_task=False so episodes end as ours do; reset on termination), stepped from Python with
actions sampled beforehand, so it pays no policy cost (its best case); and a gymnasium
`SyncVectorEnv` of 8 of them. Both are timed as the best of 3 passes, like the JAX side. With
`--cores 1` (default) the process is pinned to one CPU before JAX starts, so every number is per
CPU core.

Prints a markdown table; benchmarks/RESULTS.md keeps the runs reported there.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from benchmarks.harness import cpu_model

BATCHES = (1, 256, 4096)


def bench_jax(layout: str, batch: int, steps: int, repeats: int = 3) -> float:
    """Env steps/s of T scanned steps of vmap(step) over `batch` tasks, waypoint expert acting."""
    import jax
    import jax.numpy as jnp

    from icrl_jax import envs

    env = envs.make("point_maze", layout=layout, task="random_goal")
    params = env.task_params(jnp.arange(batch))

    @jax.jit
    def rollout(key):
        _, state = jax.vmap(env.reset)(jax.random.split(key, batch), params)

        def body(carry, key):
            state, total, successes = carry
            actions = jax.vmap(env.expert_action)(state, params)
            _, state, reward, _, _, info = jax.vmap(env.step)(
                jax.random.split(key, batch), state, actions, params)
            return (state, total + reward.sum(), successes + info["success"].sum()), None

        init = (state, jnp.float32(0), jnp.int32(0))
        return jax.lax.scan(body, init, jax.random.split(key, steps))[0][1:]

    jax.block_until_ready(rollout(jax.random.PRNGKey(0)))  # compile
    best = float("inf")
    for i in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(rollout(jax.random.PRNGKey(i + 1)))
        best = min(best, time.perf_counter() - start)
    return batch * steps / best


def _gym_map(layout: str):
    from gymnasium_robotics.envs.maze import maps

    return {"umaze": maps.U_MAZE, "medium": maps.MEDIUM_MAZE, "large": maps.LARGE_MAZE}[layout]


def bench_gym_single(layout: str, steps: int, repeats: int = 3) -> float:
    """Steps/s of one gymnasium-robotics PointMazeEnv stepped from Python (reset on termination),
    best of `repeats` passes over the same actions."""
    import numpy as np
    from gymnasium_robotics.envs.maze.point_maze import PointMazeEnv

    env = PointMazeEnv(maze_map=_gym_map(layout), continuing_task=False)
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, 2))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                env.reset()
        best = min(best, time.perf_counter() - start)
    return steps / best


def bench_gym_vector(layout: str, steps: int, num_envs: int = 8, repeats: int = 3) -> float:
    """Env steps/s of a gymnasium SyncVectorEnv of `num_envs` PointMazeEnvs (auto-resetting)."""
    import gymnasium as gym
    import numpy as np
    from gymnasium_robotics.envs.maze.point_maze import PointMazeEnv

    vec = gym.vector.SyncVectorEnv(
        [lambda: PointMazeEnv(maze_map=_gym_map(layout), continuing_task=False)] * num_envs)
    vec.reset(seed=0)
    calls = max(steps // num_envs, 1)
    actions = np.random.default_rng(0).uniform(-1, 1, (calls, num_envs, 2))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for a in actions:
            vec.step(a)
        best = min(best, time.perf_counter() - start)
    vec.close()
    return calls * num_envs / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layout", default="medium", choices=("umaze", "medium", "large"))
    parser.add_argument("--cores", type=int, default=1,
                        help="pin the process to this many CPUs (0: no pinning)")
    parser.add_argument("--quick", action="store_true", help="10x fewer steps")
    args = parser.parse_args()
    if args.cores > 0:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.cores])
    cores = len(os.sched_getaffinity(0))
    scale = 10 if args.quick else 1
    jax_steps = {1: 20_000, 256: 4_000, 4096: 1_000}

    rows = []
    gym_single = bench_gym_single(args.layout, 20_000 // scale)
    gym_vector = bench_gym_vector(args.layout, 20_000 // scale)
    for batch in BATCHES:
        rate = bench_jax(args.layout, batch, max(jax_steps[batch] // scale, 10))
        rows.append((batch, rate))
        print(f"jax N={batch}: {rate:,.0f} steps/s", flush=True)

    print(f"\n{platform.machine()}, {cpu_model()}, nproc {os.cpu_count()}, pinned to {cores} "
          f"core(s), load average {os.getloadavg()[0]:.1f}; layout {args.layout}\n")
    print("| simulator | envs | env steps/s | per core | JAX / gymnasium-robotics (1 env) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| gymnasium-robotics PointMazeEnv (MuJoCo, random actions) | 1 | {gym_single:,.0f} | "
          f"{gym_single:,.0f} | 1.0x |")
    print(f"| gymnasium SyncVectorEnv of PointMazeEnv | 8 | {gym_vector:,.0f} | "
          f"{gym_vector:,.0f} | {gym_vector / gym_single:.1f}x |")
    for batch, rate in rows:
        print(f"| JAX jit(scan(vmap(step))), waypoint expert acting | {batch:,} | {rate:,.0f} | "
              f"{rate / cores:,.0f} | {rate / cores / gym_single:.1f}x |")


if __name__ == "__main__":
    main()
