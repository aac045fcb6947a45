"""In-context evaluation against the number of environments: env-steps/s and peak RSS.

The main job's model (`ad/darkroom.py:quick`: AD 2x64 on Dark Room, 600-step rollouts, actions
sampled at temperature 0.7), randomly initialised (speed does not depend on the values), rolled
out by `run_policies` as `evaluate` does, with the config's `eval.chunk_size`: N = 1, 16, 256,
4,096 (and 65,536 with `--max-envs 65536`) environments, each N in its own process so that its
peak RSS (`ru_maxrss`, the JAX runtime included) is its own. `seconds` is the second call's wall
time (compiled); `first call` includes compiling (above 10M env-steps only one call is made).

`--policy` picks what the model does beyond its context: `default` (the preset as configured),
or `recompute` (the earlier default: learned positions and no attention window, so the whole
100-step window is recomputed at every step once the rollout outgrows it).

    python benchmarks/bench_eval_scaling.py [--envs 1 16 256 4096] [--write]
    python benchmarks/bench_eval_scaling.py --device   # the largest N on a GPU / TPU, if any
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

SECTION = "## In-context evaluation against the number of environments (main job)"
#: Larger runs (env-steps) are timed once, compiling included.
LONGEST = 10_000_000


def one(num_envs: int, steps: int, policy: str, chunk: int, device: bool) -> dict:
    """Roll out `num_envs` envs in this process; returns the measurements."""
    if not device:
        from icrl_jax.core import cpu_devices
        cpu_devices.use_one_device_per_core()
    import jax
    import numpy as np

    if device and jax.default_backend() == "cpu":
        return dict(skipped="no GPU or TPU here (JAX backend: cpu)")

    from icrl_jax.core.run import build_env
    from icrl_jax.data.dataset import to_step_windows
    from icrl_jax.data.histories import generate_histories
    from icrl_jax.data.rollout import run_policies
    from icrl_jax.data.sources import uniform_random
    from icrl_jax.experiments.ad import darkroom
    from icrl_jax.methods import build_method

    config = darkroom.get_config("quick")
    if policy == "recompute":
        config.model.position, config.model.attention_window = "learned", 0
    if chunk >= 0:
        config.eval.chunk_size = chunk
    env = build_env(config)
    method = build_method(config, env)
    ids = np.arange(num_envs)
    tasks = env.task_params(ids % env.num_tasks)
    probe = to_step_windows(generate_histories(env, uniform_random(), env.task_params(ids[:1]),
                                               config.train.seq_len, jax.random.PRNGKey(0)))
    params = method.init(jax.random.PRNGKey(1), probe)
    policies = method.policies(params, env, config)

    def run():  # as `evaluate` runs it (AD's analysis reads no final policy states)
        return run_policies(env, policies, tasks, steps, jax.random.PRNGKey(2),
                            chunk_size=config.eval.chunk_size or None, keep_state=False)

    start = time.perf_counter()
    out = run()
    seconds = first = time.perf_counter() - start
    if num_envs * steps <= LONGEST:  # else the first call is the measurement (compile: ~2 s)
        out = None
        start = time.perf_counter()
        out = run()
        seconds = time.perf_counter() - start
    return dict(num_envs=num_envs, steps=steps, first=first, seconds=seconds,
                steps_per_s=num_envs * steps / seconds,
                rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                backend=jax.default_backend(), devices=len(jax.devices()),
                chunk=int(config.eval.chunk_size), mean_reward=float(
                    np.mean(out["model"]["rewards"])),
                cached=bool(policies["model"].build.cached))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 16, 256, 4096])
    ap.add_argument("--max-envs", type=int, default=0, help="also this N (e.g. 65536)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--policy", choices=("default", "recompute"), default="default")
    ap.add_argument("--chunk", type=int, default=-1, help="eval.chunk_size (-1: the config's)")
    ap.add_argument("--device", action="store_true",
                    help="run only the largest N, on the default accelerator")
    ap.add_argument("--write", action="store_true", help="write the table to RESULTS.md")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.steps, args.policy, args.chunk, args.device)))
        return

    sizes = sorted(set(args.envs + ([args.max_envs] if args.max_envs else [])))
    if args.device:  # the child finds the accelerator (this process must not hold it)
        sizes = sizes[-1:]
    rows = []
    for n in sizes:
        command = [sys.executable, __file__, "--one", str(n), "--steps", str(args.steps),
                   "--policy", args.policy, "--chunk", str(args.chunk)]
        command += ["--device"] if args.device else []
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            rows.append(f"| {n:,} | {args.steps} | failed (exit {done.returncode}) | | | | |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        if "skipped" in r:
            print(f"--device: {r['skipped']}; nothing to run")
            return
        rows.append(f"| {n:,} | {r['steps']} | {r['first']:.1f} | {r['seconds']:.2f} | "
                    f"{r['steps_per_s']:,.0f} | {r['rss_mib']:,.0f} | {r['chunk'] or 'all'} |")
        print(rows[-1], f"({r['backend']}, {r['devices']} devices, cached={r['cached']})",
              flush=True)

    from results import cpu_model, table_section  # this directory
    where = ("the default accelerator" if args.device else
             f"{cpu_model()}, {os.cpu_count()} cores (one CPU device per core)")
    prose = (f"`python benchmarks/bench_eval_scaling.py --envs "
             f"{' '.join(map(str, args.envs))}{f' --max-envs {args.max_envs}' if args.max_envs else ''}"
             f"{'' if args.policy == 'default' else ' --policy ' + args.policy}` on {where}; "
             f"load average {os.getloadavg()[0]:.1f} at the end (the cores are shared). The main "
             "job's model (randomly initialised) rolled out as `evaluate` does, the model policy "
             "only; `seconds`: second call (compiled; above 10M env-steps the first call, compiling "
             "included, ~2 s), `first call`: with compiling; peak RSS of the N's own process.")
    table_section(SECTION + ("" if args.policy == "default" else f": {args.policy}"), prose,
                  ["envs", "steps", "first call (s)", "seconds", "env-steps/s",
                   "peak RSS (MiB)", "chunk"], rows, args.write, top=True)


if __name__ == "__main__":
    main()
