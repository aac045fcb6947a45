"""brax locomotion env steps per second by backend: `jit(scan(vmap(step)))` over N envs with
random actions (how envs/continuous/locomotion.py picks its default backend).

    python benchmarks/bench_locomotion.py ENV BACKEND [STEPS]    # e.g. hopper spring 100
"""

import sys
import time

import jax
from brax import envs


def main():
    name, backend = sys.argv[1], sys.argv[2]
    num_envs, steps = 256, int(sys.argv[3]) if len(sys.argv) > 3 else 100
    env = envs.get_environment(name, backend=backend)

    def run(key):
        state = jax.vmap(env.reset)(jax.random.split(key, num_envs))

        def body(s, k):
            action = jax.random.uniform(k, (num_envs, env.action_size), minval=-1, maxval=1)
            s = jax.vmap(env.step)(s, action)
            return s, s.reward.sum()

        return jax.lax.scan(body, state, jax.random.split(key, steps))[1].sum()

    f = jax.jit(run)
    start = time.perf_counter()
    jax.block_until_ready(f(jax.random.PRNGKey(0)))
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(f(jax.random.PRNGKey(1)))
    seconds = time.perf_counter() - start
    print(f"{name} {backend}: compile+run {compile_s:.1f}s, {num_envs * steps / seconds:.0f} "
          f"env-steps/s (N={num_envs}, T={steps})", flush=True)


if __name__ == "__main__":
    main()
