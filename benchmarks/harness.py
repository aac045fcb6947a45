"""What every benchmark shares: timing, A/B comparisons, memory, the hardware line, tables, and
the sections of benchmarks/RESULTS.md.

* `time_call`: the first call (compiling) timed apart, then `warmup` untimed calls, then the
  median over `rounds` rounds of `calls` calls each, inside an optional time budget.
* `interleave`: A/B in one process; the variants are called in turn every round, so load on
  shared cores hits them alike, and the ratio is taken round by round (`AB.ratios`).
* `run_in_tree`: the same measurement in another checkout's code (a `git worktree`), one child
  process, its JSON answer back; `compare_trees` alternates the trees.
* `host_peak_rss_mib`, `device_memory`: peak host RSS and the memory JAX reports for a device.
* `hardware_line`: the device JAX uses, the CPU model, the core count and the load average.
* `markdown_table`, `table_section`, `write_section`: one table writer, and `--write` replacing a
  benchmark's own `## ` section of RESULTS.md.

Nothing here imports JAX at module level: a suite chooses its platform before JAX starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
#: The checkout this package belongs to.
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "RESULTS.md")


# --- the platform --------------------------------------------------------------------------

def choose_device(device: str | None) -> None:
    """Make JAX use `device` ("cpu", "gpu", "tpu"; None: JAX's default). Must run before JAX
    starts; afterwards it checks that JAX already uses that platform."""
    if not device:
        return
    if "jax" in sys.modules and os.environ.get("JAX_PLATFORMS") not in (None, device):
        import jax
        if jax.default_backend() != device:
            raise SystemExit(f"--device {device}: JAX already started on {jax.default_backend()}")
    os.environ["JAX_PLATFORMS"] = device


# --- timing --------------------------------------------------------------------------------

def _block(out: Any) -> Any:
    if "jax" in sys.modules:
        import jax
        jax.block_until_ready(out)
    return out


@dataclasses.dataclass
class Timing:
    """Seconds of the first (compiling) call, and per call over the timed rounds."""

    compile_s: float
    rounds: list[float]

    @property
    def seconds(self) -> float:
        """Median seconds per call over the rounds."""
        return statistics.median(self.rounds)

    def rate(self, work: float) -> float:
        """`work` done by one call, per second (median round)."""
        return work / self.seconds


def time_call(fn: Callable, *args, calls: int = 1, rounds: int = 5, warmup: int = 0,
              budget_s: float | None = None) -> Timing:
    """Time `fn(*args)` (jitted or not; its output is waited for): the first call apart
    (`compile_s`: compiling plus one run), `warmup` untimed calls, then `rounds` rounds of `calls`
    calls. With `budget_s`, no new round starts once that many seconds have passed since the
    first call began (at least one round always runs)."""
    start = time.perf_counter()
    _block(fn(*args))
    compile_s = time.perf_counter() - start
    for _ in range(warmup):
        _block(fn(*args))
    times = []
    for _ in range(rounds):
        if times and budget_s is not None and time.perf_counter() - start > budget_s:
            break
        begin = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        _block(out)
        times.append((time.perf_counter() - begin) / calls)
    return Timing(compile_s, times)


def time_stateful(step: Callable[[Any], tuple[Any, Any]], state: Any, *, calls: int = 1,
                  rounds: int = 5, budget_s: float | None = None) -> tuple[Timing, Any]:
    """`time_call` for a step that threads a state: `step(state) -> (state, output)`; the
    output is waited for. Returns the timing and the last state."""
    holder = [state]

    def call():
        holder[0], out = step(holder[0])
        return out

    timing = time_call(call, calls=calls, rounds=rounds, budget_s=budget_s)
    return timing, holder[0]


@dataclasses.dataclass
class AB:
    """Seconds per call of each variant, every round, in the order they were called."""

    rounds: dict[str, list[float]]

    @property
    def seconds(self) -> dict[str, float]:
        return {name: statistics.median(t) for name, t in self.rounds.items()}

    @property
    def ratios(self) -> dict[str, float]:
        """Each variant's speed over the first one's: the median of the per-round ratios
        (first's seconds / its seconds; > 1: faster than the first)."""
        first = next(iter(self.rounds.values()))
        return {name: statistics.median(a / b for a, b in zip(first, t))
                for name, t in self.rounds.items()}


def interleave(variants: dict[str, Callable[[], Any]], rounds: int = 7, calls: int = 1,
               warmup: int = 1) -> AB:
    """A/B(/C...) in one process: each variant called once to compile (and `warmup` more
    times), then every round calls each variant `calls` times in turn."""
    for fn in variants.values():
        for _ in range(1 + warmup):
            _block(fn())
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            begin = time.perf_counter()
            for _ in range(calls):
                out = fn()
            _block(out)
            times[name].append((time.perf_counter() - begin) / calls)
    return AB(times)


# --- other checkouts -----------------------------------------------------------------------

def last_json_line(text: str) -> dict | None:
    """The last line of `text` that parses as a JSON object, or None."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def run_in_tree(tree: str, module: str, argv: Sequence[str], env: dict | None = None,
                timeout: float | None = None) -> dict:
    """Run `python -m <module> <argv>` (a module of this package) with the project code of the
    checkout `tree`, and return the JSON object it prints last.

    The child starts in an empty directory holding only a link to this package, with `tree`
    next on its path: this package's measurement code, that checkout's `icrl_jax`
    (`benchmarks/__init__.py` also maps its envs/ and experiments/)."""
    tree = os.path.abspath(tree)
    if not os.path.isdir(os.path.join(tree, "icrl_jax")):
        raise SystemExit(f"{tree} is not a checkout of this project (no icrl_jax/ in it)")
    with tempfile.TemporaryDirectory() as start:
        os.symlink(HERE, os.path.join(start, "benchmarks"))
        environment = dict(os.environ if env is None else env, PYTHONPATH=tree,
                           BENCHMARKS_TREE=tree)
        done = subprocess.run([sys.executable, "-m", module, *argv], cwd=start, env=environment,
                              capture_output=True, text=True, timeout=timeout)
    result = last_json_line(done.stdout)
    if done.returncode or result is None:
        raise RuntimeError(f"{module} {' '.join(argv)} in {tree} failed:\n{done.stderr[-3000:]}")
    return result


def check_tree() -> None:
    """In a child of `run_in_tree`: fail unless `icrl_jax` was imported from the tree asked
    for (an editable install elsewhere would otherwise answer in its place)."""
    tree = os.environ.get("BENCHMARKS_TREE")
    if not tree:
        return
    import icrl_jax
    import icrl_jax.envs
    for module in (icrl_jax, icrl_jax.envs):
        if not os.path.abspath(module.__file__).startswith(tree + os.sep):
            raise RuntimeError(f"measuring {tree} but imported {module.__file__}")


def compare_trees(trees: dict[str, str], module: str, argv: Sequence[str], repeats: int = 1,
                  on_result: Callable[[str, dict], None] | None = None) -> dict[str, list[dict]]:
    """`run_in_tree` in each of `trees` (label -> checkout) in turn, `repeats` times: A B A B,
    so load on shared cores hits every tree alike. Returns each label's results in order."""
    results: dict[str, list[dict]] = {label: [] for label in trees}
    for _ in range(repeats):
        for label, tree in trees.items():
            results[label].append(run_in_tree(tree, module, argv))
            if on_result:
                on_result(label, results[label][-1])
    return results


def commit_of(tree: str) -> str:
    """The short commit a checkout is at ("" outside git), for a table's prose."""
    done = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip()


# --- memory and hardware -------------------------------------------------------------------

def host_peak_rss_mib(children: bool = False) -> float:
    """Peak resident set of this process (or of its waited-for children), MiB; Linux reports
    `ru_maxrss` in KiB."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024


def device_memory(device=None) -> dict[str, float] | None:
    """MiB in use, peak in use and the limit of a JAX device (default: the first), where JAX
    reports them (GPUs, TPUs); None elsewhere (the CPU). The peak is the process's so far:
    JAX keeps no per-call peak."""
    import jax
    device = device or jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends that do not implement it raise
        return None
    if not stats:
        return None
    mib = lambda key: stats[key] / 2 ** 20 if key in stats else float("nan")  # noqa: E731
    return {"in_use_mib": mib("bytes_in_use"), "peak_mib": mib("peak_bytes_in_use"),
            "limit_mib": mib("bytes_limit")}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo with its family and model numbers and whether it
    has AVX-512 (e.g. "AMD EPYC (family 25, model 17, AVX-512)"), else what `platform` knows.
    Cloud hosts often report a bare "AMD EPYC"; the numbers tell generations apart (family 25
    model 17 is Zen 4, family 26 Zen 5), and a CPU's matmul peak, hence its MFU, differs by
    about 2x between them."""
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


def load_average() -> float:
    """The 1-minute load average (other jobs on shared cores show here)."""
    return os.getloadavg()[0]


def device_name() -> str:
    """The device JAX computes on, e.g. "gpu `NVIDIA H200` x1" (starts JAX)."""
    import jax
    device = jax.devices()[0]
    return f"{device.platform} `{device.device_kind}` x{jax.device_count()}"


def hardware_line() -> str:
    """One line for a table's prose: the device, the host CPU and cores, the load average."""
    import jax
    return (f"Device: {device_name()} (jax {jax.__version__}); host CPU {cpu_model()}, "
            f"{os.cpu_count()} cores; load average {load_average():.1f}")


# --- tables and RESULTS.md -----------------------------------------------------------------

def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any] | str]) -> str:
    """A Markdown table; a row is its cells (formatted with `str`) or an already formatted
    `| ... |` line."""
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        lines.append(row if isinstance(row, str) else "| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


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


def table_section(heading: str, prose: str, columns: Sequence[str], rows: Sequence[Sequence[Any] | str],
                  write: bool, top: bool = False, path: str = RESULTS) -> str:
    """A `## ` section: `prose` (what was measured, how, on what), then the table; printed,
    and written into RESULTS.md (`path`) if `write`."""
    section = "\n".join([heading, "", prose, "", markdown_table(columns, rows), ""])
    print(section, flush=True)
    if write:
        write_section(heading, section, path=path, top=top)
    return section


def command_line(suite: str) -> str:
    """How this run was started, as a table's prose quotes it."""
    return " ".join(["python -m benchmarks", suite, *sys.argv[2:]]) if sys.argv[0].endswith(
        "__main__.py") else " ".join(["python", "-m", f"benchmarks.{suite}", *sys.argv[1:]])
