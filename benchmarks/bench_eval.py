"""In-context evaluation throughput: Headless-AD on Bernoulli bandits, with the key/value cache
vs recomputing the whole context window at every step (`icrl_jax.methods.in_context.InContextPolicy`).

Both policies run the same rollout (same parameters, tasks and keys; they choose the same arms,
see tests/test_headless_ad.py) in one `vmap(scan)` program each; we time the second call of each
(the first compiles) and report environment steps per second and their ratio.

    python benchmarks/bench_eval.py [--envs 100] [--steps 300] [--write]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import jax
import numpy as np

from results import write_section  # benchmarks/results.py (this script's directory)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs.bandits import BernoulliBandit  # noqa: E402
from icrl_jax.data.dataset import StepWindows  # noqa: E402
from icrl_jax.data.histories import generate_histories  # noqa: E402
from icrl_jax.methods.in_context import in_context_source  # noqa: E402
from icrl_jax.methods.headless_ad import HeadlessAD, default_headless_config  # noqa: E402
from icrl_jax.models.transformer import default_transformer_config  # noqa: E402

SECTION = "## In-context evaluation: key/value cache vs recomputed window"


def build(num_arms: int, d_model: int, layers: int, context: int):
    config = default_transformer_config()
    config.update(dict(d_model=d_model, num_layers=layers, num_heads=4, position="rotary",
                       max_len=context))
    for key, value in dict(default_headless_config(), action_embed_dim=64, tau=0.5).items():
        config[key] = value
    method = HeadlessAD(config, num_observations=1)
    example = StepWindows(observations=np.zeros((1, context), np.int32),
                          prev_actions=np.zeros((1, context), np.int32),
                          prev_rewards=np.zeros((1, context), np.float32),
                          actions=np.zeros((1, context), np.int32),
                          action_mask=np.ones((1, num_arms), bool))
    params = method.init(jax.random.PRNGKey(0), example)
    return method, method.eval_params(params, jax.random.PRNGKey(1), num_arms)


def time_rollout(env, policy, task_params, steps) -> tuple[float, np.ndarray]:
    run = lambda: jax.block_until_ready(  # noqa: E731
        generate_histories(env, policy, task_params, steps, jax.random.PRNGKey(2)).actions)
    run()  # compile
    start = time.perf_counter()
    actions = run()
    return time.perf_counter() - start, np.asarray(actions)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--arms", type=int, default=20)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    env = BernoulliBandit(arms=args.arms, distribution="uniform", seed=0)
    method, params = build(args.arms, args.d_model, args.layers, args.steps)
    task_params = env.task_params(np.arange(args.envs))
    results = {}
    for name, max_steps in (("recomputed window", None), ("key/value cache", args.steps)):
        policy = in_context_source(method, params, env, args.steps, greedy=False,
                                   max_steps=max_steps)
        results[name] = time_rollout(env, policy, task_params, args.steps)
    same = float((results["recomputed window"][1] == results["key/value cache"][1]).mean())
    env_steps = args.envs * args.steps
    rows = [f"| {name} | {seconds:.2f} | {env_steps / seconds:,.0f} |"
            for name, (seconds, _) in results.items()]
    ratio = results["recomputed window"][0] / results["key/value cache"][0]
    load = os.getloadavg()[0]
    text = "\n".join([
        SECTION, "",
        f"`python benchmarks/bench_eval.py --envs {args.envs} --steps {args.steps}` on "
        f"{platform.processor() or platform.machine()}, {jax.device_count()} x "
        f"{jax.devices()[0].device_kind}, load average {load:.1f} at the end (other jobs ran "
        "on these cores). Headless-AD rollout on "
        f"{args.envs} Bernoulli bandits with {args.arms} arms for {args.steps} steps, context "
        f"{args.steps} (the whole rollout, so both give the same actions: "
        f"{same:.1%} identical here), model {args.layers} x {args.d_model} with the "
        f"{args.arms}-token action-set prompt. Second call of each (the first compiles).", "",
        "| policy | seconds | env steps/s |", "| --- | --- | --- |", *rows, "",
        f"The cache is **{ratio:.1f}x** faster: each step decodes one token (twice: `act` "
        "cannot keep its cache write) instead of the whole window. Rollouts longer than the "
        "context still recompute the sliding window.", ""])
    print(text)
    if args.write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
