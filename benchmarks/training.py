"""Training-step throughput shared by the suites: tokens/s, model FLOP/s and MFU of the one
trainer's jitted step (`pipeline.train.make_train_steps`) on an experiment config's own model and
data, or on an AD model of a given size on synthetic tokens.

FLOPs per token follow the Kaplan et al. (2020) convention, 6N + 12·L·d·T (N non-embedding
parameters, `is_embedding`; L layers, width d, context T), as `models.transformer.flops_per_token`.
MFU divides model FLOP/s by the device's dense peak for the dtype the products run in (float32
matmuls run as TF32 on NVIDIA GPUs under JAX's default precision); on a CPU the peak is a jitted
4096x4096 matmul timed in the same process (`matmul_peak`).
"""

from __future__ import annotations

import jax
import numpy as np

from benchmarks.harness import Timing, time_call

#: Dense tensor-core peaks (FLOP/s) from the vendors' datasheets, without sparsity: TF32 (what
#: float32 matmuls run as under JAX's default precision) and bf16.
PEAK_TF32 = {"H100": 494e12, "H200": 494e12, "A100": 156e12}
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "TPU v4": 275e12,
             "TPU v5 lite": 197e12, "TPU v5p": 459e12}


def datasheet_peak(precision: str) -> float | None:
    """The first device's dense peak for `precision` ("fp32", "bf16"), None where unknown."""
    kind = jax.devices()[0].device_kind
    peaks = PEAK_BF16 if precision == "bf16" else PEAK_TF32
    return next((value for name, value in peaks.items() if name in kind), None)


def matmul_peak(size: int = 4096, calls: int = 5, dtype=np.float32) -> float:
    """FLOP/s of a jitted `size x size` matmul on the default device: the measured peak that a
    CPU's MFU divides by (a CPU's datasheet peak assumes every core at full vector width)."""
    a = jax.device_put(np.random.default_rng(0).standard_normal((size, size)).astype(dtype))
    timing = time_call(jax.jit(lambda x: x @ x), a, calls=calls, rounds=1)
    return 2 * size ** 3 / timing.seconds


def is_embedding(path: str) -> bool:
    """Parameters that do no per-token product, left out of N: position and id tables (DT's
    timestep table too), and the AD step tokens' mixing map, reward map and grid coordinates,
    which `models.tokens.ADStepTokens` folds into tables and vectors once a step. Its linear
    maps of float inputs (`linear`, `action_linear`) still run per token and count."""
    if any(name in path for name in ("position_embedding", "table", "'action'", "'timestep'")):
        return True
    return "'tokens'" in path and any(name in path for name in ("'mix'", "'reward'", "'coordinates'"))


def throughput(timing: Timing, params, steps_per_call: int, batch: int, context: int,
               layers: int, d_model: int, replicas: int = 1) -> dict:
    """Tokens/s, steps/s and model FLOP/s of one timed training call of `steps_per_call`
    optimiser steps on `batch` windows of `context` tokens (per replica, `replicas` of them)."""
    from icrl_jax.models.transformer import flops_per_token
    if replicas > 1:
        params = jax.tree.map(lambda x: x[0], params)
    leaves = jax.tree_util.tree_leaves_with_path(params)
    total = sum(int(np.size(x)) for _, x in leaves)
    embedding = sum(int(np.size(x)) for path, x in leaves if is_embedding(jax.tree_util.keystr(path)))
    tokens_per_s = timing.rate(steps_per_call * batch * context * replicas)
    flops = flops_per_token(total - embedding, layers, d_model, context)
    return dict(params=total, tokens_per_s=tokens_per_s, steps_per_s=timing.rate(steps_per_call),
                model_flops_per_s=tokens_per_s * flops, compile_s=timing.compile_s,
                seconds_per_call=timing.seconds, rounds=len(timing.rounds))


class TrainingCall:
    """One jitted call of `train_config.steps_per_call` training steps as `train` runs them (the
    data placed on the mesh, the state sharded); calling it advances `state` and returns the
    metrics. `steps`, `data`, `seed` and `hyper` are the jitted steps' arguments (to lower it)."""

    def __init__(self, build, train_data, train_config, num_replicas: int = 0, hyper=None):
        from icrl_jax.pipeline.train import data_mesh, init_state, make_train_steps, place_data, state_sharding

        replicas = num_replicas > 0
        # Replicas are initialised from their own keys and train with them as their seeds.
        self.seed = jax.random.split(jax.random.PRNGKey(0), num_replicas) if replicas else jax.random.PRNGKey(1)
        mesh = data_mesh(num_replicas if replicas else train_config.batch_size)
        self.data, self.hyper = place_data(train_data.arrays, mesh), hyper
        if replicas:
            state = jax.vmap(lambda k, h: init_state(build, train_data, k, h))(self.seed, hyper)
        else:
            state = init_state(build, train_data, jax.random.PRNGKey(0))
        self.state = jax.device_put(state, state_sharding(mesh, replicas, num_replicas))
        self.steps = make_train_steps(build, train_data, train_config, mesh, replicas, num_replicas)

    def __call__(self):
        self.state, metrics = self.steps(self.state, self.data, self.seed, self.hyper)
        return metrics


def time_training(build, train_data, train_config, calls: int = 1, rounds: int = 5,
                  budget_s: float | None = None, num_replicas: int = 0, hyper=None, timer=None):
    """Time jitted calls of `train_config.steps_per_call` training steps (`TrainingCall`): the
    compiling call apart, the median over rounds. `build(hyper) -> (method, optimizer)`;
    `num_replicas` > 0: that many vmapped replicas (`hyper` per replica). `timer(make, calls)
    -> (Timing, TrainingCall)` times it otherwise (`make()` builds a fresh, uncompiled call).
    Returns (Timing, the last state)."""
    make = lambda: TrainingCall(build, train_data, train_config, num_replicas, hyper)  # noqa: E731
    if timer is not None:
        timing, call = timer(make, calls)
        return timing, call.state
    call = make()
    return time_call(call, calls=calls, rounds=rounds, budget_s=budget_s), call.state


def measure_experiment(config, calls: int = 1, steps_per_call: int = 10, rounds: int = 5,
                       budget_s: float | None = None, assignments=None, timer=None) -> dict:
    """An experiment config's own model and optimiser, trained on histories of its own source
    (its first `data.num_train_tasks` tasks), `steps_per_call` steps a jitted call; with
    `assignments`, one vmapped replica per assignment (a sweep's group); `timer`: `time_training`'s."""
    from icrl_jax.core.config import finalize
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import build_source
    from icrl_jax.methods import build_method
    from icrl_jax.pipeline import run as R
    from icrl_jax.pipeline.train import make_optimizer

    config.train.steps_per_call = steps_per_call
    config = finalize(config)
    env = R.build_env(config)
    method = build_method(config, env)
    steps, tasks = int(config.data.num_steps), int(config.data.num_train_tasks)
    source = build_source(config.data.source, env, steps, dict(config.data.source_kwargs))
    history = generate_histories(env, source, env.task_params(np.arange(tasks)), steps,
                                 jax.random.PRNGKey(0))
    train_data = method.training_data(history, config, env)
    if assignments:
        from icrl_jax.pipeline.train import replica_builder, replica_hyperparameters
        build = replica_builder(lambda model: build_method(config, env, model), config)
        timing, state = time_training(build, train_data, config.train, calls, rounds, budget_s,
                                      len(assignments), replica_hyperparameters(config, assignments), timer)
    else:
        optimizer = make_optimizer(config.train)
        timing, state = time_training(lambda _: (method, optimizer), train_data, config.train,
                                      calls, rounds, budget_s, timer=timer)
    return throughput(timing, state.params, steps_per_call, int(config.train.batch_size),
                      int(config.train.seq_len), int(config.model.num_layers),
                      int(config.model.d_model), len(assignments or [None]))


def synthetic_windows(num_actions: int = 5, num_obs: int = 81, n: int = 256, t: int = 1000):
    """AD training windows over random Dark-Room-shaped histories (`n` of `t` steps)."""
    from icrl_jax.data.windows import to_step_windows
    from icrl_jax.data.history import History
    rng = np.random.default_rng(0)
    obs = rng.integers(0, num_obs, (n, t)).astype(np.int32)
    return to_step_windows(History(obs, rng.integers(0, num_actions, (n, t)).astype(np.int32),
                                   rng.random((n, t)).astype(np.float32), np.zeros((n, t), bool),
                                   np.arange(n, dtype=np.int32), np.ones((n, num_actions), bool)))


def synthetic_trajectories(n: int, t: int, state_dim: int, action_dim: int):
    """`n` random continuous-control episodes of `t` steps (`Trajectories`: normal states,
    uniform actions in [-1, 1], rewards and returns-to-go of ones, all steps valid)."""
    from icrl_jax.data.trajectories import Trajectories
    rng = np.random.default_rng(0)
    return Trajectories(rng.normal(size=(n, t, state_dim)).astype(np.float32),
                        rng.uniform(-1, 1, (n, t, action_dim)).astype(np.float32),
                        np.ones((n, t), np.float32), np.ones((n, t), np.float32),
                        np.tile(np.arange(t, dtype=np.int32), (n, 1)), np.ones((n, t), bool))


def measure_ad(layers: int, d_model: int, heads: int, batch: int, context: int, precision: str = "fp32",
               calls: int = 1, rounds: int = 5, budget_s: float | None = None, steps_per_call: int = 10,
               histories: int = 256, model: dict | None = None, timer=None) -> dict:
    """An AD transformer of the given size (the shared transformer's defaults otherwise, so the
    attention implementation is whatever they select; `model`: other `model` fields, such as
    `position` or `attention_impl`) on 81 observations and 5 actions, trained on
    `synthetic_windows` of `context` steps, one token a step; `timer`: `time_training`'s."""
    from icrl_jax.core.config import default_train_config
    from icrl_jax.data.windows import sample_windows
    from icrl_jax.data.train_data import on_device
    from icrl_jax.methods.ad import AD
    from icrl_jax.methods.fields import ad_model_config
    from icrl_jax.pipeline.train import make_optimizer

    config = ad_model_config()
    config.update(dict(num_layers=layers, d_model=d_model, num_heads=heads, max_len=context,
                       label_smoothing=0.0, **(model or {})))
    train_config = default_train_config()
    train_config.update(dict(num_steps=10_000, batch_size=batch, seq_len=context,
                             steps_per_call=steps_per_call, compute_dtype=precision))
    method, optimizer = AD(config, 5, 81), make_optimizer(train_config)
    windows = synthetic_windows(n=histories, t=max(1000, 2 * context))
    train_data = on_device(jax.device_put(windows), sample_windows, context)
    timing, state = time_training(lambda _: (method, optimizer), train_data, train_config, calls,
                                  rounds, budget_s, timer=timer)
    return throughput(timing, state.params, steps_per_call, batch, context, layers, d_model)
