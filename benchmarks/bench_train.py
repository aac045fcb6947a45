"""Training throughput of every model we train: tokens/s, model FLOP/s and MFU.

    python -m benchmarks train [--quick] [--write] [--device cpu|gpu|tpu] [--precision fp32|bf16]
    python -m benchmarks train --headless-paper [--write]   # Headless-AD at the paper's scale
    python -m benchmarks train --old DIR [--repeats N] [--write]   # before/after, side by side

FLOPs per token, the peaks and the throughput are `benchmarks.training`'s (Kaplan's 6N + 12·L·d·T;
the vendors' dense peaks where known). On a CPU, MFU is a ratio measured side by side: each row
is timed in `--peak-rounds` rounds interleaved with a 4096x4096 matmul (the peak;
`harness.interleave`), and MFU is the median over rounds of the round's model FLOP/s over its
own peak (`interleaved_mfu`): on shared cores the peak moves by 25% between minutes.

`--old DIR` measures `ROWS_BEFORE_AFTER` in this checkout and in another one (a `git worktree` of
an older commit), one process per (checkout, row), the checkouts alternating
(`harness.compare_trees`). With `--precision bf16` the model computes in bfloat16 (float32
parameters, as `train.compute_dtype`) and MFU is against the bf16 peak.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np

from benchmarks import harness, training

SIZES = {  # name: (layers, d_model, heads, batch, context)
    "small (quick presets)": (2, 64, 4, 64, 100),
    "medium": (4, 256, 8, 64, 200),
    "paper darkroom (n-gram)": (4, 512, 8, 128, 200),
}
#: The host malloc settings measured (`prepare_process`).
HOST_MALLOC = "glibc default"


def prepare_process(device: str | None = None) -> None:
    """Run as `icrl-jax` runs, before JAX starts: its host malloc settings (re-executing this
    process once) and one CPU device per core. A checkout older than those modules (`--old`)
    runs without them."""
    global HOST_MALLOC
    harness.choose_device(device)
    try:
        from icrl_jax.core import host_memory
        host_memory.reexec_with_huge_pages()
    except ImportError:
        pass
    HOST_MALLOC = os.environ.get("GLIBC_TUNABLES") or "glibc default"
    try:
        from icrl_jax.core import cpu_devices
        cpu_devices.use_one_device_per_core()
    except ImportError:
        pass


def benchmark_model(layers, d_model, heads, batch, context, precision="fp32"):
    """The benchmarked AD model on 81 observations and 5 actions, and its train config (the
    model `training.measure_ad` trains)."""
    from icrl_jax.core.config import default_train_config
    from icrl_jax.methods.ad import AD
    from icrl_jax.methods.fields import ad_model_config

    config = ad_model_config()
    config.update(dict(num_layers=layers, d_model=d_model, num_heads=heads, max_len=context,
                       label_smoothing=0.0))
    train_config = default_train_config()
    train_config.update(dict(num_steps=10_000, batch_size=batch, seq_len=context, steps_per_call=10,
                             compute_dtype=precision))
    return AD(config, 5, 81), train_config


PEAK_SIZE = 4096
#: Set by `profile_train`: after timing, `_timer` traces one more call with the JAX profiler
#: into this directory and writes the compiled program's HLO text beside it.
TRACE_DIR: str | None = None
#: Set by `step_ab`: a context manager factory under which `_timer` also compiles a reference
#: step and interleaves it with this checkout's in `AB_ROUNDS` rounds (`harness.interleave`);
#: `LAST_AB` keeps the comparison.
AB_REFERENCE = None
AB_ROUNDS = 10
LAST_AB: harness.AB | None = None
#: On a CPU, `_timer` interleaves the model with a matmul peak in `PEAK_ROUNDS` rounds (without
#: a reference) and leaves the rounds' (peak FLOP/s, seconds per call) in `LAST_ROUNDS` for
#: `interleaved_mfu`. 0: one round after the compiling call, no peak.
PEAK_ROUNDS = 0
PEAK_DTYPE = np.float32
LAST_ROUNDS: list[tuple[float, float]] = []


def _peak_call(dtype):
    """One jitted `PEAK_SIZE` square matmul, ready to call."""
    a = jax.device_put(np.random.default_rng(0).standard_normal((PEAK_SIZE, PEAK_SIZE)).astype(dtype))
    product = jax.jit(lambda x: x @ x)
    return lambda: product(a)


def _timer(make, calls: int):
    """`training.time_training`'s timer: this checkout's step (and a reference's, `AB_REFERENCE`,
    or a matmul peak's, `PEAK_ROUNDS`) compiled, then timed interleaved, round by round."""
    global LAST_AB
    variants = {}
    if AB_REFERENCE is not None:
        with AB_REFERENCE():  # traced (and compiled) under the reference implementation
            variants["reference"] = make()
            jax.block_until_ready(variants["reference"]())
    elif PEAK_ROUNDS:
        variants["peak"] = _peak_call(PEAK_DTYPE)
    start = time.perf_counter()
    variants["this checkout"] = call = make()
    jax.block_until_ready(call())
    compile_s = time.perf_counter() - start
    rounds = AB_ROUNDS if AB_REFERENCE is not None else max(1, PEAK_ROUNDS)
    LAST_AB = harness.interleave(variants, rounds=rounds, calls=calls, warmup=0)
    LAST_ROUNDS[:] = [(2 * PEAK_SIZE ** 3 / peak, seconds) for peak, seconds in
                      zip(LAST_AB.rounds.get("peak", []), LAST_AB.rounds["this checkout"])]
    if TRACE_DIR is not None:
        os.makedirs(TRACE_DIR, exist_ok=True)
        with open(os.path.join(TRACE_DIR, "step.hlo"), "w") as f:
            f.write(call.steps.lower(call.state, call.data, call.seed, call.hyper).compile().as_text())
        with jax.profiler.trace(TRACE_DIR, create_perfetto_trace=True):
            jax.block_until_ready(call())
    return harness.Timing(compile_s, LAST_AB.rounds["this checkout"]), call


def interleaved_mfu(result: dict) -> dict:
    """`result` (of the last timed row) with `peak`, the median of its rounds' peaks, and `mfu`,
    the median over rounds of the round's model FLOP/s over its own peak; unchanged without
    interleaved rounds (`PEAK_ROUNDS`)."""
    if not LAST_ROUNDS:
        return result
    median_seconds = float(np.median([seconds for _, seconds in LAST_ROUNDS]))
    mfus = [result["model_flops_per_s"] * median_seconds / seconds / peak
            for peak, seconds in LAST_ROUNDS]
    return dict(result, peak=float(np.median([peak for peak, _ in LAST_ROUNDS])),
                mfu=float(np.median(mfus)), rounds=len(LAST_ROUNDS))


def measure(layers, d_model, heads, batch, context, calls, precision="fp32"):
    """The AD transformer on synthetic learning histories (`training.measure_ad`)."""
    return training.measure_ad(layers, d_model, heads, batch, context, precision, calls, timer=_timer)


def measure_unimask(num_replicas, calls, precision="fp32"):
    """Uni[MASK]'s quick grid step: `num_replicas` DoorKey models (every regime x seeds) vmapped
    side by side, as `icrl-jax report --config experiments/unimask/doorkey.py:quick` trains them."""
    import ml_collections

    from icrl_jax import envs
    from icrl_jax.experiments.unimask.doorkey import REGIMES, get_config
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import build_source
    from icrl_jax.papers.unimask.method import UniMask
    from icrl_jax.papers.unimask.masks import regime_index
    from icrl_jax.pipeline.train import make_optimizer, replica_hyperparameters

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

    timing, state = training.time_training(build, data, config.train, calls, num_replicas=num_replicas,
                                           hyper=hyper, timer=_timer)
    return training.throughput(timing, state.params, 10, int(config.train.batch_size), k,
                               int(config.model.num_layers), int(config.model.d_model), num_replicas)


def measure_gpt_dt(mixture: bool, calls: int, precision="fp32"):
    """GPT-DTMA's quick DT (the 4 x 128 GPT-2 of `experiments/gpt_dtma/lm.py:quick`, 4 heads) on
    hopper-shaped synthetic windows (11-d states, 3-d actions), batch 32 x 20 steps = 60 tokens
    each; `mixture` adds the MoA gates. Initialisation does not change the step, so GPT-DT and
    DT share a row."""
    from icrl_jax.experiments.gpt_dtma import QUICK_MODEL
    from icrl_jax.methods.fields import dt_model_config
    from icrl_jax.data.trajectories import sample_trajectory_windows
    from icrl_jax.core.config import default_train_config, default_transformer_config
    from icrl_jax.data.train_data import on_device
    from icrl_jax.methods.dt import DecisionTransformer
    from icrl_jax.pipeline.train import make_optimizer

    config = default_transformer_config()
    config.update(dt_model_config())
    config.update(dict(d_model=QUICK_MODEL["model.d_model"], num_layers=QUICK_MODEL["model.num_layers"],
                       num_heads=QUICK_MODEL["model.num_heads"], norm_epsilon=1e-5,
                       mixture_of_attention=mixture))
    steps, batch = 20, QUICK_MODEL["train.batch_size"]
    method = DecisionTransformer(config, (), steps, None, continuous_dim=3)
    episodes = training.synthetic_trajectories(256, 200, 11, 3)
    train_data = on_device(jax.device_put(episodes), sample_trajectory_windows, steps)
    train_config = default_train_config()
    train_config.update(dict(num_steps=10_000, batch_size=batch, seq_len=steps, steps_per_call=10,
                             compute_dtype=precision))
    optimizer = make_optimizer(train_config)
    timing, state = training.time_training(lambda _: (method, optimizer), train_data, train_config, calls,
                                           timer=_timer)
    return training.throughput(timing, state.params, 10, batch, 3 * steps, int(config.num_layers),
                               int(config.d_model))


def measure_main_job(calls: int, precision="fp32"):
    """The earlier main job, `experiments/ad/darkroom.py:quick_oracle` (the README's first
    command is the same model without the n-gram layer): 2 x 64, 4 heads, a 1-gram layer after
    the first block, dropout 0.1, batch 64 x 100 steps, on its noisy-oracle histories; 10 steps a
    call as in the benchmarks above (the preset runs 50)."""
    from icrl_jax.experiments.ad.darkroom import get_config
    config = get_config("quick_oracle")
    config.train.compute_dtype = precision
    return training.measure_experiment(config, calls, 10, timer=_timer)


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
    return training.measure_experiment(config, calls, 10, assignments=assignments if num_replicas else None,
                                       timer=_timer)


def measure_key_to_door(ngram: bool, calls: int, precision="fp32"):
    """Issue 19 part 3's Key-to-Door recipe, `ad/key_to_door.py:qlearning_cpu_starts` (AD +
    a 1-gram layer) or its plain-AD twin: 2 x 64, 4 heads, batch 64 x 200 steps, dropout 0.3 /
    0.2, episode starts marked, on Q-learning histories of its 100 training goals; 10 steps a
    call (the preset runs 50)."""
    from icrl_jax.experiments.ad.key_to_door import get_config
    config = get_config("qlearning_cpu_starts" + ("" if ngram else "_ad"))
    config.train.compute_dtype = precision
    return training.measure_experiment(config, calls, 10, timer=_timer)


def measure_headless_paper(batch: int, calls: int, precision="fp32", layout: str | None = None):
    """Headless-AD at the paper's bandit scale (Table 3: 4 layers, d 512, 64 heads, rotary, a
    300-step context) on Thompson-sampling histories of 64 bandits with 4-20 arms, one optimiser
    step per jitted call (a step takes seconds on a CPU). `layout`: `model.layout` ("reference":
    the authors' 622 tokens; None: the config's own)."""
    from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
    config = get_config("")
    if layout is not None:
        config.model.layout = layout
    config.data.num_train_tasks = 64
    config.data.num_steps = config.train.seq_len
    config.data.source = "thompson_sampling"
    config.train.update(dict(batch_size=batch, compute_dtype=precision))
    return training.measure_experiment(config, calls, 1, timer=_timer)


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
    "headless_reference_8": ("Headless-AD paper scale at the authors' token layout (622 tokens), "
                             "batch 8", lambda calls: measure_headless_paper(8, calls,
                                                                          layout="reference")),
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
#: Rows `--old` leaves out unless `--rows` names them: a step takes seconds, and checkouts from
#: before `model.layout` cannot build them. `profile_train` profiles them.
PROFILE_ONLY_ROWS = ("headless_reference_8",)
BEFORE_AFTER_HEADING = "## Training throughput before and after (side by side)"


def measure_row(name: str) -> dict:
    """One `ROWS_BEFORE_AFTER` row in this process: the model, with its peak."""
    harness.check_tree()
    result = interleaved_mfu(ROWS_BEFORE_AFTER[name][1](2 if name.startswith("headless") else 3))
    if "mfu" not in result:  # no interleaved rounds: one peak, measured after the model
        peak = training.matmul_peak()
        result = dict(result, peak=peak, mfu=result["model_flops_per_s"] / peak)
    return dict(result, host_malloc=HOST_MALLOC)


def before_after(args) -> None:
    """`ROWS_BEFORE_AFTER` in `args.old` and in this checkout, alternating per row and repeat
    (`harness.compare_trees`); MFU is each process's model FLOP/s over its own matmul peak."""
    import json

    from icrl_jax.core.host_memory import TUNABLE  # this checkout's

    # Each checkout's process starts with the user's environment: the new one adds its malloc
    # tunable itself (this process did, re-executing), an old one has none.
    tunables = [t for t in os.environ.get("GLIBC_TUNABLES", "").split(":") if t and t != TUNABLE]
    environment = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables:
        environment["GLIBC_TUNABLES"] = ":".join(tunables)
    trees = {"old": os.path.abspath(args.old), "new": harness.ROOT}
    lines, malloc = [], {}

    def report(side, result):
        malloc[side] = result.get("host_malloc", "glibc default")
        print(side, json.dumps({k: result[k] for k in ("tokens_per_s", "mfu")}), flush=True)

    for name in args.rows.split(","):
        runs = {label: [] for label in trees}
        for _ in range(args.repeats):  # A B A B, each a fresh process
            for label, tree in trees.items():
                runs[label].append(harness.run_in_tree(tree, "benchmarks.bench_train", ["--row", name],
                                                       env=environment))
                report(label, runs[label][-1])
        median = {side: float(np.median([r["tokens_per_s"] for r in rs])) for side, rs in runs.items()}
        fmt = lambda rs: " / ".join(f"{r['tokens_per_s']:,.0f} ({100 * r['mfu']:.0f}%)" for r in rs)  # noqa: E731
        lines.append([ROWS_BEFORE_AFTER[name][0], fmt(runs["old"]), fmt(runs["new"]),
                      f"{median['new'] / median['old']:.2f}x"])
    harness.table_section(
        BEFORE_AFTER_HEADING,
        f"Command: `python -m benchmarks train --old <worktree of {harness.commit_of(args.old)}> "
        f"--repeats {args.repeats} --write`, this checkout at {harness.commit_of(harness.ROOT)} (plus "
        f"uncommitted changes, if any). {harness.hardware_line()} (at the end; the cores were shared "
        "with other jobs). One process per (checkout, row, repeat), the checkouts alternating; each "
        f"process times its model in {PEAK_ROUNDS} rounds interleaved with a 4096x4096 float32 "
        "matmul (the peak), and MFU (in brackets) is the median over rounds of the "
        "round's model FLOP/s (6N + 12·L·d·T a token) over its peak. Ratio: new / old "
        f"median tokens/s. Host malloc (icrl_jax/core/host_memory.py): before {malloc['old']}, after "
        f"{malloc['new']}.",
        ["model", "before: tokens/s (MFU)", "after: tokens/s (MFU)", "ratio"], lines, args.write)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks train", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the small models, fewer calls")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    parser.add_argument("--all-sizes", action="store_true",
                        help="also the paper-size model on a CPU (hours on 2 cores)")
    parser.add_argument("--device", choices=("cpu", "gpu", "tpu"),
                        help="the JAX platform to measure (default: JAX's default)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--headless-paper", action="store_true",
                        help="only Headless-AD at the paper's bandit scale, batch 4 and 32")
    parser.add_argument("--old", help="a checkout to compare with, side by side (ROWS_BEFORE_AFTER)")
    parser.add_argument("--rows", default=",".join(r for r in ROWS_BEFORE_AFTER
                                                   if r not in PROFILE_ONLY_ROWS),
                        help="with --old: which rows, comma-separated")
    parser.add_argument("--repeats", type=int, default=1, help="with --old: runs per side")
    parser.add_argument("--row", choices=tuple(ROWS_BEFORE_AFTER),
                        help="measure one row in this process, print JSON (what --old runs)")
    parser.add_argument("--peak-rounds", type=int, default=3,
                        help="on a CPU: timing rounds per row, each interleaved with a matmul peak")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None):
    global PEAK_ROUNDS, PEAK_DTYPE
    args = parse_args(sys.argv[1:] if argv is None else argv)
    prepare_process(args.device)
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
    peak = training.datasheet_peak(args.precision)
    peak_source = "datasheet dense peak"
    if device.platform == "cpu" and not PEAK_ROUNDS:  # one peak, just before the models
        # The dtype the model's products run in: bf16 compute multiplies bf16 by bf16.
        bf16 = args.precision == "bf16"
        peak = training.matmul_peak(dtype=jax.numpy.bfloat16 if bf16 else np.float32)
        peak_source = f"a jitted 4096x4096 {'bfloat16' if bf16 else 'float32'} matmul, measured here"
        print(f"CPU matmul peak: {peak / 1e9:.1f} GFLOP/s", flush=True)
    rows = []
    calls = 3 if device.platform == "cpu" else 20
    for name, (layers, d, heads, batch, context) in SIZES.items():
        if args.quick and name != "small (quick presets)":
            continue
        if device.platform == "cpu" and name.startswith("paper") and not args.all_sizes:
            continue
        r = measure(layers, d, heads, batch, context,
                    calls if name.startswith("small") or device.platform != "cpu" else 1, args.precision)
        rows.append(_row(name, f"{layers}x{d}, {heads} heads", f"{batch}x{context}",
                         f"{r['params']:,}", r, peak))
        print(rows[-1], flush=True)
        if name.startswith("small"):  # the README's first command, the same shapes
            r = measure_main_job(calls, args.precision)
            rows.append(_row("`ad/darkroom.py:quick_oracle` (+1-gram layer, dropout 0.1)",
                             "2x64, 4 heads", "64x100", f"{r['params']:,}", r, peak))
            print(rows[-1], flush=True)
    # The Uni[MASK] quick grid: 10 regimes x 3 seeds trained as vmapped replicas.
    r = measure_unimask(30, calls, args.precision)
    rows.append(_row("Uni[MASK] DoorKey quick grid (30 vmapped replicas)", "2x64, 4 heads",
                     "30x100x10", f"{r['params']:,} each", r, peak))
    print(rows[-1], flush=True)
    for mixture, name in ((False, "GPT-DT / DT, GPT-DTMA quick (hopper shapes)"),
                          (True, "GPT-DTMA / DTMA (MoA gates), same shapes")):
        r = measure_gpt_dt(mixture, calls, args.precision)
        rows.append(_row(name, "4x128, 4 heads", "32x60", f"{r['params']:,}", r, peak))
        print(rows[-1], flush=True)
    memory = harness.device_memory()
    dtype = "bfloat16" if args.precision == "bf16" else "float32"
    harness.table_section(
        HEADING,
        f"{harness.hardware_line()} (at the end; other jobs share these cores: compare rows, not "
        f"runs). Command: `{harness.command_line('train')}`. Float32 parameters; {dtype} activations; "
        "10 optimiser steps per jitted call; compile time excluded. FLOPs per token = "
        "6N + 12·L·d·T (Kaplan convention, N = non-embedding parameters; since the step tokens' "
        "mixing map was folded into their tables, it counts as embedding: `is_embedding`). "
        f"Peak host memory (ru_maxrss) {harness.host_peak_rss_mib():,.0f} MiB"
        + (f", peak device memory {memory['peak_mib']:,.0f} MiB. " if memory else ". ")
        + (f"MFU = the median over {PEAK_ROUNDS} timing rounds of the round's model FLOP/s over "
           f"the peak of a jitted 4096x4096 {dtype} matmul interleaved with it (median peak in "
           "brackets, GFLOP/s): `interleaved_mfu`. "
           if PEAK_ROUNDS else f"MFU = model FLOP/s / peak, peak {peak / 1e9 if peak else 0:,.1f} "
           f"GFLOP/s ({peak_source}). ")
        + f"Host malloc (icrl_jax/core/host_memory.py): {HOST_MALLOC}.",
        ["model", "layers x width", "batch x context", "params", "tokens/s", "steps/s",
         "model GFLOP/s", "MFU"], rows, args.write)


HEADLESS_HEADING = "## Headless-AD at the paper's bandit scale (steps/s)"


def headless_paper(args) -> None:
    """Steps/s of the paper-scale Headless-AD bandit model at batch 4 and 32 (to compare with
    the PyTorch reference on the same machine), in its own RESULTS.md section. On a CPU each
    timing round is interleaved with its own matmul peak (`interleaved_mfu`): on shared cores
    the peak moves by 20% between minutes, more than most changes to the step."""
    rows = []
    for batch, calls in ((4, 6), (32, 3)):
        r = interleaved_mfu(measure_headless_paper(batch, calls, args.precision))
        measured = [f"{r['peak'] / 1e9:.0f}", f"{100 * r['mfu']:.0f}%"] if "mfu" in r else ["n/a", "n/a"]
        rows.append([batch, f"{r['steps_per_s']:.3f}", f"{1 / r['steps_per_s']:.2f}",
                     f"{r['tokens_per_s']:,.0f}", f"{r['params']:,}", *measured])
        print(rows[-1], flush=True)
    harness.table_section(
        HEADLESS_HEADING,
        f"{harness.hardware_line()} (at the end). Command: `{harness.command_line('train')}`. "
        "`experiments/headless_ad/bernoulli_bandit.py` at paper scale (4 layers, d 512, "
        f"64 heads, rotary, context 300 steps), {args.precision}, one optimiser step per jitted "
        f"call, 6 (batch 4) or 3 (batch 32) timed calls a round after the compiling one, "
        f"{PEAK_ROUNDS} rounds. Tokens count one per context step (the action-set prompt is not "
        f"counted); MFU is the median over rounds of the round's model FLOP/s over a 4096x4096 "
        f"float32 matmul interleaved with it (median peak in the peak column). "
        f"Host malloc (icrl_jax/core/host_memory.py): {HOST_MALLOC}.",
        ["batch", "steps/s", "s/step", "tokens/s", "params", "peak (GFLOP/s)", "MFU"], rows,
        args.write)


if __name__ == "__main__":
    sys.exit(main())
