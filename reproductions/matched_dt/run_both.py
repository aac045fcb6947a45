"""Both Decision Transformers, one after the other per seed, each as its own timed process.

    python reproductions/matched_dt/run_both.py $CORL --data runs/matched_dt --seeds 0 1 2

Per seed: ours (`icrl-jax train --config reproductions/matched_dt/config.py`, work directory
`<data>/ours/seed_<s>`), then CORL's (`corl_runner.py` under `--ref-python`). Each process's
wall time, the CPU time of it and its children, and the load average before and after go to
`<data>/timings.json` (merged with what is there); then `summarise.py` prints the table.
Run `export.py --out <data>` first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def timed(cmd: list[str], log: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()
    start = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}); see {log}")
    return dict(wall_seconds=wall, cpu_seconds=(after.ru_utime - before.ru_utime)
                + (after.ru_stime - before.ru_stime),
                load_before=load[0], load_after=os.getloadavg()[0], command=" ".join(cmd))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a checkout of github.com/corl-team/CORL")
    parser.add_argument("--data", required=True, help="export.py's --out")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ref-python", default=os.environ.get("REF_PYTHON"), required="REF_PYTHON" not in os.environ,
                        help="a python with torch and numpy (default: $REF_PYTHON)")
    args = parser.parse_args(argv)
    data = os.path.abspath(args.data)
    path = os.path.join(data, "timings.json")
    timings = json.load(open(path)) if os.path.exists(path) else {}
    for seed in args.seeds:
        workdir = os.path.join(data, "ours", f"seed_{seed}")
        if os.path.exists(workdir):  # a finished run would only be evaluated: no training time
            raise SystemExit(f"{workdir} exists; remove it to time seed {seed} again")
        ours = ["icrl-jax", "train", "--config", "reproductions/matched_dt/config.py",
                f"--config.seed={seed}", f"--config.workdir={workdir}",
                f"--config.data.minari_root={os.path.join(data, 'minari')}",
                "--config.run.progress=False"]
        theirs = [args.ref_python, os.path.join(HERE, "corl_runner.py"), args.checkout,
                  "--data", data, "--seeds", str(seed)]
        for side, cmd in (("ours", ours), ("corl", theirs)):
            timings[f"{side}/seed_{seed}"] = timed(cmd, os.path.join(data, f"{side}_seed_{seed}.log"))
            print(side, seed, f"{timings[f'{side}/seed_{seed}']['wall_seconds']:.0f}s", flush=True)
            with open(path, "w") as f:
                json.dump(timings, f, indent=1)
    subprocess.call([sys.executable, os.path.join(HERE, "summarise.py"), data])


if __name__ == "__main__":
    sys.exit(main())
