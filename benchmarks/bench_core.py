"""The one core against the code before it, side by side: training tokens/s, in-context
evaluation env-steps/s (Headless-AD with the key/value cache and with the recomputed window; DT
on the button room) and sweep assignments/hour.

One measurement process per (tree, workload), the trees alternating A B A B
(`harness.compare_trees`), so load on the shared cores hits both alike; the section reports each
run and the new/old ratio of the medians.

    git worktree add ../old <commit before the refactor>
    python -m benchmarks core --old ../old [--repeats 2] [--write]
    python -m benchmarks core --measure --workload train   # this tree's numbers as JSON

The workloads tolerate the APIs of before the one core (the `hasattr` branches), which is what
they were compared with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from benchmarks import harness

SECTION = "## The one core vs the four pipelines (side by side)"


def train_tokens_per_second() -> float:
    """The small AD model of the quick presets (2x64, batch 64 x context 100), 10 steps a call."""
    import jax
    import numpy as np
    from icrl_jax.data.windows import sample_windows, to_step_windows
    from icrl_jax.data.history import History
    from icrl_jax.methods.ad import AD
    from icrl_jax.core.config import default_train_config
    from icrl_jax.methods.fields import ad_model_config
    from icrl_jax.pipeline import train as T

    rng = np.random.default_rng(0)
    n, t, context, batch = 256, 1000, 100, 64
    windows = to_step_windows(History(
        rng.integers(0, 81, (n, t)).astype(np.int32), rng.integers(0, 5, (n, t)).astype(np.int32),
        rng.random((n, t)).astype(np.float32), np.zeros((n, t), bool),
        np.arange(n, dtype=np.int32), np.ones((n, 5), bool)))
    model = ad_model_config()
    model.update(dict(num_layers=2, d_model=64, num_heads=4, max_len=context, label_smoothing=0.0))
    method = AD(model, 5, 81)
    config = default_train_config()
    config.update(dict(num_steps=10_000, batch_size=batch, seq_len=context, steps_per_call=10))
    optimizer, mesh, key = T.make_optimizer(config), T.data_mesh(), jax.random.PRNGKey(1)
    data = jax.device_put(windows)
    if hasattr(T, "make_train_steps"):  # the one trainer
        from icrl_jax.data.train_data import on_device
        train_data = on_device(data, sample_windows, context)
        build = lambda _: (method, optimizer)  # noqa: E731
        state = jax.device_put(T.init_state(build, train_data, key), jax.sharding.NamedSharding(
            mesh, jax.sharding.PartitionSpec()))
        steps = T.make_train_steps(build, train_data, config, mesh)
        call = lambda s: steps(s, data, key, None)  # noqa: E731
    else:
        state = T.init_train_state(method, optimizer, data, key, context, mesh)
        steps = T.make_train_step(method, optimizer, batch, context, 10, mesh)
        call = lambda s: steps(s, data, key)  # noqa: E731
    timing, _ = harness.time_stateful(call, state, rounds=3)
    return timing.rate(10 * batch * context)


def eval_steps_per_second() -> dict[str, float]:
    """Env steps/s of Headless-AD rollouts (100 bandits x 300 steps, context 300) with the
    key/value cache and with the recomputed window; and of DT on the button room (80 envs x 100
    steps, context 10)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from icrl_jax import envs
    from icrl_jax.envs.bandits import BernoulliBandit
    from icrl_jax.data.windows import StepWindows
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.papers.headless_ad.method import HeadlessAD, default_headless_config
    from icrl_jax.papers.msat.method import MSAT
    from icrl_jax.core.config import default_transformer_config
    from icrl_jax.methods.dt import dt_model_config
    from icrl_jax.methods.fields import ad_model_config
    try:
        from icrl_jax.methods.in_context import in_context_source
        new = True
    except ImportError:
        from icrl_jax.evaluate import in_context_source
        new = False

    out = {}
    arms, num_envs, steps = 20, 100, 300
    env = BernoulliBandit(arms=arms, distribution="uniform", seed=0)
    config = ad_model_config()
    config.update(dict(d_model=64, num_layers=2, num_heads=4, position="rotary", max_len=steps))
    for key, value in dict(default_headless_config(), action_embed_dim=64, tau=0.5).items():
        config[key] = value
    method = HeadlessAD(config, num_observations=1)
    example = StepWindows(np.zeros((1, steps), np.int32), np.zeros((1, steps), np.int32),
                          np.zeros((1, steps), np.float32), np.zeros((1, steps), np.int32),
                          np.ones((1, arms), bool))
    params = method.init(jax.random.PRNGKey(0), example)
    params = method.eval_params(params, jax.random.PRNGKey(1), env if new else arms)
    tasks = env.task_params(np.arange(num_envs))
    for name, max_steps in (("headless_ad_cache", steps), ("headless_ad_recompute", None)):
        policy = in_context_source(method, params, env, steps, False, max_steps=max_steps)
        timing = harness.time_call(lambda: generate_histories(env, policy, tasks, steps,  # noqa: B023
                                                              jax.random.PRNGKey(2)).actions, rounds=1)
        out[name] = timing.rate(num_envs * steps)

    room = envs.make("button_room", size=5, episode_length=20)
    context, num_envs, steps = 10, 80, 100
    model = default_transformer_config()
    model.update(dt_model_config())
    model.update(dict(d_model=64, num_layers=2, num_heads=4, max_timestep=20))
    dt = MSAT(model, room.action_dims, context)
    one = jax.tree.map(jnp.asarray, dict(
        returns_to_go=np.zeros((1, context), np.float32),
        observations=np.zeros((1, context) + room.observation_shape, np.float32),
        actions=np.zeros((1, context, 2), np.int32), timesteps=np.zeros((1, context), np.int32),
        mask=np.ones((1, context), bool)))
    from icrl_jax.data.trajectories import Trajectories
    one = Trajectories(rewards=jnp.zeros((1, context)), **one)
    dt_params = dt.init(jax.random.PRNGKey(0), one)
    tasks = room.task_params(np.arange(num_envs) % room.num_tasks)
    if new:
        from icrl_jax.methods.dt_rollout import return_conditioned_source
        policy = return_conditioned_source(dt, dt_params, room, context, 10.0, False)
        run = lambda: generate_histories(room, policy, tasks, steps,  # noqa: E731
                                         jax.random.PRNGKey(3)).rewards
    else:
        from icrl_jax.methods.dt_rollout import make_rollout
        rollout = make_rollout(dt, room, context, steps, False)
        run = lambda: rollout(dt_params, tasks, 10.0, jax.random.PRNGKey(3))["rewards"]  # noqa: E731
    out["msat_button_room"] = harness.time_call(run, rounds=1).rate(num_envs * steps)
    return out


def sweep_assignments_per_hour() -> float:
    """8 assignments of the n-gram Dark Room quick search, 200 updates each, as one vmapped
    group (K = 8)."""
    import jax
    import numpy as np
    from icrl_jax import envs
    from icrl_jax.experiments.ngram.darkroom import get_config
    from icrl_jax.tools import sweep as S
    from icrl_jax.data.windows import sample_windows, to_step_windows
    from icrl_jax.data.history import History

    config = get_config("quick")
    config.unlock()
    config.train.num_steps, config.train.steps_per_call = 200, 100
    config.lock()
    rng = np.random.default_rng(0)
    n, t = 80, 2000
    windows = jax.device_put(to_step_windows(History(
        rng.integers(0, 81, (n, t)).astype(np.int32), rng.integers(0, 5, (n, t)).astype(np.int32),
        rng.integers(0, 2, (n, t)).astype(np.float32), np.zeros((n, t), bool),
        np.arange(n, dtype=np.int32), np.ones((n, 5), bool))))
    space = {k: v for k, v in S.flatten_space(config.sweep.space).items() if k in S.VMAPPED}
    assignments = [S.sample_assignment(space, 0, i) for i in range(8)]
    seeds = list(range(8))
    env = envs.make("darkroom")
    scratch = tempfile.mkdtemp()
    if hasattr(S, "group_data") and "workdir" in S.train_assignments.__code__.co_varnames:
        from icrl_jax.data.train_data import on_device
        data = on_device(windows, sample_windows, config.train.seq_len)
        # The timed call reuses the first call's program: a dict of the caller's where the
        # trainer takes one, its own global cache before.
        kept = ({"programs": {}} if "programs" in S.train_assignments.__code__.co_varnames
                else {})
        run = lambda d: S.train_assignments(config, env, data, assignments, seeds,  # noqa: E731
                                            os.path.join(scratch, d), **kept)
    else:
        run = lambda d: S.train_assignments(config, env, windows, assignments, seeds)  # noqa: E731
    names = iter(["compile", "timed"])  # each call its own work directory
    return harness.time_call(lambda: run(next(names)), rounds=1).rate(3600 * len(assignments))


WORKLOADS = {"train": train_tokens_per_second, "eval": eval_steps_per_second,
             "sweep": sweep_assignments_per_hour}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks core", description=__doc__.split("\n")[0])
    ap.add_argument("--old", help="a checkout of the code before the refactor (required unless --measure)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    ap.add_argument("--measure", action="store_true", help="one workload in this process, as JSON")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="train")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.measure:
        harness.choose_device("cpu")
        harness.check_tree()
        value = WORKLOADS[args.workload]()
        print(json.dumps(value if isinstance(value, dict) else {args.workload: value}))
        return
    if not args.old:
        ap.error("--old DIR is required (a checkout to compare with)")
    runs: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    load_before = harness.load_average()
    trees = {"old": os.path.abspath(args.old), "new": harness.ROOT}

    def collect(label, result):
        for name, value in result.items():
            runs[label].setdefault(name, []).append(value)
            print(f"{label} {name}: {value:,.1f}", flush=True)

    for _ in range(args.repeats):
        for workload in WORKLOADS:
            harness.compare_trees(trees, "benchmarks.bench_core", ["--measure", "--workload", workload],
                                  on_result=collect)
    import numpy as np
    units = {"train": "tokens/s", "sweep": "assignments/hour"}
    rows = [[name, units.get(name, "env steps/s"), " / ".join(f"{v:,.0f}" for v in runs["old"][name]),
             " / ".join(f"{v:,.0f}" for v in runs["new"][name]),
             f"{np.median(runs['new'][name]) / np.median(runs['old'][name]):.2f}x"] for name in runs["new"]]
    harness.table_section(
        SECTION,
        f"Command: `python -m benchmarks core --old <worktree of {harness.commit_of(args.old)}> "
        f"--repeats {args.repeats} --write`. Hardware: {harness.cpu_model()}, "
        f"{os.cpu_count()} cores, CPU backend; load average {load_before:.1f} before, "
        f"{harness.load_average():.1f} after. Each number is one fresh process; old and new alternate "
        "(A B A B). train: the small AD model (2x64, batch 64 x 100), 10 steps per jitted call. "
        "eval: Headless-AD on 100 bandits x 300 steps (context 300) with the key/value cache and "
        "with the recomputed window; M-SAT on 80 button rooms x 100 steps (context 10). sweep: "
        "8 n-gram Dark Room assignments x 200 updates as one vmapped group.",
        ["workload", "unit", "old (each run)", "new (each run)", "new / old (medians)"], rows, args.write)


if __name__ == "__main__":
    main()
