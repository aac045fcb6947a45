"""Environment steps per second for every icrl-jax env, side by side with gymnax's Bernoulli bandit.

    python benchmarks/bench_envs.py [--quick] [--no-write]

For each env and each batch size N, one jitted program runs `lax.scan` over T steps of
`vmap(env.step)` over N tasks (our envs: N different tasks' params; gymnax: its default params) and
the usual per-step key split. Actions are a cheap deterministic cycle over each task's available
actions so that the policy costs (nearly) nothing. Rewards and observations are summed into the
carry so that XLA cannot drop any of the step's work. Compile time is excluded (one warm-up call);
the reported time is the best of `repeats` timed calls, each ended by `block_until_ready`.

Each env runs in its own subprocess so that its peak memory is its own: `ru_maxrss` (Linux: KiB)
of that process after each batch size, i.e. the cumulative peak resident set size of the whole
process (JAX runtime included), not just the env's arrays.

The section "Environment steps per second" of benchmarks/RESULTS.md is rewritten with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import cpu_model, write_section

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Environment steps per second"
ENV_NAMES = ["gymnax:BernoulliBandit-misc", "bernoulli_bandit", "contextual_bandit", "darkroom",
             "darkroom_composite", "key_to_door"]
BATCHES = [1, 16, 256, 4096, 65536]


def steps_for(batch: int, quick: bool) -> int:
    """Scan length per batch size: about 2-4M env steps per timed call at large N (fewer if quick)."""
    full = {1: 20_000, 16: 20_000, 256: 8_000, 4096: 1_000, 65536: 100}
    return max(full[batch] // (10 if quick else 1), 10)


def build(name: str):
    """-> (env, params for a batch of N tasks (callable N -> params, batched or None), action count fn)."""
    import jax.numpy as jnp

    if name.startswith("gymnax:"):
        import gymnax

        env, params = gymnax.make(name.split(":", 1)[1])
        return env, (lambda n: params), False, (lambda p, n: jnp.full((n,), env.num_actions))
    from icrl_jax import envs

    env = envs.make(name)

    def params_for(n):
        ids = jnp.arange(n, dtype=jnp.int32)
        return env.task_params(ids if env.num_tasks is None else ids % env.num_tasks)

    return env, params_for, True, (lambda p, n: p.action_mask.sum(-1).astype(jnp.int32))


def bench_one(name: str, batch: int, steps: int, repeats: int) -> dict:
    import jax
    import jax.numpy as jnp

    env, params_for, batched_params, count_fn = build(name)
    params = params_for(batch)
    counts = count_fn(params, batch)  # available actions per task, (N,)
    p_axis = 0 if batched_params else None

    def rollout(key):
        reset_keys = jax.random.split(key, batch)
        _, state = jax.vmap(env.reset, in_axes=(0, p_axis))(reset_keys, params)
        offsets = jnp.arange(batch, dtype=jnp.int32)

        def body(carry, t):
            state, key, total = carry
            key, sub = jax.random.split(key)
            # Cycle through each task's available actions (indices 0..count-1 are the real ones).
            actions = (offsets + t) % counts
            obs, state, reward, _, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0, p_axis))(
                jax.random.split(sub, batch), state, actions, params)
            obs_sum = jnp.sum(obs.astype(jnp.float32))
            return (state, key, total + reward.astype(jnp.float32).sum() + 1e-9 * obs_sum), None

        carry, _ = jax.lax.scan(body, (state, key, jnp.float32(0.0)),
                                jnp.arange(steps, dtype=jnp.int32))
        return carry[2]

    fn = jax.jit(rollout)
    key = jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    fn(key).block_until_ready()  # compile + first run (excluded)
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for r in range(repeats):
        t0 = time.perf_counter()
        fn(jax.random.PRNGKey(r + 1)).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return {"env": name, "batch": batch, "steps": steps, "seconds": best,
            "steps_per_s": batch * steps / best, "compile_s": compile_s,
            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child(name: str, batches: list[int], quick: bool, repeats: int) -> None:
    for b in batches:
        print(json.dumps(bench_one(name, b, steps_for(b, quick), repeats)), flush=True)


def render(rows: list[dict], argv: list[str]) -> str:
    import jax

    by = {(r["env"], r["batch"]): r for r in rows}
    base = "gymnax:BernoulliBandit-misc"
    batches = sorted({r["batch"] for r in rows})
    names = [n for n in ENV_NAMES if any(r["env"] == n for r in rows)]
    lines = [
        SECTION, "",
        f"Command: `{' '.join(['python benchmarks/bench_envs.py', *argv])}`",
        f"Hardware: {cpu_model()}, {os.cpu_count()} cores visible, CPU backend "
        f"(jax {jax.__version__}, {jax.devices()[0].platform}); the cores were shared with other "
        "engineers' jobs while this ran, so absolute numbers are noisy (ratios within one run are "
        "the meaningful part).",
        "",
        "Env steps/s = N parallel envs x T scanned steps / best wall time of a jitted "
        "`scan(vmap(step))` call (compile excluded). Ratio = steps/s over gymnax "
        "`BernoulliBandit-misc` at the same N in the same run. Peak RSS = `ru_maxrss` of that env's "
        "own benchmark process after this N (cumulative peak, JAX runtime included).",
        "",
        "Reading the numbers: the harness draws one PRNG key per env per step (as a real rollout "
        "must). `darkroom` and `darkroom_composite` never consume the step key (deterministic "
        "moves, fixed start), so XLA drops that key split and their small scan bodies compile to a "
        "tight native loop; they are measured honestly but are not a like-for-like comparison "
        "with the bandits. `key_to_door` uses the key only for the random start cell on reset. "
        "Our bandits override `transition` so a pull is one uniform draw and one gather, with no "
        "reset-and-select (gymnax's generic step splits the key, samples, resets and selects).",
        "",
        "| env | N | T | steps/s | vs gymnax | peak RSS (MiB) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        for b in batches:
            r = by.get((name, b))
            if r is None:
                continue
            g = by.get((base, b))
            ratio = f"{r['steps_per_s'] / g['steps_per_s']:.2f}x" if g else "n/a"
            lines.append(f"| {name} | {b} | {r['steps']} | {r['steps_per_s']:,.0f} | {ratio} | "
                         f"{r['maxrss_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10x fewer steps, N up to 4096")
    ap.add_argument("--envs", nargs="*", default=ENV_NAMES, help="subset of envs")
    ap.add_argument("--batches", nargs="*", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    batches = args.batches or ([b for b in BATCHES if b <= 4096] if args.quick else BATCHES)
    if args.child:
        child(args.child, batches, args.quick, args.repeats)
        return
    rows = []
    for name in args.envs:
        cmd = [sys.executable, "-m", "benchmarks.bench_envs", "--child", name, "--repeats", str(args.repeats),
               "--batches", *map(str, batches)] + (["--quick"] if args.quick else [])
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            sys.exit(f"benchmark of {name} failed:\n{out.stderr[-3000:]}")
        for line in out.stdout.splitlines():
            row = json.loads(line)
            rows.append(row)
            print(f"{row['env']:>28} N={row['batch']:>6} T={row['steps']:>6} "
                  f"{row['steps_per_s']:>14,.0f} steps/s  compile {row['compile_s']:.1f}s  "
                  f"maxrss {row['maxrss_mib']:.0f} MiB", flush=True)
    text = render(rows, sys.argv[1:])
    print(text)
    if not args.no_write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
