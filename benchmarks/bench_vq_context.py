"""In-context rollout of AD + n-gram layers on VQ codes (the Miniworld `quick_ngram` model):
the context holding each frame's encoder features and VQ codes (coded once per frame) against
the context holding pixels (CNN and VQ-VAE over the whole window at every step), side by side.

Synthetic 64x64 frames drawn from a pool of 16 (so the n-gram layers find matches), a randomly
initialised model and VQ-VAE of the preset's shapes; the policy steps `--envs` environments per
call, jitted, as the host bridge calls it. Both variants alternate A B A B in one process, and
the greedy actions of both are checked equal.

    python benchmarks/bench_vq_context.py [--envs 8] [--steps 100] [--repeats 3] [--write]
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.harness import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## AD + VQ n-grams in context: codes kept per frame vs recomputed over the window"


def build(num_envs: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from icrl_jax.envs.host.specs import MiniworldRoom
    from icrl_jax.experiments.miniworld import ad_darkroom
    from icrl_jax.data.windows import StepWindows
    from icrl_jax.data.rollout import SourceOnHost
    from icrl_jax.methods.ad import AD
    from icrl_jax.methods.in_context import in_context_source
    from icrl_jax.models.encoders import VQVAE, vq_ngram_ids
    from icrl_jax.models.ngram import register_ngram_ids

    config = ad_darkroom.get_config("quick_ngram")
    vq_config = config.vq
    vq = VQVAE(image_size=64, grid=int(vq_config.grid), num_codes=int(vq_config.num_codes),
               code_dim=int(vq_config.code_dim), channels=int(vq_config.channels),
               pool=int(vq_config.pool))
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 256, (16, 64, 64, 3)).astype(np.uint8)
    vq_params = jax.jit(vq.init)(jax.random.key(0), jnp.asarray(pool[:2]))["params"]
    register_ngram_ids("vq_bench", vq_ngram_ids(vq, vq_params))
    model_config = config.model
    model_config.ngram_match = "vq_bench"
    env = MiniworldRoom()
    context = int(config.train.seq_len)

    class RecomputingAD(AD):
        """The same model with pixels in its context (the rule before codes were cached)."""

        caches_encoded_context = False

    methods = {"cached": AD(model_config, env.num_actions, None),
               "recomputed": RecomputingAD(model_config, env.num_actions, None)}
    example = StepWindows(jnp.asarray(pool[None, :4]), jnp.zeros((1, 4), jnp.int32),
                          jnp.zeros((1, 4)), jnp.zeros((1, 4), jnp.int32),
                          jnp.ones((1, env.num_actions), bool))
    params = jax.jit(methods["cached"].init)(jax.random.key(1), example)
    policies = {}
    for name, method in methods.items():
        source = in_context_source(method, params, env, context, greedy=True)
        assert source.build.encoded == (name == "cached")
        policies[name] = SourceOnHost(source, env)
    frames = pool[rng.integers(0, 16, (4 * context, num_envs))]
    return policies, frames, context


def rollout_steps_per_second(policy, frames, steps: int, num_envs: int):
    """Env steps/s of `steps` policy calls (after one compiling call), and the actions."""
    import jax
    import jax.numpy as jnp

    from icrl_jax.envs.host.bridge import HostStep

    act = jax.jit(policy.act)
    state = policy.init(jax.random.key(0), num_envs)
    zeros = jnp.zeros(num_envs)
    step = HostStep(jnp.asarray(frames[0]), jnp.zeros((num_envs, 0)), zeros,
                    jnp.zeros(num_envs, bool), jnp.int32(0))
    jax.block_until_ready(act(jax.random.key(0), state, step))
    taken = []
    start = time.perf_counter()
    for t in range(steps):
        step = HostStep(jnp.asarray(frames[t]), jnp.zeros((num_envs, 0)), zeros,
                        jnp.zeros(num_envs, bool), jnp.int32(t))
        actions, state = act(jax.random.key(t), state, step)
        taken.append(actions)
    jax.block_until_ready(taken)
    return steps * num_envs / (time.perf_counter() - start), [a.tolist() for a in taken]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    policies, frames, context = build(args.envs)
    steps = min(args.steps, len(frames))
    rates = {name: [] for name in policies}
    actions = {}
    for _ in range(args.repeats):
        for name, policy in policies.items():
            rate, actions[name] = rollout_steps_per_second(policy, frames, steps, args.envs)
            rates[name].append(rate)
            print(f"{name}: {rate:.1f} env steps/s", flush=True)
    same = actions["cached"] == actions["recomputed"]
    median = {name: sorted(r)[len(r) // 2] for name, r in rates.items()}
    load = os.getloadavg()[0]
    lines = [
        SECTION, "",
        f"`python benchmarks/bench_vq_context.py --envs {args.envs} --steps {args.steps} "
        f"--repeats {args.repeats}` on {cpu_model()}, "
        f"{os.cpu_count()} cores, load average {load:.1f} at the end. Miniworld `quick_ngram` "
        f"shapes (context {context}, 64x64 frames, CNN on 16x16, VQ-VAE 4x4 codes on 16x16), "
        f"{args.envs} envs per call, {steps} steps; variants alternating in one process.", "",
        "| context holds | env steps/s (each run) | median |", "| --- | --- | --- |"]
    for name in policies:
        what = ("encoder features + VQ codes per frame" if name == "cached"
                else "pixels (CNN + VQ over the window each step)")
        lines.append(f"| {what} | {' / '.join(f'{r:.1f}' for r in rates[name])} | "
                     f"{median[name]:.1f} |")
    lines += ["", f"Cached / recomputed: **{median['cached'] / median['recomputed']:.2f}x**; "
              f"greedy actions identical: {same}.", ""]
    text = "\n".join(lines)
    print(text)
    if not same:
        raise SystemExit("the two contexts chose different actions")
    if args.write:
        path = os.path.join(ROOT, "benchmarks", "RESULTS.md")
        with open(path) as f:
            old = f.read()
        if SECTION in old:
            head, _, rest = old.partition(SECTION)
            tail = rest.split("\n## ", 1)
            old = head + ("## " + tail[1] if len(tail) > 1 else "")
        with open(path, "w") as f:
            f.write(old.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":
    main()
