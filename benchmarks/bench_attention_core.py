"""The attention core and dropout masks of this checkout against another one, in one process.

`python benchmarks/bench_attention_core.py --old DIR [--write]`: DIR is a checkout (a `git
worktree` of an older commit). Its `icrl_jax/models/attention.py` is loaded under another module
name next to this checkout's, and the two `dot_product_attention`s (causal blocks, forward and
backward, with each checkout's own dropout masks applied through the `dropout` argument) and the
two dropout layers alone are timed alternately, median of many calls: the same cores' load hits
both alike, so the ratio is what to read. Both checkouts need `icrl_jax/models/dropout.py` and
attention dropout through `Dropout.mask`'s interface (f3225b0 and later).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from benchmarks.harness import cpu_model, table_section  # noqa: E402

HEADING = "## Attention core and dropout masks, before and after (one process)"

#: (label, batch, steps, heads, head width, attention dropout, calls)
ATTENTION_CASES = (
    ("small quick model", 64, 100, 4, 16, 0.0, 40),
    ("quick model with attention dropout (Uni[MASK]'s)", 64, 100, 4, 16, 0.1, 40),
    ("Headless-AD paper scale", 4, 300, 64, 8, 0.22, 8),
    ("medium model", 64, 200, 8, 32, 0.0, 10),
)
#: (label, shape, rate, calls)
DROPOUT_CASES = (
    ("main job's residual dropout", (64, 100, 64), 0.1, 60),
    ("Headless-AD paper scale residual dropout", (4, 300, 512), 0.12, 60),
    ("Uni[MASK]'s attention dropout, one replica's weights", (100, 4, 10, 10), 0.1, 60),
)


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # flax's dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def mask_dropout(keep_mask):
    """dropout(rate) -> (x, key) -> x through a checkout's `keep_mask`."""
    def make(rate):
        def apply(x, key):
            mask, kept = keep_mask(key, 1.0 - rate, x.shape)
            return jax.lax.select(mask, x * (1.0 / kept), jnp.zeros_like(x))
        return apply
    return make


def versions(old_root: str) -> dict:
    """name -> (dot_product_attention, keep_mask) of each checkout. Both need the attention
    dropout interface of `Dropout.mask` (a shape in, a bool mask and a scale out: f3225b0 and
    later)."""
    from icrl_jax.models.attention import dot_product_attention
    from icrl_jax.models.dropout import keep_mask
    old_dropout_path = os.path.join(old_root, "icrl_jax/models/dropout.py")
    if not os.path.exists(old_dropout_path):
        raise SystemExit(f"{old_root} has no icrl_jax/models/dropout.py: pick a later commit")
    old_attention = _load(os.path.join(old_root, "icrl_jax/models/attention.py"), "old_attention")
    return {"old": (old_attention.dot_product_attention,
                    _load(old_dropout_path, "old_dropout").keep_mask),
            "new": (dot_product_attention, keep_mask)}


def alternate(functions: dict, args: tuple, calls: int) -> dict:
    """Median milliseconds per call of each function, called in turn `calls` times."""
    for f in functions.values():
        jax.block_until_ready(f(*args))
    times = {name: [] for name in functions}
    for _ in range(calls):
        for name, f in functions.items():
            start = time.perf_counter()
            jax.block_until_ready(f(*args))
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


def attention_gradient(attention, keep_mask, rate, mask):
    def loss(q, k, v, key):
        drop = None
        if rate:
            keys = iter(jax.random.split(key, 8))  # one per causal block

            def drop(shape):  # `Dropout.mask`'s pair: the bool mask and the kept values' scale
                keep, kept = keep_mask(next(keys), 1.0 - rate, shape)
                return keep, 1.0 / kept
        return (attention(q, k, v, mask, causal_from=0, dropout=drop) ** 2).sum()
    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def main():
    from icrl_jax.core.host_memory import reexec_with_huge_pages
    reexec_with_huge_pages()  # as the CLI runs (both checkouts share this process)
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True, help="a checkout to compare with")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    sides = versions(os.path.abspath(args.old))
    rows = []
    for label, batch, steps, heads, width, rate, calls in ATTENTION_CASES:
        q, k, v = jax.random.normal(jax.random.PRNGKey(0), (3, batch, steps, heads, width))
        mask = jnp.tril(jnp.ones((1, 1, steps, steps), bool))
        ms = alternate({name: attention_gradient(attention, keep_mask, rate, mask)
                        for name, (attention, keep_mask) in sides.items()},
                       (q, k, v, jax.random.PRNGKey(1)), calls)
        rows.append(f"| attention core, forward + backward: {label}, batch {batch} x {steps}, "
                    f"{heads} heads of {width}, dropout {rate} | {ms['old']:.2f} | "
                    f"{ms['new']:.2f} | {ms['old'] / ms['new']:.2f}x |")
        print(rows[-1], flush=True)
    for label, shape, rate, calls in DROPOUT_CASES:
        x = jax.random.normal(jax.random.PRNGKey(0), shape)
        ms = alternate({name: jax.jit(jax.grad(
                            lambda x, key, d=mask_dropout(keep_mask): (d(rate)(x, key) ** 2).sum()))  # noqa: B008
                        for name, (_, keep_mask) in sides.items()},
                       (x, jax.random.PRNGKey(1)), calls)
        rows.append(f"| dropout alone, forward + backward: {label}, {shape}, rate {rate} | "
                    f"{ms['old']:.2f} | {ms['new']:.2f} | {ms['old'] / ms['new']:.2f}x |")
        print(rows[-1], flush=True)
    commit = lambda tree: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,  # noqa: E731
                                         capture_output=True, text=True).stdout.strip()
    table_section(
        HEADING,
        f"Command: `python benchmarks/bench_attention_core.py --old <worktree of "
        f"{commit(args.old)}> --write`, this checkout at {commit(ROOT)}. Device: "
        f"{jax.devices()[0].platform}, {os.cpu_count()} cores ({cpu_model()}); "
        f"load average when it finished {os.getloadavg()[0]:.1f}. float32; one jitted gradient "
        "with respect to q, k and v (attention) or x (dropout); median milliseconds per call, the "
        "two checkouts called in turn; glibc malloc on huge pages as the CLI runs.",
        ["what", "before (ms)", "after (ms)", "ratio"], rows, args.write)


if __name__ == "__main__":
    main()
