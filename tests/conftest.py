"""One persistent XLA compilation cache for a test run.

Many tests start `icrl-jax` in subprocesses (CLI, resume, distributed) and several files build the
same tiny models, so the same programs would compile again in every process. The cache is a fresh
temporary folder per run, shared by the xdist workers and every subprocess through JAX's own
environment variables (read when jax is imported, so this runs before any test module imports it),
and removed at the end. A damaged or half-written entry only costs a recompile: JAX warns and
compiles again. Programs with host callbacks are never cached by JAX. Only programs that took JAX's
default minimum (a second) to compile are written: writing every eager op's program as well
(minimum 0) crashed a worker deep into a run, in XLA's executable serialisation.

The tests compile far more than they run (tiny models, a few steps each), so XLA's CPU backend
compiles them with LLVM's optimisation level 0 and without its newer fusion emitters, both of
which buy faster code for a longer compile (`_TEST_XLA_FLAGS`, added to `XLA_FLAGS` for the
workers and subprocesses; `tests/xla_flags.py` keeps them where a test sets a device count; the
suite's times with and without are in `benchmarks/RESULTS.md`). Benchmarks and users' runs keep
XLA's defaults.

Hypothesis draws the same examples on every run (`derandomize`), so a CI run fails only on a
change; `HYPOTHESIS_PROFILE=explore` draws fresh ones, to search for new failures.
"""

import os
import shutil
import tempfile

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

_DIR_VARIABLE = "JAX_COMPILATION_CACHE_DIR"
#: flag -> value; a flag the user set already keeps the user's value.
_TEST_XLA_FLAGS = {"--xla_backend_optimization_level": "0", "--xla_cpu_use_fusion_emitters": "false"}


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return  # an xdist worker inherits its controller's environment
    flags = os.environ.get("XLA_FLAGS", "")
    for flag, value in _TEST_XLA_FLAGS.items():
        if flag not in flags:
            flags = f"{flags} {flag}={value}".strip()
    os.environ["XLA_FLAGS"] = flags
    if os.environ.get(_DIR_VARIABLE):
        return  # the user's own cache
    os.environ[_DIR_VARIABLE] = tempfile.mkdtemp(prefix="icrl_jax_test_xla_cache_")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    config._icrl_jax_cache_dir = os.environ[_DIR_VARIABLE]


def pytest_unconfigure(config):
    cache_dir = getattr(config, "_icrl_jax_cache_dir", None)
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)
