"""One persistent XLA compilation cache for a test run.

Many tests start `icrl-jax` in subprocesses (CLI, resume, distributed) and several files build the
same tiny models, so the same programs would compile again in every process. The cache is a fresh
temporary folder per run, shared by the xdist workers and every subprocess through JAX's own
environment variables (read when jax is imported, so this runs before any test module imports it),
and removed at the end. A damaged or half-written entry only costs a recompile: JAX warns and
compiles again. Programs with host callbacks are never cached by JAX.
"""

import os
import shutil
import tempfile

_DIR_VARIABLE = "JAX_COMPILATION_CACHE_DIR"


def pytest_configure(config):
    if os.environ.get(_DIR_VARIABLE) or hasattr(config, "workerinput"):
        return  # set by the user, or inherited by an xdist worker from its controller
    os.environ[_DIR_VARIABLE] = tempfile.mkdtemp(prefix="icrl_jax_test_xla_cache_")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    config._icrl_jax_cache_dir = os.environ[_DIR_VARIABLE]


def pytest_unconfigure(config):
    cache_dir = getattr(config, "_icrl_jax_cache_dir", None)
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)
