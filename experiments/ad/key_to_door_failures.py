"""Where a trained Key-to-Door model's in-context rollouts fail.

    python -m experiments.ad.key_to_door_failures --preset qlearning_cpu_starts --seed 0 \
        --workdir runs/k2d_starts/ngram_s0 [--rollouts 100] [--out DIR]
    python -m experiments.ad.key_to_door_failures --from-npz --workdir DIR   # report saved ones

Rolls the run's latest checkpoint out on its held-out goals (one rollout per goal, the
evaluation's length, temperature and key), keeps the trajectories (`evaluate` keeps only
returns), and prints:
  - how one episode's outcome (0: no key, 1: key but no door, 2: both) follows the last's;
  - the share of episodes that open the door by the key-to-door distance of the goal,
    pooled over episodes and averaged over goals;
  - for episodes that fail the door right after one that opened it, how many pass through the
    cell the door was entered from then.
The trajectories go to `DIR/failures.npz` (default: the workdir).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

GRID = 9  # Dark Key-to-Door 9x9: cell id = row * 9 + column


def episode_spans(dones: np.ndarray) -> list[tuple[int, int]]:
    """The [first, last] steps of each complete episode of one rollout, `dones` bool `(T,)`."""
    ends = np.flatnonzero(dones)
    return list(zip(np.r_[0, ends[:-1] + 1].tolist(), ends.tolist()))


def outcome_transitions(rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
    """Counts int `(3, 3)` of consecutive episodes' returns [this, next] over rollouts
    (`rewards`, `dones` `(N, T)`)."""
    counts = np.zeros((3, 3), np.int64)
    for reward, done in zip(rewards, dones):
        outcomes = [int(round(reward[a:b + 1].sum())) for a, b in episode_spans(done)]
        for this, following in zip(outcomes[:-1], outcomes[1:]):
            counts[this, following] += 1
    return counts


def manhattan(a, b) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    return np.abs(a // GRID - b // GRID) + np.abs(a % GRID - b % GRID)


def door_rate_by_distance(rewards, dones, keys, doors, skip_steps: int = 0
                          ) -> dict[int, tuple[int, float, int, float]]:
    """Key-to-door distance -> (episodes, share of them that opened the door, goals, mean over
    those goals of each goal's own share), over the episodes that start at or after
    `skip_steps` (e.g. the first context). Rollouts that open the door make short episodes and
    so weigh more in the pooled share; the per-goal mean weighs each rollout once.

    rewards, dones: (N, T), one rollout per goal; keys, doors: (N,) cell ids."""
    opened: dict[int, list[list[bool]]] = {}
    for reward, done, key, door in zip(rewards, dones, keys, doors):
        outcomes = [round(reward[a:b + 1].sum()) == 2
                    for a, b in episode_spans(done) if a >= skip_steps]
        if outcomes:
            opened.setdefault(int(manhattan(key, door)), []).append(outcomes)
    return {d: (sum(map(len, goals)), float(np.mean(np.concatenate(goals))), len(goals),
                float(np.mean([np.mean(g) for g in goals])))
            for d, goals in sorted(opened.items())}


def door_revisits(observations, rewards, dones) -> tuple[int, int]:
    """Episodes that get the key but not the door right after one that opened the door, and
    how many of them pass through, after the key, the cell the door was entered from."""
    failed = revisited = 0
    for obs, reward, done in zip(observations, rewards, dones):
        spans = episode_spans(done)
        for (a0, b0), (a, b) in zip(spans[:-1], spans[1:]):
            if round(reward[a0:b0 + 1].sum()) != 2 or round(reward[a:b + 1].sum()) != 1:
                continue
            key_step = a + int(np.flatnonzero(reward[a:b + 1] > 0)[0])
            failed += 1
            revisited += bool((obs[key_step + 1:b + 1] == obs[b0]).any())
    return failed, revisited


def roll_out(preset: str, seed: int, workdir: str, num_rollouts: int):
    """The run's model on its first `num_rollouts` held-out goals (one rollout each)."""
    import jax

    from icrl_jax.experiments.ad.key_to_door import get_config
    from icrl_jax.pipeline import run as R
    from icrl_jax.data.history_generation import generate_histories
    from icrl_jax.methods import build_method

    config = get_config(preset)
    config.seed, config.workdir = seed, workdir
    config = R.resolve_config(config)
    env = R.build_env(config)
    method = build_method(config, env)
    params = R.load_params(config, env, method)
    ids = np.unique(R.eval_task_ids(env, config))[:num_rollouts]
    tasks = env.task_params(ids)
    policy = method.policies(params, env, config)["model"]
    history = generate_histories(env, policy, tasks, int(config.eval.num_steps),
                                 jax.random.PRNGKey(config.eval.seed), task_ids=ids)
    return dict(observations=np.asarray(history.observations), rewards=np.asarray(history.rewards),
                dones=np.asarray(history.dones), task_ids=ids, keys=np.asarray(tasks.key),
                doors=np.asarray(tasks.door), context=int(config.train.seq_len))


def report(rollouts: dict) -> str:
    rewards, dones = rollouts["rewards"], rollouts["dones"]
    counts = outcome_transitions(rewards, dones)
    shares = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    lines = ["| this episode | episodes | next: 0 | next: 1 | next: 2 |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {i} | {counts[i].sum()} | " + " | ".join(f"{p:.3f}" for p in shares[i]) + " |"
              for i in range(3)]
    lines += ["", "| key-to-door distance | episodes | door opened | goals "
              "| door opened, mean of goals |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {d} | {n} | {rate:.2f} | {goals} | {per_goal:.2f} |"
              for d, (n, rate, goals, per_goal) in door_rate_by_distance(
                  rewards, dones, rollouts["keys"], rollouts["doors"], rollouts["context"]).items()]
    failed, revisited = door_revisits(rollouts["observations"], rewards, dones)
    lines += ["", f"episodes that fail the door right after opening it: {failed}; of them, "
              f"{revisited} pass after the key through the cell the door was entered from"]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", help="the run's preset (needed unless --from-npz)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--rollouts", type=int, default=100)
    parser.add_argument("--out", help="where failures.npz goes (default: the workdir)")
    parser.add_argument("--from-npz", action="store_true",
                        help="report the trajectories already in failures.npz, no rollouts")
    args = parser.parse_args()
    path = os.path.join(args.out or args.workdir, "failures.npz")
    if args.from_npz:
        if not os.path.exists(path):
            parser.error(f"--from-npz: no {path}; run once without it to roll out and save one")
        with np.load(path) as saved:
            rollouts = {name: saved[name] for name in saved.files}
    else:
        if not args.preset:
            parser.error("--preset is needed to roll the run out (or --from-npz)")
        rollouts = roll_out(args.preset, args.seed, args.workdir, args.rollouts)
        np.savez(path, **rollouts)
    print(report(rollouts))


if __name__ == "__main__":
    main()
