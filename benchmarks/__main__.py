"""`python -m benchmarks SUITE [--tiny] [--device cpu|gpu|tpu] [--write] [--out DIR] ...`: run one
suite; with no suite, list them with what each measures and about how long it takes.

Every suite is a module of this package with a `main(argv)`; `python -m benchmarks SUITE --help`
lists its own options. `--device` is read here too, before any suite starts JAX.
"""

from __future__ import annotations

import importlib
import sys

from benchmarks import harness

#: Suite name -> (module, what it measures, about how long it takes at its default size).
SUITES = {
    "accelerator": ("benchmarks.accelerator",
                    "the device check: training tokens/s and MFU (fp32, bf16) of three models, in-context "
                    "evaluation at 4k-1M envs, every JAX env at 65k envs, history generation",
                    "<= 10 min on one GPU; about 1 min with --tiny on a CPU"),
}


def usage() -> str:
    lines = ["python -m benchmarks SUITE [--tiny] [--device cpu|gpu|tpu] [--write] [--out DIR] ...", "",
             "suites:"]
    width = max(map(len, SUITES))
    for name, (_, what, duration) in SUITES.items():
        lines.append(f"  {name:<{width}}  {what}")
        lines.append(f"  {'':<{width}}  time: {duration}")
    lines += ["", "benchmarks/README.md says more; `python -m benchmarks SUITE --help` lists a suite's options."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUITES:
        print(f"unknown suite {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    if "--device" in rest and rest.index("--device") + 1 < len(rest):
        harness.choose_device(rest[rest.index("--device") + 1])  # before the suite imports JAX
    return importlib.import_module(SUITES[name][0]).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
