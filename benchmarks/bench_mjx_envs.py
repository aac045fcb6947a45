"""Env steps per second of gymnasium's MuJoCo v5 locomotion tasks: ours on MJX
(envs/continuous/mjx_locomotion.py, `jit(scan(vmap(step)))` with auto-reset) beside gymnasium's
own vector env (MuJoCo's C simulator, one process: `SyncVectorEnv`) and brax's spring hopper
(envs/continuous/locomotion.py, the other physics), at N envs, uniform random torques, in one run.

    python benchmarks/bench_mjx_envs.py [--env hopper_v5] [--sizes 1,256,4096] [--steps 100]
        [--chunk 2048] [--write]

`--write` puts the table into benchmarks/RESULTS.md (section "MJX locomotion envs").
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import gymnasium as gym
import jax
import numpy as np

from benchmarks.harness import cpu_model, table_section  # noqa: E402

from icrl_jax import envs  # noqa: E402
from icrl_jax.envs.continuous.mjx_locomotion import TASKS  # noqa: E402


#: Envs vmapped together at most (the chunks run in sequence, `lax.map` over vmapped chunks,
#: inside the same program). jaxlib's batched LAPACK Cholesky (MJX factors each env's mass matrix with it)
#: splits a batch of more than about 2,800 small matrices into tasks on XLA's CPU thread pool and
#: waits for them on a pool thread; when as many such calls run at once as the pool has threads
#: (2 on a 2-core host), every thread waits and the program never finishes.
CHUNK = 2048


def jax_env_rate(name: str, num_envs: int, steps: int, chunk: int = CHUNK) -> tuple[float, float]:
    """(env-steps/s, compile seconds) of a registered JAX env, N envs a step, `chunk` of them
    vmapped together (0: all)."""
    env = envs.make(name)
    params = env.default_params

    if 0 < chunk < num_envs and num_envs % chunk:
        raise ValueError(f"--chunk {chunk} must divide the number of envs {num_envs}")

    def over_envs(f, xs):
        """vmap(f)(xs), `chunk` envs at a time in sequence (lax.map's own batching cannot
        reshape MJX's zero-size arrays back)."""
        if not 0 < chunk < num_envs:
            return jax.vmap(f)(xs)
        split = lambda x: x.reshape((num_envs // chunk, chunk) + x.shape[1:])
        ys = jax.lax.map(jax.vmap(f), jax.tree.map(split, xs))
        return jax.tree.map(lambda y: y.reshape((num_envs,) + y.shape[2:]), ys)

    def run(key):
        keys = jax.random.split(key, num_envs)
        _, state = over_envs(lambda k: env.reset(k, params), keys)

        def body(state, k):
            ka, ks = jax.random.split(k)
            action = jax.random.uniform(ka, (num_envs, env.action_dim), minval=-1, maxval=1)
            _, state, reward, *_ = over_envs(lambda xs: env.transition(*xs, params),
                                             (jax.random.split(ks, num_envs), state, action))
            return state, reward.sum()

        return jax.lax.scan(body, state, jax.random.split(key, steps))[1].sum()

    f = jax.jit(run)
    start = time.perf_counter()
    jax.block_until_ready(f(jax.random.PRNGKey(0)))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(f(jax.random.PRNGKey(1)))
    return num_envs * steps / (time.perf_counter() - start), compile_s


def gymnasium_rate(gym_id: str, num_envs: int, steps: int) -> float:
    """env-steps/s of gymnasium's synchronous vector env (autoreset), actions drawn up front."""
    vec = gym.make_vec(gym_id, num_envs=num_envs, vectorization_mode="sync")
    vec.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, *vec.action_space.shape))
    start = time.perf_counter()
    for t in range(steps):
        vec.step(actions[t])
    seconds = time.perf_counter() - start
    vec.close()
    return num_envs * steps / seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="hopper_v5", choices=tuple(TASKS))
    parser.add_argument("--sizes", default="1,256,4096")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=CHUNK,
                        help="envs vmapped together at most (0: all; see CHUNK)")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    brax_name = args.env.removesuffix("_v5")
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        mjx_rate, mjx_compile = jax_env_rate(args.env, n, args.steps, args.chunk)
        gym_rate = gymnasium_rate(TASKS[args.env].gym_id, n, args.steps)
        brax_rate, _ = jax_env_rate(brax_name, n, args.steps, chunk=0)  # no LAPACK in brax
        rows.append(f"| {n:,} | {mjx_rate:,.0f} | {gym_rate:,.0f} | {mjx_rate / gym_rate:.2f}x | "
                    f"{brax_rate:,.0f} | {mjx_compile:.0f} s |")
        print(rows[-1], flush=True)
    command = "python benchmarks/bench_mjx_envs.py " + " ".join(argv if argv is not None else sys.argv[1:])
    prose = (f"{TASKS[args.env].gym_id}: env-steps/s over {args.steps} steps of uniform random "
             f"torques (auto-reset), measured one after the other in one run on {cpu_model()} "
             f"with {os.cpu_count()} cores (`{command.strip()}`). MJX: ours, float32, "
             f"`jit(scan(vmap(step)))`, at most {args.chunk or 'all'} envs vmapped together; "
             f"gymnasium: its `SyncVectorEnv` on MuJoCo's C simulator "
             f"(float64); brax: our brax `{brax_name}` (spring backend, other dynamics: not D4RL's).")
    table_section("## MJX locomotion envs", prose,
                  ["N envs", "MJX (ours)", "gymnasium MuJoCo", "MJX / gymnasium", "brax spring",
                   "MJX compile"], rows, args.write)


if __name__ == "__main__":
    main()
