"""Shared by the benchmarks: each owns one `## ` section of benchmarks/RESULTS.md."""

from __future__ import annotations

import os
import platform
import re
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def write_section(heading: str, text: str, path: str = RESULTS, top: bool = False) -> None:
    """Replace the section that starts with `heading` (a `## ` line) by `text`, which starts
    with that heading, or add it (at the end; `top`: before the first section); every other
    section is left as it is."""
    old = open(path).read() if os.path.exists(path) else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = text.rstrip("\n") + "\n"
    first = re.search(r"^## ", old, re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text + "\n", old, count=1)
    elif top and first:
        new = old[:first.start()] + text + "\n" + old[first.start():]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(new.rstrip("\n") + "\n")


def table_section(heading: str, prose: str, columns: list[str], rows: list[str],
                  write: bool, top: bool = False) -> str:
    """A `## ` section: `prose` (what was measured, how, on what), then a Markdown table with
    `columns` and the already formatted `rows`; printed, and written to RESULTS.md if `write`."""
    section = "\n".join([heading, "", prose, "", "| " + " | ".join(columns) + " |",
                         "|" + " --- |" * len(columns), *rows, ""])
    print(section)
    if write:
        write_section(heading, section, top=top)
    return section


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo with its family and model numbers and whether it
    has AVX-512 (e.g. "AMD EPYC (family 25, model 17, AVX-512)"), else what `platform` knows.
    Cloud hosts often report a bare "AMD EPYC"; the numbers tell generations apart (family 25
    model 17 is Zen 4, whose 512-bit FMAs run as two halves; family 26 is Zen 5), and the
    matmul peak, hence every MFU in RESULTS.md, differed by about 2x between the hosts these
    benchmarks ran on."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine() or "unknown"
    extra = [f"{label} {fields[key]}" for key, label in (("cpu family", "family"), ("model", "model"))
             if key in fields]
    if "avx512f" in fields.get("flags", "").split():
        extra.append("AVX-512")
    return fields["model name"] + (f" ({', '.join(extra)})" if extra else "")


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
