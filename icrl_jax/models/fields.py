"""Config fields of the shared model features beside the transformer's own: the n-gram
induction-head layers (`models/ngram.py`) and activation rematerialisation, declared here once
with what they take.

Pure ml_collections (no model code), so that experiment files, which import these, load fast.
"""

from __future__ import annotations

import os
from typing import MutableMapping

from icrl_jax.core import validation


def ngram_model_fields() -> dict:
    """The n-gram layers' fields of `config.model` (none by default)."""
    return dict(
        # Inserted after these many blocks each (0 = before the first); empty = none. Each
        # position gets the 1..ngram_max-gram layers.
        ngram_positions=(),
        ngram_max=1,
        ngram_shuffle=False,  # ablation: matches moved to random causal keys
        ngram_latest=False,  # read only the most recent match (not all matches uniformly)
        # Which step ids they match: transition | observation | observation_return (the cell
        # and the episode's reward so far, e.g. Key-to-Door's key flag) | vq | a registered id fn
        ngram_match="transition",
        # ngram_match="vq": directory of the pretrained VQ-VAE (config.json + model.safetensors);
        # "" = <dataset>/vq, pretrained there first by `train` when the config has a `vq` section.
        vq_checkpoint="",
    )


def memory_model_fields() -> dict:
    """Fields of `config.model` that trade compute for training memory."""
    return dict(
        # Recompute each transformer block's activations in the backward pass rather than keep
        # them (`Transformer.remat`): long contexts train in less memory, same gradients (on a
        # CPU with REMAT_CPU_XLA_FLAG in XLA_FLAGS, which the CLI sets: use_memory_scheduler).
        remat=False,
        # On a CPU, XLA's memory-minimising scheduler (REMAT_CPU_XLA_FLAG, set by the CLI) without
        # remat: a lower peak for a slower step, the same values (the Headless-AD step at the
        # authors' layout, batch 32: 0.70x the peak, 1.15x the time; benchmarks/RESULTS.md).
        memory_scheduler=False,
    )


#: The `config.model` fields that ask for `REMAT_CPU_XLA_FLAG` (any of them true).
MEMORY_SCHEDULER_FIELDS = ("remat", "memory_scheduler")


#: On a CPU, `model.remat` saves memory only under this XLA flag, in `XLA_FLAGS` before JAX
#: starts: XLA's default CPU scheduler favours concurrency and runs each block's recomputation
#: as soon as its input exists, in the forward pass, keeping what remat meant to drop; the
#: memory-minimising scheduler leaves it for the backward pass (tests/test_remat.py).
REMAT_CPU_XLA_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def add_remat_scheduler_flag(environ: MutableMapping[str, str]) -> None:
    """Add `REMAT_CPU_XLA_FLAG` to `environ["XLA_FLAGS"]` (read when JAX starts), unless a
    scheduler is chosen there already."""
    flags = environ.get("XLA_FLAGS", "")
    if REMAT_CPU_XLA_FLAG.split("=")[0] not in flags:
        environ["XLA_FLAGS"] = f"{flags} {REMAT_CPU_XLA_FLAG}".strip()


def use_memory_scheduler(config, environ: MutableMapping[str, str] = os.environ) -> bool:
    """`add_remat_scheduler_flag` when `config` sets `model.remat` or `model.memory_scheduler`
    (`MEMORY_SCHEDULER_FIELDS`; configs without them leave XLA's default); call it before JAX
    starts. Returns whether the config asks for it."""
    model = config["model"] if "model" in config else {}
    if not any(field in model and model[field] for field in MEMORY_SCHEDULER_FIELDS):
        return False
    add_remat_scheduler_flag(environ)
    return True


#: What the memory fields take (core/validation.py).
MEMORY_CONSTRAINTS = validation.declare("memory", tuple(
    validation.boolean(f"model.{field}") for field in MEMORY_SCHEDULER_FIELDS))


#: What the n-gram layers' fields take (core/validation.py).
NGRAM_CONSTRAINTS = validation.declare("ngram", (
    validation.int_tuple("model.ngram_positions", "'(1,)'", minimum=0),
    validation.positive_int("model.ngram_max", 1), validation.boolean("model.ngram_shuffle"),
    validation.boolean("model.ngram_latest"), validation.string("model.ngram_match", "transition"),
    validation.string("model.vq_checkpoint"),
    *(validation.no_effect(key, default, lambda positions: not positions,
                  "without n-gram layers (model.ngram_positions=())",
                  needs=("model.ngram_positions",))
      for key, default in (("model.ngram_max", 1), ("model.ngram_shuffle", False),
                           ("model.ngram_latest", False), ("model.ngram_match", "transition"))),
    validation.relation(("model.ngram_positions", "model.num_layers"),
               "each of model.ngram_positions must be at most model.num_layers (a layer goes "
               "after that many blocks)",
               lambda positions, layers: all(p <= layers for p in positions),
               lambda positions, layers: f"model.ngram_positions='({layers},)'"),
))
