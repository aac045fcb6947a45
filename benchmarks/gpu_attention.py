"""The GPU attention diagnostic: the accelerator suite's slow or failing training rows again, each
with `model.attention_impl` forced, in about three and a half minutes on one GPU, compiles
included.

    PYTHONUNBUFFERED=1 python -m benchmarks gpu_attention [--tiny] [--device cpu|gpu|tpu]
        [--out DIR] [--budget 200] [--only PREFIX ...] [--serial] [--list] [--write]

A row is `MODEL/PRECISION/IMPLEMENTATION`: one jitted call of the trainer's steps
(`pipeline.train.make_train_steps`) on the same model, data and batch as the accelerator
suite's `train/MODEL/PRECISION` row (`accelerator.measure_training`), with the attention
implementation forced. Each row records

* `ran`: the attention paths the step actually took, counted while it was traced (a probe on
  `models.attention`'s kernels: "cudnn", "cudnn rejected" where cuDNN refused the shapes at
  trace time, "pallas", "blockwise", "dense"), and `auto_runs`, the paths the default
  (`attention_impl='auto'`) takes for the same model and precision (a trace, no compile);
* `trace_s` (tracing and lowering), `compile_s` (XLA's compile alone), `first_call_s` and the
  median of three timed calls: tokens/s, steps/s, MFU over the datasheet's dense peak.

Groups of rows (one model at one precision) run in child processes of their own, as in the
accelerator suite (`accelerator.run_group`: per-row budgets, a killed or failed row recorded in
one line, JSON and Markdown rewritten after every row). To fit the compiles into the budget the
groups run at the same time (`--serial`: one after another): they trace and compile in parallel
on the host's cores, and take turns on the device (a file lock), so that no timed call shares it
with another group's. A row that would start with less than `MIN_ROW_S` of the suite's budget
left is skipped and listed. `--tiny` shrinks every model so the suite runs in about a minute on
a CPU, where the "cudnn" rows fail in one line and the "pallas" rows run in interpret mode.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import fcntl
import json
import os
import statistics
import sys
import threading
import time
import traceback

from benchmarks import accelerator, harness
from benchmarks.accelerator import DONE, START, Row, one_line

HEADING = "## GPU attention diagnostic"
JSON_NAME, TABLE_NAME = "gpu_attention.json", "gpu_attention.md"
#: The whole suite's default budget, seconds.
SUITE_BUDGET_S = 200.0
#: A row that would start with less than this many seconds of the suite left is skipped.
MIN_ROW_S, TINY_MIN_ROW_S = 15.0, 0.0
TIMED_CALLS = 3


@dataclasses.dataclass(frozen=True)
class Spec:
    """A row: which model, precision and attention implementation; seconds it may take."""

    model: str  # main_job | xland_4096 | headless_ad_paper
    precision: str  # fp32 | bf16
    implementation: str  # a `model.attention_impl` value
    budget_s: float
    question: str

    @property
    def name(self) -> str:
        return f"{self.model}/{self.precision}/{self.implementation}"

    @property
    def group(self) -> str:
        return f"{self.model}/{self.precision}"


MODELS = {"main_job": "`ad/darkroom.py:quick` (AD 2x64, 4 heads of 16, rotary, window 50), batch 64 x 100",
          "xland_4096": "AD at XLand-100B's size (8x512, 8 heads of 64), batch 8 x 4,096 synthetic tokens",
          "headless_ad_paper": "`headless_ad/bernoulli_bandit.py` (4x512, 64 heads of 8, attention dropout "
                               "0.2187, rotary), batch 128 x 300 steps"}

#: Most informative first within each group; the groups run side by side.
SPECS = [
    Spec("main_job", "bf16", "cudnn", 40, "is cuDNN (what auto picks) the bf16 slowdown?"),
    Spec("main_job", "bf16", "dense", 40, "bf16 without cuDNN: as fast as fp32?"),
    Spec("main_job", "fp32", "dense", 40, "the fp32 reference (auto's choice in fp32)"),
    Spec("xland_4096", "fp32", "blockwise", 60, "does fp32 at 4,096 tokens compile and run blockwise?"),
    Spec("xland_4096", "fp32", "dense", 75, "dense fp32 at 4,096 tokens: fits, how fast?"),
    Spec("xland_4096", "bf16", "cudnn", 45, "cuDNN at 4,096 tokens: the accelerator row's 28% MFU again"),
    Spec("xland_4096", "bf16", "blockwise", 60, "blockwise bf16 against cuDNN"),
    Spec("xland_4096", "bf16", "pallas", 45, "the Pallas kernel in bf16 against cuDNN"),
    Spec("headless_ad_paper", "bf16", "dense", 90, "dense with dropout at ~600 tokens, head size 8"),
    Spec("headless_ad_paper", "bf16", "blockwise", 90, "blockwise (auto's choice from 512 tokens): the 3.1% MFU?"),
]
SPEC_BY_NAME = {s.name: s for s in SPECS}


def rows(only: list[str] | None = None) -> list[Row]:
    chosen = [s for s in SPECS if not only or any(s.name.startswith(p) for p in only)]
    if not chosen:
        raise SystemExit(f"--only {' '.join(only)}: no such rows (see --list)")
    return [Row(s.name, f"{MODELS[s.model]}, {s.precision}; {s.question}", s.budget_s) for s in chosen]


# --- which attention ran (in a child) ----------------------------------------------------------

class AttentionProbe:
    """Counts the attention kernels `models.attention.dot_product_attention` calls while a step
    is traced: each kernel function of that module is wrapped where it is looked up."""

    KERNELS = {"_cudnn_attention": "cudnn", "pallas_attention": "pallas",
               "blockwise_attention": "blockwise", "dense_attention": "dense"}

    def __init__(self):
        from icrl_jax.models import attention
        self.seen: collections.Counter = collections.Counter()
        self.installed = []
        for attribute, label in self.KERNELS.items():
            kernel = getattr(attention, attribute, None)
            if callable(kernel):
                setattr(attention, attribute, self._wrap(kernel, label))
                self.installed.append(label)

    def _wrap(self, kernel, label):
        def counted(*args, **kwargs):
            out = kernel(*args, **kwargs)
            self.seen["cudnn rejected" if label == "cudnn" and out is None else label] += 1
            return out
        return counted

    def take(self) -> str:
        """What was counted since the last call, e.g. "cudnn x2"; then start again."""
        if not self.installed:
            return "unknown (no kernel of models.attention found to probe)"
        text = ", ".join(f"{label} x{n}" for label, n in sorted(self.seen.items())) or "none"
        self.seen.clear()
        return text


# --- the rows' models (in a child) -----------------------------------------------------------

def experiment_config(model: str, precision: str, tiny: bool):
    """The accelerator suite's config for `train/MODEL/PRECISION` (`accelerator.measure_training`),
    before its `train.steps_per_call`."""
    if model == "main_job":
        from icrl_jax.experiments.ad.darkroom import get_config
        config = get_config("quick")
        config.train.compute_dtype = precision
        if tiny:
            config.data.num_train_tasks, config.train.batch_size = 8, 8
        return config
    from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
    config = get_config("")
    config.data.num_train_tasks = 512
    config.data.num_steps = config.train.seq_len
    config.train.compute_dtype = precision
    if tiny:
        config.model.update(dict(num_layers=1, d_model=32, num_heads=2))
        config.train.update(dict(batch_size=2, seq_len=20))
        config.data.update(dict(num_train_tasks=8, num_steps=20))
    return config


def xland_sizes(tiny: bool) -> tuple[int, int, int, int, int]:
    """(layers, d_model, heads, batch, context) of the accelerator suite's XLand-size rows."""
    return (1, 32, 2, 2, 64) if tiny else (8, 512, 8, 8, 4096)


def steps_per_call(model: str, tiny: bool) -> int:
    """As the accelerator suite's rows: 10 steps a call for the main job, 5 for the others."""
    if model == "main_job":
        return 2 if tiny else 10
    if model == "headless_ad_paper":
        return 1 if tiny else 5
    return 2 if tiny else 5


#: Training data by model, shared by a group's rows (it does not depend on attention).
_DATA: dict = {}


def training_parts(spec: Spec, implementation: str, tiny: bool):
    """(method, optimizer, train data, train config, layers, d_model) of a row's model with
    `model.attention_impl = implementation`."""
    import jax
    import numpy as np

    from icrl_jax.pipeline.train import make_optimizer
    if spec.model == "xland_4096":
        from benchmarks.training import synthetic_windows
        from icrl_jax.core.config import default_train_config
        from icrl_jax.data.windows import sample_windows
        from icrl_jax.data.train_data import on_device
        from icrl_jax.methods.ad import AD
        from icrl_jax.methods.fields import ad_model_config
        layers, d_model, heads, batch, context = xland_sizes(tiny)
        model = ad_model_config()
        model.update(dict(num_layers=layers, d_model=d_model, num_heads=heads, max_len=context,
                          label_smoothing=0.0, attention_impl=implementation))
        train = default_train_config()
        train.update(dict(num_steps=10_000, batch_size=batch, seq_len=context,
                          steps_per_call=steps_per_call(spec.model, tiny), compute_dtype=spec.precision))
        if spec.model not in _DATA:
            windows = synthetic_windows(n=16 if tiny else 64, t=max(1000, 2 * context))
            _DATA[spec.model] = on_device(jax.device_put(windows), sample_windows, context)
        return AD(model, 5, 81), make_optimizer(train), _DATA[spec.model], train, layers, d_model

    from icrl_jax.core.config import finalize
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import build_source
    from icrl_jax.methods import build_method
    from icrl_jax.pipeline import run as R
    config = experiment_config(spec.model, spec.precision, tiny)
    config.train.steps_per_call = steps_per_call(spec.model, tiny)
    config.model.attention_impl = implementation
    config = finalize(config)
    env = R.build_env(config)
    method = build_method(config, env)
    if spec.model not in _DATA:
        steps, tasks = int(config.data.num_steps), int(config.data.num_train_tasks)
        source = build_source(config.data.source, env, steps, dict(config.data.source_kwargs))
        history = generate_histories(env, source, env.task_params(np.arange(tasks)), steps,
                                     jax.random.PRNGKey(0))
        _DATA[spec.model] = method.training_data(history, config, env)
    return (method, make_optimizer(config.train), _DATA[spec.model], config.train,
            int(config.model.num_layers), int(config.model.d_model))


def prepared_step(method, optimizer, train_data, train_config):
    """(the jitted training steps, the sharded state, the placed data, the seed), as
    `benchmarks.training.time_training` prepares them."""
    import jax

    from icrl_jax.pipeline.train import data_mesh, init_state, make_train_steps, place_data, state_sharding
    build = lambda _: (method, optimizer)  # noqa: E731
    mesh = data_mesh(train_config.batch_size)
    state = jax.device_put(init_state(build, train_data, jax.random.PRNGKey(0)), state_sharding(mesh))
    steps = make_train_steps(build, train_data, train_config, mesh)
    return steps, state, place_data(train_data.arrays, mesh), jax.random.PRNGKey(1)


@contextlib.contextmanager
def device_turn(lock_path: str | None):
    """Hold the device alone (an exclusive lock on `lock_path`) while timing."""
    if not lock_path:
        yield 0.0
        return
    begin = time.perf_counter()
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - begin
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_AUTO: dict[str, str] = {}


def measure(name: str, tiny: bool, probe: AttentionProbe, lock_path: str | None) -> dict:
    import jax

    from benchmarks import training
    spec = SPEC_BY_NAME[name]
    result = dict(model=spec.model, precision=spec.precision, implementation=spec.implementation)
    if spec.group not in _AUTO:  # what the default picks here: a trace, no compile
        steps, state, data, seed = prepared_step(*training_parts(spec, "auto", tiny)[:4])
        probe.take()
        try:
            jax.eval_shape(steps, state, data, seed, None)
            _AUTO[spec.group] = probe.take()
        except Exception as e:  # noqa: BLE001 - recorded; the forced implementation still runs
            _AUTO[spec.group] = f"trace failed: {one_line(e)}"
    result["auto_runs"] = _AUTO[spec.group]
    method, optimizer, train_data, train_config, layers, d_model = training_parts(spec, spec.implementation, tiny)
    steps, state, data, seed = prepared_step(method, optimizer, train_data, train_config)
    probe.take()
    begin = time.perf_counter()
    try:
        lowered = steps.lower(state, data, seed, None)
    finally:
        result.update(ran=probe.take(), trace_s=time.perf_counter() - begin)
    begin = time.perf_counter()
    compiled = lowered.compile()
    result["compile_s"] = time.perf_counter() - begin
    with device_turn(lock_path) as waited:
        begin = time.perf_counter()
        state, metrics = compiled(state, data, seed, None)
        jax.block_until_ready(metrics)
        result.update(waited_for_device_s=waited, first_call_s=time.perf_counter() - begin)
        seconds = []
        for _ in range(TIMED_CALLS):
            begin = time.perf_counter()
            state, metrics = compiled(state, data, seed, None)
            jax.block_until_ready(metrics)
            seconds.append(time.perf_counter() - begin)
    batch, context = int(train_config.batch_size), int(train_config.seq_len)
    timing = harness.Timing(result["compile_s"], seconds)
    result.update(training.throughput(timing, state.params, int(train_config.steps_per_call), batch,
                                      context, layers, d_model))
    result.update(compile_s=result["compile_s"], seconds_per_call=statistics.median(seconds),
                  batch=batch, context=context, layers=layers, d_model=d_model)
    peak = training.datasheet_peak(spec.precision)
    result.update(peak_flops_per_s=peak, mfu=result["model_flops_per_s"] / peak if peak else None)
    return result


def child(names: list[str], tiny: bool, deadline: float, lock_path: str | None) -> None:
    """Measure `names` in order, printing a start line and a result line for each; a row that
    would start with less than `MIN_ROW_S` left before `deadline` is skipped."""
    from icrl_jax.core import cpu_devices
    cpu_devices.use_one_device_per_core()  # as the accelerator suite (a GPU or TPU ignores it)
    probe = AttentionProbe()
    least = TINY_MIN_ROW_S if tiny else MIN_ROW_S
    for name in names:
        print(START + name, flush=True)
        begin = time.perf_counter()
        left = deadline - time.time()
        if left < least:
            result = dict(status="skipped", error=f"would not fit: {left:.0f} s of the suite's budget "
                          f"left, a row needs at least {least:.0f} s")
        else:
            try:
                result = dict(measure(name, tiny, probe, lock_path), status="ok")
            except Exception as e:  # noqa: BLE001 - a failed row is recorded, the next one runs
                traceback.print_exc()
                result = dict(status="failed", error=one_line(e), ran=probe.take(),
                              auto_runs=_AUTO.get(SPEC_BY_NAME[name].group, ""))
        result.update(accelerator._device_fields(), wall_s=time.perf_counter() - begin)
        print(DONE + json.dumps(dict(result, name=name)), flush=True)


# --- the parent --------------------------------------------------------------------------------

class AttentionSuite(accelerator.Suite):
    name, module, json_name, table_name = "gpu_attention", "benchmarks.gpu_attention", JSON_NAME, TABLE_NAME

    def child_command(self, names: list[str], budgets: dict[str, float]) -> list[str]:
        return (super().child_command(names, budgets) + ["--deadline", repr(self.deadline)]
                + (["--lock", self.lock_path] if self.lock_path else []))

    def report(self, name: str) -> None:
        r = self.results[name]
        line = f"[{len(self.results):>2}/{len(self.rows)}] {name}: "
        if r["status"] == "ok":
            mfu = f", MFU {100 * r['mfu']:.1f}%" if r.get("mfu") else ""
            line += (f"{r['steps_per_s']:,.2f} steps/s, {r['tokens_per_s']:,.0f} tokens/s{mfu}; compile "
                     f"{r['compile_s']:.1f} s (trace {r['trace_s']:.1f} s)")
        else:
            line += f"{r['status'].upper()} {r.get('error', '')}"
        if r.get("ran"):
            line += f"; ran {r['ran']} (auto: {r.get('auto_runs', '?')})"
        print(line + f" ({r.get('wall_s', 0):.0f} s; {time.time() - self.started:.0f} s in)", flush=True)

    def section(self, document: dict) -> str:
        device = document["device"]
        where = (f"{device['platform']} `{device['device_kind']}` x{device['device_count']}, "
                 f"jax {device['jax_version']}" if device else "no row finished")
        prose = (f"Command: `{document['command']}`. Device: {where}; host CPU {document['host_cpu']}, "
                 f"{document['host_cores']} cores. Whole suite {document['elapsed_s']:.0f} s, compiles "
                 "included. Each row is the accelerator suite's training row of that model and precision "
                 "with `model.attention_impl` forced; `ran` counts the attention kernels the step took "
                 "when traced, `auto` those the default takes. Throughput: the median of "
                 f"{TIMED_CALLS} timed calls after the first; compile is XLA's alone, trace apart.")
        table = []
        for r in document["rows"]:
            if r["status"] == "ok":
                mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else ""
                speed = f"{r['steps_per_s']:,.2f} steps/s ({r['tokens_per_s']:,.0f} tokens/s)"
                times = f"{r['trace_s']:.1f} / {r['compile_s']:.1f} / {r['first_call_s']:.2f}"
                device_peak = f"{r['device_peak_mib']:,.0f}" if r.get("device_peak_mib") is not None else "n/a"
            else:
                speed, mfu, times, device_peak = f"{r['status']}: {r.get('error', '')}", "", "", ""
            table.append([r["name"], r.get("ran", ""), r.get("auto_runs", ""), speed, mfu, times, device_peak])
        table += [[name, "", "", "not run (suite stopped)", "", "", ""] for name in document["waiting"]]
        return "\n".join([HEADING, "", prose, "", harness.markdown_table(
            ["row", "ran", "auto runs", "throughput", "MFU", "trace / compile / first call (s)",
             "peak device (MiB)"], table), ""])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = accelerator.suite_parser("gpu_attention", __doc__.split("\n\n")[0], SUITE_BUDGET_S,
                                      (JSON_NAME, TABLE_NAME))
    parser.add_argument("--serial", action="store_true", help="one group after another, not side by side")
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--lock", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = argv
    harness.choose_device(args.device)
    if args.child:
        return child(args.child.split(","), args.tiny, args.deadline, args.lock)
    chosen = rows(args.only)
    if args.list:
        for r in chosen:
            print(f"{r.name:<32} {r.budget_s:>4.0f} s  {r.what}")
        return
    args.child_environment = dict(os.environ)
    if not args.serial:  # groups share the device: each takes memory as it needs it
        args.child_environment.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.makedirs(args.out, exist_ok=True)
    suite = AttentionSuite(args, chosen)
    suite.deadline = suite.started + args.budget
    suite.lock_path = None if args.serial else os.path.join(args.out, ".device-turn.lock")
    groups: dict[str, list[str]] = {}
    for r in chosen:
        groups.setdefault(SPEC_BY_NAME[r.name].group, []).append(r.name)
    print(f"{len(chosen)} rows in {len(groups)} groups ({'one after another' if args.serial else 'side by side'}), "
          f"at most {args.budget:.0f} s; results in {args.out}", flush=True)
    suite.write()
    if args.serial:
        for names in groups.values():
            accelerator.run_group(suite, names, suite.deadline)
    else:
        threads = [threading.Thread(target=accelerator.run_group, args=(suite, names, suite.deadline))
                   for names in groups.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    accelerator.publish(suite, args, TABLE_NAME, HEADING)


if __name__ == "__main__":
    main()
