"""Evaluate the authors' trained weights with our evaluation (system python): separates a
difference of training from one of evaluation.

    python reproductions/matched_headless_ad/cross_eval.py --data runs/matched_headless_ad --seeds 1 2

Loads `<data>/theirs/seed_<s>.safetensors` (theirs.py) into our `model.layout=reference`
model (`reference_layout.params_from_reference`; tests/test_reference_equivalence.py and
tests/test_headless_ad_layout.py check that it then computes what theirs computes) and runs our
in-context evaluation of the `matched_reference` preset on the same held-out bandits, with the
seeds ours.py uses (or `--eval-seeds`: the spread of one model's score over evaluations).
Writes `<data>/cross_eval/seed_<s>_eval_<e>.json`.
"""

from __future__ import annotations

import argparse
import json
import os

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file

from icrl_jax.pipeline import run as R
from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
from icrl_jax.methods import build_method
from icrl_jax.papers.headless_ad import reference_layout as RL


def cross_eval(data: str, seed: int, eval_seed: int | None = None) -> dict:
    eval_seed = 1000 + seed if eval_seed is None else eval_seed
    config = get_config("matched_reference")
    config.workdir = os.path.join(data, "cross_eval", f"seed_{seed}_eval_{eval_seed}")
    config.data.path = os.path.join(os.path.abspath(data), "histories.npz")
    config.seed = seed
    config.eval.seed = eval_seed
    config.model.eval_embedding_seed = eval_seed
    config.run.progress = False
    config = R.resolve_config(config)
    env = R.build_env(config)
    method = build_method(config, env)
    steps, arms, dim = int(config.train.seq_len), env.num_actions, method.embed_dim
    example = (jnp.zeros((1, steps - 1, dim)), jnp.zeros((1, steps - 1), jnp.int32),
               jnp.zeros((1, arms, dim)))
    weights = load_file(os.path.join(data, "theirs", f"seed_{seed}.safetensors"))
    params = RL.params_from_reference(method.reference, weights, example)
    results = R.evaluate(config, params=params)
    final = np.load(os.path.join(config.workdir, "eval_rollouts.npz"))["model_regret"][:, -1]
    return dict(seed=seed, eval_seed=eval_seed, final_regret=float(final.mean()),
                final_regrets=final.tolist(),
                model_final_regret=float(results["model_final_regret"]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="runs/matched_headless_ad")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-seeds", type=int, nargs="*", default=[],
                        help="evaluation seeds (map and rollouts); default 1000 + seed")
    args = parser.parse_args(argv)
    for seed in args.seeds:
        for eval_seed in args.eval_seeds or [None]:
            result = cross_eval(args.data, seed, eval_seed)
            name = f"seed_{seed}_eval_{result['eval_seed']}.json"
            with open(os.path.join(args.data, "cross_eval", name), "w") as f:
                json.dump(result, f, indent=1)
            print(json.dumps({k: v for k, v in result.items() if k != "final_regrets"}))


if __name__ == "__main__":
    main()
