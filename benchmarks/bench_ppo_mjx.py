"""Env steps per second of our on-device PPO (data/sources/ppo.py) on an MJX locomotion env, by
the number of envs per update: one jitted chunk of updates, timed on its second call.

    python benchmarks/bench_ppo_mjx.py [--env hopper_v5] [--sizes 16,32,128] [--updates 2]
"""

from __future__ import annotations

import argparse
import time

import jax

from icrl_jax import envs
from icrl_jax.data.sources import ppo as P


def ppo_rate(name: str, num_envs: int, updates: int) -> tuple[float, float]:
    """(env-steps/s, seconds of the first, compiling call) of `updates` PPO updates."""
    ppo = P.PPO(envs.make(name), P.PPOConfig(num_envs=num_envs), 1_000_000)
    state = ppo.init(jax.random.PRNGKey(0))
    start = time.perf_counter()
    state, out = ppo.run(state, updates, False)
    jax.block_until_ready(out)
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(ppo.run(state, updates, False))
    return updates * ppo.steps_per_update / (time.perf_counter() - start), first


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="hopper_v5")
    parser.add_argument("--sizes", default="16,32,128")
    parser.add_argument("--updates", type=int, default=2)
    args = parser.parse_args(argv)
    for n in [int(s) for s in args.sizes.split(",")]:
        rate, first = ppo_rate(args.env, n, args.updates)
        print(f"{args.env}, {n} envs: {rate:,.0f} env steps/s (first call {first:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
