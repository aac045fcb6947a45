"""Where a training step's time goes: one jitted call of a `train` suite row traced with the
JAX profiler, each executed XLA operation's time attributed to the model part that made it
(from the `op_name` metadata the compiled program keeps), forward and backward apart.

    python -m benchmarks profile_train [--row main_job] [--tree DIR] [--write]

`--tree DIR` profiles another checkout's code (`harness.run_in_tree`).

The categories are read off the names of our modules (`attention`, `mlp`, `Dropout`, `ngram_`,
`norm`, `tokens`, ...), so the table says which part of the model to speed up. An operation
counts where XLA's metadata puts it: the backward pass of a residual dropout, for instance, also
holds the layout copies of the gradient that flows through it. With `--write`
the table goes to benchmarks/RESULTS.md (one section per row and checkout).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile

from benchmarks import bench_train as B
from benchmarks import harness

#: (category, pattern in the operation's op_name), first match wins.
CATEGORIES = (
    # first, so that attention dropout's masks (`.../attention/Dropout_0/...`) count here
    ("dropout (random bits, masks)", r"Dropout|bernoulli|threefry|random_bits"),
    ("attention: scores, softmax, weighted sum", r"/attention/(?!qkv|out/)"),
    ("attention: qkv and output projections", r"/attention/(qkv|out)/"),
    ("n-gram layer", r"/ngram_"),
    ("feed-forward (MLP)", r"/mlp"),
    ("layer norms", r"norm"),
    ("step tokens (embeddings)", r"/tokens/"),
    ("action head and loss", r"action_head|cross_entropy|log_softmax|logsumexp"),
    # optax's updates are inlined: their operations sit directly in the step's call, outside
    # the model's scopes (`.../closed_call/div`)
    ("optimiser (AdamW, clipping)", r"adam|clip|scale_by|optax|chain|/closed_call/[\w\-]+$"),
    ("window sampling", r"sample|dynamic_slice|gather"),
)


def operation_metadata(hlo: str) -> dict[str, str]:
    """Instruction name -> its op_name (the JAX source path), from compiled HLO text."""
    out = {}
    for line in hlo.splitlines():
        match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = \S+ [\w\-]+\(", line)
        if match:
            op_name = re.search(r'op_name="([^"]+)"', line)
            out[match.group(1)] = op_name.group(1) if op_name else ""
    return out


def category(op_name: str) -> str:
    for name, pattern in CATEGORIES:
        if re.search(pattern, op_name):
            return name
    return "other (loop, copies, unattributed)"


def profile(row: str, trace_dir: str) -> tuple[dict, float, dict]:
    """Trace one call of `row`; returns ({(category, pass): microseconds}, total, the row's
    throughput)."""
    B.TRACE_DIR = trace_dir
    result = B.ROWS_BEFORE_AFTER[row][1](2)
    metadata = operation_metadata(open(os.path.join(trace_dir, "step.hlo")).read())
    trace = sorted(glob.glob(os.path.join(trace_dir, "**", "*perfetto_trace.json.gz"),
                             recursive=True))[-1]
    events = json.load(gzip.open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    times = collections.Counter()
    for event in events:
        name = event.get("name", "")
        if event.get("ph") != "X" or name not in metadata:  # XLA operations only
            continue
        op_name = metadata[name]
        backward = "transpose(jvp(" in op_name  # JAX names the backward pass's operations so
        times[(category(op_name), "backward" if backward else "forward")] += event["dur"]
    return times, sum(times.values()), result


def profile_json(row: str) -> dict:
    """`profile` of `row` in this process, as JSON: "category|pass" -> microseconds."""
    harness.check_tree()
    with tempfile.TemporaryDirectory() as trace_dir:
        times, total, result = profile(row, trace_dir)
    return {"times": {f"{name}|{side}": us for (name, side), us in times.items()}, "total": total,
            "tokens_per_s": result["tokens_per_s"]}


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks profile_train", description=__doc__.split("\n")[0])
    parser.add_argument("--row", default="main_job", choices=tuple(B.ROWS_BEFORE_AFTER))
    parser.add_argument("--tree", help="another checkout to profile (default: this one)")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON (what --tree runs)")
    parser.add_argument("--device", choices=("cpu", "gpu", "tpu"))
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.tree:
        tree = os.path.abspath(args.tree)
        found = harness.run_in_tree(tree, "benchmarks.profile_train", ["--row", args.row, "--json"]
                                    + (["--device", args.device] if args.device else []))
    else:
        tree = harness.ROOT
        B.prepare_process(args.device)
        found = profile_json(args.row)
        if args.json:
            return print(json.dumps(found))
    times = collections.Counter({tuple(key.split("|")): us for key, us in found["times"].items()})
    total = found["total"]
    by_category = collections.Counter()
    for (name, _), microseconds in times.items():
        by_category[name] += microseconds
    rows = [[name, f"{100 * by_category[name] / total:.0f}%", f"{100 * times[(name, 'forward')] / total:.0f}%",
             f"{100 * times[(name, 'backward')] / total:.0f}%"] for name, _ in by_category.most_common()]
    commit = harness.commit_of(tree)
    harness.table_section(
        f"## Where the training step's time goes: {args.row} at {commit}",
        f"Command: `python -m benchmarks profile_train --row {args.row}"
        f"{' --tree <worktree of ' + commit + '>' if args.tree else ''} --write`. "
        f"{B.ROWS_BEFORE_AFTER[args.row][0]}; one jitted call traced with the JAX profiler "
        f"({harness.hardware_line()}); each XLA operation's time is attributed by its `op_name` "
        f"(`CATEGORIES`). Executed operations took {total / 1e3:,.0f} ms in the traced call; untraced "
        f"throughput {found['tokens_per_s']:,.0f} tokens/s.",
        ["part of the step", "share", "forward", "backward"], rows, args.write)


if __name__ == "__main__":
    sys.exit(main())
