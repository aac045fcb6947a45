"""Our Headless-AD on the exported data, both layouts (system python).

    python reproductions/matched_headless_ad/ours.py --data runs/matched_headless_ad --seeds 0 1 2

For each layout (`--layouts`: `ours` is the `matched` preset of
experiments/headless_ad/bernoulli_bandit.py, `reference` its `matched_reference`) and seed,
what `icrl-jax train --config=experiments/headless_ad/bernoulli_bandit.py:<preset>` runs, in this
process so that training and evaluation are timed apart: `run.train` (the histories are
`<data>/histories.npz`, which export_histories.py made) then `run.evaluate` on the held-out
bandits that export_histories.py gave the authors' code. Seeds: `seed` (init, embedding draws,
batches) and `eval.seed` = `eval_embedding_seed` = 1000 + seed (their `eval_seed`).

Writes `<data>/ours_<layout>/seed_<s>.json` (as theirs.py writes for theirs) next to each run's
work directory `<data>/ours_<layout>/seed_<s>/`.

`--eval-seeds E ...` only evaluates the trained checkpoints, once per evaluation seed (rollout
key and embedding map; the model, no baselines): `<data>/ours_<layout>/seed_<s>_eval_<e>.json`.
`--set KEY=VALUE ... --name NAME` trains with config overrides (one deviation from the authors'
code at a time, e.g. `model.prompt_order=causal`) into `<data>/ours_<layout>_<NAME>/`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from icrl_jax.pipeline import run as R
from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
from icrl_jax.methods import build_method

PRESETS = {"ours": "matched", "reference": "matched_reference"}


def matched_config(data: str, layout: str, seed: int, overrides: dict | None = None,
                   folder: str = ""):
    """The preset of `layout` on `<data>`'s histories, seeded, with `overrides` (`key.sub`:
    value), for the work directory `<data>/<folder or ours_<layout>>/seed_<seed>`."""
    config = get_config(PRESETS[layout])
    for key, value in (overrides or {}).items():
        section, name = key.split(".", 1)
        config[section][name] = value
    config.workdir = os.path.join(data, folder or f"ours_{layout}", f"seed_{seed}")
    config.data.path = os.path.join(os.path.abspath(data), "histories.npz")
    config.seed = seed
    config.eval.seed = 1000 + seed
    config.model.eval_embedding_seed = 1000 + seed
    config.run.progress = False
    return config


def evaluate_checkpoint(data: str, layout: str, seed: int, eval_seed: int,
                        overrides: dict | None = None, folder: str = "") -> dict:
    """The trained run's checkpoint under our evaluation with `eval_seed` (rollout key and
    embedding map), the model only (no baselines); writes to `<run>_eval_<eval_seed>/`."""
    config = R.resolve_config(matched_config(data, layout, seed, overrides, folder))
    env = R.build_env(config)
    params = R.load_params(config, env, build_method(config, env))
    config.workdir = f"{config.workdir}_eval_{eval_seed}"
    config.eval.seed = eval_seed
    config.model.eval_embedding_seed = eval_seed
    config.eval.baselines = ()
    start = time.perf_counter()
    R.evaluate(config, params=params)
    final = np.load(os.path.join(config.workdir, "eval_rollouts.npz"))["model_regret"][:, -1]
    return dict(seed=seed, eval_seed=eval_seed, layout=layout, overrides=overrides or {},
                final_regret=float(final.mean()), final_regrets=final.tolist(),
                eval_seconds=time.perf_counter() - start)


def run_one(data: str, layout: str, seed: int, num_steps: int = 0, overrides: dict | None = None,
            folder: str = "") -> dict:
    config = matched_config(data, layout, seed, overrides, folder)
    workdir = config.workdir
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
    return dict(seed=seed, layout=layout, overrides=overrides or {}, final_regret=float(final.mean()),
                final_regrets=final.tolist(), losses=losses, train_seconds=train_seconds,
                eval_seconds=eval_seconds, num_updates=int(config.train.num_steps),
                load_average=os.getloadavg(),
                random_final_regret=float(results.get("random_final_regret", np.nan)),
                source_final_regret=float(results.get("source_final_regret", np.nan)))


def parse_value(text: str):
    """A --set value: JSON (numbers, true / false, lists) where it parses, else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="runs/matched_headless_ad")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--layouts", nargs="+", default=["reference", "ours"],
                        choices=sorted(PRESETS))
    parser.add_argument("--num-steps", type=int, default=0, help="override the updates")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides (a deviation measured one at a time), e.g. "
                             "model.norm=rmsnorm; the runs go to <data>/ours_<layout>_<name>/")
    parser.add_argument("--name", default="", help="the folder suffix of --set runs")
    parser.add_argument("--eval-seeds", type=int, nargs="*", default=[],
                        help="only evaluate the trained checkpoints, once per seed given; writes "
                             "<run>_eval_<e>.json")
    args = parser.parse_args(argv)
    overrides = {k: parse_value(v) for k, v in (item.split("=", 1) for item in args.set)}
    if overrides and not args.name:
        parser.error("--set needs --name (the folder of those runs)")
    for layout in args.layouts:
        folder = f"ours_{layout}_{args.name}" if args.name else f"ours_{layout}"
        os.makedirs(os.path.join(args.data, folder), exist_ok=True)
        for seed in args.seeds:
            if args.eval_seeds:
                for eval_seed in args.eval_seeds:
                    result = evaluate_checkpoint(args.data, layout, seed, eval_seed, overrides, folder)
                    with open(os.path.join(args.data, folder, f"seed_{seed}_eval_{eval_seed}.json"),
                              "w") as f:
                        json.dump(result, f, indent=1)
                    print(json.dumps({k: v for k, v in result.items() if k != "final_regrets"}))
                continue
            result = run_one(args.data, layout, seed, args.num_steps, overrides, folder)
            with open(os.path.join(args.data, folder, f"seed_{seed}.json"), "w") as f:
                json.dump(result, f, indent=1)
            print(json.dumps({k: v for k, v in result.items() if k != "final_regrets"}))


if __name__ == "__main__":
    main()
