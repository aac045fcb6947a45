"""Make the matched comparison's data once, for both implementations (system python).

    python reproductions/matched_headless_ad/export_histories.py --out runs/matched_headless_ad

Generates our Thompson-sampling histories of the `matched` preset of
experiments/headless_ad/bernoulli_bandit.py (`<out>/histories.npz`, what our runs train on) and
writes the same histories in the Headless-AD authors' format (`<out>/trajectories/`: one folder
per history with `trajectories_<T>.npz` holding states, actions, rewards, dones and num_actions,
and a `metadata.metadata` listing it, as their `generate.py` writes and their
`SequenceDataset` reads), the held-out bandits both evaluate on (`<out>/eval_bandits.npz`: arm
means `(N, max_arms)`, 0 past each bandit's arm count, and arm counts `(N,)`) and their
training settings equal to ours (`<out>/matched.json`, their config's field names).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from icrl_jax.experiments.headless_ad.bernoulli_bandit import get_config
from icrl_jax.pipeline import run as R
from icrl_jax.data.builders import task_split


def matched_config(preset: str, out: str):
    config = get_config(preset)
    config.data.path = os.path.join(os.path.abspath(out), "histories.npz")
    return config


def their_settings(config, env) -> dict:
    """Their `src/bandit/algorithms/headless_ad.py` Config fields that equal our config."""
    model, train = config.model, config.train
    if float(train.b2) != 0.999 or float(train.min_lr_ratio) != 0.0:
        raise SystemExit("their AdamW has b2 = 0.999 and their schedule ends at 0: the preset "
                         "must set train.b2=0.999 and train.min_lr_ratio=0")
    return dict(
        num_env_steps=int(config.data.num_steps), seq_len=int(train.seq_len),
        num_in_context_steps=int(config.eval.num_steps),
        train_min_arms=int(env.min_arms), train_max_arms=int(env.num_actions),
        num_eval_envs=int(config.data.num_test_tasks),
        token_embed_dim=int(model.action_embed_dim), d_model=int(model.d_model),
        num_layers=int(model.num_layers), num_heads=int(model.num_heads),
        dropout=float(model.residual_dropout), attention_dropout=float(model.attention_dropout),
        batch_size=int(train.batch_size), learning_rate=float(train.learning_rate),
        beta1=float(train.b1), weight_decay=float(train.weight_decay),
        warmup_ratio=float(train.warmup_steps) / float(train.num_steps),
        clip_grad_norm=float(train.grad_clip), tau=float(model.tau),
        num_train_steps=int(train.num_steps), use_action_set_prompt=bool(model.prompt),
        get_action_type="mode" if config.eval.greedy else "sample",
        sim_measure="dot", rand_emb_type="orthogonal", loss_type="contrastive")


def write_their_histories(history, directory: str) -> int:
    """One folder per history in their format; returns the number written."""
    actions = np.asarray(history.actions)
    rewards = np.asarray(history.rewards)
    dones = np.asarray(history.dones)
    arms = np.asarray(history.action_mask).sum(-1)
    steps = actions.shape[1]
    for i in range(actions.shape[0]):
        folder = os.path.join(directory, f"history_{i:05d}")
        os.makedirs(folder, exist_ok=True)
        name = f"trajectories_{steps}.npz"
        np.savez(os.path.join(folder, name),
                 states=np.zeros((steps, 1), np.float32),
                 actions=actions[i].astype(np.int32).reshape(-1, 1),
                 rewards=rewards[i].astype(np.float32).reshape(-1, 1),
                 dones=dones[i].astype(np.int32).reshape(-1, 1),
                 num_actions=np.array([arms[i]], np.float32))
        with open(os.path.join(folder, "metadata.metadata"), "w") as f:
            json.dump({"algorithm": "thompson", "label": "icrl_jax export",
                       "ordered_trajectories": [name]}, f)
    return actions.shape[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/matched_headless_ad")
    parser.add_argument("--preset", default="matched")
    args = parser.parse_args(argv)
    config = matched_config(args.preset, args.out)
    env = R.build_env(config)
    os.makedirs(args.out, exist_ok=True)
    history = R.dataset_of(config, env)
    count = write_their_histories(history, os.path.join(args.out, "trajectories"))
    _, test_ids = task_split(env, config)
    tasks = env.task_params(test_ids)
    np.savez(os.path.join(args.out, "eval_bandits.npz"), means=np.asarray(tasks.means),
             num_arms=np.asarray(tasks.num_arms), task_ids=test_ids)
    with open(os.path.join(args.out, "matched.json"), "w") as f:
        json.dump(their_settings(config, env), f, indent=1)
    print(f"{count} histories x {history.actions.shape[1]} steps -> {args.out}/trajectories; "
          f"{len(test_ids)} held-out bandits -> {args.out}/eval_bandits.npz")


if __name__ == "__main__":
    sys.exit(main())
