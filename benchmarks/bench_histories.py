"""Benchmark on-device learning-history generation; writes its section of benchmarks/RESULTS.md.

    python benchmarks/bench_histories.py [--quick]

Workloads (each in a fresh subprocess, so peak RSS is per workload; compile excluded, timed with
block_until_ready, best of `--repeats`):
* Thompson sampling, 10,000 histories x 300 steps, 20-arm Bernoulli bandits, per Beta sampler;
* a NumPy multiprocess Thompson-sampling generator (the authors' design: per-history Python loop,
  np.random.beta, a process pool over all cores), for a measured ratio;
* tabular Q-learning, 10,000 histories x 200 episodes x 20 steps on the 125-action composite room.
`--quick` shrinks the history counts 10x and reports the same per-workload numbers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import time

from benchmarks.harness import ROOT, cpu_model, write_section

SECTION = "## Learning-history generation"
#: Tasks per jitted call: 10k tasks at once fall out of cache (measured 7.5 s vs ~5 s for TS and
#: 33 s vs ~10 s for Q-learning on this CPU), so the benchmark generates in chunks of 1000.
CHUNK = 1000


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _time_jax(fn, repeats):
    """Best wall time over repeats (compile excluded) and the process CPU time of that run."""
    import jax
    jax.block_until_ready(fn(0))  # compile + warm-up
    best, cpu = float("inf"), float("nan")
    for r in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(r + 1))
        if time.perf_counter() - t < best:
            best, cpu = time.perf_counter() - t, time.process_time() - c
    return best, cpu


def run_thompson(n, sampler, repeats):
    import jax
    import numpy as np
    from icrl_jax import envs
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import thompson_sampling
    env = envs.make("bernoulli_bandit", arms=20)
    params = env.task_params(np.arange(n))
    src = thompson_sampling(sampler)
    fn = lambda seed: generate_histories(env, src, params, 300, jax.random.PRNGKey(seed),
                                         with_info=True, chunk_size=CHUNK)
    seconds, cpu = _time_jax(fn, repeats)
    _, info = fn(0)
    regret = float((info["optimal_expected_reward"] - info["expected_reward"]).sum(1).mean())
    return {"seconds": seconds, "cpu_seconds": cpu, "regret_300": regret}


def _numpy_ts_worker(args):
    import numpy as np
    means, seed = args
    rng = np.random.default_rng(seed)
    a, b = np.ones(len(means)), np.ones(len(means))
    out = np.empty((300, 2), np.float32)
    for t in range(300):
        arm = int(np.argmax(rng.beta(a, b)))
        r = float(rng.random() < means[arm])
        a[arm] += r
        b[arm] += 1.0 - r
        out[t] = arm, r
    return out


def run_numpy(n, repeats):
    import numpy as np
    means = np.random.default_rng(0).random((n, 20))
    best = float("inf")
    with mp.get_context("fork").Pool(os.cpu_count()) as pool:
        for r in range(repeats):
            t = time.perf_counter()
            pool.map(_numpy_ts_worker, [(m, r * n + i) for i, m in enumerate(means)],
                     chunksize=64)
            best = min(best, time.perf_counter() - t)
        pool.close()
        pool.join()  # reap the workers so RUSAGE_CHILDREN counts their CPU time
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"seconds": best, "cpu_seconds": (children.ru_utime + children.ru_stime) / repeats}


def run_q_learning(n, repeats):
    import jax
    import numpy as np
    from icrl_jax import envs
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.core.metrics import episode_returns_ragged
    from icrl_jax.data.sources import q_learning
    env = envs.make("darkroom_composite")
    params = env.task_params(np.arange(n) % env.num_tasks)
    src = q_learning(env, 200)
    fn = lambda seed: generate_histories(env, src, params, 200 * 20, jax.random.PRNGKey(seed),
                                         chunk_size=CHUNK)
    seconds, cpu = _time_jax(fn, repeats)
    h = fn(0)
    rets = episode_returns_ragged(h.rewards[:200], h.dones[:200])
    return {"seconds": seconds, "cpu_seconds": cpu, "late_success": float(np.mean([r[-20:].mean() for r in rets]))}


def _workload(name, n, repeats):
    if name.startswith("thompson:"):
        res = run_thompson(n, name.split(":", 1)[1], repeats)
    elif name == "numpy_thompson":
        res = run_numpy(n, repeats)
    elif name == "q_learning":
        res = run_q_learning(n, repeats)
    else:
        raise ValueError(f"unknown workload {name!r}")
    res["peak_rss_mib"] = _peak_mib()
    return res


def _spawn(name, n, repeats):
    cmd = [sys.executable, "-m", "benchmarks.bench_histories", "--workload", name, "--n", str(n),
           "--repeats", str(repeats)]
    # One XLA:CPU host device per core: generate_histories sends chunks to them round-robin.
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                                      f" --xla_force_host_platform_device_count={os.cpu_count()}"))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workload")
    ap.add_argument("--n", type=int)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.workload:
        print(json.dumps(_workload(args.workload, args.n, args.repeats)))
        return
    import jax
    scale = 10 if args.quick else 1
    n = 10_000 // scale
    load_before = os.getloadavg()
    rows = {}
    samplers = ["exact", "mt_vmap_loop", "mt_fixed", "jax"]
    for s in samplers:
        rows[f"thompson:{s}"] = _spawn(f"thompson:{s}", n, 1 if s == "jax" else args.repeats)
        print(s, rows[f"thompson:{s}"], flush=True)
    rows["numpy_thompson"] = _spawn("numpy_thompson", n, 1)
    print("numpy", rows["numpy_thompson"], flush=True)
    rows["q_learning"] = _spawn("q_learning", n, args.repeats)
    print("q", rows["q_learning"], flush=True)
    load_after = os.getloadavg()

    ts, np_ts, q = rows["thompson:exact"], rows["numpy_thompson"], rows["q_learning"]
    desc = {
        "exact": "exact: Marsaglia-Tsang, 1 proposal/draw, rejected draws compacted and redrawn "
                 "to acceptance (custom_vmap) **[default]**",
        "mt_vmap_loop": "exact: Marsaglia-Tsang, vmapped while-loop redoing the full batch",
        "mt_fixed": "approximate: Marsaglia-Tsang, 2 fixed proposals (bias ~0.05^2)",
        "jax": "exact: jax.random.beta",
    }
    lines = [
        SECTION, "",
        f"Command: `python benchmarks/bench_histories.py{' --quick' if args.quick else ''}` "
        f"({n} histories per workload). Hardware: {cpu_model()}, "
        f"{os.cpu_count()} CPU cores **shared with other engineers' jobs** (load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after), jax {jax.__version__} CPU, "
        f"float32 only, chunk_size={CHUNK} tasks per jitted call. Times exclude compilation "
        "(best of repeats, `block_until_ready`); "
        "peak memory is the workload subprocess's max RSS (includes the ~0.3 GiB JAX runtime).",
        "",
        f"Each workload runs with {os.cpu_count()} XLA host devices (chunks dispatched "
        "round-robin). CPU time is the process's user+system time for the timed run: with the "
        "cores shared, wall time is inflated by other jobs, CPU time much less so.",
        "",
        "| workload | wall (s) | CPU (s) | peak RSS (MiB) | notes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in samplers:
        r = rows[f"thompson:{s}"]
        lines.append(f"| Thompson sampling, {n} x 300 steps, 20 arms — {desc[s]} | "
                     f"{r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['peak_rss_mib']:.0f} | "
                     f"mean regret@300 "
                     f"{r['regret_300']:.1f} |")
    lines.append(f"| NumPy reference TS generator (per-history loop, np.random.beta, "
                 f"{os.cpu_count()}-process pool) | {np_ts['seconds']:.2f} | "
                 f"{np_ts['cpu_seconds']:.2f} | {np_ts['peak_rss_mib']:.0f} (parent) | JAX exact is "
                 f"{np_ts['seconds'] / ts['seconds']:.1f}x faster (wall), "
                 f"{np_ts['cpu_seconds'] / ts['cpu_seconds']:.1f}x (CPU) |")
    lines.append(f"| Q-learning, {n} x 200 episodes x 20 steps, 125-action composite Dark Room | "
                 f"{q['seconds']:.2f} | {q['cpu_seconds']:.2f} | {q['peak_rss_mib']:.0f} | "
                 f"success rate in the last 20 "
                 f"episodes {q['late_success']:.2f} |")
    lines += [
        "",
        f"Against the targets (on {os.cpu_count()} idle cores: Thompson < 4 s, Q-learning < 10 s; "
        f"reference generators ~40 s and ~7 min): Thompson exact took {ts['seconds']:.2f} s wall / "
        f"{ts['cpu_seconds']:.2f} CPU-s, Q-learning {q['seconds']:.2f} s wall / "
        f"{q['cpu_seconds']:.2f} CPU-s. With every core ours, wall time approaches CPU-s / "
        f"{os.cpu_count()} (chunks run on one host device per core); with the load average above "
        f"{os.cpu_count()}, the wall numbers are contention-bound, not the generator's.",
        "",
        "Sampler choice. Thompson sampling needs a fresh Beta(a, b) draw per arm and step "
        "(a, b integer >= 1), so the generator is RNG-bound. Beta = G_a / (G_a + G_b) with "
        "Marsaglia-Tsang gammas (shape >= 1, acceptance 95-99%) costs one normal + one uniform "
        "per gamma when it accepts. Exactness needs rejection run to acceptance; under `vmap` a "
        "while loop re-proposes the whole batch until the last of the N x 2A (40k per 1000-task "
        "chunk) draws of a step accepts "
        "(~4-6 rounds). The default sampler instead makes one round for all draws, then gathers "
        "only the rejected ones (`jnp.nonzero(size=M/16+64)`) and re-proposes them in a loop until "
        "all accept: exact in distribution; only ~5% of draws are redrawn, but on XLA:CPU the "
        "compaction's gather/scatter costs about as much as a second full round (see below). "
        "It needs the whole batch, so it "
        "is a `jax.custom_batching.custom_vmap` rule. Variants measured per step on 1000 x 20 "
        "arms (CPU ms/step, shapes (3,40) / (1,1) / (100,100)): this one 1.04 / 1.30 / 0.85; two "
        "full rounds then element compaction 1.26 / 1.49 / 1.02; two rounds then compaction of "
        "32-draw blocks 1.90 / 2.10 / 2.00 (2-D gathers are slow on XLA:CPU); the approximate two "
        "fixed proposals 0.87 / 0.87 / 0.87. Ruled out: sums of a+b exponentials "
        "(exact, no rejection, but 2A+t ≈ 40-340 uniforms per history-step instead of ~80) and "
        "order statistics (same count). Also measured: non-partitionable threefry "
        "(`fast_rng=True`) generates bits 2-3x faster on this CPU than the partitionable default "
        "(0.23 s vs 0.54 s for 60M words); it changes which numbers a key gives, not their "
        "distribution.",
        "",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
