"""`icrl-jax pretrain-vq`, and the first stage of `train` when the n-gram layers match VQ codes
(`model.ngram_match="vq"`, n-gram paper sec. 2.3): a VQ-VAE (`models/encoders.py`) pretrained to
reconstruct the frames of the run's pixel store, whose 4x4 codes per frame are the n-gram ids.

Training is the one trainer (`train.train`: resumable orbax checkpoints, progress, NaN stop) on
frames drawn uniformly from the store (`FramesLoader`), set by the config's `vq` section
(`config.default_vq_config`: codebook size, code size, width, pooling; updates, batch, learning
rate). The VQ directory, `model.vq_checkpoint` (default `<pixel store>/vq`: every run on the same
data shares it, and regenerating the store removes it with the frames it was trained on), gets:

  config.json, model.safetensors  the `VQVAE` fields and parameters (`encoders.save_vq`): what
                                  the n-gram id function loads (`encoders.vq_ids_from_config`)
  vq.json                         reconstruction MSE (trained and untrained) and code usage on
                                  `vq.eval_frames` frames of the store: perplexity, codes used,
                                  distinct 4x4 grids (= distinct n-gram ids), frames whose grid
                                  another frame shares (= frames that can match)
  checkpoints/, metrics.jsonl, tensorboard/   the training run (resume, curves)

A directory that holds a finished VQ-VAE of the same architecture (vq.json at `vq.num_steps`, or
no training run at all: one pretrained elsewhere) is used as it is; one of another architecture
is an error, never overwritten.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from icrl_jax.core.files import write_json
from icrl_jax.core.config import default_train_config
from icrl_jax.data.builders import dataset_path
from icrl_jax.data.pixel_store import FramesLoader, PixelStore
from icrl_jax.data.train_data import TrainData
from icrl_jax.core.distributed import is_main_process
from icrl_jax.core.errors import UserError
from icrl_jax.models.encoders import (VQVAE, code_usage, codebook_from_data, read_vq_fields,
                                      save_vq, vq_fields, vq_loss)
from icrl_jax.pipeline import train as trainer

SUMMARY = "vq.json"


def needs_vq(config) -> bool:
    """Whether the config's model has n-gram layers that match VQ codes."""
    model = config.model
    # The model of another kind of config (a Decision Transformer's, a language model's) has no
    # n-gram fields.
    return "ngram_positions" in model and bool(model.ngram_positions) and model.ngram_match == "vq"


def resolve_vq_checkpoint(config, env) -> None:
    """Check a VQ n-gram config against its env and fill `model.vq_checkpoint` (default: `vq/`
    in the run's dataset directory). No-op for other configs."""
    if not needs_vq(config):
        return
    if not env.pixels:
        raise UserError(f"model.ngram_match='vq' matches the VQ codes of pixel observations; "
                        f"env {config.env.name!r} has none (use 'transition' or 'observation')")
    if not config.model.vq_checkpoint:
        if "vq" not in config:
            raise UserError("model.ngram_match='vq' needs a `vq` section (to pretrain the VQ-VAE) "
                            "or model.vq_checkpoint=DIR of a pretrained one")
        config.model.vq_checkpoint = os.path.join(dataset_path(config, env), "vq")


def vq_model(config, env) -> VQVAE:
    """The `VQVAE` of `config.vq` for the env's frames."""
    h, w, c = env.observation_shape
    if h != w:
        raise UserError(f"the VQ-VAE takes square frames; {config.env.name} has {h}x{w}")
    vq = config.vq
    model = VQVAE(image_size=int(h), grid=int(vq.grid), num_codes=int(vq.num_codes),
                  code_dim=int(vq.code_dim), channels=int(vq.channels), image_channels=int(c),
                  pool=int(vq.pool))
    try:
        model.num_downsamples  # noqa: B018 (validates the sizes)
    except ValueError as e:
        raise UserError(f"vq section: {e}") from None
    return model


class VQPretraining:
    """What the trainer needs of a model: `init` (the codebook drawn from the encoder outputs
    of the example frames, `codebook_from_data`), and `loss` on uint8 frames `(B, H, W, C)`
    with its parts and the batch's code usage as metrics."""

    trainable = None  # every parameter trains

    def __init__(self, model: VQVAE, beta: float):
        self.model, self.beta = model, float(beta)

    def init(self, key, example):
        init_key, codebook_key = jax.random.split(key)
        params = self.model.init({"params": init_key}, example[:1])["params"]
        return codebook_from_data(self.model, params, example, codebook_key)

    def loss(self, params, batch, key=None):
        del key
        out = self.model.apply({"params": params}, batch)
        total, parts = vq_loss(out, self.beta)
        return total, dict(parts, loss=total, **code_usage(out["codes"], self.model.num_codes))


def vq_train_config(config) -> ml_collections.ConfigDict:
    """The trainer's config for the `vq` section (no weight decay: it would shrink the
    codebook towards the origin)."""
    vq = config.vq
    train = default_train_config()
    train.update(dict(num_steps=int(vq.num_steps), batch_size=int(vq.batch_size), seq_len=1,
                      learning_rate=float(vq.learning_rate), warmup_steps=int(vq.warmup_steps),
                      steps_per_call=int(vq.steps_per_call), log_every=int(vq.log_every),
                      checkpoint_every=int(vq.checkpoint_every), weight_decay=0.0,
                      compute_dtype=config.train.compute_dtype,
                      prefetch=int(config.train.prefetch)))
    return train


def code_statistics(model: VQVAE, params, frames: np.ndarray, chunk: int = 256) -> dict[str, Any]:
    """Reconstruction MSE and code usage of `frames` uint8 `(N, H, W, C)` (the first
    N - N % chunk of them, so one program runs every chunk)."""
    chunk = min(chunk, len(frames))
    frames = frames[: len(frames) - len(frames) % chunk]

    @jax.jit
    def run(x):
        out = model.apply({"params": params}, x)
        return jnp.mean((out["recon"] - out["target"]) ** 2, axis=(1, 2, 3)), out["codes"]

    errors, codes = zip(*(jax.device_get(run(frames[i:i + chunk]))
                          for i in range(0, len(frames), chunk)))
    codes = np.concatenate(codes)
    _, inverse, counts = np.unique(codes.reshape(len(codes), -1), axis=0, return_inverse=True,
                                   return_counts=True)
    usage = jax.device_get(code_usage(jnp.asarray(codes), model.num_codes))
    return dict(frames=int(len(codes)), recon_mse=float(np.concatenate(errors).mean()),
                perplexity=float(usage["perplexity"]), codes_used=int(usage["codes_used"]),
                distinct_grids=int(len(counts)),
                frames_sharing_grid=float((counts[inverse.reshape(-1)] > 1).mean()))


def read_summary(path: str) -> dict[str, Any] | None:
    summary = os.path.join(path, SUMMARY)
    if not os.path.isfile(summary):
        return None
    with open(summary) as f:
        return json.load(f)


def _finished(path: str, model: VQVAE, num_steps: int) -> bool:
    """Whether `path` holds a usable VQ-VAE of `model`'s architecture (an error if it holds
    one of another)."""
    fields = read_vq_fields(path)
    if fields is None:
        return False
    if fields != vq_fields(model):
        diff = ", ".join(f"{k}: {fields.get(k)} (there) vs {v} (config)"
                         for k, v in vq_fields(model).items() if fields.get(k) != v)
        raise UserError(f"{path} holds a VQ-VAE of another architecture ({diff}); pass "
                        "--config.model.vq_checkpoint=NEW_DIR or remove it")
    summary = read_summary(path)
    if summary is None:  # pretrained elsewhere: no training run of ours to continue
        return not os.path.isdir(os.path.join(path, "checkpoints"))
    return summary.get("steps") == num_steps


def pretrain_vq(config, env, store, stop_at: int | None = None) -> dict[str, Any] | None:
    """Pretrain (resuming) the `vq` section's VQ-VAE on `store`'s frames into
    `model.vq_checkpoint` (or `<dataset>/vq`), unless a finished one is there; returns vq.json's
    content (None when `stop_at` paused the run before `vq.num_steps`)."""

    if "vq" not in config:
        raise UserError("this config has no `vq` section (the VQ-VAE to pretrain); the Miniworld "
                        "configs have one (experiments/miniworld/)")
    if not isinstance(store, PixelStore):
        raise UserError(f"the VQ-VAE pretrains on the frames of a pixel store (learning histories "
                        f"of a host simulator); {config.env.name}'s dataset is a "
                        f"{type(store).__name__}")
    path = config.model.vq_checkpoint or os.path.join(dataset_path(config, env), "vq")
    model = vq_model(config, env)
    vq = config.vq
    if _finished(path, model, int(vq.num_steps)):
        summary = read_summary(path) or {}
        print(f"using the pretrained VQ-VAE in {path}")
        return summary
    train_config = vq_train_config(config)
    if train_config.batch_size > store.num_steps:
        raise UserError(f"vq.batch_size={train_config.batch_size} is larger than the store's "
                        f"{store.num_steps} frames")

    def loader_fn(start_step: int, shard=(0, 1)) -> FramesLoader:
        return FramesLoader(store, train_config.batch_size // shard[1],
                            train_config.steps_per_call, start_step, seed=int(config.seed),
                            prefetch=train_config.prefetch, shard=shard)

    # The example batch also seeds the codebook (`VQPretraining.init`).
    example = store.sample(np.random.default_rng(int(config.seed)), train_config.batch_size,
                           1)["obs"][:, 0]
    method = VQPretraining(model, vq.beta)
    signature = dict(method="vq_vae", env=config.env.name, vq=vq_fields(model),
                     beta=float(vq.beta))
    start = time.perf_counter()
    state = trainer.train(method, TrainData(example, loader_fn=loader_fn), train_config, path,
                    signature, seed=int(config.seed), show_progress=bool(config.run.progress),
                    stop_at=stop_at, log=config.log)
    seconds = time.perf_counter() - start
    if int(state.step) < int(vq.num_steps):
        return None
    params = jax.tree.map(jnp.asarray, state.params)
    frames = store.sample(np.random.default_rng(int(config.seed) + 1),
                          min(int(vq.eval_frames), store.num_steps), 1)["obs"][:, 0]
    untrained = method.init(jax.random.key(int(config.seed)), jnp.asarray(example))
    stats = code_statistics(model, params, frames)
    summary = dict(architecture=vq_fields(model), beta=float(vq.beta), steps=int(state.step),
                   batch_size=train_config.batch_size, learning_rate=train_config.learning_rate,
                   store_frames=int(store.num_steps), train_seconds=round(seconds, 1),
                   recon_mse_untrained=code_statistics(model, untrained, frames)["recon_mse"],
                   num_codes=model.num_codes, **stats)
    if is_main_process():
        save_vq(path, model, params)
        write_json(os.path.join(path, SUMMARY), summary, indent=1)
    if jax.process_count() > 1:  # the others read the files only once they exist
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices("icrl_jax: vq pretrained")
    print(f"VQ-VAE: reconstruction MSE {summary['recon_mse']:.4f} (untrained "
          f"{summary['recon_mse_untrained']:.4f}), perplexity {summary['perplexity']:.1f} of "
          f"{model.num_codes} codes ({summary['codes_used']} used), {summary['distinct_grids']} "
          f"distinct {model.grid}x{model.grid} grids in {summary['frames']} frames -> {path}")
    return summary
