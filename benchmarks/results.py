"""Shared by the benchmarks: each owns one `## ` section of benchmarks/RESULTS.md."""

from __future__ import annotations

import os
import platform
import re
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def write_section(heading: str, text: str, path: str = RESULTS) -> None:
    """Replace the section that starts with `heading` (a `## ` line) by `text`, which starts
    with that heading, or append it; every other section is left as it is."""
    old = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = text.rstrip("\n") + "\n"
    if pattern.search(old):
        new = pattern.sub(lambda _: text + "\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(new.rstrip("\n") + "\n")


def table_section(heading: str, prose: str, columns: list[str], rows: list[str],
                  write: bool) -> str:
    """A `## ` section: `prose` (what was measured, how, on what), then a Markdown table with
    `columns` and the already formatted `rows`; printed, and written to RESULTS.md if `write`."""
    section = "\n".join([heading, "", prose, "", "| " + " | ".join(columns) + " |",
                         "|" + " --- |" * len(columns), *rows, ""])
    print(section)
    if write:
        write_section(heading, section)
    return section


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def best_seconds(fn, *args, calls: int = 1, repeats: int = 2) -> float:
    """Best wall seconds per call of the jitted `fn(*args)` over `repeats` runs of `calls`
    calls each, after one compiling call."""
    import jax
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / calls)
    return best
