"""The attention core and dropout masks of this checkout against another one, in one process.

`python -m benchmarks attention_core --old DIR [--tiny] [--write]`: DIR is a checkout (a `git
worktree` of an older commit). Its `icrl_jax/models/attention.py` and `dropout.py` are loaded
under other module names next to this checkout's (what they import from the rest of `icrl_jax`
is this checkout's), and the two `dot_product_attention`s (causal, forward and backward, with
each checkout's own attention dropout) and the dropout masks alone are timed interleaved
(`harness.interleave`): the same cores' load hits both alike, so the ratio is what to read.

Attention dropout is passed as each checkout's attention takes it: an `AttentionDropout` draw
(keep bits hashed from (batch, head, row, column)) where its attention.py has one, else the
older callable `dropout(shape) -> (bool mask, scale)` built on its `dropout.keep_mask`
(f3225b0 and later; earlier checkouts are refused).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import jax
import jax.numpy as jnp

from benchmarks import harness

HEADING = "## Attention core and dropout masks, before and after (one process)"

#: (label, batch, steps, heads, head width, attention dropout, calls)
ATTENTION_CASES = (
    ("small quick model", 64, 100, 4, 16, 0.0, 40),
    ("quick model with attention dropout (Uni[MASK]'s)", 64, 100, 4, 16, 0.1, 40),
    ("Headless-AD paper scale", 4, 300, 64, 8, 0.22, 8),
    ("medium model", 64, 200, 8, 32, 0.0, 10),
)
#: (label, shape, rate, calls); a 4-d shape is attention weights `(B, H, T, S)`, dropped by each
#: checkout's attention dropout, else residual dropout through `keep_mask`.
DROPOUT_CASES = (
    ("main job's residual dropout", (64, 100, 64), 0.1, 60),
    ("Headless-AD paper scale residual dropout", (4, 300, 512), 0.12, 60),
    ("Uni[MASK]'s attention dropout, one replica's weights", (100, 4, 10, 10), 0.1, 60),
)
#: `--tiny`: the first attention and dropout cases, a few calls (a check that it runs).
TINY_CALLS = 3


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # flax's dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def residual_dropout(keep_mask, rate):
    """(x, key) -> x dropped at `rate` through a checkout's `keep_mask`."""
    def apply(x, key):
        mask, kept = keep_mask(key, 1.0 - rate, x.shape)
        return jax.lax.select(mask, x * (1.0 / kept), jnp.zeros_like(x))
    return apply


def attention_dropout(side: dict, rate):
    """key -> what `side`'s `dot_product_attention` takes as `dropout` (None at rate 0)."""
    if not rate:
        return lambda key: None
    if side["AttentionDropout"] is not None:
        return lambda key: side["AttentionDropout"].from_key(key, rate)

    def callable_dropout(key):
        keys = iter(jax.random.split(key, 8))  # one per causal block

        def drop(shape):  # the bool mask and the kept values' scale
            keep, kept = side["keep_mask"](next(keys), 1.0 - rate, shape)
            return keep, 1.0 / kept
        return drop
    return callable_dropout


def weights_dropout(side: dict, rate):
    """(weights `(B, H, T, S)`, key) -> the weights dropped as `side`'s attention drops them."""
    if side["AttentionDropout"] is None:
        return residual_dropout(side["keep_mask"], rate)

    def apply(w, key):
        draw = side["AttentionDropout"].from_key(key, rate)
        return draw.apply(w, draw.keep(*w.shape[:2], 0, w.shape[2], 0, w.shape[3]))
    return apply


def versions(old_root: str) -> dict:
    """name -> {"attention": dot_product_attention, "keep_mask": ..., "AttentionDropout": the
    class or None} of each checkout."""
    from icrl_jax.models import attention, dropout
    old_dropout_path = os.path.join(old_root, "icrl_jax/models/dropout.py")
    if not os.path.exists(old_dropout_path):
        raise SystemExit(f"{old_root} has no icrl_jax/models/dropout.py: pick a later commit")
    old_attention = _load(os.path.join(old_root, "icrl_jax/models/attention.py"), "old_attention")
    old_dropout = _load(old_dropout_path, "old_dropout")
    side = lambda a, d: {"attention": a.dot_product_attention, "keep_mask": d.keep_mask,  # noqa: E731
                         "AttentionDropout": getattr(a, "AttentionDropout", None)}
    return {"old": side(old_attention, old_dropout), "new": side(attention, dropout)}


def attention_gradient(side: dict, rate, mask):
    draw = attention_dropout(side, rate)

    def loss(q, k, v, key):
        return (side["attention"](q, k, v, mask, causal_from=0, dropout=draw(key)) ** 2).sum()
    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def alternate(functions: dict, args: tuple, calls: int) -> dict:
    """Milliseconds per call of each function (median) and the old / new ratio (median of the
    rounds' ratios), the functions called in turn `calls` rounds (`harness.interleave`)."""
    ab = harness.interleave({name: (lambda f=f: f(*args)) for name, f in functions.items()}, rounds=calls)
    return {**{name: 1e3 * t for name, t in ab.seconds.items()}, "ratio": ab.ratios["new"]}


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks attention_core", description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="a checkout to compare with")
    parser.add_argument("--tiny", action="store_true", help="one attention case with dropout, one "
                        f"dropout case, {TINY_CALLS} calls each (a check that it runs)")
    parser.add_argument("--device", choices=("cpu", "gpu", "tpu"))
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    harness.choose_device(args.device)
    from icrl_jax.core.host_memory import reexec_with_huge_pages
    reexec_with_huge_pages()  # as the CLI runs (both checkouts share this process)
    sides = versions(os.path.abspath(args.old))
    attention_cases = [ATTENTION_CASES[1][:-1] + (TINY_CALLS,)] if args.tiny else ATTENTION_CASES
    dropout_cases = [DROPOUT_CASES[2][:-1] + (TINY_CALLS,)] if args.tiny else DROPOUT_CASES
    rows = []
    for label, batch, steps, heads, width, rate, calls in attention_cases:
        q, k, v = jax.random.normal(jax.random.PRNGKey(0), (3, batch, steps, heads, width))
        mask = jnp.tril(jnp.ones((1, 1, steps, steps), bool))
        ms = alternate({name: attention_gradient(side, rate, mask) for name, side in sides.items()},
                       (q, k, v, jax.random.PRNGKey(1)), calls)
        rows.append([f"attention core, forward + backward: {label}, batch {batch} x {steps}, "
                     f"{heads} heads of {width}, dropout {rate}", f"{ms['old']:.2f}", f"{ms['new']:.2f}",
                     f"{ms['ratio']:.2f}x"])
        print(rows[-1], flush=True)
    for label, shape, rate, calls in dropout_cases:
        x = jax.random.normal(jax.random.PRNGKey(0), shape)
        drops = {name: weights_dropout(side, rate) if len(shape) == 4 else residual_dropout(side["keep_mask"], rate)
                 for name, side in sides.items()}
        ms = alternate({name: jax.jit(jax.grad(lambda x, key, d=d: (d(x, key) ** 2).sum()))
                        for name, d in drops.items()}, (x, jax.random.PRNGKey(1)), calls)
        rows.append([f"dropout alone, forward + backward: {label}, {shape}, rate {rate}",
                     f"{ms['old']:.2f}", f"{ms['new']:.2f}", f"{ms['ratio']:.2f}x"])
        print(rows[-1], flush=True)
    harness.table_section(
        HEADING,
        f"Command: `python -m benchmarks attention_core --old <worktree of "
        f"{harness.commit_of(args.old)}>{' --tiny' if args.tiny else ''} --write`, this checkout at "
        f"{harness.commit_of(harness.ROOT)}. {harness.hardware_line()} (when it finished). float32; "
        "one jitted gradient "
        "with respect to q, k and v (attention) or x (dropout); median milliseconds per call, the "
        "two checkouts called in turn; ratio: the median of the rounds' old / new; glibc malloc on "
        "huge pages as the CLI runs.",
        ["what", "before (ms)", "after (ms)", "ratio"], rows, args.write)


if __name__ == "__main__":
    sys.exit(main())
