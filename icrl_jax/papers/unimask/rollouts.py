"""What Uni[MASK]'s trained models do when rolled out: the Maze2D returns table (App. H) of the
random-mask and single-task models acting as BC, RC and goal-conditioned policies; Fig. 8's
(agent cell, action) distributions on DoorKey; and past inference by backward sampling.
"""

from __future__ import annotations

import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.files import write_json
from icrl_jax.core.metrics import episode_returns_ragged
from icrl_jax.core.plots import save_figure
from icrl_jax.data.builders import task_split
from icrl_jax.data.history_generation import generate_histories
from icrl_jax.data.sources import ParamSource, build_source
from icrl_jax.envs.doorkey import cell_of, split_state
from icrl_jax.methods import method_class
from icrl_jax.papers.unimask.grid_training import ReplicaGroup, unimask_group
from icrl_jax.papers.unimask.method import SnippetPolicy, sample_past


#: (label, regime trained, how it acts) of the returns table (Uni[MASK] App. H, Table 1).
RETURN_ROWS = (("random-mask, BC", "random", "bc"), ("random-mask, RC", "random", "rc"),
               ("random-mask, goal", "random", "goal"), ("single-task BC", "behaviour_cloning", "bc"),
               ("single-task RC", "reward_conditioned", "rc"),
               ("single-task goal", "goal_conditioned", "goal"))


def run_returns(config, dataset, env) -> dict[str, Any]:
    """Uni[MASK]'s Maze2D table: the random-mask model used for behaviour cloning,
    reward-conditioned (return-to-go 1.1 x the return of the dataset episode whose initial
    state is nearest) and goal-conditioned control, against single-task models, by their
    returns on held-out start/goal pairs (`data.num_test_tasks`, one episode each), over
    `grid.num_seeds` seeds. The last `grid.validation_episodes` dataset episodes are held out
    for early stopping. Writes `returns.json` and `returns.png`."""
    from dataclasses import replace


    grid = config.grid
    cls = method_class(config.method)
    k = int(config.train.seq_len)
    base = cls(config.model, env, k)
    held = int(grid.validation_episodes)
    if not 0 < held < dataset.num_episodes:
        raise UserError(f"grid.validation_episodes={held} must be in (0, "
                        f"{dataset.num_episodes}) episodes of the dataset")
    split = dataset.num_episodes - held
    cut = lambda sl: replace(dataset, **{f: getattr(dataset, f)[sl] for f in (  # noqa: E731
        "observations", "actions", "rewards", "terminations", "truncations", "mask",
        "final_observations", "lengths")})
    train_set, held_out = cut(slice(0, split)), cut(slice(split, None))
    data = base.training_data(train_set, config, env)
    validation = base.snippets(held_out.to_trajectories(), limit=2000)
    num_seeds = int(grid.num_seeds)
    seeds = [int(config.seed) + s for s in range(num_seeds)]
    regimes = list(dict.fromkeys(r for _, r, _ in RETURN_ROWS))
    start = time.perf_counter()
    group = unimask_group("maze", config, env, data, validation,
                           np.repeat(regimes, num_seeds), seeds * len(regimes))
    best = group.run(int(grid.eval_every), bool(config.run.progress))
    params = ReplicaGroup.params_of(best)
    reference = (np.asarray(train_set.observations[:, 0]).reshape(train_set.num_episodes, -1),
                 train_set.returns)
    _, test_ids = task_split(env, config)
    tasks = env.task_params(test_ids)
    steps = int(env.episode_length)
    results: dict[str, list[dict[str, float]]] = {}
    for label, regime, mode in RETURN_ROWS:
        policy = SnippetPolicy(
            base, target=float(grid.rtg_factor) if mode == "rc" else None,
            reference=reference if mode == "rc" else None,
            goal_observation=env.goal_observation if mode == "goal" else None)
        results[label] = []
        for s in range(num_seeds):
            row = regimes.index(regime) * num_seeds + s
            one = jax.tree.map(lambda x: jnp.asarray(x[row]), params)
            history, info = generate_histories(env, ParamSource(policy, one, name=label), tasks,
                                               steps, jax.random.PRNGKey(int(config.seed) + s),
                                               with_info=True)
            returns = episode_returns_ragged(np.asarray(history.rewards),
                                               np.asarray(history.dones))
            terminated = np.asarray(info["terminated"])
            results[label].append(dict(
                seed=seeds[s], mean_return=float(np.mean([r[0] for r in returns])),
                success=float(terminated.any(1).mean()),
                steps_to_goal=float(np.mean(np.where(terminated.any(1),
                                                     terminated.argmax(1) + 1, steps)))))
    data_returns = float(np.mean(train_set.returns))
    table = {label: {m: [float(np.mean([r[m] for r in rows])),
                         float(np.std([r[m] for r in rows], ddof=1) / np.sqrt(len(rows)))
                         if len(rows) > 1 else 0.0]
                     for m in ("mean_return", "success", "steps_to_goal")}
             for label, rows in results.items()}
    out = dict(seeds=num_seeds, test_tasks=int(len(test_ids)), episode_length=steps,
               dataset_episodes=int(split), dataset_mean_return=data_returns,
               rtg_factor=float(grid.rtg_factor), wall_seconds=round(time.perf_counter() - start, 1),
               validation_losses={r: best["losses"][i * num_seeds:(i + 1) * num_seeds].tolist()
                                  for i, r in enumerate(regimes)},
               table=table, per_seed=results)
    write_json(os.path.join(config.workdir, "returns.json"), out, indent=1)
    _plot_returns(table, data_returns, os.path.join(config.workdir, "returns.png"))
    return out


def _plot_returns(table, data_return, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, metric, title in ((axes[0], "mean_return", "return (distance covered to the goal)"),
                              (axes[1], "success", "success rate")):
        means = [table[l][metric][0] for l in labels]
        errs = [table[l][metric][1] for l in labels]
        ax.bar(range(len(labels)), means, yerr=errs, capsize=3,
               color=["C0"] * 3 + ["C1"] * (len(labels) - 3))
        ax.set_xticks(range(len(labels)), [l.replace(", ", "\n") for l in labels], fontsize=7)
        ax.set_title(title, fontsize=9)
    axes[0].axhline(data_return, color="k", ls="--", lw=1, label="dataset mean")
    axes[0].legend(fontsize=7)
    save_figure(fig, path, dpi=110)


#: Fig. 8's conditioning: agent at (1, 4), key at (2, 2) (cell ids of `envs/doorkey.py`).
FIG8_LAYOUT = ((1, 4), (2, 2))


def rollout_distributions(config, env, method, params, num_episodes: int = 1000):
    """Fig. 8's analogue: (agent cell, action) frequencies of `num_episodes` behaviour-cloning
    rollouts of the model from one initial state, next to as many episodes of the data's source
    (held-out data) and of a uniform random policy; total-variation distances to the data.
    Writes `rollouts.png`."""
    (ax, ay), (kx, ky) = FIG8_LAYOUT
    layout = env.layout_params(jnp.full(num_episodes, cell_of(ax, ay)),
                               jnp.full(num_episodes, cell_of(kx, ky)))
    steps = int(config.data.num_steps)
    key = jax.random.PRNGKey(int(config.seed) + 7)
    policies = {
        "data": build_source(config.data.source, env, steps, config.data.source_kwargs.to_dict()),
        "model": method.policies(params, env, config)["model_bc"],
        "random": build_source("uniform_random", env, steps, {}),
    }
    freq = {}
    for name, policy in policies.items():
        history = generate_histories(env, policy, layout, steps, key)
        agent, _ = split_state(history.observations)
        joint = np.zeros((16, env.num_actions))
        np.add.at(joint, (np.asarray(agent).ravel(), np.asarray(history.actions).ravel()), 1)
        freq[name] = joint / joint.sum()
    tv = {name: 0.5 * float(np.abs(freq[name] - freq["data"]).sum()) for name in ("model",
                                                                                  "random")}
    _plot_rollouts(freq, tv, os.path.join(config.workdir, "rollouts.png"))
    return dict(layout=dict(agent=FIG8_LAYOUT[0], key=FIG8_LAYOUT[1]), episodes=num_episodes,
                policy="random-mask model, seed 0, behaviour cloning",
                total_variation_to_data=tv,
                frequencies={k: v.round(5).tolist() for k, v in freq.items()})


def backward_inference(env, method, params, validation, seed: int, start: int = 5):
    """Past inference by sampling from step `start` backwards with rejection of
    dynamics-inconsistent draws: how much model mass rejection removes, and a check that every
    sampled transition is then consistent."""
    sampled, rejected = sample_past(method, params, validation, start,
                                    jax.random.PRNGKey(seed + 11), env.next_observation)
    nxt = env.next_observation(sampled.observations[:, :start], sampled.actions[:, :start, 0])
    consistent = np.asarray(nxt == sampled.observations[:, 1:start + 1]).mean()
    return dict(start=start, snippets=int(validation.actions.shape[0]),
                model_mass_on_inconsistent_pairs=round(float(rejected), 4),
                consistent_after_rejection=float(consistent))


def _plot_rollouts(freq, tv, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4))
    for ax, name in zip(axes, ("data", "model", "random")):
        cells = freq[name].sum(1).reshape(4, 4).T  # rows y, columns x as in the env docstring
        ax.imshow(cells, cmap="Blues", vmin=0)
        for (y, x), v in np.ndenumerate(cells):
            ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(4), [1, 2, 3, 4])
        ax.set_yticks(range(4), [1, 2, 3, 4])
        label = "held-out data" if name == "data" else f"{name} (TV to data {tv[name]:.3f})"
        ax.set_title(f"agent cell visits: {label}", fontsize=8)
    width = 0.27
    for j, name in enumerate(("data", "model", "random")):
        axes[3].bar(np.arange(4) + (j - 1) * width, freq[name].sum(0), width, label=name)
    axes[3].set_xticks(range(4), ["right", "down", "left", "up"])
    axes[3].set_title("action frequencies", fontsize=8)
    axes[3].legend(fontsize=7)
    save_figure(fig, path, dpi=110)
