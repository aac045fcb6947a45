"""Return and success rate of the privileged ViZDoom experts (`python -m experiments.host.doom_expert`).

Success (see `envs.host.vizdoom.episode_stats`): My Way Home = the vest was reached; Deadly
Corridor = the vest was reached (return above `DC_SUCCESS_RETURN`). Only complete episodes count.
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from icrl_jax.envs.host import vizdoom as vd
from icrl_jax.envs.host.bridge import host_rollout

episode_stats = vd.episode_stats  # kept importable from here


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=vd.SCENARIOS, default="my_way_home")
    ap.add_argument("--num-envs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1050)
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    pool = vd.doom_bridge(args.scenario, args.num_envs)
    try:
        out = host_rollout(pool, vd.DoomExpert(args.scenario, args.noise), args.steps,
                           jax.random.PRNGKey(args.seed), seed=args.seed)
    finally:
        pool.close()
    rets, succ = episode_stats(np.asarray(out["rewards"]), np.asarray(out["dones"]),
                               np.asarray(out["terminated"]), args.scenario)
    print(json.dumps({"scenario": args.scenario, "noise": args.noise, "episodes": int(len(rets)),
                      "mean_return": float(rets.mean()) if len(rets) else None,
                      "success_rate": float(succ.mean()) if len(succ) else None}))


if __name__ == "__main__":
    main()
