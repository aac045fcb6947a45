"""Training throughput of the AD transformer: tokens/s, model FLOP/s, and MFU on a GPU.

FLOPs per token use the Kaplan et al. (2020) convention, 6N + 12·L·d·T (N = non-embedding
parameters, `is_embedding`; L layers, width d, context T), the same as `icrl_jax.models.transformer.flops_per_token`.
MFU divides achieved model FLOP/s by the device's dense peak for the dtype we train in (float32
matmuls run as TF32 on NVIDIA GPUs by JAX's default precision), so it is only reported where the
peak is known.

    python benchmarks/bench_train.py [--quick] [--write] [--device cpu|gpu|tpu] [--precision fp32|bf16]
    python benchmarks/bench_train.py --old DIR [--repeats N] [--write]   # before/after, side by side

`--old DIR` measures `ROWS_BEFORE_AFTER` in this checkout and in another one (a `git worktree` of
an older commit), one process per (checkout, row), the checkouts alternating: on shared cores
the load hits both alike.

On a CPU, MFU is a ratio measured side by side: each row is timed in `--peak-rounds` rounds, each
right after a 4096x4096 matmul of its own (the peak), and MFU is the median over rounds of the
round's model FLOP/s over its own peak (`interleaved_mfu`).

With `--precision bf16` the model computes in bfloat16 (float32 parameters, as `train.compute_dtype`)
and MFU is against the bf16 dense peak.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

def _device_from_argv() -> None:
    # The platform must be chosen before JAX starts.
    if "--device" in sys.argv:
        os.environ["JAX_PLATFORMS"] = sys.argv[sys.argv.index("--device") + 1]


_device_from_argv()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: `--tree DIR`: measure that checkout's code (the `--old` comparison runs this script so).
TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv else ROOT
sys.path.insert(0, TREE)
try:  # measure what `icrl-jax` runs: its host malloc settings (re-executes this script once)
    from icrl_jax.core import host_memory
    # An older checkout has no such module; an editable install would find this one's instead.
    if os.path.abspath(host_memory.__file__).startswith(os.path.abspath(TREE) + os.sep):
        host_memory.reexec_with_huge_pages()
except ImportError:  # a checkout older than icrl_jax/host_memory.py
    pass
HOST_MALLOC = os.environ.get("GLIBC_TUNABLES") or "glibc default"
try:  # and its CPU devices (one per core), before JAX starts
    from icrl_jax.core import cpu_devices
    if os.path.abspath(cpu_devices.__file__).startswith(os.path.abspath(TREE) + os.sep):
        cpu_devices.use_one_device_per_core()
except ImportError:  # a checkout older than icrl_jax/cpu_devices.py: one CPU device
    pass

import jax  # noqa: E402
import numpy as np  # noqa: E402

from results import cpu_model, table_section  # noqa: E402  # benchmarks/results.py (this script's directory)

from icrl_jax.data.dataset import to_step_windows  # noqa: E402
from icrl_jax.data.history import History  # noqa: E402
from icrl_jax.methods.ad import AD  # noqa: E402
from icrl_jax.core.config import default_train_config, default_transformer_config  # noqa: E402
from icrl_jax.methods.fields import ad_model_config  # noqa: E402
from icrl_jax.models.transformer import count_params, flops_per_token  # noqa: E402
from icrl_jax.data.dataset import sample_windows  # noqa: E402
from icrl_jax.data.train_data import on_device  # noqa: E402
from icrl_jax.pipeline.train import (data_mesh, init_state, make_optimizer,  # noqa: E402
                            make_train_steps, place_data, state_sharding)

# Dense tensor-core peaks (FLOP/s), from the vendors' datasheets (without sparsity): TF32 (what
# float32 matmuls run as under JAX's default precision) and bf16.
PEAK_TF32 = {"H100": 494e12, "H200": 494e12, "A100": 156e12}
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "TPU v4": 275e12,
             "TPU v5 lite": 197e12, "TPU v5p": 459e12}

SIZES = {  # name: (layers, d_model, heads, batch, context)
    "small (quick presets)": (2, 64, 4, 64, 100),
    "medium": (4, 256, 8, 64, 200),
    "paper darkroom (n-gram)": (4, 512, 8, 128, 200),
}


def synthetic_data(num_actions=5, num_obs=81, n=256, t=1000):
    rng = np.random.default_rng(0)
    obs = rng.integers(0, num_obs, (n, t)).astype(np.int32)
    return to_step_windows(History(obs, rng.integers(0, num_actions, (n, t)).astype(np.int32),
                                   rng.random((n, t)).astype(np.float32), np.zeros((n, t), bool),
                                   np.arange(n, dtype=np.int32), np.ones((n, num_actions), bool)))


def matmul_peak(size: int = 4096, calls: int = 5, dtype=np.float32) -> float:
    """FLOP/s of a jitted `size x size` matmul on the default device: the measured peak that
    CPU MFU divides by (a CPU's datasheet peak assumes every core at full vector width)."""
    a = jax.device_put(np.random.default_rng(0).standard_normal((size, size)).astype(dtype))
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    start = time.perf_counter()
    for _ in range(calls):
        out = f(a)
    jax.block_until_ready(out)
    return 2 * size ** 3 * calls / (time.perf_counter() - start)


def benchmark_model(layers, d_model, heads, batch, context, precision="fp32"):
    """The benchmarked AD model on 81 observations and 5 actions, and its train config."""
    config = ad_model_config()
    config.update(dict(num_layers=layers, d_model=d_model, num_heads=heads, max_len=context,
                       label_smoothing=0.0))
    train_config = default_train_config()
    train_config.update(dict(num_steps=10_000, batch_size=batch, seq_len=context, steps_per_call=10,
                             compute_dtype=precision))
    return AD(config, 5, 81), train_config


#: Set by `benchmarks/profile_train.py`: after timing, `_time_calls` traces one more call with
#: the JAX profiler into this directory and writes the compiled program's HLO text beside it.
TRACE_DIR: str | None = None
#: Set by `benchmarks/bench_step_ab.py`: a context manager factory under which `_time_calls`
#: also compiles a reference step, times both alternately in `AB_ROUNDS` rounds, and leaves the
#: median seconds per call of each in `AB_SECONDS` ("reference", "this checkout").
AB_REFERENCE = None
AB_ROUNDS = 10
AB_SECONDS: dict[str, float] = {}
#: On a CPU, `_time_calls` times the model in `PEAK_ROUNDS` rounds (without a reference), each
#: right after a matmul peak of its own (`matmul_peak`, 2 calls), and leaves the rounds'
#: (peak FLOP/s, seconds per call) in `LAST_ROUNDS`: `interleaved_mfu` divides each round's
#: model FLOP/s by its own peak. On these shared cores the peak moves by 25% between minutes;
#: one peak measured before a long table is not the one its later rows ran against.
PEAK_ROUNDS = 0
PEAK_DTYPE = np.float32
LAST_ROUNDS: list[tuple[float, float]] = []


def _time_calls(build, train_data, train_config, calls, num_replicas=0, hyper=None):
    """Seconds per jitted call of `train_config.steps_per_call` steps (compile excluded), and
    the final state. `num_replicas` > 0: that many vmapped replicas (`hyper` per replica)."""
    replicas = num_replicas > 0
    # Replicas are initialised from their own keys and train with them as their seeds.
    seed = jax.random.split(jax.random.PRNGKey(0), num_replicas) if replicas else \
        jax.random.PRNGKey(1)

    def compiled():
        """[the jitted steps, a state after one (compiling) call, the placed data]"""
        try:  # the devices `train` would use (a reference may replace `data_mesh`)
            mesh = data_mesh(num_replicas if replicas else train_config.batch_size)
        except TypeError:  # a checkout whose `data_mesh` takes every device
            mesh = data_mesh()
        data = place_data(train_data.arrays, mesh)
        if replicas:
            state = jax.vmap(lambda k, h: init_state(build, train_data, k, h))(seed, hyper)
        else:
            state = init_state(build, train_data, jax.random.PRNGKey(0))
        state = jax.device_put(state, state_sharding(mesh, replicas, num_replicas))
        steps = make_train_steps(build, train_data, train_config, mesh, replicas, num_replicas)
        state, metrics = steps(state, data, seed, hyper)  # compile
        jax.block_until_ready(metrics)
        return [steps, state, data]

    variants = {}
    if AB_REFERENCE is not None:
        with AB_REFERENCE():  # traced (and compiled) under the reference implementation
            variants["reference"] = compiled()
    variants["this checkout"] = compiled()
    times = {name: [] for name in variants}
    interleave = AB_REFERENCE is None and PEAK_ROUNDS > 0
    LAST_ROUNDS.clear()
    for _ in range(AB_ROUNDS if AB_REFERENCE is not None else max(1, PEAK_ROUNDS)):
        peak = matmul_peak(calls=2, dtype=PEAK_DTYPE) if interleave else None
        for name, variant in variants.items():
            start = time.perf_counter()
            for _ in range(calls):
                variant[1], metrics = variant[0](variant[1], variant[2], seed, hyper)
            jax.block_until_ready(metrics)
            times[name].append((time.perf_counter() - start) / calls)
            if interleave:
                LAST_ROUNDS.append((peak, times[name][-1]))
    AB_SECONDS.update({name: float(np.median(t)) for name, t in times.items()})
    train_steps, state, data = variants["this checkout"]
    seconds = AB_SECONDS["this checkout"]
    if TRACE_DIR is not None:
        os.makedirs(TRACE_DIR, exist_ok=True)
        with open(os.path.join(TRACE_DIR, "step.hlo"), "w") as f:
            f.write(train_steps.lower(state, data, seed, hyper).compile().as_text())
        with jax.profiler.trace(TRACE_DIR, create_perfetto_trace=True):
            state, metrics = train_steps(state, data, seed, hyper)
            jax.block_until_ready(metrics)
    return seconds, state


def interleaved_mfu(result: dict) -> dict:
    """`result` (`_throughput` of the last `_time_calls`) with `peak`, the median of its rounds'
    peaks, and `mfu`, the median over rounds of the round's model FLOP/s over its own peak;
    unchanged without interleaved rounds (`PEAK_ROUNDS`)."""
    if not LAST_ROUNDS:
        return result
    median_seconds = float(np.median([seconds for _, seconds in LAST_ROUNDS]))
    mfus = [result["model_flops_per_s"] * median_seconds / seconds / peak
            for peak, seconds in LAST_ROUNDS]
    return dict(result, peak=float(np.median([peak for peak, _ in LAST_ROUNDS])),
                mfu=float(np.median(mfus)), rounds=len(LAST_ROUNDS))


def is_embedding(path: str) -> bool:
    """Parameters that do no per-token product, left out of N: position and id tables (DT's
    timestep table too), and the AD step tokens' mixing map, reward map and grid coordinates,
    which `models.tokens.ADStepTokens` folds into tables and vectors once a step. Its linear
    maps of float inputs (`linear`, `action_linear`) still run per token and count."""
    if any(name in path for name in ("position_embedding", "table", "'action'", "'timestep'")):
        return True
    return "'tokens'" in path and any(name in path for name in ("'mix'", "'reward'",
                                                                "'coordinates'"))


def _throughput(seconds_per_call, state, steps, batch, context, layers, d_model, replicas=1):
    params = jax.tree.map(lambda x: x[0], state.params) if replicas > 1 else state.params
    embedding = sum(int(np.size(x)) for path, x in jax.tree_util.tree_leaves_with_path(params)
                    if is_embedding(jax.tree_util.keystr(path)))
    n_nonembedding = count_params(params) - embedding
    flops = flops_per_token(n_nonembedding, layers, d_model, context)
    tokens = steps * batch * context * replicas / seconds_per_call
    return dict(tokens_per_s=tokens, steps_per_s=steps / seconds_per_call,
                params=count_params(params), flops_per_token=flops, model_flops_per_s=tokens * flops)


def measure(layers, d_model, heads, batch, context, calls, precision="fp32"):
    """The AD transformer on synthetic learning histories."""
    method, train_config = benchmark_model(layers, d_model, heads, batch, context, precision)
    train_data = on_device(jax.device_put(synthetic_data(t=max(1000, context))), sample_windows,
                           context)
    optimizer = make_optimizer(train_config)
    seconds, state = _time_calls(lambda _: (method, optimizer), train_data, train_config, calls)
    return _throughput(seconds, state, 10, batch, context, layers, d_model)


def measure_unimask(num_replicas, calls, precision="fp32"):
    """Uni[MASK]'s quick grid step: `num_replicas` DoorKey models (every regime x seeds) vmapped
    side by side, as `icrl-jax report --config experiments/unimask/doorkey.py:quick` trains them."""
    import ml_collections

    from icrl_jax import envs
    from icrl_jax.experiments.unimask.doorkey import REGIMES, get_config
    from icrl_jax.data.histories import generate_histories
    from icrl_jax.data.sources import build_source
    from icrl_jax.papers.unimask.method import UniMask
    from icrl_jax.papers.unimask.masks import regime_index
    from icrl_jax.pipeline.train import replica_hyperparameters

    config = get_config("quick")
    config.train.steps_per_call = 10
    config.train.compute_dtype = precision
    env = envs.make(config.env.name, **config.env.kwargs.to_dict())
    history = generate_histories(env, build_source("noisy_rational", env, 10, {}),
                                 env.task_params(np.arange(500)), 10, jax.random.PRNGKey(0))
    k = int(config.train.seq_len)
    data = UniMask(config.model, env, k).training_data(history, config, env)
    rows = [{"model.regime": regime_index(REGIMES[i % len(REGIMES)])}
            for i in range(num_replicas)]
    hyper = replica_hyperparameters(config, rows)
    hyper["model.regime"] = jax.numpy.asarray([r["model.regime"] for r in rows], np.float32)

    def build(h):
        model = dict(config.model.to_dict(), regime=h["model.regime"])
        return UniMask(ml_collections.ConfigDict(model), env, k), make_optimizer(config.train, h)

    seconds, state = _time_calls(build, data, config.train, calls, num_replicas, hyper)
    return _throughput(seconds, state, 10, int(config.train.batch_size), k,
                       int(config.model.num_layers), int(config.model.d_model), num_replicas)


def measure_gpt_dt(mixture: bool, calls: int, precision="fp32"):
    """GPT-DTMA's quick DT (the 4 x 128 GPT-2 of `experiments/gpt_dtma/lm.py:quick`, 4 heads) on
    hopper-shaped synthetic windows (11-d states, 3-d actions), batch 32 x 20 steps = 60 tokens
    each; `mixture` adds the MoA gates. Initialisation does not change the step, so GPT-DT and
    DT share a row."""
    from icrl_jax.experiments.gpt_dtma import QUICK_MODEL
    from icrl_jax.methods.fields import dt_model_config
    from icrl_jax.data.trajectories import Trajectories, sample_trajectory_windows
    from icrl_jax.methods.dt import DecisionTransformer

    config = default_transformer_config()
    config.update(dt_model_config())
    config.update(dict(d_model=QUICK_MODEL["model.d_model"], num_layers=QUICK_MODEL["model.num_layers"],
                       num_heads=QUICK_MODEL["model.num_heads"], norm_epsilon=1e-5,
                       mixture_of_attention=mixture))
    steps, batch = 20, QUICK_MODEL["train.batch_size"]
    method = DecisionTransformer(config, (), steps, None, continuous_dim=3)
    rng = np.random.default_rng(0)
    n, t = 256, 200
    episodes = Trajectories(rng.normal(size=(n, t, 11)).astype(np.float32),
                            rng.uniform(-1, 1, (n, t, 3)).astype(np.float32),
                            np.ones((n, t), np.float32), np.ones((n, t), np.float32),
                            np.tile(np.arange(t, dtype=np.int32), (n, 1)), np.ones((n, t), bool))
    train_data = on_device(jax.device_put(episodes), sample_trajectory_windows, steps)
    train_config = default_train_config()
    train_config.update(dict(num_steps=10_000, batch_size=batch, seq_len=steps, steps_per_call=10,
                             compute_dtype=precision))
    optimizer = make_optimizer(train_config)
    seconds, state = _time_calls(lambda _: (method, optimizer), train_data, train_config, calls)
    return _throughput(seconds, state, 10, batch, 3 * steps, int(config.num_layers),
                       int(config.d_model))


def _measure_experiment(config, calls: int, steps_per_call: int, assignments=None):
    """An experiment config's own model and optimiser, trained on histories of its own source
    (its first `data.num_train_tasks` tasks), `steps_per_call` steps a jitted call; with
    `assignments`, one vmapped replica per assignment (a sweep's group)."""
    from icrl_jax.pipeline import run as R
    from icrl_jax.core.config import finalize
    from icrl_jax.data.histories import generate_histories
    from icrl_jax.data.sources import build_source
    from icrl_jax.methods import build_method

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
        seconds, state = _time_calls(build, train_data, config.train, calls, len(assignments),
                                     replica_hyperparameters(config, assignments))
    else:
        optimizer = make_optimizer(config.train)
        seconds, state = _time_calls(lambda _: (method, optimizer), train_data, config.train,
                                     calls)
    return _throughput(seconds, state, steps_per_call, int(config.train.batch_size),
                       int(config.train.seq_len), int(config.model.num_layers),
                       int(config.model.d_model), len(assignments or [None]))


def measure_main_job(calls: int, precision="fp32"):
    """The earlier main job, `experiments/ad/darkroom.py:quick_oracle` (the README's first
    command is the same model without the n-gram layer): 2 x 64, 4 heads, a 1-gram layer after
    the first block, dropout 0.1, batch 64 x 100 steps, on its noisy-oracle histories; 10 steps a
    call as in the benchmarks above (the preset runs 50)."""
    from icrl_jax.experiments.ad.darkroom import get_config
    config = get_config("quick_oracle")
    config.train.compute_dtype = precision
    return _measure_experiment(config, calls, 10)


def measure_sweep_replicas(num_replicas: int, calls: int, precision="fp32"):
    """A random search's training program: `ngram/darkroom.py:quick_explorer_goals40_narrow`
    (the main job's model plus a 1-gram layer, batch 64 x 100, on grid-explorer histories of
    40 goals) with its first `num_replicas` assignments vmapped side by side, as `icrl-jax
    sweep` trains a group; 0 replicas: the first assignment as a single run (`train`'s path)."""
    from icrl_jax.experiments.ngram.darkroom import get_config
    from icrl_jax.tools.sweep import flatten_space, sample_assignment

    config = get_config("quick_explorer_goals40_narrow")
    config.train.compute_dtype = precision
    space = flatten_space(config.sweep.space)
    assignments = [sample_assignment(space, 0, i) for i in range(max(1, num_replicas))]
    if not num_replicas:  # the first assignment's values as a plain config
        for key, value in assignments[0].items():
            section, field = key.split(".", 1)
            config[section][field] = value
    return _measure_experiment(config, calls, 10, assignments if num_replicas else None)


def measure_key_to_door(ngram: bool, calls: int, precision="fp32"):
    """Issue 19 part 3's Key-to-Door recipe, `ad/key_to_door.py:qlearning_cpu_starts` (AD +
    a 1-gram layer) or its plain-AD twin: 2 x 64, 4 heads, batch 64 x 200 steps, dropout 0.3 /
    0.2, episode starts marked, on Q-learning histories of its 100 training goals; 10 steps a
    call (the preset runs 50)."""
    from icrl_jax.experiments.ad.key_to_door import get_config
    config = get_config("qlearning_cpu_starts" + ("" if ngram else "_ad"))
    config.train.compute_dtype = precision
    return _measure_experiment(config, calls, 10)


def measure_headless_paper(batch: int, calls: int, precision="fp32"):
    """Headless-AD at the paper's bandit scale (Table 3: 4 layers, d 512, 64 heads, rotary, a
    300-step context) on Thompson-sampling histories of 64 bandits with 4-20 arms, one optimiser
    step per jitted call (a step takes seconds on a CPU)."""
    from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
    config = get_config("")
    config.data.num_train_tasks = 64
    config.data.num_steps = config.train.seq_len
    config.data.source = "thompson_sampling"
    config.train.update(dict(batch_size=batch, compute_dtype=precision))
    return _measure_experiment(config, calls, 1)


def _row(name, shape, batch, params, r, peak) -> str:
    """A table row; MFU from `r`'s interleaved rounds where it has them, else against `peak`."""
    r = interleaved_mfu(r)
    if "mfu" in r:
        mfu = f"{100 * r['mfu']:.0f}% (peak {r['peak'] / 1e9:.0f})"
    else:
        mfu = f"{100 * r['model_flops_per_s'] / peak:.0f}%" if peak else "n/a (no known peak)"
    return (f"| {name} | {shape} | {batch} | {params} | {r['tokens_per_s']:,.0f} "
            f"| {r['steps_per_s']:.2f} | {r['model_flops_per_s'] / 1e9:,.1f} | {mfu} |")


HEADING = "## Training throughput (AD, Uni[MASK] and GPT-DT transformers)"


#: Rows of the before/after comparison (`--old`): name -> (label, measure(calls) -> result).
ROWS_BEFORE_AFTER = {
    "small": ("small (quick presets), 2x64, 4 heads, 64x100",
              lambda calls: measure(*SIZES["small (quick presets)"], calls)),
    "main_job": ("`ad/darkroom.py:quick_oracle` (+1-gram layer, dropout 0.1), 64x100",
                 measure_main_job),
    "key_to_door": ("`ad/key_to_door.py:qlearning_cpu_starts` (+1-gram layer, dropout 0.3 / 0.2, "
                    "episode starts), 2x64, 64x200", lambda calls: measure_key_to_door(True, calls)),
    "key_to_door_ad": ("`ad/key_to_door.py:qlearning_cpu_starts_ad` (the same without the "
                       "n-gram layer), 2x64, 64x200", lambda calls: measure_key_to_door(False, calls)),
    "medium": ("medium, 4x256, 8 heads, 64x200", lambda calls: measure(*SIZES["medium"], calls)),
    "headless_paper_4": ("Headless-AD paper scale, 4x512, 64 heads, batch 4 x 300",
                         lambda calls: measure_headless_paper(4, calls)),
    "unimask": ("Uni[MASK] DoorKey quick grid (dropout 0.1), 30 vmapped replicas of 2x64, 30x100x10",
                lambda calls: measure_unimask(30, calls)),
    "gpt_dt": ("GPT-DT / DT quick (hopper shapes), 4x128, 4 heads, 32x60",
               lambda calls: measure_gpt_dt(False, calls)),
    "sweep_single": ("a sweep assignment trained alone (`ngram/darkroom.py:"
                     "quick_explorer_goals40_narrow`, 2x64 + 1-gram layer), 64x100",
                     lambda calls: measure_sweep_replicas(0, calls)),
    "sweep_8": ("the same sweep's first 8 assignments as vmapped replicas, 8x64x100",
                lambda calls: measure_sweep_replicas(8, calls)),
}
BEFORE_AFTER_HEADING = "## Training throughput before and after (side by side)"


def measure_row(name: str) -> dict:
    """One `ROWS_BEFORE_AFTER` row in this process: the matmul peak, then the model."""
    import icrl_jax
    if not os.path.abspath(icrl_jax.__file__).startswith(os.path.abspath(TREE)):
        raise RuntimeError(f"measuring {TREE} but imported {icrl_jax.__file__}")
    result = interleaved_mfu(ROWS_BEFORE_AFTER[name][1](2 if name.startswith("headless") else 3))
    if "mfu" not in result:  # no interleaved rounds: one peak, measured after the model
        peak = matmul_peak()
        result = dict(result, peak=peak, mfu=result["model_flops_per_s"] / peak)
    return dict(result, host_malloc=HOST_MALLOC)


def before_after(args) -> None:
    """`ROWS_BEFORE_AFTER` in `args.old` and in this checkout, alternating per row and repeat;
    MFU is each process's model FLOP/s over its own matmul peak."""
    import json
    import subprocess

    from icrl_jax.core.host_memory import TUNABLE  # this checkout's

    # Each checkout's process starts with the user's environment: the new one adds its malloc
    # tunable itself (this process did, re-executing), an old one has none.
    tunables = [t for t in os.environ.get("GLIBC_TUNABLES", "").split(":") if t and t != TUNABLE]
    environment = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables:
        environment["GLIBC_TUNABLES"] = ":".join(tunables)

    def run(tree, name):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--tree", tree,
                              "--row", name], capture_output=True, text=True, cwd=tree,
                             env=environment)
        if out.returncode:
            raise RuntimeError(f"{name} in {tree} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    commit = lambda tree: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree,  # noqa: E731
                                         capture_output=True, text=True).stdout.strip()
    lines, malloc = [], {}
    for name in args.rows.split(","):
        runs = {"old": [], "new": []}
        for _ in range(args.repeats):
            for side, tree in (("old", args.old), ("new", ROOT)):
                runs[side].append(run(tree, name))
                malloc[side] = runs[side][-1].get("host_malloc", "glibc default")
                print(name, side, f"{runs[side][-1]['tokens_per_s']:,.0f} tokens/s, MFU "
                      f"{100 * runs[side][-1]['mfu']:.0f}%", flush=True)
        median = {side: float(np.median([r["tokens_per_s"] for r in rs])) for side, rs in runs.items()}
        fmt = lambda rs: " / ".join(f"{r['tokens_per_s']:,.0f} ({100 * r['mfu']:.0f}%)" for r in rs)  # noqa: E731
        lines.append(f"| {ROWS_BEFORE_AFTER[name][0]} | {fmt(runs['old'])} | {fmt(runs['new'])} "
                     f"| {median['new'] / median['old']:.2f}x |")
    table_section(
        BEFORE_AFTER_HEADING,
        f"Command: `python benchmarks/bench_train.py --old <worktree of {commit(args.old)}> "
        f"--repeats {args.repeats} --write`, this checkout at {commit(ROOT)} (plus uncommitted "
        f"changes, if any). Device: {jax.devices()[0].platform}, host CPU {cpu_model()}, "
        f"{os.cpu_count()} cores; load "
        f"average when it finished {os.getloadavg()[0]:.1f} (the cores were shared with other "
        "jobs). One process per (checkout, row, repeat), the checkouts alternating; each "
        f"process times its model in {PEAK_ROUNDS} rounds, each right after a 4096x4096 float32 "
        "matmul of its own (the peak), and MFU (in brackets) is the median over rounds of the "
        "round's model FLOP/s (6N + 12·L·d·T a token) over its peak. Ratio: new / old "
        f"median tokens/s. Host malloc (icrl_jax/host_memory.py): before {malloc['old']}, after "
        f"{malloc['new']}.",
        ["model", "before: tokens/s (MFU)", "after: tokens/s (MFU)", "ratio"], lines, args.write)

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the small model, fewer calls")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument("--all-sizes", action="store_true",
                        help="also the paper-size model on a CPU (hours on 2 cores)")
    parser.add_argument("--device", choices=("cpu", "gpu", "tpu"),
                        help="the JAX platform to measure (default: JAX's default)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--headless-paper", action="store_true",
                        help="only Headless-AD at the paper's bandit scale, batch 4 and 32")
    parser.add_argument("--old", help="a checkout to compare with, side by side (ROWS_BEFORE_AFTER)")
    parser.add_argument("--rows", default=",".join(ROWS_BEFORE_AFTER),
                        help="with --old: which rows, comma-separated")
    parser.add_argument("--repeats", type=int, default=1, help="with --old: runs per side")
    parser.add_argument("--tree", default=ROOT, help="the checkout whose code is measured")
    parser.add_argument("--row", choices=tuple(ROWS_BEFORE_AFTER),
                        help="measure one row in this process, print JSON (used by --old)")
    parser.add_argument("--peak-rounds", type=int, default=3,
                        help="on a CPU: timing rounds per row, each after its own matmul peak")
    args = parser.parse_args()
    global PEAK_ROUNDS, PEAK_DTYPE
    if jax.devices()[0].platform == "cpu":
        PEAK_ROUNDS = args.peak_rounds
        PEAK_DTYPE = jax.numpy.bfloat16 if args.precision == "bf16" else np.float32
    if args.row:
        import json
        return print(json.dumps(measure_row(args.row)))
    if args.old:
        return before_after(args)
    if args.headless_paper:
        return headless_paper(args)
    device = jax.devices()[0]
    kind = device.device_kind
    peaks = PEAK_BF16 if args.precision == "bf16" else PEAK_TF32
    peak = next((v for k, v in peaks.items() if k in kind), None)
    peak_source = "datasheet dense peak"
    if device.platform == "cpu" and not PEAK_ROUNDS:  # one peak, just before the models
        # The dtype the model's products run in: bf16 compute multiplies bf16 by bf16.
        bf16 = args.precision == "bf16"
        peak = matmul_peak(dtype=jax.numpy.bfloat16 if bf16 else np.float32)
        peak_source = f"a jitted 4096x4096 {'bfloat16' if bf16 else 'float32'} matmul, measured here"
        print(f"CPU matmul peak: {peak / 1e9:.1f} GFLOP/s", flush=True)
    rows = []
    for name, (layers, d, heads, batch, context) in SIZES.items():
        if args.quick and name != "small (quick presets)":
            continue
        if device.platform == "cpu" and name.startswith("paper") and not args.all_sizes:
            continue
        calls = (3 if name.startswith("small") else 1) if device.platform == "cpu" else 20
        r = measure(layers, d, heads, batch, context, calls, args.precision)
        rows.append(_row(name, f"{layers}x{d}, {heads} heads", f"{batch}x{context}",
                         f"{r['params']:,}", r, peak))
        print(rows[-1], flush=True)
        if name.startswith("small"):  # the README's first command, the same shapes
            r = measure_main_job(3 if device.platform == "cpu" else 20, args.precision)
            rows.append(_row("`ad/darkroom.py:quick_oracle` (+1-gram layer, dropout 0.1)",
                             "2x64, 4 heads", "64x100", f"{r['params']:,}", r, peak))
            print(rows[-1], flush=True)
    # The Uni[MASK] quick grid: 10 regimes x 3 seeds trained as vmapped replicas.
    r = measure_unimask(30, 3 if device.platform == "cpu" else 20, args.precision)
    rows.append(_row("Uni[MASK] DoorKey quick grid (30 vmapped replicas)", "2x64, 4 heads",
                     "30x100x10", f"{r['params']:,} each", r, peak))
    print(rows[-1], flush=True)
    for mixture, name in ((False, "GPT-DT / DT, GPT-DTMA quick (hopper shapes)"),
                          (True, "GPT-DTMA / DTMA (MoA gates), same shapes")):
        r = measure_gpt_dt(mixture, 3 if device.platform == "cpu" else 20, args.precision)
        rows.append(_row(name, "4x128, 4 heads", "32x60", f"{r['params']:,}", r, peak))
        print(rows[-1], flush=True)
    cpu = cpu_model()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    table_section(
        HEADING,
        f"Device: {device.platform} `{kind}` x{jax.device_count()}; host CPU {cpu}, "
        f"{os.cpu_count()} cores. Command: `python benchmarks/bench_train.py"
        f"{' --quick' if args.quick else ''}{' --precision bf16' if args.precision == 'bf16' else ''}"
        f" --write`. Float32 parameters; {'bfloat16' if args.precision == 'bf16' else 'float32'} "
        "activations; "
        "10 optimiser steps per jitted call; compile time excluded. FLOPs per token = "
        "6N + 12·L·d·T (Kaplan convention, N = non-embedding parameters; since the step tokens' "
        "mixing map was folded into their tables, it counts as embedding: `is_embedding`). "
        "Peak host memory "
        f"(ru_maxrss) {peak_mib:,.0f} MiB. Load average when it finished: "
        f"{os.getloadavg()[0]:.1f} (other jobs share these cores; compare rows, not runs). "
        + (f"MFU = the median over {PEAK_ROUNDS} timing rounds of the round's model FLOP/s over "
           "the peak of a jitted 4096x4096 "
           f"{'bfloat16' if args.precision == 'bf16' else 'float32'} matmul timed right before "
           "it (median peak in brackets, GFLOP/s): `interleaved_mfu`. "
           if PEAK_ROUNDS else f"MFU = model FLOP/s / peak, peak {peak / 1e9 if peak else 0:,.1f} "
           f"GFLOP/s ({peak_source}). ")
        + f"Host malloc (icrl_jax/host_memory.py): {HOST_MALLOC}.",
        ["model", "layers x width", "batch x context", "params", "tokens/s", "steps/s",
         "model GFLOP/s", "MFU"], rows, args.write)

HEADLESS_HEADING = "## Headless-AD at the paper's bandit scale (steps/s)"


def headless_paper(args) -> None:
    """Steps/s of the paper-scale Headless-AD bandit model at batch 4 and 32 (to compare with
    the PyTorch reference on the same machine), in its own RESULTS.md section. On a CPU each
    timing round follows its own matmul peak (`interleaved_mfu`): on shared cores the peak moves
    by 20% between minutes, more than most changes to the step."""
    device = jax.devices()[0]
    rows = []
    for batch, calls in ((4, 6), (32, 3)):
        r = interleaved_mfu(measure_headless_paper(batch, calls, args.precision))
        measured = (f"{r['peak'] / 1e9:.0f} | {100 * r['mfu']:.0f}%" if "mfu" in r
                    else "n/a | n/a")
        rows.append(f"| {batch} | {r['steps_per_s']:.3f} | {1 / r['steps_per_s']:.2f} | "
                    f"{r['tokens_per_s']:,.0f} | {r['params']:,} | {measured} |")
        print(rows[-1], flush=True)
    table_section(
        HEADLESS_HEADING,
        f"Device: {device.platform} `{device.device_kind}` x{jax.device_count()}; host CPU "
        f"{cpu_model()}, {os.cpu_count()} cores. Command: `python benchmarks/bench_train.py "
        "--headless-paper --write`. `experiments/headless_ad/bernoulli_bandit.py` at paper "
        "scale (4 layers, d 512, "
        f"64 heads, rotary, context 300 steps), {args.precision}, one optimiser step per jitted "
        f"call, 6 (batch 4) or 3 (batch 32) timed calls a round after the compiling one, "
        f"{PEAK_ROUNDS} rounds. Tokens count one per context step (the action-set prompt is not "
        f"counted); MFU is the median over rounds of the round's model FLOP/s over a 4096x4096 "
        f"float32 matmul timed right before it (median peak in the peak column). Load average when it finished: "
        f"{os.getloadavg()[0]:.1f}. Host malloc (icrl_jax/host_memory.py): {HOST_MALLOC}.",
        ["batch", "steps/s", "s/step", "tokens/s", "params", "peak (GFLOP/s)", "MFU"], rows,
        args.write)

if __name__ == "__main__":
    main()
