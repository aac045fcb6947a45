"""Context length against training speed and memory: AD at XLand-100B's size (8 layers, 512 wide,
8 heads, ALiBi positions) trained on 512 to 4,096-token windows, dense and blockwise attention
side by side.

`python -m benchmarks context_length [--contexts 512,1024,2048,4096] [--batch 8]
[--impls dense,blockwise] [--dense-up-to 2048] [--remat] [--write]` (`--remat`: every block
recomputes its activations in the backward pass, `model.remat`): each (context, attention)
point runs in a child process of its own (`--point CONTEXT IMPL`), so that its peak resident memory is its own:
the child times its jitted training step (`training.measure_ad`: the first call, compiling, apart;
then the median of `--rounds` calls of `--steps-per-call` steps), reads its peak RSS before
timing a 4096^3 matmul for the MFU's peak (`training.matmul_peak`), and prints one JSON line.
Points run one at a time; a child that dies (out of memory) is a row that says so. Dense
attention keeps the `(B, H, T, T)` weights of every layer for the backward pass, so it is
measured up to `--dense-up-to` tokens only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks import harness
from icrl_jax.models.fields import REMAT_CPU_XLA_FLAG, add_remat_scheduler_flag

HEADING = "## Context length: AD at XLand-100B's size, dense and blockwise attention"


def measure_point(args, context: int, implementation: str) -> dict:
    """In the child: one point's throughput, MFU and peak RSS."""
    from benchmarks import training

    result = training.measure_ad(
        args.layers, args.d_model, args.heads, args.batch, context, calls=1, rounds=args.rounds,
        steps_per_call=args.steps_per_call, histories=args.histories,
        model=dict(position=args.position, attention_impl=implementation, remat=args.remat))
    result["peak_rss_mib"] = harness.host_peak_rss_mib()
    peak = training.matmul_peak()
    if args.remat:
        implementation += " + remat"
    return dict(result, context=context, implementation=implementation, peak_flops=peak,
                mfu=result["model_flops_per_s"] / peak)


def run_point(context: int, implementation: str, argv: list[str]) -> dict:
    """One point in a child process; its JSON, or what stopped it."""
    env = dict(os.environ)
    if "--remat" in argv:  # XLA's default CPU scheduler undoes remat (models/fields.py)
        add_remat_scheduler_flag(env)
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_context_length", *argv,
                           "--point", str(context), implementation],
                          capture_output=True, text=True, cwd=harness.ROOT, env=env)
    result = harness.last_json_line(done.stdout)
    if done.returncode or result is None:
        killed = done.returncode < 0 or done.returncode == 137
        label = implementation + (" + remat" if "--remat" in argv else "")
        return dict(context=context, implementation=label,
                    failed="killed (out of memory)" if killed else done.stderr.strip()[-300:])
    return result


def row(result: dict) -> list:
    if "failed" in result:
        return [result["context"], result["implementation"], "", "", "", "", result["failed"]]
    return [f"{result['context']:,}", result["implementation"], f"{result['steps_per_s']:.3g}",
            f"{result['tokens_per_s']:,.0f}", f"{100 * result['mfu']:.0f}%",
            f"{result['peak_rss_mib'] / 1024:.2f}", f"compile + first call {result['compile_s']:.0f} s"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="512,1024,2048,4096")
    parser.add_argument("--impls", default="dense,blockwise")
    parser.add_argument("--dense-up-to", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--position", default="alibi")
    parser.add_argument("--remat", action="store_true", help="model.remat: recompute each "
                        "block's activations in the backward pass")
    parser.add_argument("--steps-per-call", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--histories", type=int, default=64)
    parser.add_argument("--write", action="store_true", help="write the table into RESULTS.md")
    parser.add_argument("--point", nargs=2, metavar=("CONTEXT", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.point:
        print(json.dumps(measure_point(args, int(args.point[0]), args.point[1])), flush=True)
        return
    passed = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write"]
    rows = []
    for context in (int(c) for c in args.contexts.split(",")):
        for implementation in args.impls.split(","):
            if implementation == "dense" and context > args.dense_up_to:
                continue
            result = run_point(context, implementation, passed)
            print(json.dumps(result), flush=True)
            rows.append((context, row(result)))
    rows = [r for _, r in sorted(rows, key=lambda pair: pair[0])]  # any run order, one table
    prose = (f"AD, {args.layers} layers x {args.d_model} wide, {args.heads} heads, "
             f"`model.position={args.position}`, float32, batch {args.batch}, "
             f"{args.steps_per_call} optimiser step(s) a call, median of {args.rounds} calls after "
             f"the compiling one; one child process per row, peak RSS its own"
             f"{'; remat rows: XLA_FLAGS=' + REMAT_CPU_XLA_FLAG if args.remat else ''}. MFU: model FLOPs "
             f"(6N + 12 L d T per token) over a 4096^3 matmul's FLOP/s in the same process. "
             f"{harness.hardware_line()}. "
             f"`{harness.command_line('context_length')}`")
    harness.table_section(HEADING, prose, ["context", "attention", "steps/s", "tokens/s", "MFU",
                                           "peak RSS (GiB)", "notes"], rows, args.write)


if __name__ == "__main__":
    main()
