"""Decision Transformer / M-SAT / MAT on a host simulator (ViZDoom) from pixels.

The stages of `pipeline.run_dt` for `env.name == "vizdoom"`:

* generate: `envs.host.vizdoom.record_expert_dataset` records noisy-expert episodes through the
  bridge into a pixel store (one history per episode), shared by every method on the same
  scenario and preset (`data.path`, default `runs/datasets/vizdoom_<scenario>_<preset>`).
* train: `train.train` with a loader: a `PrefetchLoader` over a `PixelTrajectoryStore` feeds
  `steps_per_call * batch_size` padded DT windows per jitted call, trained by the same
  `method.loss` / `gradient_step` as the on-device DT runs.
* evaluate: return-conditioned rollouts (`dt_rollout.DTHostPolicy`) through `host_rollout` (one
  jitted `lax.scan`, one batched callback per step) for each `eval.target_returns`; average
  return and success over complete episodes, next to the dataset's and the M-SAT paper's Table 2;
  attention maps (HTML + PNG) of the last context of env 0.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: M-SAT paper Table 2 (mean +- std over 100 evaluation runs x 5 seeds; DC in the paper's
#: reward units, max 22.0, which we read as ViZDoom's reward / 100) and Table 3 / Figure 3 for
#: the single-token baseline on My Way Home (context 60; Table 2 has no baseline row).
PAPER_TABLE2 = {
    "my_way_home": {"msat_nope": "0.863 +- 0.256", "msat": "0.964 +- 0.005",
                    "mat": "0.747 +- 0.249", "dt": "0.243 +- 0.178 (Table 3, context 60)"},
    "deadly_corridor": {"msat_nope": "16.17 +- 0.33", "msat": "14.88 +- 0.44",
                        "mat": "12.28 +- 3.1", "dt": "n/a (Figure 3 only)"},
}
#: The paper's Deadly Corridor rewards are ViZDoom's divided by this (its maximum 22.0 vs our
#: ~2300 for x-progress to the vest plus the +1000 vest bonus).
DC_PAPER_REWARD_DIVISOR = 100.0


def scenario_of(config) -> str:
    from envs.host import vizdoom as vd
    scenario = config.env.kwargs.get("scenario", "")
    if scenario not in vd.SCENARIOS:
        raise ValueError(f"env.kwargs.scenario must be one of {vd.SCENARIOS}, got {scenario!r}")
    return scenario


def store_dir(config) -> str:
    return config.data.path or os.path.join(
        "runs", "datasets", f"vizdoom_{scenario_of(config)}_{config.preset or 'paper'}")


def variant_name(config) -> str:
    """dt | msat | mat | msat_nope (M-SAT with `timestep_encoding='none'`) | mat_nope ..."""
    return config.method + ("_nope" if config.model.timestep_encoding == "none" else "")


def generate(config, force: bool = False) -> dict:
    """Record the expert dataset into the pixel store (skipped when it exists, unless `force`)."""
    from envs.host import vizdoom as vd
    directory = store_dir(config)
    info_path = os.path.join(directory, "dataset.json")
    if os.path.exists(os.path.join(directory, "meta.json")) and not force:
        with open(info_path) as f:
            return json.load(f)
    if force and os.path.isdir(directory):
        for name in os.listdir(directory):  # a store is only our own chunk files
            os.remove(os.path.join(directory, name))
    info = vd.record_expert_dataset(
        directory, scenario_of(config), int(config.data.num_steps),
        num_envs=int(config.data.num_envs), noise=tuple(config.data.noise),
        seed=int(config.seed), steps_per_call=int(config.data.steps_per_call))
    print(f"recorded {info['steps']} steps ({info['episodes']} episodes, "
          f"{info['bytes'] / 2**30:.2f} GiB) in {info['generation_seconds']} s -> {directory}")
    return info


def open_store(config):
    from icrl_jax.data.pixel_trajectories import PixelTrajectoryStore
    directory = store_dir(config)
    if not os.path.exists(os.path.join(directory, "meta.json")):
        if not config.run.generate:
            raise FileNotFoundError(f"no pixel store at {directory} and run.generate=False")
        generate(config)
    store = PixelTrajectoryStore(directory)
    from envs.host import vizdoom as vd
    scenario = scenario_of(config)
    want = (list(vd.OBS_SHAPE), [len(vd.COMPONENTS[scenario])])
    if [store.meta["obs_shape"], store.meta["action_shape"]] != list(want):
        raise ValueError(f"{directory} holds obs {store.meta['obs_shape']} / actions "
                         f"{store.meta['action_shape']}, not {scenario}'s {want}")
    return store


def build_method(config):
    from envs.host import vizdoom as vd
    from icrl_jax.methods.msat import DT_METHODS
    dims = tuple(int(d) for d in vd.action_nvec(scenario_of(config)))
    return DT_METHODS[config.method](config.model, dims, config.train.seq_len, None)


def signature(config) -> dict[str, Any]:
    return dict(method=config.method, env=config.env.name, scenario=scenario_of(config),
                timestep_encoding=config.model.timestep_encoding)


def _example(store, config):
    return jax.tree.map(jnp.asarray, store.sample(np.random.default_rng(0), 1,
                                                  config.train.seq_len))


def train(config):
    """Train (resuming) from the pixel store's prefetching loader, then evaluate."""
    from icrl_jax import train as T
    from icrl_jax.data.pixel_store import PrefetchLoader

    store = open_store(config)
    method = build_method(config)
    per_call = config.train.steps_per_call * config.train.batch_size

    def loader_fn(start_step: int):
        # A resumed run draws a fresh, seeded stream of windows from where it stopped.
        return PrefetchLoader(store, per_call, config.train.seq_len,
                              seed=int(config.seed) * 1_000_003 + start_step)

    start = time.perf_counter()
    state = T.train(method, _example(store, config), config.train, config.workdir,
                    signature(config), seed=config.seed, show_progress=config.run.progress,
                    loader_fn=loader_fn)
    with open(os.path.join(config.workdir, "train_time.json"), "w") as f:
        json.dump({"train_seconds_this_invocation": time.perf_counter() - start,
                   "steps": int(state.step)}, f)
    if config.run.evaluate:
        return evaluate(config, params=jax.tree.map(jnp.asarray, state.params))
    return None


def load_params(config, method, store):
    from icrl_jax import train as T
    checkpointer = T.Checkpointer(os.path.join(config.workdir, "checkpoints"), signature(config))
    if checkpointer.latest_step() is None:
        raise FileNotFoundError(f"no checkpoint in {config.workdir}/checkpoints; train first")
    like = T.init_train_state(method, T.make_optimizer(config.train), _example(store, config),
                              jax.random.key(0), config.train.seq_len, T.data_mesh(),
                              lambda example, *_: example)
    state = checkpointer.restore(like)
    checkpointer.close()
    return state.params


def last_context(out: dict[str, np.ndarray], env: int, context_len: int, target: float):
    """The context env `env` held at its last step, rebuilt from a rollout's outputs (for
    attention maps): the last <= K steps of its final (possibly unfinished) episode."""
    from icrl_jax.data.trajectories import Trajectories
    dones = np.asarray(out["dones"][env])
    ends = np.flatnonzero(dones[:-1])
    first = int(ends[-1]) + 1 if len(ends) else 0
    rewards = np.asarray(out["rewards"][env], np.float32)
    last = len(dones)
    lo = max(first, last - context_len)
    rtg = target - (np.cumsum(rewards[first:last]) - rewards[first:last])
    n, pad = last - lo, context_len - (last - lo)

    def left_pad(x):
        return np.concatenate([np.zeros((pad,) + x.shape[1:], x.dtype), x])

    return Trajectories(
        observations=left_pad(np.asarray(out["observations"][env, lo:last])),
        actions=left_pad(np.asarray(out["actions"][env, lo:last], np.int32)),
        rewards=left_pad(rewards[lo:last]),
        returns_to_go=left_pad(rtg[lo - first:].astype(np.float32)),
        timesteps=left_pad(np.arange(lo - first, last - first, dtype=np.int32)),
        mask=left_pad(np.ones(n, bool)))


def evaluate(config, params=None) -> dict[str, Any]:
    """Return-conditioned bridge rollouts; writes `eval.json` and attention maps."""
    from envs.host import vizdoom as vd
    from envs.host.bridge import host_rollout
    from icrl_jax.analysis.attention_maps import context_attention, write_attention
    from icrl_jax.pipeline import write_eval_results
    from icrl_jax.methods.dt_rollout import DTHostPolicy

    scenario = scenario_of(config)
    store = open_store(config)
    method = build_method(config)
    if params is None:
        params = load_params(config, method, store)
    num_envs = int(config.eval.num_envs_per_task)
    # Count the episodes that start early enough to end within the rollout whatever happens.
    max_start = int(config.eval.num_steps) - vd.MAX_EPISODE_STEPS - 1  # 1 step of slack
    if max_start < 0:
        raise ValueError(f"eval.num_steps={config.eval.num_steps} is shorter than one "
                         f"{vd.MAX_EPISODE_STEPS}-step episode time limit")
    results: dict[str, Any] = dict(scenario=scenario, variant=variant_name(config),
                                   num_envs=num_envs, num_steps=int(config.eval.num_steps),
                                   greedy=bool(config.eval.greedy),
                                   episodes_counted="those starting at step <= "
                                                    f"{max_start} (they all finish)")
    start = time.perf_counter()
    pool = vd.doom_bridge(scenario, num_envs, record=False)
    last_out, last_target = None, None
    try:
        for target in config.eval.target_returns:
            policy = DTHostPolicy(method, params, config.train.seq_len, float(target),
                                  vd.OBS_SHAPE, jnp.uint8, bool(config.eval.greedy))
            out = jax.device_get(host_rollout(pool, policy, int(config.eval.num_steps),
                                              jax.random.PRNGKey(config.eval.seed),
                                              seed=int(config.eval.seed)))
            returns, success = vd.episode_stats(out["rewards"], out["dones"], out["terminated"],
                                                scenario, max_start=max_start)
            tag = f"@{float(target):g}"
            results[f"model_return{tag}"] = float(returns.mean()) if len(returns) else None
            results[f"model_return_std{tag}"] = float(returns.std()) if len(returns) else None
            results[f"model_success{tag}"] = float(success.mean()) if len(success) else None
            results[f"model_episodes{tag}"] = int(len(returns))
            if scenario == "deadly_corridor" and len(returns):
                results[f"model_return_paper_units{tag}"] = float(returns.mean()
                                                                  / DC_PAPER_REWARD_DIVISOR)
            last_out, last_target = out, float(target)
    finally:
        pool.close()
    results["eval_seconds"] = time.perf_counter() - start
    results.update(dataset_return_mean=float(store.episode_returns.mean()),
                   dataset_return_max=float(store.episode_returns.max()),
                   dataset_episodes=int(store.num_episodes), dataset_steps=int(store.num_steps),
                   paper_table2=PAPER_TABLE2[scenario].get(variant_name(config), "n/a"))
    context = last_context(last_out, 0, config.train.seq_len, last_target)
    maps, labels = context_attention(method, params, jax.tree.map(jnp.asarray, context))
    results.update(write_attention(
        config.workdir, maps, labels,
        f"{config.experiment} ({variant_name(config)}) env 0, target {last_target:g}"))
    return write_eval_results(config, results)


def run(config, command: str):
    """`icrl-jax generate | train | evaluate` for DT methods on a host simulator."""
    from icrl_jax.pipeline import run_stage
    return run_stage(command, {"generate": lambda: generate(config, force=True),
                               "train": lambda: train(config),
                               "evaluate": lambda: evaluate(config)},
                     f"method {config.method!r}")
