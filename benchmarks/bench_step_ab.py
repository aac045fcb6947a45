"""The whole training step with and without one change, in one process.

    python -m benchmarks step_ab --reference REFERENCE [--rows small,main_job] [--rounds 12]

REFERENCE: one of `REFERENCES` (`--help` lists them).

`python -m benchmarks train --old` runs each checkout in its own processes; on shared cores a
process's throughput moves by up to 25% between repeats of the same code, more than most changes
to the step. Here one process compiles the step of a `train` suite row twice, once traced with
a function of this checkout replaced by a reference implementation (`REFERENCES`, the code the
change replaced), and calls the two in turn for `--rounds` rounds (`harness.interleave`): the
same load hits both, and the median of the round-by-round ratios is what to read. Nothing is
written to RESULTS.md; quote the printed table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from benchmarks import bench_train as B
from benchmarks import harness
from benchmarks.bench_sampling import row_then_window


def _einsum_contract_queries(a, b):
    """`sum_t a[..., t, s] b[..., t, d]` written directly (before 085bdf5)."""
    return jnp.einsum("...ts,...td->...sd", a, b)


def _lapack_orthonormal_columns(matrix):
    """Householder QR through LAPACK with R's diagonal signs folded in (before the
    Gram-Schmidt `orthonormal_columns`)."""
    q, r = jnp.linalg.qr(matrix)
    return q * jnp.sign(jnp.diagonal(r))[None, :]


def _bits_keep_mask(key, keep, shape):
    """Dropout masks from the 16-bit halves of `jax.random.bits` words (before the unrolled
    Threefry of `icrl_jax.models.dropout.keep_mask`; residual dropout's masks: attention dropout
    draws its own, `AttentionDropout`)."""
    from icrl_jax.models.dropout import LEVELS
    last = shape[-1]
    words = jax.random.bits(key, shape[:-1] + ((last + 1) // 2,), jnp.uint32)
    threshold = jnp.round(jnp.clip(jnp.asarray(keep, jnp.float32), 0.0, 1.0) * LEVELS
                          ).astype(jnp.uint32)
    mask = jnp.concatenate([(words & (LEVELS - 1)) < threshold, (words >> 16) < threshold],
                           axis=-1)[..., :last]
    return mask, threshold.astype(jnp.float32) / LEVELS


class _AtCommit:
    """An attribute of a module as it was at a commit (`git show`), loaded when first used."""

    def __init__(self, commit: str, path: str, attribute: str):
        self.commit, self.path, self.attribute = commit, path, attribute

    def load(self):
        source = subprocess.run(["git", "-C", harness.ROOT, "show", f"{self.commit}:{self.path}"],
                                check=True, capture_output=True, text=True).stdout
        module = types.ModuleType(f"at_{self.commit}")
        sys.modules[module.__name__] = module  # flax's dataclasses look their module up
        exec(compile(source, f"{self.commit}:{self.path}", "exec"), module.__dict__)
        return getattr(module, self.attribute)


def _one_device_mesh(split=None):
    """The mesh of one CPU device (JAX's default count, before `icrl_jax.core.cpu_devices`)."""
    del split
    return Mesh(np.array(jax.devices()[:1]), ("data",))


#: name -> (module or comma-separated modules, attribute, reference implementation)
REFERENCES = {
    "attention_backward_einsum": ("icrl_jax.models.attention", "_contract_queries",
                                  _einsum_contract_queries),
    "dropout_bits_halves": ("icrl_jax.models.dropout", "keep_mask", _bits_keep_mask),
    # Residual dropout's masks laid out along their own last axis (before the `(shape[0], rest)`
    # rows).
    "dropout_mask_last_axis": ("icrl_jax.models.dropout", "keep_mask",
                               _AtCommit("6426ffa", "icrl_jax/models/dropout.py", "keep_mask")),
    "embeddings_lapack_qr": ("icrl_jax.papers.headless_ad.method", "orthonormal_columns",
                             _lapack_orthonormal_columns),
    "sample_row_then_window": ("icrl_jax.data.windows", "window_at", row_then_window),
    # The step tokens before the mixing map was folded into the embeddings (one (B, T, 3D) x
    # (3D, D) product a step).
    "tokens_concat_mix": ("icrl_jax.methods.ad,icrl_jax.papers.headless_ad.method", "ADStepTokens",
                          _AtCommit("73148c5", "icrl_jax/models/tokens.py", "ADStepTokens")),
    # Attention dropout's keep bits four to a Threefry hash, the halves of its two words
    # interleaved along the keys (before one hash per (row, column)).
    "attention_dropout_four_per_hash": ("icrl_jax.models.attention", "AttentionDropout",
                                        _AtCommit("21a397a", "icrl_jax/models/attention_masks.py",
                                                  "AttentionDropout")),
    # Dense layers through `jax.lax.dot_general`, XLA choosing the kernel gradient's transpose
    # (before `matmul.dense_dot_general`).
    "dense_plain_dot_general": ("icrl_jax.models.transformer,icrl_jax.models.attention",
                                "dense_dot_general", jax.lax.dot_general),
    # The step on one device of this process's one-per-core CPU devices: both share the
    # process's thread pool, so this is the one-device training a plain JAX process runs.
    "one_device": ("icrl_jax.pipeline.train", "data_mesh", _one_device_mesh),
}


@contextlib.contextmanager
def _replaced(module_names: str, attribute: str, value):
    """`attribute` of each of the comma-separated modules replaced by `value`."""
    modules = [importlib.import_module(name) for name in module_names.split(",")]
    originals = [getattr(module, attribute) for module in modules]
    if isinstance(value, _AtCommit):
        value = value.load()
    for module in modules:
        setattr(module, attribute, value)
    try:
        yield
    finally:
        for module, original in zip(modules, originals):
            setattr(module, attribute, original)


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks step_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--reference", choices=tuple(REFERENCES), required=True)
    parser.add_argument("--rows", default="small,main_job",
                        help=f"comma-separated, of {', '.join(B.ROWS_BEFORE_AFTER)}")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=0, help="calls a round (default: 3, 1 for Headless-AD)")
    parser.add_argument("--device", choices=("cpu", "gpu", "tpu"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    rows = args.rows.split(",")
    unknown = [row for row in rows if row not in B.ROWS_BEFORE_AFTER]
    if unknown:
        parser.error(f"unknown rows {unknown}; available: {', '.join(B.ROWS_BEFORE_AFTER)}")
    B.prepare_process(args.device)
    B.AB_REFERENCE = lambda: _replaced(*REFERENCES[args.reference])
    B.AB_ROUNDS = args.rounds
    lines = []
    for row in rows:
        B.ROWS_BEFORE_AFTER[row][1](args.calls or (1 if row.startswith("headless") else 3))
        seconds, ratios = B.LAST_AB.seconds, B.LAST_AB.ratios
        lines.append([row, f"{seconds['reference'] * 1e3:.1f}", f"{seconds['this checkout'] * 1e3:.1f}",
                      f"{ratios['this checkout']:.3f}x"])
        print(lines[-1], flush=True)
    print(f"\n{args.reference}, {args.rounds} rounds. {harness.hardware_line()}\n")
    print(harness.markdown_table(["row", "reference (ms a call)", "this checkout (ms a call)",
                                  "speed-up (median of round ratios)"], lines))


if __name__ == "__main__":
    sys.exit(main())
