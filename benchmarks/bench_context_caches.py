"""In-context rollouts longer than the context: the sliding window recomputed at every step
against m staggered key/value caches (`eval.context_caches`), side by side in one process.

Workloads at the shapes of our evaluations (randomly initialised models, actions sampled at
temperature 0.7):
* the main job (`ad/darkroom.py:quick`): AD 2x64 on Dark Room, 80 rollouts of 600 steps,
  context 100;
* Key-to-Door with a 1-gram layer (`ad/key_to_door.py:quick_explorer`): 200 rollouts of 600
  steps, context 100;
* Headless-AD's Table 1 runs (`headless_ad/bernoulli_bandit.py:quick`): 50 bandits x 300 steps,
  context 120.

Each variant compiles once, then the variants alternate for `--repeats` rounds (so load on the
shared cores hits them alike); the table gives each variant's best time, env steps/s and its
speed against the recomputed window.

    python benchmarks/bench_context_caches.py [--repeats 3] [--caches 1 2 4] [--write]
"""

from __future__ import annotations

import argparse
import os
import time

SECTION = "## In-context rollouts longer than the context: staggered caches vs the recomputed window"


def workloads(only: str | None = None):
    """name -> (env, method, params, task params, context, steps); `only`: names containing it."""
    import jax
    import numpy as np

    from icrl_jax.experiments.ad import darkroom, key_to_door
    from icrl_jax.experiments.headless_ad import bernoulli_bandit
    from icrl_jax.data.windows import to_step_windows
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import uniform_random
    from icrl_jax.methods import build_method
    from icrl_jax.pipeline.run import build_env

    out = {}
    for name, module, preset, num_envs in (("main job (AD, Dark Room)", darkroom, "quick", 80),
                                           ("Key-to-Door, AD + 1-gram", key_to_door,
                                            "quick_explorer", 200),
                                           ("Headless-AD, Bernoulli bandits", bernoulli_bandit,
                                            "quick", 50)):
        if only and only not in name:
            continue
        config = module.get_config(preset)
        env = build_env(config)
        method = build_method(config, env)
        context, steps = int(config.train.seq_len), int(config.eval.num_steps)
        ids = np.arange(num_envs)
        tasks = env.task_params(ids if env.num_tasks is None else ids % env.num_tasks)
        probe = to_step_windows(generate_histories(env, uniform_random(), tasks, context,
                                                   jax.random.PRNGKey(0)))
        params = method.eval_params(method.init(jax.random.PRNGKey(1), probe),
                                    jax.random.PRNGKey(3), env)
        out[name] = (env, method, params, tasks, context, steps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--caches", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--only", help="run only the workloads whose name contains this")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()

    from icrl_jax.core import cpu_devices
    cpu_devices.use_one_device_per_core()
    import jax

    from benchmarks.harness import cpu_model, table_section
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.methods.in_context import in_context_source

    rows = []
    for name, (env, method, params, tasks, context, steps) in workloads(args.only).items():
        runs = {}
        for caches in [0] + list(args.caches):
            policy = in_context_source(method, params, env, context, False, max_steps=steps,
                                       temperature=0.7, context_caches=caches)
            run = (lambda p=policy: generate_histories(env, p, tasks, steps,
                                                       jax.random.PRNGKey(2)).actions)
            jax.block_until_ready(run())  # compile
            runs[caches] = run
        best = {caches: float("inf") for caches in runs}
        for _ in range(args.repeats):
            for caches, run in runs.items():
                start = time.perf_counter()
                jax.block_until_ready(run())
                best[caches] = min(best[caches], time.perf_counter() - start)
        env_steps = len(jax.tree.leaves(tasks)[0]) * steps
        for caches, seconds in best.items():
            label = ("window recomputed" if caches == 0 else
                     f"{caches} staggered cache{'s' if caches > 1 else ''}")
            seen = (f"{context}" if caches == 0 else
                    f"{context - context // caches + 1}-{context}")
            rows.append(f"| {name} | {label} | {seen} | {seconds:.2f} | "
                        f"{env_steps / seconds:,.0f} | {best[0] / seconds:.1f}x |")
    prose = (f"`python benchmarks/bench_context_caches.py --repeats {args.repeats} --caches "
             f"{' '.join(map(str, args.caches))}` on {cpu_model()}, "
             f"{os.cpu_count()} cores, {len(jax.devices())} CPU devices; load average "
             f"{os.getloadavg()[0]:.1f} at the end. Randomly initialised models of the presets' "
             "shapes, best of the rounds. `steps seen` is how many of its latest steps the model "
             "acts on once the context is full.")
    table_section(SECTION, prose, ["workload", "rollout", "steps seen", "seconds",
                                   "env steps/s", "vs recomputed"], rows, args.write)


if __name__ == "__main__":
    main()
