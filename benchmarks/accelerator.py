"""The accelerator suite: this project's speed on one device, in at most ten minutes, compiles
included.

    PYTHONUNBUFFERED=1 python -m benchmarks accelerator [--tiny] [--device cpu|gpu|tpu] [--out DIR]
        [--budget 570] [--only PREFIX ...] [--write]

Rows (`ROWS`), most important first:

* `train/...`: training tokens/s, model FLOP/s and MFU, float32 and bf16 compute, of the main
  job's model (`ad/darkroom.py:quick`, on its own histories), the paper-scale Headless-AD
  (`headless_ad/bernoulli_bandit.py`, Thompson-sampling histories), and AD at XLand-100B's model
  size (8 layers, d_model 512, 8 heads) on 4,096-token windows of synthetic tokens, with the
  shared transformer's defaults (whatever attention implementation they select);
* `eval/...`: in-context evaluation env-steps/s of the main job's model (randomly initialised,
  rolled out by `run_policies` as `evaluate` does) at 4,096, 65,536 and 1,048,576 envs;
* `envs/...`: env steps/s of every registered JAX env whose simulator is installed, at 65,536
  envs (`jit(scan(vmap(step)))`), beside gymnax's Bernoulli bandit and xminigrid's own step;
* `histories/...`: learning-history generation (Thompson sampling on 20-arm bandits, tabular
  Q-learning on the composite Dark Room), 10,000 histories each.

The rows run in child processes, one per group (a group's rows share compiled code and the
runtime's start), while this process only reads their answers: it never starts JAX, so the
children have the whole device. Every row has a time budget; a row that passes it is killed
(the group's child restarts for the rows after it) and a row that fails (out of memory, say) is
recorded with its one-line error, as is every row still waiting when `--budget` seconds are
spent. After every row the JSON file (`accelerator.json`) and the Markdown table
(`accelerator.md`) in `--out` are rewritten, so a killed suite still leaves what it measured.

Peak device memory is what JAX reports (`memory_stats`, GPUs and TPUs): the child process's peak
up to the end of the row, so a group's later rows include its earlier ones. `--tiny` shrinks every
size so the suite runs in about a minute on a CPU (tests/test_benchmarks.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from benchmarks import harness

HEADING = "## Accelerator suite"
JSON_NAME, TABLE_NAME = "accelerator.json", "accelerator.md"
START, DONE = "@@start ", "@@row "


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    what: str
    budget_s: float  # at full size; tiny rows get `TINY_BUDGET_S`


TINY_BUDGET_S = 300.0
#: The whole suite's default budget, seconds: ten minutes less a margin for the last row's kill.
SUITE_BUDGET_S = 570.0
EVAL_ENVS = (4_096, 65_536, 1_048_576)
TINY_EVAL_ENVS = (16, 64, 256)
ENV_BATCH, TINY_ENV_BATCH = 65_536, 256


def training_rows(tiny: bool = False) -> list[Row]:
    rows = []
    for precision in ("fp32", "bf16"):
        rows += [
            Row(f"train/main_job/{precision}", f"`ad/darkroom.py:quick` (AD 2x64, rotary, window 50), "
                f"batch 64 x 100 steps, {precision}", 60),
            Row(f"train/headless_ad_paper/{precision}", "`headless_ad/bernoulli_bandit.py` (4x512, "
                f"64 heads, rotary), batch 128 x 300 steps, {precision}", 75),
            Row(f"train/ad_xland_size_4096/{precision}", "AD at XLand-100B's size (8x512, 8 heads), "
                f"batch 8 x 4,096 tokens, synthetic tokens, {precision}", 90),
        ]
    return rows


def eval_rows(tiny: bool = False) -> list[Row]:
    return [Row(f"eval/main_job/{n}", f"`ad/darkroom.py:quick` in context, {n:,} envs", budget)
            for n, budget in zip(EVAL_ENVS, (60, 60, 120))]


def env_names() -> list[str]:
    """Every registered JAX env whose simulator is installed (host simulators are not JAX's),
    with xminigrid's many ids narrowed to one XLand and one MiniGrid; then the other packages'
    own steps where installed."""
    from icrl_jax import envs
    from icrl_jax.core.extras import MissingExtraError

    names = []
    for name in envs.REGISTRY.names():
        if name.startswith(("XLand-MiniGrid", "MiniGrid")) and name not in XMINIGRID_OURS:
            continue
        try:
            constructor = envs.REGISTRY.get(name)
        except MissingExtraError:
            continue
        constructor = getattr(constructor, "func", constructor)
        if isinstance(constructor, type) and issubclass(constructor, envs.HostEnv):
            continue  # a host simulator behind the bridge
        names.append(name)
    names.append("gymnax:BernoulliBandit-misc")
    if _installed("xminigrid"):
        names.append(f"xminigrid:{XMINIGRID_NATIVE}")
    return names


XMINIGRID_OURS = ("XLand-MiniGrid-R1-9x9", "MiniGrid-EmptyRandom-8x8")
XMINIGRID_NATIVE = "MiniGrid-EmptyRandom-8x8"


def _installed(package: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(package) is not None


#: Envs on a physics simulator (brax, MuJoCo MJX): `--tiny` leaves them out, as their compiles
#: alone take minutes on a CPU.
PHYSICS_PACKAGES = ("brax", "mujoco")


def env_rows(tiny: bool = False) -> list[Row]:
    from icrl_jax.envs import SIMULATOR_PACKAGES
    names = [name for name in env_names() if not (tiny and any(
        package in PHYSICS_PACKAGES for package in SIMULATOR_PACKAGES.get(name, ())))]
    return [Row(f"envs/{name}", f"{name} env steps/s", 40) for name in names]


def history_rows(tiny: bool = False) -> list[Row]:
    return [Row("histories/thompson", "Thompson sampling, 10,000 histories x 300 steps, 20 arms", 60),
            Row("histories/q_learning", "tabular Q-learning, 10,000 histories x 200 episodes x 20 steps, "
                "125-action composite Dark Room", 75)]


GROUPS = {"train": training_rows, "eval": eval_rows, "envs": env_rows, "histories": history_rows}


# --- the rows' measurements (run in a child) ------------------------------------------------

def _device_fields() -> dict:
    import jax
    device = jax.devices()[0]
    memory = harness.device_memory(device)
    return dict(platform=device.platform, device_kind=device.device_kind,
                device_count=jax.device_count(), jax_version=jax.__version__,
                device_peak_mib=memory["peak_mib"] if memory else None,
                device_limit_mib=memory["limit_mib"] if memory else None,
                host_peak_rss_mib=harness.host_peak_rss_mib())


def measure_training(name: str, tiny: bool, budget_s: float) -> dict:
    import jax
    from benchmarks import training

    _, model, precision = name.split("/")
    rounds = dict(rounds=2 if tiny else 5, budget_s=budget_s / 2)
    if model == "main_job":
        from icrl_jax.experiments.ad.darkroom import get_config
        config = get_config("quick")
        config.train.compute_dtype = precision
        if tiny:
            config.data.num_train_tasks, config.train.batch_size = 8, 8
        result = training.measure_experiment(config, steps_per_call=2 if tiny else 10, **rounds)
        layers, d_model = int(config.model.num_layers), int(config.model.d_model)
    elif model == "headless_ad_paper":
        from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
        config = get_config("")
        config.data.num_train_tasks = 512
        config.data.num_steps = config.train.seq_len
        config.train.compute_dtype = precision
        if tiny:
            config.model.update(dict(num_layers=1, d_model=32, num_heads=2))
            config.train.update(dict(batch_size=2, seq_len=20))
            config.data.update(dict(num_train_tasks=8, num_steps=20))
        result = training.measure_experiment(config, steps_per_call=1 if tiny else 5, **rounds)
        layers, d_model = int(config.model.num_layers), int(config.model.d_model)
    else:
        layers, d_model, heads, batch, context = (1, 32, 2, 2, 64) if tiny else (8, 512, 8, 8, 4096)
        result = training.measure_ad(layers, d_model, heads, batch, context, precision,
                                     steps_per_call=2 if tiny else 5, histories=16 if tiny else 64,
                                     **rounds)
    peak = training.datasheet_peak(precision)
    peak_source = "datasheet"
    if peak is None and jax.devices()[0].platform == "cpu":
        import jax.numpy as jnp
        peak = training.matmul_peak(size=1024 if tiny else 4096,
                                    dtype=jnp.bfloat16 if precision == "bf16" else jnp.float32)
        peak_source = "a matmul measured here"
    result.update(layers=layers, d_model=d_model, peak_flops_per_s=peak, peak_source=peak_source,
                  mfu=result["model_flops_per_s"] / peak if peak else None)
    return result


#: The eval group's measured env-steps/s by N: the largest N picks its rollout length from them.
_EVAL_RATES: dict[int, float] = {}


def measure_eval(name: str, tiny: bool, budget_s: float) -> dict:
    import jax
    import numpy as np

    from icrl_jax.data.rollout import run_policies
    from icrl_jax.experiments.ad.darkroom import get_config
    from icrl_jax.methods import build_method
    from icrl_jax.pipeline.run import build_env

    num_envs = int(name.split("/")[-1])
    if tiny:
        num_envs = TINY_EVAL_ENVS[EVAL_ENVS.index(num_envs)]
    config = get_config("quick")
    env = build_env(config)
    method = build_method(config, env)
    steps = 20 if tiny else int(config.eval.num_steps)
    if _EVAL_RATES and not tiny:  # fit one call of the largest N into a third of the budget
        rate = _EVAL_RATES[max(_EVAL_RATES)]
        steps = int(max(50, min(steps, rate * budget_s / 3 / num_envs)))
    # An accelerator wants more envs a call than the config's CPU-sized chunk.
    chunk = int(config.eval.chunk_size) if tiny else min(num_envs, 65_536)
    ids = np.arange(num_envs)
    tasks = env.task_params(ids % env.num_tasks)
    probe = _probe_windows(env, config)
    params = method.init(jax.random.PRNGKey(1), probe)
    policies = method.policies(params, env, config)
    policy_name = sorted(policies)[-1]  # "model"

    def rollout():
        out = run_policies(env, {policy_name: policies[policy_name]}, tasks, steps,
                           jax.random.PRNGKey(2), chunk_size=chunk, keep_state=False)
        return out[policy_name]["rewards"]

    # One call compiles; a second is timed unless the first took over a quarter of the budget.
    timing = harness.time_call(rollout, rounds=1 if num_envs >= 65_536 else 3, budget_s=budget_s / 4)
    rate = num_envs * steps / timing.seconds
    _EVAL_RATES[num_envs] = rate
    return dict(num_envs=num_envs, steps=steps, chunk_size=chunk, env_steps_per_s=rate,
                compile_s=timing.compile_s, seconds_per_call=timing.seconds, rounds=len(timing.rounds))


def _probe_windows(env, config):
    """A batch of training windows of the model's shape, to initialise its parameters."""
    import jax
    import numpy as np

    from icrl_jax.data.windows import to_step_windows
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import uniform_random
    return to_step_windows(generate_histories(env, uniform_random(), env.task_params(np.arange(1)),
                                              config.train.seq_len, jax.random.PRNGKey(0)))


def _env_and_step(name: str):
    """(step(key, state, actions, params) -> (obs, state, reward), reset(keys, params) ->
    state, params for N envs, actions(t, key, params, N)) of one env row."""
    import jax
    import jax.numpy as jnp

    if name.startswith("gymnax:"):
        import gymnax
        env, params = gymnax.make(name.split(":", 1)[1])
        num = env.num_actions
        return (lambda key, state, a, p: jax.vmap(env.step, (0, 0, 0, None))(
                    jax.random.split(key, a.shape[0]), state, a, p)[:3],
                lambda keys, p: jax.vmap(env.reset, (0, None))(keys, p)[1],
                lambda n: params,
                lambda t, key, p, n: (jnp.arange(n) + t) % num)
    if name.startswith("xminigrid:"):
        import xminigrid
        env, params = xminigrid.make(name.split(":", 1)[1])
        num = env.num_actions(params)

        def step(key, timestep, a, p):
            timestep = jax.vmap(env.step, (None, 0, 0))(p, timestep, a)
            return timestep.observation, timestep, timestep.reward

        return (step, lambda keys, p: jax.vmap(env.reset, (None, 0))(p, keys), lambda n: params,
                lambda t, key, p, n: (jnp.arange(n) + t) % num)
    from icrl_jax import envs
    env = envs.make(name)

    def params_for(n):
        ids = jnp.arange(n, dtype=jnp.int32)
        return env.task_params(ids if env.num_tasks is None else ids % env.num_tasks)

    def actions(t, key, p, n):
        if env.continuous_actions:
            return jax.random.uniform(key, (n, env.action_dim), minval=-1.0, maxval=1.0)
        counts = p.action_mask.sum(-1).astype(jnp.int32) if hasattr(p, "action_mask") else env.num_actions
        return (jnp.arange(n, dtype=jnp.int32) + t) % counts  # each task's available actions in turn

    return (lambda key, state, a, p: jax.vmap(env.step)(jax.random.split(key, a.shape[0]), state, a, p)[:3],
            lambda keys, p: jax.vmap(env.reset)(keys, p)[1], params_for, actions)


def measure_env(name: str, tiny: bool, budget_s: float) -> dict:
    """`jit(scan(vmap(step)))` over N envs for T steps; rewards and observations are summed into
    the carry so that XLA keeps all the work."""
    import jax
    import jax.numpy as jnp

    env_name = name.split("/", 1)[1]
    batch, steps = (TINY_ENV_BATCH, 10) if tiny else (ENV_BATCH, 100)
    step, reset, params_for, actions = _env_and_step(env_name)
    params = params_for(batch)

    def rollout(key):
        key, reset_key = jax.random.split(key)
        state = reset(jax.random.split(reset_key, batch), params)

        def body(carry, t):
            state, key, total = carry
            key, act_key, step_key = jax.random.split(key, 3)
            obs, state, reward = step(step_key, state, actions(t, act_key, params, batch), params)
            leaves = jax.tree.leaves(obs)
            checksum = sum(jnp.sum(x.astype(jnp.float32)) for x in leaves)
            return (state, key, total + jnp.sum(reward.astype(jnp.float32)) + 1e-9 * checksum), None

        carry, _ = jax.lax.scan(body, (state, key, jnp.float32(0.0)), jnp.arange(steps, dtype=jnp.int32))
        return carry[2]

    timing = harness.time_call(jax.jit(rollout), jax.random.PRNGKey(0), rounds=3, budget_s=budget_s / 2)
    return dict(num_envs=batch, steps=steps, env_steps_per_s=timing.rate(batch * steps),
                compile_s=timing.compile_s, seconds_per_call=timing.seconds, rounds=len(timing.rounds))


def measure_histories(name: str, tiny: bool, budget_s: float) -> dict:
    import jax
    import numpy as np

    from icrl_jax import envs
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import q_learning, thompson_sampling

    n = 64 if tiny else 10_000
    if name.endswith("thompson"):
        env, steps = envs.make("bernoulli_bandit", arms=20), 30 if tiny else 300
        source = thompson_sampling("exact")
    else:
        env = envs.make("darkroom_composite")
        episodes = 10 if tiny else 200
        steps, source = episodes * 20, q_learning(env, episodes)
    params = env.task_params(np.arange(n) % env.num_tasks if env.num_tasks else np.arange(n))
    # The CPU's histories go in chunks of 1,000 (cache-sized); an accelerator takes them at once.
    chunk = 1000 if jax.devices()[0].platform == "cpu" else None
    timing = harness.time_call(lambda: generate_histories(env, source, params, steps, jax.random.PRNGKey(0),
                                                          chunk_size=chunk),
                               rounds=2, budget_s=budget_s / 2)
    return dict(histories=n, steps=steps, seconds_per_call=timing.seconds, compile_s=timing.compile_s,
                histories_per_s=timing.rate(n), env_steps_per_s=timing.rate(n * steps),
                rounds=len(timing.rounds))


MEASURE = {"train": measure_training, "eval": measure_eval, "envs": measure_env,
           "histories": measure_histories}


def child(names: list[str], tiny: bool, budgets: dict[str, float]) -> None:
    """Measure `names` in order, printing a start line and a result line for each."""
    from icrl_jax.core import cpu_devices
    cpu_devices.use_one_device_per_core()  # as `icrl-jax` runs on a CPU (a GPU or TPU ignores it)
    for name in names:
        print(START + name, flush=True)
        begin = time.perf_counter()
        try:
            result = MEASURE[name.split("/")[0]](name, tiny, budgets[name])
            result.update(status="ok")
        except Exception as e:  # noqa: BLE001 - a failed row is recorded, the next one runs
            traceback.print_exc()
            result = dict(status="failed", error=one_line(e))
        result.update(_device_fields(), wall_s=time.perf_counter() - begin)
        print(DONE + json.dumps(dict(result, name=name)), flush=True)


def one_line(error: BaseException | str) -> str:
    """An error's first line with its type, at most 300 characters."""
    text = str(error).strip().splitlines()
    text = text[0] if text else ""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {text}"
    return text[:300]


# --- the parent: budgets, children, the files ------------------------------------------------

class Suite:
    """The rows, their results so far, and the JSON / Markdown files they are written to. Other
    suites on this machinery (`gpu_attention.py`) subclass it: their name, child module, files,
    budgets and table."""

    name, module, json_name, table_name = "accelerator", "benchmarks.accelerator", JSON_NAME, TABLE_NAME

    def __init__(self, args, rows: list[Row]):
        self.args, self.rows = args, rows
        self.results: dict[str, dict] = {}
        self.started = time.time()
        self.lock = threading.Lock()  # groups may run in threads of their own
        self.meta = dict(suite=self.name, tiny=args.tiny, command=" ".join(
            [f"python -m benchmarks {self.name}", *args.argv]), budget_s=args.budget,
            started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            host_cpu=harness.cpu_model(), host_cores=os.cpu_count())

    def row_budget(self, row: Row) -> float:
        return TINY_BUDGET_S if self.args.tiny else row.budget_s

    def child_command(self, names: list[str], budgets: dict[str, float]) -> list[str]:
        return [sys.executable, "-m", self.module, "--child", ",".join(names), "--budgets",
                json.dumps(budgets)] + (["--tiny"] if self.args.tiny else [])

    def record(self, name: str, result: dict) -> None:
        row = next(r for r in self.rows if r.name == name)
        with self.lock:
            self.results[name] = dict(result, name=name, what=row.what)
            self.report(name)
            self.write()

    def report(self, name: str) -> None:
        r = self.results[name]
        done = len(self.results)
        line = f"[{done:>2}/{len(self.rows)}] {name}: "
        if r["status"] != "ok":
            line += f"{r['status'].upper()} {r.get('error', '')}"
        else:
            line += summary(r)
            if r.get("device_peak_mib") is not None:
                line += f", peak device {r['device_peak_mib']:,.0f} MiB"
        line += f" ({r.get('wall_s', 0):.0f} s; {time.time() - self.started:.0f} s in)"
        print(line, flush=True)

    def write(self) -> None:
        os.makedirs(self.args.out, exist_ok=True)
        ok = [r for r in self.results.values() if "device_kind" in r]
        device = {k: ok[-1][k] for k in ("platform", "device_kind", "device_count", "jax_version")} if ok else {}
        peak = max((r["device_peak_mib"] for r in ok if r.get("device_peak_mib") is not None), default=None)
        document = dict(self.meta, device=device, device_peak_mib=peak,
                        elapsed_s=time.time() - self.started,
                        rows=[self.results[r.name] for r in self.rows if r.name in self.results],
                        waiting=[r.name for r in self.rows if r.name not in self.results])
        _atomic_write(os.path.join(self.args.out, self.json_name), json.dumps(document, indent=1) + "\n")
        _atomic_write(os.path.join(self.args.out, self.table_name), self.section(document))

    def section(self, document: dict) -> str:
        device = document["device"]
        where = (f"{device['platform']} `{device['device_kind']}` x{device['device_count']}, "
                 f"jax {device['jax_version']}" if device else "no row finished")
        peak = document["device_peak_mib"]
        prose = (f"Command: `{document['command']}`. Device: {where}; host CPU {document['host_cpu']}, "
                 f"{document['host_cores']} cores; load average {harness.load_average():.1f} at the end. "
                 f"Peak device memory over the suite: "
                 f"{f'{peak:,.0f} MiB' if peak is not None else 'not reported by JAX for this device'}. "
                 f"Whole suite {document['elapsed_s']:.0f} s, compiles included. Each row's number is the "
                 "median over its timed calls, the compiling call apart (`compile`, which includes one run); "
                 "peak device memory is the row's process's so far (`memory_stats`). MFU: model FLOP/s "
                 "(6N + 12·L·d·T a token) over the datasheet's dense peak (TF32 for fp32), or on a CPU over a "
                 "jitted matmul timed in the row.")
        gymnax = next((r for r in document["rows"] if r["name"] == "envs/gymnax:BernoulliBandit-misc"
                       and r["status"] == "ok"), None)
        rows = [table_row(r, gymnax) for r in document["rows"]]
        rows += [[name, "", "not run (suite stopped)", "", "", "", ""] for name in document["waiting"]]
        return "\n".join([HEADING, "", prose, "", harness.markdown_table(
            ["row", "what", "throughput", "MFU (envs: vs gymnax)", "compile (s)", "peak device (MiB)",
             "peak host RSS (MiB)"], rows), ""])


def summary(r: dict) -> str:
    """A row's main number, in words."""
    if "tokens_per_s" in r:
        mfu = f", MFU {100 * r['mfu']:.1f}%" if r.get("mfu") else ""
        return f"{r['tokens_per_s']:,.0f} tokens/s{mfu}, compile {r['compile_s']:.1f} s"
    if "histories_per_s" in r:
        return (f"{r['histories_per_s']:,.0f} histories/s ({r['env_steps_per_s']:,.0f} env-steps/s), "
                f"compile {r['compile_s']:.1f} s")
    return (f"{r['env_steps_per_s']:,.0f} env-steps/s ({r['num_envs']:,} envs x {r['steps']} steps), "
            f"compile {r['compile_s']:.1f} s")


def table_row(r: dict, gymnax: dict | None = None) -> list[str]:
    if r["status"] != "ok":
        return [r["name"], r["what"], f"{r['status']}: {r.get('error', '')}", "", "", "", ""]
    if "tokens_per_s" in r:
        throughput = f"{r['tokens_per_s']:,.0f} tokens/s ({r['steps_per_s']:,.2f} steps/s)"
    elif "histories_per_s" in r:
        throughput = f"{r['histories_per_s']:,.0f} histories/s ({r['env_steps_per_s']:,.0f} env-steps/s)"
    else:
        throughput = f"{r['env_steps_per_s']:,.0f} env-steps/s ({r['num_envs']:,} x {r['steps']})"
    mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else ""
    if r["name"].startswith("envs/") and gymnax:
        mfu = f"{r['env_steps_per_s'] / gymnax['env_steps_per_s']:.2f}x gymnax"
    device = f"{r['device_peak_mib']:,.0f}" if r.get("device_peak_mib") is not None else "n/a"
    return [r["name"], r["what"], throughput, mfu, f"{r['compile_s']:.1f}", device,
            f"{r['host_peak_rss_mib']:,.0f}"]


def _atomic_write(path: str, text: str) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        f.write(text)
    os.replace(temporary, path)


def run_group(suite: Suite, names: list[str], deadline: float) -> None:
    """Measure `names` in child processes: one child for the group, a new one after a row that
    killed it or was killed for passing its budget."""
    budgets = {r.name: suite.row_budget(r) for r in suite.rows}
    while names:
        if time.time() >= deadline:
            for name in names:
                suite.record(name, dict(status="skipped", error="the suite's time budget was spent"))
            return
        command = suite.child_command(names, {n: budgets[n] for n in names})
        with tempfile.TemporaryFile("w+") as stderr:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                       start_new_session=True, cwd=harness.ROOT,
                                       env=suite.args.child_environment)
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=lambda: [lines.put(x) for x in process.stdout] + [lines.put(None)],
                             daemon=True).start()
            current, row_deadline = None, deadline
            while True:
                try:
                    line = lines.get(timeout=max(0.1, min(row_deadline, deadline) - time.time()))
                except queue.Empty:
                    line = "timeout"
                if line == "timeout":
                    _kill(process)
                    over = "the suite's time budget was spent" if time.time() >= deadline else \
                        f"passed its budget of {budgets.get(current, 0):.0f} s"
                    if current:
                        suite.record(current, dict(status="failed", error=f"killed: {over}"))
                        names.remove(current)
                    break
                if line is None:  # the child ended
                    process.wait()
                    if current:  # ... in the middle of a row
                        stderr.seek(0)
                        last = [x for x in stderr.read().strip().splitlines() if x.strip()]
                        suite.record(current, dict(status="failed", error=one_line(
                            f"process ended ({process.returncode}): {last[-1] if last else ''}")))
                        names.remove(current)
                    elif names:  # failed before its first row
                        stderr.seek(0)
                        last = [x for x in stderr.read().strip().splitlines() if x.strip()]
                        for name in names:
                            suite.record(name, dict(status="failed", error=one_line(
                                f"process ended ({process.returncode}): {last[-1] if last else ''}")))
                        names.clear()
                    break
                if line.startswith(START):
                    current = line[len(START):].strip()
                    row_deadline = time.time() + budgets[current]
                elif line.startswith(DONE):
                    result = json.loads(line[len(DONE):])
                    suite.record(result["name"], result)
                    names.remove(result["name"])
                    current, row_deadline = None, deadline
                else:
                    print(line, end="", flush=True)


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def select_rows(only: list[str] | None, tiny: bool = False) -> list[Row]:
    rows = [row for make in GROUPS.values() for row in make(tiny)]
    if only:
        rows = [r for r in rows if any(r.name.startswith(prefix) for prefix in only)]
        if not rows:
            raise SystemExit(f"--only {' '.join(only)}: no such rows (see --list)")
    return rows


def suite_parser(suite: str, description: str, budget_s: float, files: tuple[str, str]) -> argparse.ArgumentParser:
    """The options every suite on this machinery takes (its children's hidden ones included)."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {suite}", description=description)
    parser.add_argument("--tiny", action="store_true", help="every size shrunk: about a minute on a CPU")
    parser.add_argument("--device", choices=("cpu", "gpu", "tpu"), help="the JAX platform (default: JAX's)")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), f"icrl_jax_{suite}"),
                        help=f"folder for {files[0]} and {files[1]}")
    parser.add_argument("--budget", type=float, default=budget_s, help="seconds for the whole suite")
    parser.add_argument("--only", nargs="+", help="only rows whose names start with these")
    parser.add_argument("--list", action="store_true", help="list the rows and their budgets")
    parser.add_argument("--write", action="store_true", help="also write the table into benchmarks/RESULTS.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--budgets", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = suite_parser("accelerator", __doc__.split("\n\n")[0], SUITE_BUDGET_S, (JSON_NAME, TABLE_NAME))
    args = parser.parse_args(argv)
    args.argv = argv
    harness.choose_device(args.device)
    if args.child:
        return child(args.child.split(","), args.tiny, json.loads(args.budgets))
    # The children measure on the device; this process lists the envs on the CPU, so that it
    # never holds the device's memory.
    args.child_environment = dict(os.environ)
    os.environ["JAX_PLATFORMS"] = "cpu"
    rows = select_rows(args.only, args.tiny)
    if args.list:
        for r in rows:
            print(f"{r.name:<40} {r.budget_s:>4.0f} s  {r.what}")
        return
    suite = Suite(args, rows)
    deadline = suite.started + args.budget
    print(f"{len(rows)} rows, at most {args.budget:.0f} s; results in {args.out}", flush=True)
    suite.write()
    for group in GROUPS:
        names = [r.name for r in rows if r.name.split("/")[0] == group]
        if names:
            run_group(suite, names, deadline)
    publish(suite, args, TABLE_NAME, HEADING)


def publish(suite, args, table_name: str, heading: str) -> None:
    """Write the suite's files, print its table, and with `--write` put it in RESULTS.md under
    `heading`."""
    suite.write()
    with open(os.path.join(args.out, table_name)) as f:
        text = f.read()
    print(text, flush=True)
    if args.write:
        harness.write_section(heading, text)


if __name__ == "__main__":
    main()
