"""Learning histories on device: `vmap` over tasks x `lax.scan` over steps of source x env.

`generate_histories(env, source, params, num_steps, key)` returns a `History`; everything runs in
one jitted program per (env, source, num_steps, chunk shape), with no Python loop per step.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from icrl_jax.envs.base import BANDIT, ICRLEnv
from icrl_jax.data.history import History
from icrl_jax.data.sources import ParamSource, Source, Transition


def _env_step(env, key, state, action, params):
    """gymnax step that also returns the true post-step obs/state (before the auto-reset).

    Returns (next_obs, next_state, final_obs, final_state, reward, terminated, truncated).
    Envs that override `ICRLEnv.transition` (bandits: every step is an episode) are stepped through
    it; their final_state is the returned state. Otherwise this is gymnax's `Environment.step`,
    written out so the pre-reset state (e.g. Key-to-Door's key flag) is not lost.
    """
    if isinstance(env, ICRLEnv) and type(env).transition is not ICRLEnv.transition:
        obs, new_state, reward, term, trunc, info = env.transition(key, state, action, params)
        return obs, new_state, info["final_observation"], new_state, reward, term, trunc
    k_step, k_reset = jax.random.split(key)
    obs_st, state_st, reward, term, _ = env.step_env(k_step, state, action, params)
    trunc = env.is_truncated(state_st, params)
    done = term | trunc
    obs_re, state_re = env.reset_env(k_reset, params)
    select = partial(jax.tree.map, lambda r, s: jax.lax.select(done, r, s))
    return (select(obs_re, obs_st), select(state_re, state_st), obs_st, state_st,
            reward.astype(jnp.float32), jnp.asarray(term, bool), jnp.asarray(trunc, bool))


def _step_info(env, state, action, params, final_obs, terminated) -> dict[str, jax.Array]:
    if env.kind != BANDIT:  # the observation after the step, before an auto-reset replaces it
        return {"final_observations": final_obs, "terminated": terminated}
    means = env.expected_rewards(state, params)
    return {"expected_reward": means[action], "optimal_expected_reward": means.max()}


@partial(jax.jit, static_argnames=("env", "source", "num_steps", "with_info", "with_state"))
def _generate(env, source, num_steps: int, with_info: bool, with_state: bool, keys, params,
              source_params=None):
    """keys `(N,)`, params batched `(N, ...)` -> dict of `(N, T, ...)` arrays.

    `source` is a `Source`, or the `build` of a `ParamSource` whose arrays are `source_params`.
    """
    if not isinstance(source, Source):
        source = source(source_params)

    def init_one(key, p):
        k_src, k_env, k_run = jax.random.split(key, 3)
        obs, env_state = env.reset(k_env, p)
        return k_run, obs, env_state, source.init(k_src, p)

    def step_one(carry, p):
        key, obs, env_state, src_state = carry
        key, k_act, k_env, k_upd = jax.random.split(key, 4)
        action, src_state = source.act(k_act, src_state, obs, env_state, p)
        action = jnp.asarray(action, jnp.float32 if env.continuous_actions else jnp.int32)
        next_obs, next_state, final_obs, final_state, reward, term, trunc = _env_step(
            env, k_env, env_state, action, p)
        tr = Transition(obs=obs, action=action, reward=reward, next_obs=final_obs,
                        terminated=term, truncated=trunc, env_state=env_state,
                        next_env_state=final_state)
        src_state = source.update(k_upd, src_state, tr, p)
        out = {"observations": obs, "actions": action, "rewards": reward, "dones": term | trunc}
        if with_info:
            out.update(_step_info(env, env_state, action, p, final_obs, term))
        return (key, next_obs, next_state, src_state), out

    carry = jax.vmap(init_one)(keys, params)
    step_all = jax.vmap(step_one)

    def scan_body(carry, _):
        return step_all(carry, params)

    carry, out = jax.lax.scan(scan_body, carry, None, length=num_steps)
    # scan stacks time first: (T, N, ...) -> (N, T, ...)
    out = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), out)
    if with_state:
        out["policy_state"] = carry[3]
    return out


def generate_histories(env, source: Source, params: Any, num_steps: int, key: jax.Array, *,
                       task_ids=None, chunk_size: int | None = None, with_info: bool = False,
                       with_state: bool = False, fast_rng: bool = True,
                       on_chunk: Callable[[int], None] | None = None):
    """Run `source` on every task in `params` for `num_steps` steps and record the histories.

    Args:
      env: an `ICRLEnv` (gymnax env, task in params, auto-reset keeps the task).
      source: a `Source` (see `icrl_jax.data.sources`), or a `ParamSource` such as a trained
        model's in-context policy.
      params: batched EnvParams with leading axis N (e.g. `env.task_params(task_ids)`).
      num_steps: T, steps per history (across episodes).
      key: PRNG key; history n uses `split(key, N)[n]`, so chunking does not change results.
        Or `(N,)` keys, one per history (a subset of a larger split: a process's share).
      task_ids: int `(N,)` recorded in the History (default `arange(N)`).
      chunk_size: most tasks per jitted call (memory/cache bound; default: all N): the N tasks
        go in ceil(N / chunk_size) equal chunks, each rounded up to a multiple of the local
        devices, over which each call is sharded; the last chunk is padded, so one trace.
      with_info: also return per-step info `(N, T)` arrays; for bandits `expected_reward` of
        the chosen arm and `optimal_expected_reward` (regret = their difference, summed); for
        episodic envs `final_observations` `(N, T, *obs_shape)`, the observation after each step
        before an auto-reset (an episode's last one, for offline datasets), and `terminated`
        bool `(N, T)` (dones that are not truncations).
      with_state: also return each env's final policy state as `info["policy_state"]`.
      fast_rng: trace with non-partitionable threefry (faster bits on CPU, benchmarks/RESULTS.md; it only changes
        which random numbers a key yields, not their distribution).
      on_chunk: called with each chunk's number of tasks once that chunk's rollout is done
        (progress: one host round trip per chunk, none per step).

    Returns:
      `History` with observations `(N, T, *obs_shape)`, actions int32 `(N, T)`, rewards float32
      `(N, T)`, dones bool `(N, T)` (terminated | truncated), task_ids int32 `(N,)`, action_mask
      bool `(N, A)`; and, with `with_info`, `(History, info dict)`.
    """
    leaves = jax.tree.leaves(params)
    n = int(np.shape(leaves[0])[0])
    task_ids = np.arange(n, dtype=np.int32) if task_ids is None else np.asarray(task_ids, np.int32)
    if task_ids.shape != (n,):
        raise ValueError(f"task_ids has shape {task_ids.shape}; expected ({n},) to match params")
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    keys = key if np.ndim(key) == (1 if typed else 2) else jax.random.split(key, n)
    if len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} histories")
    # Each chunk is one program over a mesh of the local devices, its envs sharded along the
    # mesh (padded to a multiple of the device count); on a CPU host run with
    # XLA_FLAGS=--xla_force_host_platform_device_count=<cores> every core gets a shard.
    devices = jax.local_devices()
    mesh = Mesh(np.array(devices), ("envs",))
    chunk = n if chunk_size is None else max(1, min(int(chunk_size), n))
    chunk = -(-n // -(-n // chunk))  # equal chunks: 4,100 tasks at most 4,096 a call -> 2 x 2,050
    chunk = -(-chunk // len(devices)) * len(devices)
    env_sharding, replicated = NamedSharding(mesh, P("envs")), NamedSharding(mesh, P())
    ctx = jax.threefry_partitionable(False) if fast_rng else contextlib.nullcontext()
    parts = []
    with ctx:
        for start in range(0, n, chunk):
            idx = np.arange(start, start + chunk).clip(max=n - 1)  # pad the last chunk
            sub = jax.device_put(jax.tree.map(lambda x: x[idx], (keys, params)), env_sharding)
            if isinstance(source, ParamSource):  # its arrays are traced arguments, not constants
                out = _generate(env, source.build, int(num_steps), bool(with_info),
                                bool(with_state), *sub,
                                source_params=jax.device_put(source.params, replicated))
            else:
                out = _generate(env, source, int(num_steps), bool(with_info), bool(with_state),
                                *sub)
            parts.append(jax.tree.map(lambda x: x[:min(chunk, n - start)], out))
            if on_chunk is not None:
                jax.block_until_ready(parts[-1])
                on_chunk(min(chunk, n - start))
    out = parts[0] if len(parts) == 1 else jax.tree.map(lambda *x: jnp.concatenate(x), *parts)
    history = History(observations=out.pop("observations"), actions=out.pop("actions"),
                      rewards=out.pop("rewards").astype(jnp.float32), dones=out.pop("dones"),
                      task_ids=jnp.asarray(task_ids),
                      # Continuous actions (float32 `(N, T, d)`) have no action set: `(N, 0)`.
                      action_mask=jnp.zeros((n, 0), bool) if env.continuous_actions
                      else jnp.asarray(params.action_mask, bool))
    return (history, out) if (with_info or with_state) else history
