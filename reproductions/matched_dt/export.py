"""Export the matched configuration's point-maze dataset for CORL's DT (system python, JAX).

    python reproductions/matched_dt/export.py --out runs/matched_dt

Writes into `--out`:
* `minari/`: our Minari dataset (made here if missing; `icrl-jax train` of every seed reads it
  with `--config.data.minari_root=<out>/minari`), so both sides train on the same episodes;
* `d4rl.npz`: the same steps in D4RL's `get_dataset()` layout, which CORL's
  `load_d4rl_trajectories` reads: `observations` `(N, 6)`, `actions` `(N, 2)`, `rewards` `(N,)`,
  `terminals` and `timeouts` bool `(N,)`, episodes one after another (an episode ends at the
  first step with either flag);
* `matched.json`: CORL's `TrainConfig` fields equal to `config.py`'s settings, the evaluation
  protocol (target return, episodes, episode length), the env kwargs and held-out task ids for
  `env_server.py`, and the dataset's reference returns (D4RL's normalised score).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def matched_config(minari_root: str, workdir: str = "/tmp/matched_dt_export"):
    """`config.py`'s config with the dataset under `minari_root`."""
    spec = importlib.util.spec_from_file_location("matched_dt_config", os.path.join(HERE, "config.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config.workdir = workdir
    config.data.minari_root = minari_root
    return config


def d4rl_arrays(episodes) -> dict[str, np.ndarray]:
    """A `MinariEpisodes` -> D4RL's flat step arrays (see the module docstring).

    An episode whose last step has neither flag (a stream cut at its end) gets `timeouts` there,
    so that D4RL's reader ends it where the dataset does."""
    keep = [slice(0, int(n)) for n in episodes.lengths]
    cat = lambda x: np.concatenate([x[e, s] for e, s in enumerate(keep)])
    terminals, timeouts = cat(episodes.terminations), cat(episodes.truncations)
    ends = np.cumsum(episodes.lengths) - 1
    timeouts[ends] |= ~terminals[ends]
    return dict(observations=cat(episodes.observations).astype(np.float32),
                actions=cat(episodes.actions).astype(np.float32),
                rewards=cat(episodes.rewards).astype(np.float32),
                terminals=terminals.astype(bool), timeouts=timeouts.astype(bool))


def split_d4rl(arrays: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """D4RL's flat arrays -> episodes (dicts of `observations`, `actions`, `rewards`), cut after
    every step with `terminals | timeouts`, as D4RL's consumers cut them (a tail without an end
    flag is dropped)."""
    ends = np.flatnonzero(np.asarray(arrays["terminals"]) | np.asarray(arrays["timeouts"]))
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [{k: np.asarray(arrays[k])[s:e + 1] for k in ("observations", "actions", "rewards")}
            for s, e in zip(starts, ends)]


def matched_settings(config, env, episodes, test_ids) -> dict:
    """CORL's `TrainConfig` fields and our evaluation protocol for `config` (see the module
    docstring); `reward_scale` is `1 / model.rtg_scale` (CORL multiplies, we divide)."""
    m, t, e = config.model, config.train, config.eval
    if len(e.target_returns) != 1:
        raise ValueError(f"the matched run evaluates one target return, got {e.target_returns}")
    corl = dict(
        embedding_dim=int(m.d_model), num_layers=int(m.num_layers), num_heads=int(m.num_heads),
        seq_len=int(t.seq_len), episode_len=int(env.episode_length),
        attention_dropout=float(m.attention_dropout), residual_dropout=float(m.residual_dropout),
        embedding_dropout=float(m.embedding_dropout), max_action=1.0,
        learning_rate=float(t.learning_rate), betas=[float(t.b1), float(t.b2)],
        weight_decay=float(t.weight_decay), clip_grad=float(t.grad_clip),
        batch_size=int(t.batch_size), update_steps=int(t.num_steps),
        warmup_steps=int(t.warmup_steps), reward_scale=1.0 / float(m.rtg_scale),
        target_returns=[float(e.target_returns[0])], eval_episodes=len(test_ids))
    return dict(
        corl=corl, env_name=config.env.name, env_kwargs=config.env.kwargs.to_dict(),
        test_task_ids=[int(i) for i in test_ids], eval_num_steps=int(e.num_steps),
        ref_min_score=episodes.ref_min_score, ref_max_score=episodes.ref_max_score,
        dataset_id=config.data.dataset_id, episodes=int(len(episodes.lengths)),
        steps=int(episodes.lengths.sum()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for minari/, d4rl.npz, matched.json")
    args = parser.parse_args(argv)
    from icrl_jax.pipeline.run import build_env, dataset_of, eval_task_ids

    out = os.path.abspath(args.out)
    config = matched_config(os.path.join(out, "minari"), os.path.join(out, "export_workdir"))
    env = build_env(config)
    episodes = dataset_of(config, env)
    if episodes.actions.ndim != 3:
        raise SystemExit(f"{config.data.dataset_id}: CORL's DT needs continuous actions")
    arrays = d4rl_arrays(episodes)
    np.savez(os.path.join(out, "d4rl.npz"), **arrays)
    settings = matched_settings(config, env, episodes, eval_task_ids(env, config))
    with open(os.path.join(out, "matched.json"), "w") as f:
        json.dump(settings, f, indent=1)
    print(f"wrote {out}/d4rl.npz ({settings['episodes']} episodes, {settings['steps']} steps) "
          f"and matched.json")


if __name__ == "__main__":
    sys.exit(main())
