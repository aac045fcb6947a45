"""One persistent XLA compilation cache for a test run.

Many tests start `icrl-jax` in subprocesses (CLI, resume, distributed) and several files build the
same tiny models, so the same programs would compile again in every process. The cache is a fresh
temporary folder per run, shared by the xdist workers and every subprocess through JAX's own
environment variables (read when jax is imported, so this runs before any test module imports it),
and removed at the end. A damaged or half-written entry only costs a recompile: JAX warns and
compiles again. Programs with host callbacks are never cached by JAX.

The tests compile far more than they run (tiny models, a few steps each), so XLA's CPU backend
compiles them with LLVM's optimisation level 0 and without its newer fusion emitters, both of
which buy faster code for a longer compile (`_TEST_XLA_FLAGS`, added to `XLA_FLAGS` for the
workers and subprocesses; `tests/xla_flags.py` keeps them where a test sets a device count; the
suite's times with and without are in `benchmarks/RESULTS.md`). Benchmarks and users' runs keep
XLA's defaults.

Every compiled program JAX keeps maps about six memory regions, and a worker runs hundreds of test
files in one process: past the kernel's limit of 65,530 mappings, the next compile crashed inside
XLA. JAX's caches are cleared after each test file (`_release_compiled_programs`).

Hypothesis draws the same examples on every run (`derandomize`), so a CI run fails only on a
change; `HYPOTHESIS_PROFILE=explore` draws fresh ones, to search for new failures.
"""

import gc
import os
import shutil
import sys
import tempfile

import pytest
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
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    config._icrl_jax_cache_dir = os.environ[_DIR_VARIABLE]


def pytest_unconfigure(config):
    cache_dir = getattr(config, "_icrl_jax_cache_dir", None)
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test file, drop the programs JAX compiled for it (module docstring)."""
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
        gc.collect()
