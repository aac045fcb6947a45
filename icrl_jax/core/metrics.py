"""Metrics of learning histories: per-episode returns, regret, normalised scores."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np


def episode_returns(rewards: jax.Array, dones: jax.Array, max_episodes: int) -> jax.Array:
    """Return of each complete episode of each history.

    Args:
      rewards: `(N, T)`; dones: bool `(N, T)` True on an episode's last step.
      max_episodes: static number of episode slots to return.
    Returns:
      float32 `(N, max_episodes)`; NaN where the history has fewer complete episodes.
    """
    dones = jnp.asarray(dones, bool)
    episode_index = jnp.cumsum(dones, axis=1) - dones  # the ending step belongs to its episode
    sums = jax.vmap(lambda r, e: jax.ops.segment_sum(r, e, num_segments=max_episodes))(
        jnp.asarray(rewards, jnp.float32), episode_index)
    complete = jnp.arange(max_episodes)[None, :] < dones.sum(axis=1, keepdims=True)
    return jnp.where(complete, sums, jnp.nan)


def episode_returns_ragged(rewards, dones) -> list[np.ndarray]:
    """Per history, the returns of its complete episodes in order (episodes may differ in
    length and number across histories): `(N, T)` arrays -> N float32 arrays `(E_n,)`."""
    dones = np.asarray(dones, bool)
    returns = np.asarray(episode_returns(rewards, dones, max(int(dones.sum(1).max()), 1)))
    return [row[: int(count)] for row, count in zip(returns, dones.sum(1))]


def rollout_episode_returns(rollout: dict[str, np.ndarray], num_steps: int) -> np.ndarray:
    """Each rollout's complete episodes' returns in order: `rewards`, `dones` `(N, T)` ->
    float32 `(N, E)`, NaN-padded on the right, E the most episodes any rollout completed (>= 1).
    """
    returns = np.asarray(episode_returns(rollout["rewards"], rollout["dones"], num_steps))
    return returns[:, : max(int((~np.isnan(returns)).sum(1).max()), 1)]


def last_episodes(returns: np.ndarray, window: int) -> np.ndarray:
    """Each row's last `window` complete episodes: returns `(N, E)` NaN-padded on the right
    (episodes that end early give rows their own episode counts) -> `(N, window)`, NaN where a
    row has fewer episodes."""
    returns = np.asarray(returns, np.float64)
    count = (~np.isnan(returns)).sum(1)
    index = count[:, None] - window + np.arange(window)[None, :]
    picked = np.take_along_axis(returns, np.clip(index, 0, returns.shape[1] - 1), axis=1)
    return np.where(index >= 0, picked, np.nan)


def cumulative_regret(optimal_rewards: jax.Array, chosen_rewards: jax.Array) -> jax.Array:
    """Expected (pseudo-)regret accumulated over steps: `(N, T)` -> `(N, T)`."""
    return jnp.cumsum(optimal_rewards - chosen_rewards, axis=1)


def normalised_score(value, random_value, source_value):
    """0 for the random policy, 1 for the source algorithm (works for returns and for regrets)."""
    return (np.asarray(value) - random_value) / (np.asarray(source_value) - random_value)


def mean_and_stderr(x: np.ndarray, axis: int = 0, ddof: int = 0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """NaN-aware mean and standard error along `axis`; `ddof=1` for the sample deviation (a
    few seeds), the error being 0 where there are no more than `ddof` values."""
    x = np.asarray(x, np.float64)
    count = np.sum(~np.isnan(x), axis=axis)
    mean = np.nanmean(x, axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # count <= ddof: masked below
        std = np.nanstd(x, axis=axis, ddof=ddof)
    return mean, np.where(count > ddof, std, 0.0) / np.sqrt(np.maximum(count, 1))


def seed_mean_sem(values, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The statistic every report and table gives over training seeds: the mean and its standard
    error with the sample deviation (n - 1); the error is 0 for a single seed."""
    return mean_and_stderr(values, axis=axis, ddof=1)


def format_mean_sem(values, digits: int = 2) -> str:
    """`seed_mean_sem` of a list of per-seed values as "m ± s" ("m" for one seed, "-" for none)."""
    values = np.asarray(values, np.float64)
    if values.size == 0:
        return "-"
    if values.size == 1:
        return f"{values[0]:.{digits}f}"
    mean, sem = seed_mean_sem(values)
    return f"{float(mean):.{digits}f} ± {float(sem):.{digits}f}"


def expected_max_performance(scores, max_n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Expected Maximum Performance (Dodge et al., 2019) of a random hyperparameter search.

    With the N scores sorted, v(1) <= ... <= v(N), the best of n assignments drawn with
    replacement is v(i) with probability p_n(i) = (i/N)^n - ((i-1)/N)^n, so
    E[max | n] = sum_i v(i) p_n(i) and its spread is the standard deviation of that maximum,
    sqrt(sum_i p_n(i) (v(i) - E[max | n])^2) (Dodge et al.'s reported +- band).

    Args:
      scores: `(N,)` one score per assignment (NaNs are dropped).
      max_n: largest budget n (default N).
    Returns:
      `(mean, std)`, each `(max_n,)` for n = 1..max_n (host statistics, float64).
    """
    v = np.sort(np.asarray(scores, np.float64).ravel())
    v = v[~np.isnan(v)]
    if v.size == 0:
        raise ValueError("expected_max_performance needs at least one score")
    total = v.size
    budgets = np.arange(1, (max_n or total) + 1, dtype=np.float64)[:, None]  # (n, 1)
    ranks = np.arange(1, total + 1, dtype=np.float64)[None, :]  # (1, N)
    probs = (ranks / total) ** budgets - ((ranks - 1) / total) ** budgets  # (n, N)
    mean = probs @ v
    std = np.sqrt(np.maximum((probs * (v[None, :] - mean[:, None]) ** 2).sum(-1), 0.0))
    return mean, std


def assignments_to_reach(scores, target: float) -> int | None:
    """Smallest budget n whose EMP reaches `target`, or None if even n = N does not."""
    mean, _ = expected_max_performance(scores)
    reached = np.nonzero(mean >= target)[0]
    return int(reached[0]) + 1 if reached.size else None


def policy_metrics(scoring: str, rollout: dict[str, np.ndarray], num_steps: int,
                   final_window: int = 1, goal: bool = False
                   ) -> tuple[dict[str, float], np.ndarray]:
    """The metrics of one policy's rollouts, and its curves (one definition for every stage).

    Args:
      scoring: "regret" (`EnvSpec.scoring`: scored by expected regret; `rollout` has `expected_reward` and
        `optimal_expected_reward`) or "returns" (scored by episode returns).
      rollout: `(N, T)` arrays `rewards`, `dones` (and the bandit info).
      final_window: steps (bandits) or episodes (episodic) the final scores average.
      goal: termination means the goal was reached (`EnvSpec.goal_terminates`): also report
        `first_episode_goal` from `rollout["terminated"]`.
    Returns:
      (metrics, curves) with one curve per rollout (`(N, points)`, NaN where missing).
      bandits: `final_regret` (cumulative, after the last step), `final_step_regret` (the last
      `final_window` steps); curves = cumulative regret `(N, T)`.
      episodic: `first_episode_return`; `last_episode_return` (each rollout's OWN last complete
      episode: with episodes that end early, rollouts complete different numbers of episodes, and
      a column-wise "last episode" would average only the fastest rollouts); `success` (mean
      return of each rollout's last `final_window` episodes); `mean_return` (all complete
      episodes); `episodes` (mean complete episodes per rollout); curves = return per episode
      index, over the indices at least half of the rollouts reached.
    """
    if scoring == "regret":
        step_regret = np.asarray(rollout["optimal_expected_reward"] - rollout["expected_reward"],
                                 np.float64)
        regret = np.cumsum(step_regret, axis=1)
        return dict(final_regret=float(regret[:, -1].mean()),
                    final_step_regret=float(step_regret[:, -int(final_window):].mean())
                    ), regret
    returns = rollout_episode_returns(rollout, num_steps)
    reached = ~np.isnan(returns)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rollouts without a complete episode
        metrics = dict(first_episode_return=float(np.nanmean(returns[:, 0])),
                       last_episode_return=float(np.nanmean(last_episodes(returns, 1))),
                       success=float(np.nanmean(last_episodes(returns, int(final_window)))),
                       mean_return=float(np.nanmean(returns)),
                       episodes=float(reached.sum(1).mean()))
    if goal:
        metrics.update(first_episode_goal(rollout["dones"], rollout["terminated"]))
    return metrics, returns[:, reached.mean(0) >= 0.5]


def first_episode_goal(dones, terminated) -> dict[str, float]:
    """Of each rollout's first episode: `goal_reached`, the fraction that ended by termination
    (the goal) rather than the time limit, and `episode_length`, its mean length in steps (the
    GPT-DTMA paper's maze metric; a failed episode counts its full time limit). `(N, T)` bool
    arrays; rollouts whose first episode is unfinished count as not reaching the goal, with
    length T."""
    dones, terminated = np.asarray(dones, bool), np.asarray(terminated, bool)
    ended = dones.any(1)
    end = np.where(ended, dones.argmax(1), dones.shape[1] - 1)
    reached = ended & terminated[np.arange(len(end)), end]
    return dict(goal_reached=float(reached.mean()), episode_length=float((end + 1).mean()))


def summarise(scoring: str, rollouts: dict[str, dict[str, np.ndarray]], num_steps: int,
              final_window: int = 1, goal: bool = False
              ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """`policy_metrics` of every policy as `{policy}_{metric}`, plus the model's normalised
    scores (0 = random, 1 = source) when both baselines ran; and each policy's curves
    `(N, points)` (`mean_curve` averages them).

    `normalised_score` compares the cumulative regret (bandits) or each rollout's last complete
    episode return (episodic tasks); bandits also get `final_step_score`, the Headless-AD
    paper's score, from the expected regret of the last `final_window` steps.
    """
    results, curves = {}, {}
    for name, rollout in rollouts.items():
        metrics, curves[name] = policy_metrics(scoring, rollout, num_steps, final_window, goal)
        results.update({f"{name}_{k}": v for k, v in metrics.items()})
    scores = ({"normalised_score": "final_regret", "final_step_score": "final_step_regret"}
              if scoring == "regret" else {"normalised_score": "last_episode_return"})
    for score, key in scores.items():
        if {f"model_{key}", f"random_{key}", f"source_{key}"} <= set(results):
            with np.errstate(invalid="ignore", divide="ignore"):  # source == random: NaN
                results[score] = float(normalised_score(
                    results[f"model_{key}"], results[f"random_{key}"], results[f"source_{key}"]))
    return results, curves


def mean_curve(curves: np.ndarray) -> list[float]:
    """The mean over rollouts of `(N, points)` curves (NaN-aware), as a JSON-ready list."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.round(np.nanmean(np.asarray(curves, np.float64), 0), 4).tolist()
