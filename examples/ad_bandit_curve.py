"""Train Algorithm Distillation on Bernoulli bandits and plot its in-context regret curve.

    python examples/ad_bandit_curve.py                      # the `quick` preset: about 3 min on 2 cores
    python examples/ad_bandit_curve.py --num-steps 200      # a smoke run

Everything goes through the Python API: the experiment file's config, `run.train` (Thompson
sampling's learning histories are generated on first use), `run.evaluate` (the trained model
acts in context on held-out bandits next to Thompson sampling and a random policy), and the
per-rollout regret curves it stores in `eval_rollouts.npz`. The figure shows each policy's mean
cumulative regret over the rollouts, with a band of one standard error.
"""

from __future__ import annotations

import argparse
import os

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from icrl_jax.pipeline import run  # noqa: E402
from icrl_jax.core.config import set_dotted  # noqa: E402
from icrl_jax.experiments.ad import bernoulli_bandit  # noqa: E402  (experiments/ad/bernoulli_bandit.py)

LABELS = {"model": "AD (in context)", "source": "Thompson sampling (source)", "random": "random"}


def train_and_evaluate(workdir: str, num_steps: int | None, num_histories: int | None) -> dict:
    """Train the `quick` AD bandit model in `workdir` (resuming if it is there) and evaluate it;
    returns `eval.json`'s content."""
    config = bernoulli_bandit.get_config("quick")
    if num_steps is not None:
        set_dotted(config, "train.num_steps", num_steps)
        set_dotted(config, "train.warmup_steps", min(100, num_steps // 2))
    if num_histories is not None:
        set_dotted(config, "data.num_train_tasks", num_histories)
    config.workdir = workdir
    config.run.evaluate = False
    config = run.resolve_config(config)
    run.train(config)
    return run.evaluate(config)


def plot_regret(workdir: str, out: str) -> dict[str, float]:
    """Plot each policy's cumulative regret against the in-context step from the stored
    rollouts (`<policy>_regret`: `(rollouts, steps)`); returns each policy's final mean regret."""
    rollouts = np.load(os.path.join(workdir, "eval_rollouts.npz"))
    final = {}
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, label in LABELS.items():
        regret = rollouts[f"{name}_regret"]
        mean = regret.mean(axis=0)
        sem = regret.std(axis=0, ddof=1) / np.sqrt(len(regret))
        steps = np.arange(1, len(mean) + 1)
        ax.plot(steps, mean, label=label)
        ax.fill_between(steps, mean - sem, mean + sem, alpha=0.25)
        final[name] = float(mean[-1])
    ax.set_xlabel("in-context step")
    ax.set_ylabel("cumulative regret")
    ax.set_title(f"AD on Bernoulli bandits: {len(regret)} held-out bandits")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/example_ad_bandit")
    parser.add_argument("--num-steps", type=int, default=None,
                        help="training updates (default: the preset's 1,000)")
    parser.add_argument("--num-histories", type=int, default=None,
                        help="training bandits, one history each (default: the preset's 2,000)")
    parser.add_argument("--out", default=None, help="figure path (default: <workdir>/regret.png)")
    args = parser.parse_args()
    results = train_and_evaluate(args.workdir, args.num_steps, args.num_histories)
    out = args.out or os.path.join(args.workdir, "regret.png")
    final = plot_regret(args.workdir, out)
    print("final cumulative regret: " + ", ".join(f"{n} {v:.1f}" for n, v in final.items()))
    print(f"normalised score {results['normalised_score']:.2f} (random 0, Thompson sampling 1); "
          f"figure: {out}")


if __name__ == "__main__":
    main()
