"""Our Headless-AD on the exported data, both layouts (system python).

    python benchmarks/matched_headless_ad/ours.py --data runs/matched_headless_ad --seeds 0 1 2

For each layout (`--layouts`: `ours` is the `matched` preset of
experiments/headless_ad/bernoulli_bandit.py, `reference` its `matched_reference`) and seed,
what `icrl-jax train --config=experiments/headless_ad/bernoulli_bandit.py:<preset>` runs, in this
process so that training and evaluation are timed apart: `run.train` (the histories are
`<data>/histories.npz`, which export_histories.py made) then `run.evaluate` on the held-out
bandits that export_histories.py gave the authors' code. Seeds: `seed` (init, embedding draws,
batches) and `eval.seed` = `eval_embedding_seed` = 1000 + seed (their `eval_seed`).

Writes `<data>/ours_<layout>/seed_<s>.json` (as theirs.py writes for theirs) next to each run's
work directory `<data>/ours_<layout>/seed_<s>/`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from icrl_jax.core import run as R
from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config

PRESETS = {"ours": "matched", "reference": "matched_reference"}


def run_one(data: str, layout: str, seed: int, num_steps: int = 0) -> dict:
    config = get_config(PRESETS[layout])
    workdir = os.path.join(data, f"ours_{layout}", f"seed_{seed}")
    config.workdir = workdir
    config.data.path = os.path.join(os.path.abspath(data), "histories.npz")
    config.seed = seed
    config.eval.seed = 1000 + seed
    config.model.eval_embedding_seed = 1000 + seed
    config.run.progress = False
    config.run.evaluate = False
    if num_steps:
        config.train.num_steps = num_steps
        config.train.warmup_steps = max(1, num_steps // 10)
        config.train.checkpoint_every = num_steps
    config = R.resolve_config(config)
    start = time.perf_counter()
    R.train(config)
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    results = R.evaluate(config)
    eval_seconds = time.perf_counter() - start
    rollouts = np.load(os.path.join(workdir, "eval_rollouts.npz"))
    final = rollouts["model_regret"][:, -1]
    bandits = np.load(os.path.join(data, "eval_bandits.npz"))
    if not np.array_equal(rollouts["task_ids"], bandits["task_ids"]):
        raise SystemExit("the evaluation tasks are not the exported held-out bandits")
    losses = {}
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("phase") == "train" and "loss" in row:
                losses[row["step"]] = row["loss"]
    return dict(seed=seed, layout=layout, final_regret=float(final.mean()),
                final_regrets=final.tolist(), losses=losses, train_seconds=train_seconds,
                eval_seconds=eval_seconds, num_updates=int(config.train.num_steps),
                load_average=os.getloadavg(),
                random_final_regret=float(results.get("random_final_regret", np.nan)),
                source_final_regret=float(results.get("source_final_regret", np.nan)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="runs/matched_headless_ad")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--layouts", nargs="+", default=["reference", "ours"],
                        choices=sorted(PRESETS))
    parser.add_argument("--num-steps", type=int, default=0, help="override the updates")
    args = parser.parse_args(argv)
    for layout in args.layouts:
        for seed in args.seeds:
            result = run_one(args.data, layout, seed, args.num_steps)
            with open(os.path.join(args.data, f"ours_{layout}", f"seed_{seed}.json"), "w") as f:
                json.dump(result, f, indent=1)
            print(json.dumps({k: v for k, v in result.items() if k != "final_regrets"}))


if __name__ == "__main__":
    main()
