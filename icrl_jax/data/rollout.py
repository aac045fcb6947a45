"""The one rollout driver: any policy (`Source` / `ParamSource`) on any environment.

* JAX-native envs: `generate_histories` (`vmap` over envs, `lax.scan` over steps, one jitted
  program per env, policy and length).
* Host simulators (`env.host`): `SourceOnHost` adapts the same policy to the bridge's
  `HostPolicy` (`vmap` over the worker pool inside `host_rollout`'s one jitted scan, one batched
  callback per step). The bridge reports the previous step's reward and done with each new
  observation, so the previous transition is committed (`update`) before acting. The simulators'
  own privileged policies (`HostPolicy`s such as the Miniworld oracle) run there unchanged.

`run_policies` runs several policies on the same tasks with the same keys (the same environment
randomness where actions agree) and returns, per policy, numpy arrays `(N, T)` of rewards, dones,
actions (and for bandits the per-step expected rewards), plus the final policy state.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.envs.host.bridge import HostStep, host_rollout
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.sources import ParamSource, Source, Transition
from icrl_jax.core.logging_utils import progress


@flax.struct.dataclass
class HostParams:
    """What a policy sees of a host task: every action available (bool `(A,)`)."""

    action_mask: jax.Array


class SourceOnHost:
    """A `Source` / `ParamSource` as the bridge's batched `HostPolicy` (see the module docstring).

    State: (per-env policy states `(N, ...)`, previous observation, previous action).
    """

    def __init__(self, policy: Source | ParamSource, env):
        self.source = policy.build(policy.params) if isinstance(policy, ParamSource) else policy
        self.env = env
        self.params = HostParams(env.action_mask(None))

    def init(self, key: jax.Array, num_envs: int):
        states = jax.vmap(lambda k: self.source.init(k, self.params))(
            jax.random.split(key, num_envs))
        obs = jnp.zeros((num_envs,) + tuple(self.env.observation_shape), jnp.uint8)
        return states, obs, jnp.zeros((num_envs,) + self.env.action_shape, jnp.int32)

    def act(self, key: jax.Array, state, step: HostStep):
        states, prev_obs, prev_actions = state
        if step.obs.shape[1:] != tuple(self.env.observation_shape):
            raise ValueError(f"observations {step.obs.shape[1:]} differ from the env's "
                             f"{tuple(self.env.observation_shape)}")
        started = step.t > 0

        def one(policy_state, obs_before, action, obs, reward, done, k):
            k_update, k_act = jax.random.split(k)
            transition = Transition(obs=obs_before, action=action, reward=reward, next_obs=obs,
                                    terminated=done, truncated=jnp.zeros((), bool),
                                    env_state=None, next_env_state=None)
            updated = self.source.update(k_update, policy_state, transition, self.params)
            policy_state = jax.tree.map(lambda a, b: jnp.where(started, a, b), updated,
                                        policy_state)
            return self.source.act(k_act, policy_state, obs, None, self.params)

        keys = jax.random.split(key, step.obs.shape[0])
        actions, states = jax.vmap(one)(states, prev_obs, prev_actions, step.obs, step.reward,
                                        step.done, keys)
        actions = jnp.asarray(actions, jnp.int32)
        return actions, (states, step.obs, actions)


def _as_host_policy(policy, env):
    return SourceOnHost(policy, env) if isinstance(policy, (Source, ParamSource)) else policy


def run_policies(env, policies: dict[str, Any], tasks, num_steps: int, key: jax.Array, *,
                 seed: int = 0, chunk_size: int | None = None, workers: int | None = None,
                 show_progress: bool = False, keep_observations: bool = False,
                 keep_state: bool = True) -> dict[str, dict[str, Any]]:
    """Roll out each policy on the same tasks for `num_steps` steps.

    Args:
      env: a JAX `ICRLEnv` (then `tasks` are batched EnvParams, leading axis N) or a `HostEnv`
        (then `tasks` are N task rows, run in pools of `workers` simulators: default the env's
        `num_workers`, else all).
      policies: name -> `Source` / `ParamSource` (or, on host envs, a bridge `HostPolicy`).
      key: shared by every policy; seed: the simulators' reset seed (host envs).
      chunk_size: most envs per jitted call on JAX envs (None: all at once): memory grows
        with the chunk, not with N; results do not depend on it.
      show_progress: a bar per policy over its env-steps (with env-steps/s), moved per chunk
        of envs on JAX envs, per pool of simulators on host envs.
      keep_observations: also return the observations each action was taken in (host envs).
      keep_state: return each env's final policy state (False: None, so that a model's
        key/value caches, tens of KB an env, are not kept for every env of a large evaluation).
    Returns:
      name -> {"rewards", "dones", "actions": `(N, T)` numpy, "terminated" (episodic envs),
      "expected_reward" / "optimal_expected_reward" (bandits), "policy_state": the final state of
      each env's policy (Sources only)}.
    """
    if env.host:
        return _run_on_host(env, policies, np.asarray(tasks), num_steps, key, seed,
                            workers or env.num_workers or len(tasks), show_progress,
                            keep_observations)
    ids = np.arange(jax.tree.leaves(tasks)[0].shape[0])
    out = {}
    for name, policy in policies.items():
        # One bar per policy over its env-steps, moved once per chunk of envs (its rate is the
        # policy's env-steps/s; the first chunk's includes compiling).
        bar = progress(total=len(ids) * num_steps, unit="env-step", disable=not show_progress,
                       desc=f"rollout {name}: {len(ids)} envs x {num_steps} steps")
        history, info = generate_histories(env, policy, tasks, num_steps, key, task_ids=ids,
                                           chunk_size=chunk_size, with_info=True,
                                           with_state=keep_state,
                                           on_chunk=lambda envs: bar.update(envs * num_steps))
        bar.close()
        state = info.pop("policy_state", None)
        info.pop("final_observations", None)  # only datasets keep them
        out[name] = dict(jax.device_get(dict(rewards=history.rewards, dones=history.dones,
                                             actions=history.actions, **info)),
                         action_mask=np.asarray(history.action_mask), policy_state=state)
    return out


def _run_on_host(env, policies, tasks, num_steps, key, seed, workers, show_progress,
                 keep_observations):
    if workers < 1:
        raise ValueError(f"a pool of simulators needs at least one worker, got {workers}")
    parts: dict[str, list] = {name: [] for name in policies}
    # Built once: each policy's rollout is compiled once and reused by every group.
    host_policies = {name: _as_host_policy(policy, env) for name, policy in policies.items()}
    bar = progress(total=len(tasks), desc=f"rollouts: {len(policies)} policies on {len(tasks)} "
                   f"envs x {num_steps} steps", disable=not show_progress)
    bridge = None  # one pool for every group: later groups rebuild the envs in its workers
    try:
        for group, start in enumerate(range(0, len(tasks), workers)):
            rows = tasks[start:start + workers]
            if bridge is None:
                bridge = env.make_bridge(rows)
            else:
                bridge.set_envs(env.env_fns(rows))
            for name, policy in policies.items():
                out, state = host_rollout(bridge, host_policies[name], num_steps,
                                          jax.random.fold_in(key, group),
                                          seed=seed * 100_003 + group, return_state=True)
                out = jax.device_get(out)
                out.pop("privileged")
                if not keep_observations:
                    out.pop("observations")
                if isinstance(policy, (Source, ParamSource)):
                    out["policy_state"] = state[0]
                parts[name].append(out)
            bar.update(len(rows))
    finally:
        if bridge is not None:
            bridge.close()
    bar.close()
    out = {}
    for name, chunks in parts.items():
        merged = jax.tree.map(lambda *x: np.concatenate([np.asarray(a) for a in x]), *chunks)
        merged["action_mask"] = np.ones((len(tasks), env.num_actions), bool)
        out[name] = merged
    return out
