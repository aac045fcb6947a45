"""icrl_jax/core/host_memory.py: with glibc's huge-page tunable, a jitted call's large output costs a
page fault per huge page instead of one per 4 KiB page; `icrl-jax` re-executes itself once to
set it, and the opt-out keeps glibc's defaults; memory freed inside glibc's heap goes back to the
system when asked."""

import json
import os
import subprocess
import sys

import pytest

from icrl_jax.core.host_memory import OPT_OUT, TUNABLE, _is_glibc, huge_page_environment


def _transparent_huge_pages() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


# Calls of a jitted op whose 64 MiB output is freed before the next call; after warm-up,
# prints minor page faults per call and the output's count of 4 KiB pages.
_PROBE = """
import json, resource
import jax, jax.numpy as jnp
x = jnp.ones((4096, 1024), jnp.float32)
f = jax.jit(lambda x: jnp.concatenate([x * 2.0] * 4))  # (16384, 1024) float32: 64 MiB
for _ in range(5):
    f(x).block_until_ready()
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
before = faults()
for _ in range(10):
    f(x).block_until_ready()
print(json.dumps(dict(faults_per_call=(faults() - before) / 10, pages=16384 * 1024 * 4 // 4096)))
"""


def _clean_environment() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT)}


def _probe(environment: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE], env=environment, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not (_is_glibc() and _transparent_huge_pages()),
                    reason="glibc's malloc and transparent huge pages only")
def test_huge_pages_spare_the_page_faults_of_fresh_buffers():
    default = _probe(_clean_environment())
    huge = _probe(huge_page_environment(_clean_environment()))
    # glibc's defaults: each call maps the 64 MiB output afresh and faults in every page of it.
    assert default["faults_per_call"] > 0.9 * default["pages"]
    assert huge["faults_per_call"] < 0.1 * huge["pages"]


@pytest.mark.skipif(not _is_glibc(), reason="glibc only")
def test_environment_adds_the_tunable_once_keeps_the_users_and_respects_the_opt_out():
    clean = _clean_environment()
    assert huge_page_environment(clean)["GLIBC_TUNABLES"] == TUNABLE
    mine = {**clean, "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    assert huge_page_environment(mine)["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}"
    assert huge_page_environment({**clean, "GLIBC_TUNABLES": TUNABLE}) is None  # no second exec
    assert huge_page_environment({**clean, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) is None
    assert huge_page_environment({**clean, OPT_OUT: "default"}) is None


@pytest.mark.skipif(not _is_glibc(), reason="glibc only")
def test_reexec_runs_the_same_command_once_with_the_tunable():
    script = ("import os, sys\n"
              "print('start', os.environ.get('GLIBC_TUNABLES'), sys.argv[1:], flush=True)\n"
              "from icrl_jax.core.host_memory import reexec_with_huge_pages\n"
              "reexec_with_huge_pages()\n"
              "print('after', os.environ.get('GLIBC_TUNABLES'))\n")
    out = subprocess.run([sys.executable, "-c", script, "--flag=1"], env=_clean_environment(),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["start None ['--flag=1']", f"start {TUNABLE} ['--flag=1']", f"after {TUNABLE}"]


# ~200 MB of malloc'd blocks freed below a block still in use (so free() cannot shrink the heap
# past it); prints the resident set before and after `release_freed_memory`, in MiB.
_FREED = """
import json
from icrl_jax.core.host_memory import release_freed_memory
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
blocks = [bytes(4000) + bytes([i % 256]) for i in range(50_000)]
keep = bytes(4000) + b"x"
del blocks
freed = rss()
ran = release_freed_memory()
print(json.dumps(dict(freed=freed, released=rss(), ran=ran)))
"""


@pytest.mark.skipif(not _is_glibc(), reason="glibc only")
def test_release_gives_memory_freed_inside_the_heap_back_to_the_system():
    out = subprocess.run([sys.executable, "-c", _FREED], env=_clean_environment(),
                         capture_output=True, text=True, check=True)
    sizes = json.loads(out.stdout.strip().splitlines()[-1])
    assert sizes["ran"]
    assert sizes["freed"] - sizes["released"] > 150  # MiB of the ~200 freed
