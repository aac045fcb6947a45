"""Experiment configuration: one ml_collections ConfigDict per run, with named presets.

An experiment file defines `get_config(preset)`; it builds `base_config()`, sets the paper-scale
defaults and applies a preset (a dict of dotted overrides) with `apply_preset`. The ConfigDict is
locked, so a misspelt key on the command line (`--config.train.nun_steps=1`) fails with an error
that names the key and the nearest valid one instead of silently adding it.

This module imports no model or training code (no flax, no orbax): the defaults of the model and
train sections live here, so loading a config (the CLI, experiment files) stays cheap.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import ml_collections

from icrl_jax.core import validation
from icrl_jax.core.errors import UnknownNameError, UserError, did_you_mean


def default_transformer_config() -> ml_collections.ConfigDict:
    """Defaults of the shared transformer (`icrl_jax.models.transformer`): the `model` section."""
    return ml_collections.ConfigDict(dict(
        num_layers=2,
        d_model=64,
        num_heads=4,
        mlp_ratio=4,
        pre_norm=True,
        position="learned",  # learned | rotary | alibi | none
        max_len=256,  # longest sequence the learned position table covers
        embedding_dropout=0.0,
        residual_dropout=0.0,
        attention_dropout=0.0,
        normalize_qk=False,
        causal=True,
        # Sliding-window attention: each token sees itself and the W - 1 before it (0 = all).
        # With relative positions (rotary / none) in-context rollouts of any length decode one
        # token a step from a ring of W key/value slots (methods/in_context.py).
        attention_window=0,
        # Attention's implementation: auto (a fused kernel where one applies, else dense below
        # attention_blockwise_from tokens and blockwise from there on) | dense | blockwise
        # (memory linear in the context) | cudnn | pallas; the blockwise query / key block (0: by
        # the batch, heads and length).
        attention_impl="auto",
        attention_block_size=0,
        attention_blockwise_from=512,
        norm_epsilon=1e-6,  # LayerNorm epsilon (GPT-2: 1e-5)
        activation="gelu_tanh",  # feed-forward: gelu_tanh (GPT-2) | gelu_exact | quick_gelu (CLIP)
        # Llama-style blocks (models/llama.py): RMSNorm, a SwiGLU feed-forward of mlp_hidden
        # features (0 = mlp_ratio x d_model), no biases, grouped-query attention with
        # num_kv_heads key/value heads (0 = one per head), RoPE's base.
        norm="layernorm",  # layernorm | rmsnorm
        mlp_type="dense",  # dense | swiglu
        mlp_hidden=0,
        mlp_bias=True,
        attention_bias=True,
        num_kv_heads=0,
        rotary_base=10000.0,
    ))


#: `model.position`'s kinds (`models.transformer.Transformer` builds each).
POSITION_KINDS = ("learned", "rotary", "alibi", "none")


#: What the `model` fields take (core/validation.py). `finalize` raises `max_len` to
#: `train.seq_len`, so the position table always covers a training window. The model features'
#: fields beside the transformer's (n-gram layers) are declared in `models/fields.py`.
MODEL_CONSTRAINTS = validation.declare("model", (
    validation.positive_int("model.num_layers", 2), validation.positive_int("model.d_model", 64),
    validation.positive_int("model.num_heads", 4), validation.positive("model.mlp_ratio", 4),
    validation.boolean("model.pre_norm"), validation.choice("model.position", POSITION_KINDS),
    validation.positive_int("model.max_len", 256),
    validation.fraction("model.embedding_dropout"), validation.fraction("model.residual_dropout"),
    validation.fraction("model.attention_dropout"),
    validation.boolean("model.normalize_qk"), validation.boolean("model.causal"),
    validation.non_negative_int("model.attention_window", 0),
    validation.choice("model.attention_impl", ("auto", "dense", "blockwise", "cudnn", "pallas")),
    validation.non_negative_int("model.attention_block_size", 0),
    validation.positive_int("model.attention_blockwise_from", 512),
    validation.positive("model.norm_epsilon", 1e-6),
    validation.choice("model.activation", ("gelu_tanh", "gelu_exact", "quick_gelu", "relu")),
    validation.choice("model.norm", ("layernorm", "rmsnorm")), validation.choice("model.mlp_type", ("dense", "swiglu")),
    validation.non_negative_int("model.mlp_hidden", 0), validation.boolean("model.mlp_bias"),
    validation.boolean("model.attention_bias"), validation.non_negative_int("model.num_kv_heads", 0),
    validation.positive("model.rotary_base", 10000.0),
    validation.relation(("model.num_heads", "model.num_kv_heads"),
               "model.num_heads must be a multiple of model.num_kv_heads (0: one per head)",
               lambda h, kv: kv == 0 or h % kv == 0, lambda h, kv: "model.num_kv_heads=0"),
    validation.relation(("model.d_model", "model.num_heads"),
               "model.d_model must be divisible by model.num_heads (heads split the width)",
               lambda d, h: d % h == 0,
               lambda d, h: f"model.d_model={max(h, d // h * h)}"),
))

#: Hyperparameters that never change an array shape: the trainer traces them (`train`'s replica
#: hyperparameters), so a random search over them is one program vmapped over its assignments.
TRACED_HYPERPARAMETERS = ("train.learning_rate", "train.weight_decay", "model.embedding_dropout",
                          "model.residual_dropout", "model.label_smoothing")


def default_train_config() -> ml_collections.ConfigDict:
    """Defaults of the trainer (`icrl_jax.pipeline.train`): the `train` section."""
    return ml_collections.ConfigDict(dict(
        num_steps=2000,
        batch_size=64,
        seq_len=100,
        steps_per_call=50,  # train steps fused into one jitted call (lax.scan)
        learning_rate=3e-4,
        warmup_steps=100,
        min_lr_ratio=0.1,
        weight_decay=1e-4,
        b1=0.9,
        b2=0.99,
        grad_clip=1.0,
        log_every=50,
        checkpoint_every=500,
        keep_checkpoints=2,
        # bf16 compute with float32 parameters, optimiser state, logits and loss: "bf16";
        # "auto" = bf16 on GPUs (Ampere on) and TPUs, float32 on the CPU; "fp32".
        compute_dtype="auto",
        scan_unroll=1,  # steps of the scanned training call unrolled per loop iteration
        prefetch=2,  # loader items read ahead (datasets read from disk while training)
    ))


#: What the `train` fields take (core/validation.py).
TRAIN_CONSTRAINTS = validation.declare("train", (
    validation.positive_int("train.num_steps", 2000), validation.positive_int("train.batch_size", 64),
    validation.positive_int("train.seq_len", 100), validation.positive_int("train.steps_per_call", 50),
    validation.positive("train.learning_rate", 3e-4), validation.non_negative_int("train.warmup_steps", 100),
    validation.number("train.min_lr_ratio", 0.1, low=0, high=1), validation.non_negative("train.weight_decay", 1e-4),
    validation.fraction("train.b1", 0.9), validation.fraction("train.b2", 0.99),
    validation.positive("train.grad_clip", 1.0),
    validation.positive_int("train.log_every", 50), validation.positive_int("train.checkpoint_every", 500),
    validation.positive_int("train.keep_checkpoints", 2),
    validation.choice("train.compute_dtype", ("auto", "fp32", "bf16")),
    validation.positive_int("train.scan_unroll", 1), validation.positive_int("train.prefetch", 2),
    validation.relation(("train.steps_per_call", "train.num_steps"),
               "train.steps_per_call must be at most train.num_steps (steps fused in one call)",
               lambda per_call, steps: per_call <= steps,
               lambda per_call, steps: f"train.steps_per_call={steps}"),
    # A training call runs steps_per_call steps: the run, its logs and checkpoints end on one.
    *(validation.relation((f"train.{name}", "train.steps_per_call"),
                 f"train.{name} must be a multiple of train.steps_per_call (a training call "
                 f"runs that many steps)",
                 lambda value, per_call: value % per_call == 0,
                 lambda value, per_call, name=name:
                 f"train.{name}={max(1, round(value / per_call)) * per_call}")
      for name in ("num_steps", "log_every", "checkpoint_every")),
    # Several processes keep every device in the data mesh (pipeline/train.py data_mesh); one
    # process uses the most devices the batch divides over. A sweep splits replicas instead.
    validation.relation(("train.batch_size",),
               "train.batch_size must divide over the devices of all processes",
               lambda devices, batch: batch % devices == 0,
               lambda devices, batch: f"train.batch_size={max(devices, batch // devices * devices)}",
               needs="devices"),
))

def default_dist_config() -> ml_collections.ConfigDict:
    """More than one process (`core/distributed.py`): the `dist` section. A field left at its
    default is taken from the JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID
    environment variables, else one process."""
    return ml_collections.ConfigDict(dict(
        coordinator="",  # HOST:PORT of process 0
        num_processes=0,
        process_id=-1,
        cluster=False,  # let JAX detect SLURM / Open MPI / Kubernetes / Cloud TPU instead
        timeout_s=300,  # how long to wait for the coordinator and the other processes
    ))


def base_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.experiment = ""
    config.preset = ""
    config.seed = 0
    config.workdir = ""  # default: runs/<experiment>_<preset>
    config.method = ""  # a registered method (e.g. "ad"); "" for configs of other kinds

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
        builder="histories",  # how the dataset is made and opened (data/builders.py BUILDERS)
        dataset_id="",  # builder "minari"/"locomotion": the Minari dataset id, e.g. "hopper/medium-v0"
        minari_root="",  # ... and the folder of Minari datasets ("" = <workdir>/minari)
        # builder "minari": a dataset the user has, read as it is (a path, or an id under
        # MINARI_DATASETS_PATH / ~/.minari/datasets, e.g. "mujoco/hopper/medium-v0")
        minari_id="",
    ))
    config.model = default_transformer_config()
    config.train = default_train_config()
    config.eval = ml_collections.ConfigDict(dict(
        num_steps=500,  # in-context steps per evaluation rollout
        num_envs_per_task=1,  # independent rollouts on each held-out task
        greedy=False,  # argmax instead of sampling
        # Sampling temperature: softmax(logits / temperature); < 1 sharpens the trained policy.
        temperature=1.0,
        # AD family, rollouts longer than the context: 0 recomputes the sliding window each
        # step; m >= 1 decodes from m staggered key/value caches (m tokens a step; the model
        # then sees its last L - L/m + 1 to L steps; methods/in_context.py: staggered_slots).
        context_caches=0,
        seed=1,
        tasks="test",  # test | train: which split to evaluate on
        # Most environments per jitted rollout call (0 = all at once): a rollout's working
        # memory is one chunk's (only the returned (N, T) rewards, actions, ... grow with N),
        # and the progress bar moves once per chunk; results do not depend on it. An
        # accelerator may want more per call; on a CPU keep MJX envs at 2,048 or fewer (jaxlib's
        # batched LAPACK calls on larger batches can deadlock a small host's thread pool).
        chunk_size=1024,
        every=0,  # `train` also evaluates every this many updates (0: only when training ends)
        # Variant scores average the last `final_window` steps (bandits: expected regret) or
        # episodes (episodic tasks: return); 1 = the Headless-AD paper's scores.
        final_window=1,
        # Policies evaluated next to the model (registered in data/baselines.py): the data's
        # source, uniform random, and the privileged expert (envs that have one).
        baselines=("source", "random", "expert"),
    ))
    # `icrl-jax report --config`: the registered report `kind` (core.registry.REPORTS), the
    # training seeds it runs, and its row name in tables ("" = the method's label).
    config.report = ml_collections.ConfigDict(dict(kind="seeds", num_seeds=1, label=""))
    config.run = ml_collections.ConfigDict(dict(
        generate=True,  # `train` also generates the dataset when it is missing
        evaluate=True,  # `train` evaluates when training ends
        progress=True,
    ))
    config.dist = default_dist_config()
    # Logging options read by the trainer (metrics.jsonl and TensorBoard are always written).
    config.log = ml_collections.ConfigDict(dict(
        wandb=False,  # also log to Weights & Biases
        wandb_project="icrl-jax",
        wandb_mode="offline",  # offline | online | disabled
    ))
    return config


def _fits_tasks(env, num_train: int, num_test: int) -> bool:
    """Whether the env has `num_train + num_test` tasks (unlimited ones, and a single-task host
    simulator, which evaluates on its one task, always do)."""
    total = env.num_tasks
    if total is None or (env.host and total == 1):
        return True
    return num_train + num_test <= total


def _task_counts_example(total: int, train: int, test: int) -> str:
    """Task counts that fit `total`: fewer held-out tasks if the training ones fit, else both."""
    if train < total:
        return f"data.num_test_tasks={total - train}"
    if test < total:
        return f"data.num_train_tasks={total - test}"
    held_out = max(1, total // 4)
    return f"data.num_train_tasks={total - held_out} --config.data.num_test_tasks={held_out}"


#: What the other core sections take (core/validation.py). Registered names (method, env,
#: data.source, data.builder) are checked where they are looked up, naming the nearest.
BASE_CONSTRAINTS = validation.declare("base", (
    validation.string("experiment", "my_experiment"), validation.string("preset", "quick"),
    validation.integer("seed", 0),
    validation.string("workdir", "runs/my_run"), validation.string("method", "ad"),
    validation.string("env.name", "my_env"),
    validation.string("data.source"), validation.positive_int("data.num_train_tasks", 60),
    validation.non_negative_int("data.num_test_tasks", 20), validation.positive_int("data.histories_per_task", 1),
    validation.positive_int("data.num_steps", 1000), validation.integer("data.split_seed", 0),
    validation.string("data.path", "runs/histories.npz"), validation.positive_int("data.subsample", 1),
    validation.string("data.builder", "histories"), validation.string("data.dataset_id"),
    validation.string("data.minari_root"), validation.string("data.minari_id"),
    validation.positive_int("eval.num_steps", 500), validation.positive_int("eval.num_envs_per_task", 1),
    validation.boolean("eval.greedy"), validation.positive("eval.temperature", 1.0),
    validation.non_negative_int("eval.context_caches", 0), validation.integer("eval.seed", 1),
    validation.choice("eval.tasks", ("test", "train")), validation.non_negative_int("eval.chunk_size", 0),
    validation.non_negative_int("eval.every", 0), validation.positive_int("eval.final_window", 1),
    validation.string("report.kind", "seeds"), validation.positive_int("report.num_seeds", 1),
    validation.string("report.label"),
    validation.boolean("run.generate"), validation.boolean("run.evaluate"), validation.boolean("run.progress"),
    validation.string("dist.coordinator", "host:1234"), validation.non_negative_int("dist.num_processes", 0),
    validation.integer("dist.process_id", -1, minimum=-1), validation.boolean("dist.cluster"),
    validation.positive("dist.timeout_s", 300),
    validation.boolean("log.wandb"), validation.string("log.wandb_project", "icrl-jax"),
    validation.choice("log.wandb_mode", ("offline", "online", "disabled")),
    validation.relation(("eval.every", "train.steps_per_call"),
               lambda every, per_call: f"eval.every must be a multiple of train.steps_per_call="
               f"{per_call} (a training call ends only there)",
               lambda every, per_call: every % per_call == 0,
               lambda every, per_call: f"eval.every={max(1, round(every / per_call)) * per_call}"),
    validation.relation(("data.num_test_tasks", "eval.tasks"),
               "eval.tasks='test' evaluates on the held-out tasks: data.num_test_tasks must be "
               "at least 1",
               lambda env, test, tasks: tasks != "test" or test >= 1 or (
                   env.host and env.num_tasks == 1),
               lambda env, test, tasks: "data.num_test_tasks=1", needs="env"),
    validation.relation(("data.num_train_tasks", "data.num_test_tasks"),
               lambda env, train, test: f"data.num_train_tasks + data.num_test_tasks = "
               f"{train + test} must be at most the {env.num_tasks} tasks the env has",
               lambda env, train, test: _fits_tasks(env, train, test),
               lambda env, train, test: _task_counts_example(env.num_tasks, train, test),
               needs="env"),
))

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
    """Apply `presets[preset]` (dotted key -> value) to `config`; '' keeps the paper default.

    Raises `UnknownNameError` (suggesting the nearest preset) for a preset not in `presets`.
    """
    if preset and preset not in presets:
        raise UnknownNameError(
            f"unknown preset {preset!r}{did_you_mean(preset, presets)} (available: "
            f"{', '.join(sorted(presets))}; or none for paper scale: the file without ':preset')")
    for dotted, value in presets.get(preset, {}).items():
        set_dotted(config, dotted, value)
    config.preset = preset
    return config


def _is_free_form(parents: list[str]) -> bool:
    # kwargs dicts (env.kwargs, data.source_kwargs) are free-form: their keys are the
    # constructor arguments of the named env or source, which are checked when it is built.
    return bool(parents) and parents[-1].endswith("kwargs")


def check_key(config: ml_collections.ConfigDict, dotted: str, *,
              free_form_kwargs: bool = True) -> None:
    """Raise `UnknownNameError` unless `a.b.c` names a key of the nested `config`.

    The message names the first missing part by its full dotted name and suggests the nearest key
    at that level. With `free_form_kwargs`, a missing last key under a `*kwargs` dict is allowed
    (`set_dotted` adds it); the command line cannot add keys, since config_flags locks the config.
    """
    parts = dotted.split(".")
    node = config
    for i, part in enumerate(parts):
        parents = parts[:i]
        where = ".".join(parents)
        if not isinstance(node, (ml_collections.ConfigDict, dict)):
            raise UnknownNameError(f"config key {where!r} holds a {type(node).__name__} value, "
                                   f"not a section: it has no key {dotted!r}")
        if part in node:
            node = node[part]
            continue
        if i == len(parts) - 1 and free_form_kwargs and _is_free_form(parents):
            return
        prefix = where + "." if where else ""
        keys = sorted(str(k) for k in node.keys())
        missing = prefix + part
        # Full dotted names: the shared prefix makes difflib find near misses of short keys.
        hint = did_you_mean(missing, [prefix + k for k in keys])
        if _is_free_form(parents):
            hint += "; kwargs keys can only be added in the config file"
        also = "" if missing == dotted else f" (while setting {dotted!r})"
        listing = ", ".join(keys) if keys else "none"
        raise UnknownNameError(f"config has no key {missing!r}{also}{hint} "
                               f"(keys under {where or 'config'!r}: {listing})")


def set_dotted(config: ml_collections.ConfigDict, dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested ConfigDict; `UnknownNameError` for keys that do not exist.

    Keys of `*kwargs` dicts are free-form and may be added. A value of another type than the
    field's (a string for an integer) is a `ConfigValueError` naming the key.
    """
    check_key(config, dotted)
    *parents, leaf = dotted.split(".")
    node = config
    for part in parents:
        node = node[part]
    try:
        node[leaf] = value
    except TypeError:  # ml_collections refuses a value of another type than the field's
        raise validation.ConfigValueError(
            f"config {dotted}={validation.show_value(value)} must be a "
            f"{type(node[leaf]).__name__} like its default; "
            f"e.g. --config.{dotted}={validation.show_value(node[leaf])}") from None


def check_workdir(config: ml_collections.ConfigDict) -> None:
    """Refuse a work directory that holds another experiment's run.

    Resuming, re-evaluating and overriding hyperparameters in place are fine; but a run of another
    experiment, method or environment would mix its checkpoints and dataset with this one's.
    Raises `UserError` naming both runs when `<workdir>/config.json` differs from `config` in
    `experiment`, `method` or `env.name`.
    """
    if os.path.exists(config.workdir) and not os.path.isdir(config.workdir):
        raise UserError(f"work directory {config.workdir!r} is a file, not a directory; pass "
                        f"another --config.workdir=DIR")
    parent = os.path.dirname(os.path.abspath(config.workdir))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent and not os.path.isdir(parent):
        raise UserError(f"work directory {config.workdir!r} cannot be made: {parent} is a file; "
                        f"pass another --config.workdir=DIR")
    path = os.path.join(config.workdir, "config.json")
    if not os.path.exists(path):
        return
    try:
        with open(path) as f:
            saved = json.load(f)
    except json.JSONDecodeError as e:
        raise UserError(f"work directory {config.workdir!r} has an unreadable config.json ({e}); "
                        f"pass a new --config.workdir=DIR or remove it") from None

    def identity(cfg: ml_collections.ConfigDict) -> dict[str, Any]:
        return {"experiment": cfg.experiment, "method": cfg.method, "env.name": cfg.env.name}

    try:
        theirs = identity(ml_collections.ConfigDict(saved))
    except (AttributeError, TypeError, ValueError):  # JSON, but not a run's config
        raise UserError(f"work directory {config.workdir!r} has a config.json that is not a run's "
                        f"config; pass a new --config.workdir=DIR or remove it") from None
    ours = identity(config)
    if theirs != ours:
        def describe(d):
            return ", ".join(f"{k}={v!r}" for k, v in d.items())
        raise UserError(f"work directory {config.workdir!r} holds another run ({describe(theirs)}),"
                        f" not this one ({describe(ours)}); pass a new --config.workdir=DIR")


def saved_config(workdir: str) -> ml_collections.ConfigDict:
    """The resolved config a run wrote (`workdir/config.json`), as a ConfigDict."""
    with open(os.path.join(workdir, "config.json")) as f:
        return ml_collections.ConfigDict(json.load(f))


def finalize(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Fill derived defaults and lock the config against new keys."""
    if not config.workdir:
        config.workdir = f"runs/{config.experiment}_{config.preset or 'paper'}"
    if config.model.max_len < config.train.seq_len:
        config.model.max_len = config.train.seq_len
    config.lock()
    return config
