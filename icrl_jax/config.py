"""Experiment configuration: one ml_collections ConfigDict per run, with named presets.

An experiment file defines `get_config(preset)`; it builds `base_config()`, sets the paper-scale
defaults and applies a preset (a dict of dotted overrides) with `apply_preset`. The ConfigDict is
locked, so a misspelt key on the command line (`--config.train.nun_steps=1`) fails with an error
that names the key instead of silently adding it.
"""

from __future__ import annotations

from typing import Any, Mapping

import ml_collections

from icrl_jax.models.transformer import default_transformer_config
from icrl_jax.train import default_train_config


def base_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.experiment = ""
    config.preset = ""
    config.seed = 0
    config.workdir = ""  # default: runs/<experiment>_<preset>
    config.method = "ad"

    config.env = ml_collections.ConfigDict(dict(name="", kwargs=ml_collections.ConfigDict()))
    config.data = ml_collections.ConfigDict(dict(
        source="",
        source_kwargs=ml_collections.ConfigDict(),
        num_train_tasks=60,
        num_test_tasks=20,
        histories_per_task=1,
        num_steps=1000,  # steps per learning history
        split_seed=0,
        path="",  # dataset file; default: <workdir>/histories.npz
        subsample=1,  # train on every k-th episode of each history (n-gram paper's `subsample`)
    ))
    config.model = default_transformer_config()
    config.model.label_smoothing = 0.0
    # Grid worlds: add the cell's (row, column) features to its id embedding.
    config.model.grid_observations = False
    # N-gram layers (enabled by model.ngram_positions): which step ids they match.
    config.model.ngram_match = "transition"  # transition | observation | a registered id fn
    config.train = default_train_config()
    config.eval = ml_collections.ConfigDict(dict(
        num_steps=500,  # in-context steps per evaluation rollout
        num_envs_per_task=1,  # independent rollouts on each held-out task
        greedy=False,  # argmax instead of sampling
        # Sampling temperature: softmax(logits / temperature); < 1 sharpens the trained policy.
        temperature=1.0,
        seed=1,
        tasks="test",  # test | train: which split to evaluate on
        chunk_size=0,  # environments per jitted rollout call (0 = all at once)
        # Variant scores average the last `final_window` steps (bandits: expected regret) or
        # episodes (episodic tasks: return); 1 = the Headless-AD paper's scores.
        final_window=1,
    ))
    config.run = ml_collections.ConfigDict(dict(
        generate=True,  # `train` also generates the dataset when it is missing
        evaluate=True,  # `train` evaluates when training ends
        progress=True,
    ))
    return config


def cpu_preset(*, train_steps: int, batch_size: int, seq_len: int, learning_rate: float = 1e-3,
               d_model: int = 64, num_layers: int = 2, num_heads: int = 4,
               dropout: float = 0.0, **extra: Any) -> dict[str, Any]:
    """Dotted overrides shared by the `quick` presets: a small model trained briefly on a CPU.

    `extra` adds experiment-specific dotted keys (pass them as `**{"data.num_steps": 100}`).
    """
    return {
        "model.d_model": d_model, "model.num_layers": num_layers, "model.num_heads": num_heads,
        "model.embedding_dropout": dropout, "model.residual_dropout": dropout,
        "model.attention_dropout": dropout,
        "train.num_steps": train_steps, "train.batch_size": batch_size,
        "train.seq_len": seq_len, "train.learning_rate": learning_rate,
        "train.warmup_steps": 100, "train.steps_per_call": 50, "train.log_every": 100,
        "train.checkpoint_every": 500,
        **extra,
    }


def apply_preset(config: ml_collections.ConfigDict, presets: Mapping[str, Mapping[str, Any]],
                 preset: str) -> ml_collections.ConfigDict:
    """Apply `presets[preset]` (dotted key -> value) to `config`; '' keeps the paper default."""
    if preset and preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; available presets: "
                         f"{sorted(presets) + ['(empty) = paper scale']}")
    for dotted, value in presets.get(preset, {}).items():
        set_dotted(config, dotted, value)
    config.preset = preset
    return config


def set_dotted(config: ml_collections.ConfigDict, dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested ConfigDict, refusing keys that do not exist."""
    *parents, leaf = dotted.split(".")
    node = config
    for i, part in enumerate(parents):
        if part not in node:
            raise KeyError(f"config has no key {'.'.join(parents[:i + 1])!r} (while setting {dotted!r})")
        node = node[part]
    # kwargs dicts (env.kwargs, data.source_kwargs) are free-form: their keys are the
    # constructor arguments of the named env or source, which are checked when it is built.
    free_form = bool(parents) and parents[-1].endswith("kwargs")
    if leaf not in node and not free_form:
        raise KeyError(f"config has no key {dotted!r}; keys at that level: {sorted(node.keys())}")
    node[leaf] = value


def finalize(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Fill derived defaults and lock the config against new keys."""
    if not config.workdir:
        config.workdir = f"runs/{config.experiment}_{config.preset or 'paper'}"
    if config.model.max_len < config.train.seq_len:
        config.model.max_len = config.train.seq_len
    config.lock()
    return config
