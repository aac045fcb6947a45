"""Host memory: back XLA's large CPU buffers with transparent huge pages, and give back what the
compiler freed.

XLA's CPU runtime mallocs each call's output and temporary buffers and frees them afterwards.
glibc serves a large allocation from a fresh anonymous mapping and unmaps it on free, so every
call of a jitted step touches new memory, and the kernel faults and zeroes each 4 KiB page of
every large buffer again: a (4, 64, 320, 320) float32 attention-score tensor (105 MB) costs 25.6k
page faults per call, and the matmul that writes it runs slower than with huge pages.

With glibc's `glibc.malloc.hugetlb=1` tunable (glibc >= 2.35), malloc asks for transparent huge
pages (`madvise(MADV_HUGEPAGE)`) on what it maps, so such a buffer costs a fault per 2 MiB instead:
about 380 faults for that tensor. Large models' training steps gain most, the small one nothing
(`benchmarks/RESULTS.md`). (Reusing freed memory instead, with one arena and no mmap, spared the
faults as well but slowed the small model.)

Compiling a large program leaves hundreds of MB that XLA has freed in glibc's heaps, which glibc
keeps; the program's own buffers, allocated when it first runs, then come on top of them in the
process's peak. `release_freed_memory` returns such free memory to the system (glibc's
`malloc_trim`): `train` calls it between compiling its step and running it (0.3-0.4 GB of the
Headless-AD paper-scale step's peak, `benchmarks/RESULTS.md`).

glibc reads its tunables only when a process starts, so `icrl-jax` re-executes itself once
with the tunable added (`reexec_with_huge_pages`) before anything else runs. Set
`ICRL_JAX_HOST_MALLOC=default` to keep glibc's defaults. Elsewhere than glibc on Linux (macOS,
musl) nothing changes; where the kernel has transparent huge pages off, the hint does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import Mapping

OPT_OUT = "ICRL_JAX_HOST_MALLOC"
TUNABLE = "glibc.malloc.hugetlb=1"


def _is_glibc() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL(ctypes.util.find_library("c")).gnu_get_libc_version  # glibc only
    except (OSError, TypeError, AttributeError):
        return False
    return True


def huge_page_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """`environ` with `TUNABLE` added to GLIBC_TUNABLES; None where nothing is to change (it is
    there already, the user opted out, or the C library is not glibc)."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    if (environ.get(OPT_OUT) == "default" or "glibc.malloc.hugetlb=" in tunables
            or not _is_glibc()):
        return None
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{TUNABLE}" if tunables else TUNABLE}


def reexec_with_huge_pages() -> None:
    """Replace this process by the same command line with `TUNABLE` set (module docstring);
    returns only where nothing is to change. Call it before any other work: state is lost."""
    environment = huge_page_environment(os.environ)
    if environment is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, environment)


def release_freed_memory() -> bool:
    """Return the memory glibc holds free (in its heaps, not used by any allocation) to the
    system: `malloc_trim(0)`. Returns whether it ran (False elsewhere than glibc)."""
    if not _is_glibc():
        return False
    ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    return True
