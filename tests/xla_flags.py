"""`XLA_FLAGS` for the tests' subprocesses: this test run's own flags (`conftest.py`), with the
CPU device count replaced by the one a test asks for (or dropped, to let `icrl_jax.core.cpu_devices`
choose)."""

from __future__ import annotations

from typing import Mapping

_COUNT = "--xla_force_host_platform_device_count"


def xla_flags(environ: Mapping[str, str], devices: int | None = None) -> str:
    flags = [f for f in environ.get("XLA_FLAGS", "").split() if not f.startswith(_COUNT)]
    if devices is not None:
        flags.append(f"{_COUNT}={devices}")
    return " ".join(flags)
