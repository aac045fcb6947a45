"""Record ViZDoom expert datasets into a pixel store, or import episodes recorded elsewhere.

    python -m icrl_jax.experiments.host.record_doom record --scenario my_way_home --steps 20000 \
        --out runs/datasets/vizdoom_my_way_home_mine [--num-envs 8 --noise 0.05 0.3 --seed 0]
        [--episodes-out DIR]   # also write the documented episode format (npz per episode)
    python -m icrl_jax.experiments.host.record_doom import --episodes DIR --out STORE_DIR

`record` runs `DoomExpert` (per-env action noise spread over --noise) through the bridge
(`host_rollout`: one jitted scan, one batched callback per step) and keeps complete episodes;
`<out>/dataset.json` gets the size, returns and generation time. The DT configs
(`experiments/dt/vizdoom.py`) record the same way on first use; pass `--config.data.path=STORE_DIR`
to train on a dataset made here or imported.
"""

from __future__ import annotations

import argparse
import json

from icrl_jax.envs.host import vizdoom as vd
from icrl_jax.papers.msat import recording


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record DoomExpert episodes into a pixel store")
    rec.add_argument("--scenario", choices=vd.SCENARIOS, required=True)
    rec.add_argument("--steps", type=int, required=True, help="at least this many stored steps")
    rec.add_argument("--out", required=True, help="pixel store directory")
    rec.add_argument("--num-envs", type=int, default=8)
    rec.add_argument("--noise", type=float, nargs="+", default=[0.05, 0.3],
                     help="one action-noise probability, or LOW HIGH spread over the envs")
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--steps-per-call", type=int, default=1000)
    rec.add_argument("--episodes-out", default="", help="also save the episode format here")
    imp = sub.add_parser("import", help="episode-format directory -> pixel store")
    imp.add_argument("--episodes", required=True)
    imp.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.command == "record":
        if len(args.noise) not in (1, 2):
            ap.error("--noise takes one value or LOW HIGH")
        info = recording.record_expert_dataset(
            args.out, args.scenario, args.steps, num_envs=args.num_envs,
            noise=args.noise[0] if len(args.noise) == 1 else tuple(args.noise), seed=args.seed,
            steps_per_call=args.steps_per_call, episodes_dir=args.episodes_out)
    else:
        info = recording.import_episodes_to_store(args.episodes, args.out)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
