"""D4RL's locomotion datasets made on device (`data.builder="locomotion"`): one PPO run
recorded, its medium, medium-replay and medium-expert datasets written in Minari's format with
their reference scores (`LocomotionData`)."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import jax
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.metrics import episode_returns_ragged
from icrl_jax.data.builders import BUILDERS, Minari, cut_episodes
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.minari_io import spaces_of, write_minari
from icrl_jax.data.sources import build_source
from icrl_jax.data.sources.ppo import PPO, PPOConfig, agent_of, plan_chunks, ppo_policy


class LocomotionData(Minari):
    """D4RL's locomotion datasets from one PPO run on device (`data/sources/ppo.py`).

    `data.dataset_id` names the dataset opened: `<prefix>medium-<suffix>`,
    `<prefix>medium-replay-<suffix>` or `<prefix>medium-expert-<suffix>` (e.g.
    "hopper/medium-v0"); `build` writes all three side by side under `data.minari_root`:

    1. PPO (`data.source_kwargs`: `PPOConfig` fields) trains for `data.expert_steps` steps,
       recording all its experience and a snapshot of the agent every chunk of (at most)
       `data.ppo_chunk_updates` updates; the last snapshot is the expert.
    2. The expert's and a uniform random policy's returns (the first episode of each stream, all
       complete since `data.num_steps` >= the episode length) are the reference scores stored
       with every dataset (D4RL's normalised score: 0 random, 100 our expert), except on an env
       that is one of D4RL's tasks (`env.d4rl_reference_scores`, the MJX `*_v5` envs): there
       D4RL's own references are stored, and ours stay in the metadata.
    3. Medium: the target is `data.medium_fraction` (D4RL: about a third) of the way from the
       random to the expert return on the normalised scale (`random + f * (expert - random)`,
       so a normalised score of 100 f; a third of the raw return can lie below random, e.g.
       walker2d's alive bonus); the candidates are the snapshots up to the first whose training
       episodes (the last <= 10 updates of its chunk) average at least the target, and each
       candidate's own return (the first episode of `MEDIUM_EVAL_STREAMS` rollouts) picks the
       one closest to it (`medium_snapshot`). Training episodes lag the agent: a 1000-step
       halfcheetah episode spans about three chunks, so its return is that of older agents;
       `medium` is that policy's sampled actions on `num_train_tasks` streams x `num_steps`
       steps, `medium-replay` the training experience up to that snapshot, `medium-expert`
       medium plus as many steps of the expert.
    Only complete episodes are kept (a stream's unfinished last episode is dropped).
    """

    KINDS = ("medium", "medium-replay", "medium-expert")

    @classmethod
    def ids(cls, dataset_id: str) -> dict[str, str]:
        """The three sibling ids of `dataset_id` (kind -> id)."""
        import re
        m = re.fullmatch(r"(.*?)(medium-replay|medium-expert|medium)(-v\d+)?", dataset_id or "")
        if not m:
            raise UserError(f"data.builder='locomotion' needs data.dataset_id like "
                            f"'hopper/medium-v0' (kinds {cls.KINDS}), got {dataset_id!r}")
        return {k: f"{m.group(1)}{k}{m.group(3) or ''}" for k in cls.KINDS}

    def build(self, config, env, path: str) -> None:
        if not getattr(env, "continuous_actions", False) or env.host:
            raise UserError(f"data.builder='locomotion' needs a JAX-native continuous-action env, "
                            f"got {config.env.name!r}")
        data = config.data
        ids = self.ids(data.dataset_id)
        num_streams, num_steps = int(data.num_train_tasks), int(data.num_steps)
        if num_steps < env.episode_length:
            raise UserError(f"data.num_steps={num_steps} must be >= the episode length "
                            f"{env.episode_length} (every stream's first episode is complete)")
        kwargs = data.source_kwargs.to_dict()
        if "hidden" in kwargs:
            kwargs["hidden"] = tuple(kwargs["hidden"])
        try:
            ppo_config = PPOConfig(**kwargs)
        except TypeError as e:
            raise UserError(f"bad data.source_kwargs for PPO: {e}") from e
        key = jax.random.PRNGKey(config.seed)
        start = time.perf_counter()

        # 1. One PPO run, recorded, with a snapshot of the agent per chunk.
        num_chunks, chunk = plan_chunks(int(data.expert_steps), ppo_config,
                                          int(data.ppo_chunk_updates))
        ppo = PPO(env, ppo_config, num_chunks * chunk * ppo_config.num_envs
                    * ppo_config.rollout_steps)
        state = ppo.init(jax.random.fold_in(key, 0))
        logs, snapshots = [], []
        for c in range(num_chunks):
            state, out = ppo.run(state, chunk, True)
            logs.append(jax.device_get(out))
            snapshots.append(jax.device_get(agent_of(state)))
            recent = _recent_return(logs[-1])
            print(f"ppo: {(c + 1) * chunk * ppo.steps_per_update} steps, " + (
                f"return {recent:.1f}" if np.isfinite(recent) else "no episode ended in this "
                "chunk's last updates"), flush=True)
        train_seconds = time.perf_counter() - start

        # 2. Reference returns; the expert's rollout is also medium-expert's expert half.
        params = env.task_params(np.arange(num_streams, dtype=np.int32))
        expert = ppo_policy(env, snapshots[-1], ppo_config)
        expert_eps, expert_ret = self._rollout(env, expert, params, num_steps,
                                               jax.random.fold_in(key, 1))
        random_src = build_source("uniform_random", env, env.episode_length, {})
        _, random_ret = self._rollout(env, random_src, params, num_steps,
                                      jax.random.fold_in(key, 2))
        ref_min, ref_max, ref_kind = reference_returns(env, random_ret, expert_ret)
        refs = dict(ref_min_score=ref_min, ref_max_score=ref_max)

        # 3. The medium snapshot, its rollout and the replay up to it.
        chunk_returns = [_recent_return(l) for l in logs]
        eval_params = env.task_params(np.arange(MEDIUM_EVAL_STREAMS, dtype=np.int32))

        def snapshot_return(i: int) -> float:
            policy = ppo_policy(env, snapshots[i], ppo_config)
            return self._rollout(env, policy, eval_params, env.episode_length,
                                 jax.random.fold_in(jax.random.fold_in(key, 4), i))[1]

        medium_chunk, target, candidate_returns = medium_snapshot(
            chunk_returns, random_ret, expert_ret, float(data.medium_fraction), snapshot_return)
        medium_eps, medium_ret = self._rollout(
            env, ppo_policy(env, snapshots[medium_chunk], ppo_config), params, num_steps,
            jax.random.fold_in(key, 3))
        replay_eps = self._replay_episodes(logs[: medium_chunk + 1])
        seconds = time.perf_counter() - start
        obs_space, act_space = spaces_of(env)
        meta = dict(env_kwargs=config.env.kwargs.to_dict(), source="ppo", ppo=kwargs,
                    seed=int(config.seed), expert_steps=int(ppo.num_updates
                                                            * ppo.steps_per_update),
                    medium_steps=int((medium_chunk + 1) * chunk * ppo.steps_per_update),
                    medium_target_return=target, medium_return=medium_ret,
                    medium_candidate_returns=[float(r) for r in candidate_returns],
                    medium_snapshot=int(medium_chunk),
                    expert_return=expert_ret, random_return=random_ret,
                    reference_scores=ref_kind,
                    ppo_train_seconds=train_seconds, generation_seconds=seconds,
                    ppo_returns=np.concatenate([l["mean_return"] for l in logs]).tolist())
        for kind, episodes in (("medium", medium_eps), ("medium-replay", replay_eps),
                               ("medium-expert", medium_eps + expert_eps)):
            write_minari(self.root(config), ids[kind], episodes, obs_space, act_space,
                         config.env.name, metadata=dict(meta, kind=kind), overwrite=True,
                         algorithm_name="ppo", env_spec=env.gymnasium_id, **refs)
            steps = sum(len(e["rewards"]) for e in episodes)
            print(f"{ids[kind]}: {len(episodes)} episodes ({steps} steps), mean return "
                  f"{np.mean([e['rewards'].sum() for e in episodes]):.1f}")
        print(f"locomotion datasets in {seconds:.0f}s (PPO {train_seconds:.0f}s): random "
              f"{random_ret:.1f}, medium {medium_ret:.1f} (target {target:.1f}; snapshot "
              f"{medium_chunk + 1}/{len(logs)}, its own return {candidate_returns[medium_chunk]:.1f}, "
              f"training return {chunk_returns[medium_chunk]:.1f}),"
              f" expert {expert_ret:.1f} -> {os.path.dirname(path)}")

    @staticmethod
    def _rollout(env, policy, params, num_steps, key) -> tuple[list[dict], float]:
        """Complete episodes of `policy` on N streams, and the mean return of each stream's
        first episode (an unbiased estimate of the policy's return)."""
        history, info = generate_histories(env, policy, params, num_steps, key, with_info=True)
        history, info = jax.device_get(history), jax.device_get(info)
        first = [r[0] for r in episode_returns_ragged(np.asarray(history.rewards),
                                                       np.asarray(history.dones)) if len(r)]
        return cut_episodes(history, info), float(np.mean(first))

    @staticmethod
    def _replay_episodes(logs) -> list[dict]:
        """Episodes of the recorded PPO experience `(U, T, num_envs, ...)` per chunk, as one
        stream per env."""
        def streams(name):  # -> (num_envs, total steps, ...)
            x = np.concatenate([l[name] for l in logs])
            x = x.reshape((-1,) + x.shape[2:])
            return np.swapaxes(x, 0, 1)

        term, trunc = streams("terminated"), streams("truncated")
        history = SimpleNamespace(observations=streams("observations"),
                                  actions=streams("actions"), rewards=streams("rewards"),
                                  dones=term | trunc)
        return cut_episodes(history, dict(final_observations=streams("final_observations"),
                                          terminated=term))


#: Rollouts (one episode each) that measure a medium candidate's own return.
MEDIUM_EVAL_STREAMS = 8


def reference_returns(env, random_return: float, expert_return: float) -> tuple[float, float, str]:
    """(ref_min_score, ref_max_score, "d4rl" | "ours"): the 0 and 100 of a locomotion dataset's
    normalised score. An env that is one of D4RL's tasks (`env.d4rl_reference_scores`) scores
    against D4RL's own references, so its numbers compare with published tables; any other
    against our random and expert policies' returns."""
    d4rl = getattr(env, "d4rl_reference_scores", None)
    if d4rl is not None:
        return float(d4rl[0]), float(d4rl[1]), "d4rl"
    return float(random_return), float(expert_return), "ours"


def medium_snapshot(chunk_returns, random_return: float, expert_return: float,
                    fraction: float, evaluate=None) -> tuple[int, float, list[float]]:
    """The medium snapshot: its index, the target return `random + fraction * (expert -
    random)` (D4RL-normalised score 100 * fraction) and the candidates' scores.

    The candidates are the snapshots up to the first whose training return (`chunk_returns`,
    -inf where no episode ended) reaches the target, all if none does: stopping there keeps
    medium-replay to the experience before a medium agent. Each candidate is scored by
    `evaluate(i)` (its own rollouts' return) when given, else by its training return, and the
    one closest to the target is medium."""
    target = random_return + fraction * (expert_return - random_return)
    reached = [i for i, r in enumerate(chunk_returns) if r >= target]
    last = reached[0] if reached else len(chunk_returns) - 1
    scores = [float(evaluate(i)) if evaluate is not None else float(r)
              for i, r in enumerate(chunk_returns[: last + 1])]
    return int(np.argmin([abs(r - target) for r in scores])), float(target), scores


def _recent_return(log) -> float:
    """Mean return of the episodes ended in a chunk's last <= 10 PPO updates (-inf if none)."""
    recent = np.asarray(log["mean_return"][-10:])
    return float(np.nanmean(recent)) if np.isfinite(recent).any() else -np.inf


BUILDERS.register("locomotion", LocomotionData(), needs=("minari",))
