"""In-context evaluation against the number of environments: env-steps/s and peak RSS, ours beside
the authors' evaluation loops.

Ours (`--methods`), each randomly initialised (speed does not depend on the values) and rolled out
by `run_policies` as `evaluate` does, with the config's `eval.chunk_size`, the model policy only:

* `ad`: the main job (`ad/darkroom.py:quick`: AD 2x64 on Dark Room, 600-step rollouts, sampled at
  temperature 0.7), decoding one token a step from its ring cache;
* `headless_ad`: the paper-size Headless-AD (`headless_ad/bernoulli_bandit.py`: 4 layers, d_model
  512, 64 heads, 512-wide action embeddings, action-set prompt) on Bernoulli bandits of 4-20 arms,
  300-step rollouts (they fit its 300-step context: one cached token a step);
* `dt`: the point-maze DT (`continuous/point_maze.py:quick`: 2x64, context 10 steps of 3 tokens,
  300-step rollouts of 300-step episodes), at its target return.

Each N runs in its own process, so that its peak RSS (`ru_maxrss`, the runtime included) is its
own. `seconds` is the second call's wall time (compiled); `first call` includes compiling (above
`--longest` env-steps only one call is made, and it is the measurement).

The authors' loops (`--ref-python` with torch, and their checkouts; skipped with one line when
either is absent), run by that python in a child process of this script that imports their code
from the checkout (nothing of theirs is in this repository), randomly initialised as ours:

* `headless_ad (authors)`: `src.bandit.algorithms.headless_ad.evaluate_in_context` of
  github.com/corl-team/headless-ad with the same model sizes, on their gymnasium
  `MultiArmedBanditBernoulli` envs (their `SyncVectorEnv`), on the CPU: flash-attn, xformers and
  the fused RMSNorm replaced by the plain-PyTorch stand-ins of
  `tests/fixtures/make_headless_ad_fixtures.py`, float32 (their evaluation runs the model on
  the whole history every step);
* `dt (CORL)`: `algorithms/offline/dt.py`'s `eval_rollout` of github.com/tinkoff-ai/CORL (one
  env at a time; N envs are N calls, as its `eval_episodes` loop), its `DecisionTransformer` at our
  sizes, on gymnasium-robotics' `PointMaze_UMaze-v3` (the simulator our point maze reproduces,
  tests/test_point_maze.py) behind the old gym API their loop calls, with random start / goal
  cells, ending at the goal, and our dense reward (distance before minus after the step).

`--policy` picks what our models do beyond their context: `default` (the presets as configured),
`recompute` (AD: learned positions and no attention window, the whole 100-step window recomputed
every step past the context, the earlier default), or `window` (DT: `model.attention_window` of
`--window` tokens, so a 300-step rollout decodes one step's tokens at a time from a ring cache).

    python benchmarks/bench_eval_scaling.py [--methods ad headless_ad dt] [--envs 1 16 256 4096]
        [--ref-python /path/to/venv/bin/python --headless-ad /path/to/headless-ad
         --corl /path/to/CORL [--ref-envs 1 16]]
    python benchmarks/bench_eval_scaling.py --device   # the largest N on a GPU / TPU, if any
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SECTION = "## In-context evaluation against the number of environments"

#: Our methods: the experiment config (module, preset) and the policy measured.
METHODS = {
    "ad": ("icrl_jax.experiments.ad.darkroom", "quick"),
    "headless_ad": ("icrl_jax.experiments.headless_ad.bernoulli_bandit", ""),
    "dt": ("icrl_jax.experiments.continuous.point_maze", "quick"),
}
#: The authors' loop beside each of our methods.
REFERENCES = {"headless_ad": "headless_ad (authors)", "dt": "dt (CORL)"}


def build(method_name: str, policy: str, window: int, chunk: int):
    """(config, env, method) of one of `METHODS`, with `--policy` applied."""
    import importlib

    from icrl_jax.pipeline.run import build_env
    from icrl_jax.methods import build_method

    module, preset = METHODS[method_name]
    config = importlib.import_module(module).get_config(preset)
    if policy == "recompute":
        if method_name != "ad":
            raise SystemExit("--policy recompute is the main job's earlier default (ad only)")
        config.model.position, config.model.attention_window = "learned", 0
    elif policy == "window":
        if method_name != "dt":
            raise SystemExit("--policy window is for dt (the others are measured as configured)")
        config.model.attention_window = window
    if chunk >= 0:
        config.eval.chunk_size = chunk
    env = build_env(config)
    return config, env, build_method(config, env)


def init_params(method, env, config, key):
    """Random parameters of `method` from an example batch of the shape it trains on."""
    import jax
    import numpy as np

    from icrl_jax.methods.dt import DecisionTransformer
    if isinstance(method, DecisionTransformer):
        from icrl_jax.methods.dt_rollout import empty_context
        import jax.numpy as jnp
        obs = jnp.zeros(env.observation_shape, jnp.int32 if env.discrete_observations
                        else jnp.float32)
        example = jax.tree.map(lambda x: x[None],
                               empty_context(method, obs, config.train.seq_len))
        return method.init(key, example)
    from icrl_jax.data.windows import to_step_windows
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.data.sources import uniform_random
    probe = to_step_windows(generate_histories(env, uniform_random(), env.task_params(
        np.arange(1)), config.train.seq_len, jax.random.PRNGKey(0)))
    return method.init(key, probe)


def one(method_name: str, num_envs: int, steps: int, policy: str, window: int, chunk: int,
        device: bool, longest: int) -> dict:
    """Roll out `num_envs` envs of our `method_name` in this process; returns the measurements."""
    if not device:
        from icrl_jax.core import cpu_devices
        cpu_devices.use_one_device_per_core()
    import jax
    import numpy as np

    if device and jax.default_backend() == "cpu":
        return dict(skipped="no GPU or TPU here (JAX backend: cpu)")

    from icrl_jax.data.rollout import run_policies

    config, env, method = build(method_name, policy, window, chunk)
    steps = steps or int(config.eval.num_steps)
    ids = np.arange(num_envs)
    tasks = env.task_params(ids % env.num_tasks if env.num_tasks else ids)
    params = init_params(method, env, config, jax.random.PRNGKey(1))
    policies = method.policies(params, env, config)
    name = sorted(policies)[-1]  # "model", or the DT's (highest) target return
    policy_source = policies[name]

    def run():  # as `evaluate` runs it (keep_state=False: no analysis reads final states here)
        return run_policies(env, {name: policy_source}, tasks, steps, jax.random.PRNGKey(2),
                            chunk_size=config.eval.chunk_size or None, keep_state=False)

    start = time.perf_counter()
    out = run()
    seconds = first = time.perf_counter() - start
    if num_envs * steps <= longest:  # else the first call is the measurement
        out = None
        start = time.perf_counter()
        out = run()
        seconds = time.perf_counter() - start
    built = policy_source.build
    return dict(num_envs=num_envs, steps=steps, first=first, seconds=seconds,
                steps_per_s=num_envs * steps / seconds,
                rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                backend=jax.default_backend(), devices=len(jax.devices()),
                chunk=int(config.eval.chunk_size),
                mean_reward=float(np.mean(out[name]["rewards"])),
                cached=bool(getattr(built, "cached", False)))


# --- the authors' loops (run by --ref-python; imports torch and their code only) -------------

def ref_headless_ad(checkout: str, num_envs: int, steps: int) -> dict:
    """Their `evaluate_in_context` on `num_envs` Bernoulli bandits at our paper-size config."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fixtures"))
    import make_headless_ad_fixtures as stand_ins  # noqa: E402 (our stand-ins of their kernels)
    import numpy as np
    import torch

    stand_ins.install_kernel_stand_ins()
    # Packages their training script imports for training and logging only (numba: for their
    # grid world, which the same `envs` package registers).
    stand_ins.stub_packages("pyrallis", "accelerate", "wandb", "matplotlib", "numba")
    sys.path.insert(0, os.path.abspath(checkout))
    stand_ins.use_flash_attention_everywhere()
    from src.bandit.algorithms import headless_ad as theirs
    from src.tiny_llama.config import Config as ModelConfig

    torch.set_num_threads(os.cpu_count())
    # Our bernoulli_bandit.py paper config: 4 layers, d_model 512, 64 heads, 512-wide action
    # embeddings, context 300 (their loop needs a rollout at least that long), sampled actions.
    config = theirs.Config(num_layers=4, d_model=512, num_heads=64, token_embed_dim=512,
                           seq_len=min(300, steps), num_in_context_steps=steps, device="cpu",
                           get_action_type="sample", use_action_set_prompt=True)
    model_config = ModelConfig(
        block_size=2 * config.seq_len + 100, n_layer=config.num_layers, n_head=config.num_heads,
        n_embd=config.d_model, bias=config.layer_norm_bias,
        rotary_percentage=config.rotary_percentage, parallel_residual=config.parallel_residual,
        shared_attention_norm=config.shared_attention_norm, _norm_class=config._norm_class,
        _mlp_class=config._mlp_class, dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = theirs.Model(config=model_config, n_token=config.token_embed_dim,
                         use_action_set_prompt=True)
    model.apply(lambda m: model._init_weights(m, n_layer=model_config.n_layer))
    rng = np.random.default_rng(0)
    arms = rng.integers(4, 21, num_envs)  # 4-20 arms, as ours
    means = np.zeros((num_envs, 20))
    for i, n in enumerate(arms):
        means[i, :n] = rng.uniform(size=n)
    start = time.perf_counter()
    regrets, _, _ = theirs.evaluate_in_context(config, model, means, arms)
    seconds = time.perf_counter() - start
    assert regrets.shape == (num_envs, steps), regrets.shape
    return dict(num_envs=num_envs, steps=steps, env_steps=num_envs * steps, seconds=seconds,
                rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                torch=torch.__version__)


def ref_corl_dt(checkout: str, num_envs: int, steps: int) -> dict:
    """CORL's `eval_rollout`, `num_envs` times (one env each), on gymnasium-robotics' U maze."""
    import importlib.util

    import numpy as np
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fixtures"))
    import make_headless_ad_fixtures as stand_ins  # noqa: E402 (its import stubs)
    # dt.py imports these at its top for D4RL data, its config CLI and logging only.
    stand_ins.stub_packages("d4rl", "gym", "pyrallis", "wandb")
    try:
        import gymnasium
        import gymnasium_robotics
    except ImportError as e:
        raise SystemExit(f"skip: the reference python lacks gymnasium-robotics ({e})")
    gymnasium.register_envs(gymnasium_robotics)
    spec = importlib.util.spec_from_file_location(
        "corl_dt", os.path.join(checkout, "algorithms", "offline", "dt.py"))
    theirs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(theirs)

    class PointMazeOldAPI:
        """gymnasium-robotics' PointMaze as the old gym API `eval_rollout` calls: reset() ->
        obs (6,) = position, velocity, goal; step(a) -> (obs, reward, done, info), reward the
        distance to the goal before the step minus after it (our `random_goal` task)."""

        def __init__(self, seed: int):
            self.env = gymnasium.make("PointMaze_UMaze-v3", continuing_task=False,
                                      max_episode_steps=steps)
            self.seed = seed

        def _obs(self, o):
            return np.concatenate([o["observation"], o["desired_goal"]]).astype(np.float32)

        def _distance(self, o):
            return float(np.linalg.norm(o["achieved_goal"] - o["desired_goal"]))

        def reset(self):
            o, _ = self.env.reset(seed=self.seed)
            self.last = self._distance(o)
            return self._obs(o)

        def step(self, action):
            o, _, terminated, truncated, info = self.env.step(np.asarray(action, np.float64))
            distance = self._distance(o)
            reward, self.last = self.last - distance, distance
            return self._obs(o), reward, terminated or truncated, info

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    # Our point_maze.py:quick DT: 2 layers, d_model 64, 4 heads, context 10, 300-step episodes.
    model = theirs.DecisionTransformer(state_dim=6, action_dim=2, seq_len=10, episode_len=steps,
                                       embedding_dim=64, num_layers=2, num_heads=4).eval()
    envs = [PointMazeOldAPI(seed) for seed in range(num_envs)]
    env_steps = 0
    start = time.perf_counter()
    for env in envs:  # CORL's evaluation: one episode after another
        _, length = theirs.eval_rollout(model, env, target_return=3.0)
        env_steps += int(length)
    seconds = time.perf_counter() - start
    return dict(num_envs=num_envs, steps=steps, env_steps=env_steps, seconds=seconds,
                rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                torch=torch.__version__)


REF_LOOPS = {"headless_ad": ref_headless_ad, "dt": ref_corl_dt}


def rate_text(rate: float) -> str:
    """Env-steps/s with three significant digits below 100 (0.29), else whole numbers."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def run_child(command: list[str]) -> tuple[dict | None, str]:
    """(last JSON line of the child's stdout, or None; the error text)."""
    done = subprocess.run(command, capture_output=True, text=True, cwd=os.path.dirname(HERE))
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return None, (done.stdout + done.stderr)[-3000:]
    return json.loads(lines[-1]), ""


def ref_unavailable(python: str, checkout: str, label: str) -> str:
    """Why the authors' loop cannot run here ("" when it can)."""
    if not python:
        return f"{label}: skipped (no --ref-python: a python with torch runs the authors' code)"
    if not checkout or not os.path.isdir(checkout):
        return f"{label}: skipped (no checkout of the authors' code at {checkout or '(unset)'})"
    done = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    if done.returncode:
        return f"{label}: skipped ({python} cannot import torch)"
    return ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", nargs="+", choices=tuple(METHODS), default=list(METHODS))
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 16, 256, 4096])
    ap.add_argument("--max-envs", type=int, default=0, help="also this N (e.g. 65536)")
    ap.add_argument("--envs-headless-ad", type=int, nargs="+", default=[1, 16, 256],
                    help="the paper-size Headless-AD's N (it is 60x the main job's model)")
    ap.add_argument("--steps", type=int, default=0, help="rollout steps (0: the config's)")
    ap.add_argument("--policy", choices=("default", "recompute", "window"), default="default")
    ap.add_argument("--window", type=int, default=15,
                    help="--policy window: model.attention_window in tokens (DT: 3 a step)")
    ap.add_argument("--chunk", type=int, default=-1, help="eval.chunk_size (-1: the config's)")
    ap.add_argument("--longest", type=int, default=10_000_000,
                    help="above this many env-steps the first call is the measurement")
    ap.add_argument("--ref-python", default="", help="a python with torch for the authors' loops")
    ap.add_argument("--headless-ad", default="", help="checkout of corl-team/headless-ad")
    ap.add_argument("--corl", default="", help="checkout of tinkoff-ai/CORL")
    ap.add_argument("--ref-envs", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--ref-envs-headless-ad", type=int, nargs="+", default=[1],
                    help="N of the authors' Headless-AD loop (it runs the whole history a step)")
    ap.add_argument("--device", action="store_true",
                    help="run only the largest N, on the default accelerator")
    ap.add_argument("--write", action="store_true", help="write the table to RESULTS.md")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--method", default="ad", help=argparse.SUPPRESS)
    ap.add_argument("--ref-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--checkout", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.method, args.one, args.steps, args.policy, args.window,
                             args.chunk, args.device, args.longest)))
        return
    if args.ref_one is not None:
        steps = args.steps or 300
        print(json.dumps(REF_LOOPS[args.method](args.checkout, args.ref_one, steps)))
        return

    rows, ours, notes = [], {}, []
    for method_name in args.methods:
        sizes = args.envs_headless_ad if method_name == "headless_ad" else args.envs
        sizes = sorted(set(sizes + ([args.max_envs] if args.max_envs and
                                    method_name != "headless_ad" else [])))
        if args.device:  # the child finds the accelerator (this process must not hold it)
            sizes = sizes[-1:]
        for n in sizes:
            command = [sys.executable, "-m", "benchmarks.bench_eval_scaling", "--one", str(n), "--method", method_name,
                       "--steps", str(args.steps), "--policy", args.policy, "--window",
                       str(args.window), "--chunk", str(args.chunk), "--longest",
                       str(args.longest)] + (["--device"] if args.device else [])
            r, error = run_child(command)
            if r is None:
                print(error, file=sys.stderr)
                rows.append(f"| {method_name} | ours | {n:,} | | failed | | | | | |")
                continue
            if "skipped" in r:
                print(f"--device: {r['skipped']}; nothing to run")
                return
            ours[method_name, n] = r["steps_per_s"]
            loop = "ours" + (" (cached)" if r["cached"] else " (recompute)")
            rows.append(f"| {method_name} | {loop} | {n:,} | {r['steps']} | {r['first']:.1f} | "
                        f"{r['seconds']:.2f} | {rate_text(r['steps_per_s'])} | {r['rss_mib']:,.0f} | "
                        f"{r['chunk'] or 'all'} | |")
            print(rows[-1], f"({r['backend']}, {r['devices']} devices)", flush=True)
        if method_name not in REFERENCES or args.device:
            continue
        label = REFERENCES[method_name]
        checkout = args.headless_ad if method_name == "headless_ad" else args.corl
        why = ref_unavailable(args.ref_python, checkout, label)
        if why:
            print(why, flush=True)
            notes.append(why)
            continue
        for n in args.ref_envs_headless_ad if method_name == "headless_ad" else args.ref_envs:
            command = [args.ref_python, __file__, "--ref-one", str(n), "--method", method_name,
                       "--checkout", checkout, "--steps", str(args.steps or 300)]
            r, error = run_child(command)
            if r is None:
                print(error, file=sys.stderr)
                rows.append(f"| {method_name} | {label} | {n:,} | | failed | | | | | |")
                continue
            rate = r["env_steps"] / r["seconds"]
            ratio = ours.get((method_name, n))
            rows.append(f"| {method_name} | {label} | {n:,} | {r['steps']} | | "
                        f"{r['seconds']:.2f} | {rate_text(rate)} | {r['rss_mib']:,.0f} | | "
                        f"{f'{ratio / rate:,.0f}x' if ratio else ''} |")
            print(rows[-1], f"(torch {r['torch']})", flush=True)

    from benchmarks.harness import cpu_model, table_section
    where = ("the default accelerator" if args.device else
             f"{cpu_model()}, {os.cpu_count()} cores (one CPU device per core)")
    prose = (f"`python benchmarks/bench_eval_scaling.py {' '.join(sys.argv[1:])}` on {where}; "
             f"load average {os.getloadavg()[0]:.1f} at the end (the cores are shared). Models "
             "randomly initialised (throughput does not depend on the values), the model "
             "policy only. `seconds`: ours, the second call (compiled; above "
             f"{args.longest:,} env-steps the first, compiling included); the authors' loops, "
             "one call. `ours / theirs`: our env-steps/s over theirs at the same N. Peak RSS of "
             "each N's own process." + "".join(f" {n}." for n in notes))
    table_section(SECTION + ("" if args.policy == "default" else f": {args.policy}"), prose,
                  ["method", "loop", "envs", "steps", "first call (s)", "seconds",
                   "env-steps/s", "peak RSS (MiB)", "chunk", "ours / theirs"], rows, args.write,
                  top=True)


if __name__ == "__main__":
    main()
