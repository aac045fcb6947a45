"""XLand-MiniGrid steps/s: xminigrid's own `env.step` beside our registered env, in one run,
and the recurrent PPO source's history generation.

    python -m benchmarks xland [--envs 8192] [--steps 1000] [--env-id XLand-MiniGrid-R1-9x9]
                               [--tiny] [--device cpu|gpu|tpu] [--rounds 5]

xminigrid's benchmark protocol (`scripts/benchmark_xland.py`): a random policy, N envs x T steps,
auto-reset, one ruleset for every env, actions drawn up front `(T, N)`, one jitted program of
`lax.scan` over steps of `vmap(step)` over envs. Measured on the same actions and ruleset:

* `xminigrid`: their `GymAutoResetWrapper(env).step` (what their benchmark times);
* `ours env.step`: our registered env's gymnax `step` (auto-reset, and the guard that makes an
  unavailable traced action a no-op). XLand's step draws resets from the key in its state, as
  xminigrid's wrapper does, so the loop passes the same key array at every step;
* `ours transition`: the same without the guard (what data generation steps);
* `ours env.step, keys split per step`: a loop that makes a fresh key per env per step anyway
  (what gymnax's interface invites): the keys' cost, not the env's.

The three are interleaved round by round (`harness.interleave`), so load on shared cores hits
them alike; steps/s is the median round's, the ratio the median of the per-round ratios.
History generation: `xland_ppo`'s vmapped update (rollout, GAE, PPO epochs) over R rulesets x
E envs, env steps per second of a compiled chunk of updates.
"""

from __future__ import annotations

import argparse
import json

from benchmarks import harness


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks xland", description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", type=int, default=8192)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--env-id", default="XLand-MiniGrid-R1-9x9")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ppo-rulesets", type=int, default=64)
    p.add_argument("--ppo-envs", type=int, default=128)
    p.add_argument("--ppo-updates", type=int, default=4, help="updates per timed chunk")
    p.add_argument("--no-ppo", action="store_true")
    p.add_argument("--tiny", action="store_true", help="1,024 envs x 100 steps; PPO 4 x 16 envs")
    p.add_argument("--device", default=None)
    return p


def env_programs(env_id: str, num_envs: int, num_steps: int):
    """name -> a jitted `() -> carry` running N envs x T steps (see the module docstring)."""
    import jax
    import jax.numpy as jnp
    import xminigrid
    from xminigrid.wrappers import GymAutoResetWrapper

    from icrl_jax import envs

    ours = envs.make(env_id, num_rulesets=16) if env_id.startswith("XLand") else envs.make(env_id)
    params = ours.task_params(0)  # one ruleset for every env, as their benchmark
    theirs = GymAutoResetWrapper(xminigrid.make(env_id)[0])
    their_params = params.env_params
    key = jax.random.key(0)
    actions = jax.random.randint(jax.random.fold_in(key, 1), (num_steps, num_envs), 0, ours.num_actions)
    reset_keys = jax.random.split(key, num_envs)

    @jax.jit
    def xminigrid_step(actions):
        timestep = jax.vmap(theirs.reset, in_axes=(None, 0))(their_params, reset_keys)

        def body(timestep, action):
            return jax.vmap(theirs.step, in_axes=(None, 0, 0))(their_params, timestep, action), None

        return jax.lax.scan(body, timestep, actions)[0].state.grid

    def ours_program(step, split_keys=False):
        @jax.jit
        def run(actions):
            _, state = jax.vmap(ours.reset, in_axes=(0, None))(reset_keys, params)

            def body(carry, inputs):
                state = carry
                t, action = inputs
                keys = jax.random.split(jax.random.fold_in(key, t), num_envs) if split_keys else reset_keys
                _, state, *_ = jax.vmap(step, in_axes=(0, 0, 0, None))(keys, state, action, params)
                return state, None

            return jax.lax.scan(body, state, (jnp.arange(num_steps), actions))[0].timestep.state.grid

        return run

    return {"xminigrid": lambda: xminigrid_step(actions),
            "ours env.step": (lambda f: lambda: f(actions))(ours_program(ours.step)),
            "ours transition": (lambda f: lambda: f(actions))(ours_program(ours.transition)),
            "ours env.step, keys split per step": (lambda f: lambda: f(actions))(
                ours_program(ours.step, split_keys=True))}


def ppo_program(env_id: str, num_rulesets: int, num_envs: int, updates: int):
    """A compiled chunk of `updates` PPO updates over R rulesets x E envs, its starting state,
    and the env steps one chunk takes."""
    import jax
    import numpy as np

    from icrl_jax import envs
    from icrl_jax.data.sources import xland_ppo as X

    env = envs.make(env_id, num_rulesets=max(num_rulesets, 16))
    config = X.XLandPPOConfig(num_envs=num_envs, rollout_steps=64, minibatches=4, updates_per_call=updates)
    init, update, _ = X.make_train(env, config, 1000, 4)
    params = env.task_params(np.arange(num_rulesets))
    keys = jax.random.split(jax.random.PRNGKey(0), num_rulesets)
    runner = jax.jit(lambda k, p: jax.lax.map(lambda kp: init(*kp), (k, p)))(keys, params)

    @jax.jit
    def chunk(runner):
        return jax.lax.scan(lambda r, _: jax.vmap(update)(r, params), runner, None, length=updates)

    return chunk, runner, num_rulesets * num_envs * config.rollout_steps * updates


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    harness.choose_device(args.device)
    if args.tiny:
        args.envs, args.steps, args.ppo_rulesets, args.ppo_envs, args.rounds = 1024, 100, 4, 16, 3
    import jax  # noqa: F401  (after the device is chosen)

    work = args.envs * args.steps
    ab = harness.interleave(env_programs(args.env_id, args.envs, args.steps), rounds=args.rounds)
    rows = [[name, f"{work / seconds:,.0f}", f"{ab.ratios[name]:.2f}"] for name, seconds in ab.seconds.items()]
    result = {"env_id": args.env_id, "envs": args.envs, "steps": args.steps,
              "steps_per_second": {n: work / s for n, s in ab.seconds.items()}, "ratio": ab.ratios}
    if not args.no_ppo:
        chunk, runner, steps = ppo_program(args.env_id, args.ppo_rulesets, args.ppo_envs, args.ppo_updates)
        timing, _ = harness.time_stateful(chunk, runner, rounds=args.rounds)
        rows.append([f"xland_ppo history generation ({args.ppo_rulesets} rulesets x {args.ppo_envs} envs)",
                     f"{timing.rate(steps):,.0f}", "-"])
        result["ppo_steps_per_second"] = timing.rate(steps)
        result["ppo_compile_s"] = timing.compile_s
    print(f"{args.env_id}, {args.envs:,} envs x {args.steps:,} steps, random actions, auto-reset; "
          f"{harness.hardware_line()}")
    print(harness.markdown_table(["workload", "steps/s", "vs xminigrid"], rows))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
