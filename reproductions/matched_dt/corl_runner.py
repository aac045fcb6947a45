"""CORL's Decision Transformer trained and evaluated by its own `train()` on our exported data
(a python with torch; nothing of CORL is copied, its `dt.py` is imported from the checkout).

    $REF_PYTHON reproductions/matched_dt/corl_runner.py $CORL \\
        --data runs/matched_dt --seeds 0 1 2

`--data` is what export.py wrote. `dt.py`'s `train(config)` runs as written, with the
`TrainConfig` of `matched.json` (`train_seed` = the seed, `device="cpu"`, `num_workers=0`: the
2-core machine has no core to spare for loader workers). Its imports are met by stand-ins:
* `gym.make(...)` gives an env whose `get_dataset()` returns `d4rl.npz` (so their
  `load_d4rl_trajectories`, `SequenceDataset` and state normalisation run on our episodes) and
  whose `reset` / `step` (old gym API) forward to `env_server.py`, our point maze on the
  held-out tasks in a child process (system python), `seed` restarting at task 0;
  `get_normalized_score` is D4RL's with the dataset's reference returns;
  `gym.wrappers.TransformObservation` / `TransformReward` apply their function to every
  observation / reward, as gym's do;
* `wandb.log` records what `train()` logs; `pyrallis.wrap()` leaves `train` as it is; `d4rl`
  is empty.
`train()` evaluates at step 0 and after the last update; the step-0 evaluation (an untrained
model; it consumes no training randomness: no dropout, no grad) is skipped to save time, by a
wrapper around their `eval_rollout` that also times the evaluation and records each episode's
success (the goal reached) from the server.

Writes `<data>/corl/seed_<s>.json`: per-episode returns and successes, their means, the
normalised score, the loss every 100 updates, and the wall times (`train()` in all, the
evaluation, and the difference: data loading plus the updates).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


class HostEnv:
    """Old-gym-API env over `env_server.py` (see the module docstring)."""

    def __init__(self, data: str, settings: dict, python: str):
        self.settings, self.data, self.python = settings, data, python
        self.server = None  # started at the first call: the env that only gives the data has none
        arrays = np.load(os.path.join(data, "d4rl.npz"))
        self.dataset = {k: arrays[k] for k in arrays.files}
        obs_dim, act_dim = self.dataset["observations"].shape[1], self.dataset["actions"].shape[1]
        self.observation_space = types.SimpleNamespace(shape=(obs_dim,))
        self.action_space = types.SimpleNamespace(shape=(act_dim,), seed=lambda seed: None)
        self.successes: list[bool] = []
        self._success = False

    def _call(self, **msg) -> dict:
        if self.server is None:
            self.server = subprocess.Popen(
                [self.python, os.path.join(HERE, "env_server.py"),
                 os.path.join(self.data, "matched.json")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.server.stdin.write(json.dumps(msg) + "\n")
        self.server.stdin.flush()
        line = self.server.stdout.readline()
        if not line:
            raise RuntimeError("env_server.py exited (see its traceback above)")
        return json.loads(line)

    def get_dataset(self) -> dict:
        return self.dataset

    def seed(self, seed: int) -> None:
        self._call(cmd="seed", seed=int(seed))

    def reset(self):
        self._success = False
        return np.asarray(self._call(cmd="reset")["obs"], np.float32)

    def step(self, action):
        r = self._call(cmd="step", action=np.asarray(action, np.float32).tolist())
        self._success |= r["success"]
        return np.asarray(r["obs"], np.float32), r["reward"], r["done"], {"success": r["success"]}

    def end_episode(self) -> None:
        self.successes.append(bool(self._success))

    def get_normalized_score(self, returns):
        lo, hi = self.settings["ref_min_score"], self.settings["ref_max_score"]
        return (np.asarray(returns) - lo) / (hi - lo)

    def close(self) -> None:
        if self.server is not None:
            self.server.stdin.close()
            self.server.wait()


class _Transform:
    """gym's TransformObservation / TransformReward (old API): `fn` on observations or rewards."""

    def __init__(self, env, fn, what: str):
        self.env, self.fn, self.what = env, fn, what

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self):
        obs = self.env.reset()
        return self.fn(obs) if self.what == "obs" else obs

    def step(self, action):
        obs, reward, done, info = self.env.step(action)
        if self.what == "obs":
            obs = self.fn(obs)
        else:
            reward = self.fn(reward)
        return obs, reward, done, info


def install_stand_ins(make_env, logs: list) -> None:
    """`gym`, `d4rl`, `wandb`, `pyrallis` modules for `dt.py`'s imports (module docstring)."""
    gym = types.ModuleType("gym")
    gym.Env = object
    gym.make = lambda name: make_env()
    gym.wrappers = types.SimpleNamespace(
        TransformObservation=lambda env, fn: _Transform(env, fn, "obs"),
        TransformReward=lambda env, fn: _Transform(env, fn, "reward"))
    wandb = types.ModuleType("wandb")
    wandb.init = lambda **kwargs: None
    wandb.run = types.SimpleNamespace(save=lambda: None)
    def log(values, step=None):
        logs.append((step, values))
        if step is not None and step % 250 == 0 and "train_loss" in values:
            print(f"  step {step}: loss {values['train_loss']:.4f} at {time.perf_counter():.2f}s",
                  file=sys.stderr, flush=True)

    wandb.log = log
    pyrallis = types.ModuleType("pyrallis")
    pyrallis.wrap = lambda *args, **kwargs: (lambda fn: fn)
    pyrallis.dump = lambda *args, **kwargs: None
    sys.modules.update(gym=gym, d4rl=types.ModuleType("d4rl"), wandb=wandb, pyrallis=pyrallis)


def load_corl_dt(checkout: str):
    path = os.path.join(checkout, "algorithms", "offline", "dt.py")
    if not os.path.isfile(path):
        raise SystemExit(f"{checkout} is not a CORL checkout (no algorithms/offline/dt.py)")
    spec = importlib.util.spec_from_file_location("corl_dt", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_seed(checkout: str, data: str, seed: int, python: str, updates: int = 0) -> dict:
    import torch

    with open(os.path.join(data, "matched.json")) as f:
        settings = json.load(f)
    logs: list = []
    envs: list[HostEnv] = []

    def make_env():
        envs.append(HostEnv(data, settings, python))
        return envs[-1]

    install_stand_ins(make_env, logs)
    corl = load_corl_dt(checkout)
    corl.trange = lambda n, **kwargs: range(n)  # no progress bars
    rollout, eval_seconds, episodes = corl.eval_rollout, [0.0], []

    def eval_rollout(model, env, target_return, device="cpu"):
        if logs[-1][0] == 0:  # the evaluation of the untrained model (see the docstring)
            return 0.0, 0.0
        start = time.perf_counter()
        out = rollout(model, env, target_return, device)
        eval_seconds[0] += time.perf_counter() - start
        env.end_episode()
        episodes.append(out)
        print(f"  episode {len(episodes)}: scaled return {out[0]:.3f}, {out[1]:.0f} steps, "
              f"{time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
        return out

    corl.eval_rollout = eval_rollout
    c = dict(settings["corl"], **({"update_steps": updates} if updates else {}))
    c = dict(c, betas=tuple(settings["corl"]["betas"]),
             target_returns=tuple(settings["corl"]["target_returns"]))
    config = corl.TrainConfig(**c, env_name=settings["dataset_id"], num_workers=0,
                              eval_every=c["update_steps"], train_seed=seed, device="cpu")
    start = time.perf_counter()
    corl.train(config)
    total = time.perf_counter() - start
    for env in envs:
        env.close()
    evaluation = [v for step, v in logs if any(k.startswith("eval/") for k in v)][-1]
    scale = config.reward_scale
    returns = [r / scale for r, _ in episodes]
    successes = envs[-1].successes  # the evaluation env (the first made one gives the data)
    target = config.target_returns[0]
    return dict(
        seed=seed, updates=config.update_steps, torch=torch.__version__,
        torch_threads=torch.get_num_threads(), returns=returns, successes=successes,
        lengths=[n for _, n in episodes], mean_return=float(np.mean(returns)),
        goal_reached=float(np.mean(successes)),
        d4rl_score=float(evaluation[f"eval/{target}_normalized_score_mean"]),
        loss={int(step): v["train_loss"] for step, v in logs if "train_loss" in v and step % 100 == 0},
        total_seconds=total, eval_seconds=eval_seconds[0], train_seconds=total - eval_seconds[0])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a checkout of github.com/corl-team/CORL")
    parser.add_argument("--data", required=True, help="export.py's --out")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--updates", type=int, default=0,
                        help="override matched.json's update_steps (a smoke test)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's intra-op threads (on the shared 2-core machine 2 threads "
                             "made one evaluation forward pass 30x slower than 1)")
    parser.add_argument("--env-python", default="python3",
                        help="the python with JAX and icrl-jax that runs env_server.py")
    args = parser.parse_args(argv)
    out = os.path.join(args.data, "corl")
    os.makedirs(out, exist_ok=True)
    import torch
    torch.set_num_threads(args.threads)
    for seed in args.seeds:
        result = run_seed(os.path.abspath(args.checkout), args.data, seed, args.env_python,
                          args.updates)
        with open(os.path.join(out, f"seed_{seed}.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(f"seed {seed}: return {result['mean_return']:.3f}, goal reached "
              f"{result['goal_reached']:.2f}, train {result['train_seconds']:.0f}s, "
              f"eval {result['eval_seconds']:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
