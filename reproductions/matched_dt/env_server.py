"""Our point maze, one env stepped on the host, served over stdin/stdout (system python, JAX).

`corl_runner.py` starts it as a child process so that CORL's `eval_rollout` (which runs in the
torch venv, without JAX) steps exactly our env's dynamics and reward:

    python reproductions/matched_dt/env_server.py runs/matched_dt/matched.json

One JSON object per line each way:
* `{"cmd": "seed", "seed": s}` -> `{}`: the next reset is held-out task 0 again; reset noise is
  drawn from `PRNGKey(s)` folded with the episode's index;
* `{"cmd": "reset"}` -> `{"obs": [...]}`: the next held-out task (cycling), the point at rest at
  its start cell plus the reset noise, as the env's `reset` does;
* `{"cmd": "step", "action": [...]}` -> `{"obs", "reward", "done", "success"}`: one `step_env`
  (the action clipped to [-1, 1], as the env does); `done` is the goal's termination (CORL's
  `eval_rollout` stops at `episode_len` steps itself).
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np


def main(path: str) -> None:
    from icrl_jax import envs

    with open(path) as f:
        settings = json.load(f)
    env = envs.make(settings["env_name"], **settings["env_kwargs"])
    params = env.task_params(np.asarray(settings["test_task_ids"], np.int32))
    reset = jax.jit(env.reset_env)
    step = jax.jit(env.step_env)
    key, episode, state, task = jax.random.PRNGKey(0), 0, None, None
    out = sys.stdout
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "seed":
            key, episode = jax.random.PRNGKey(int(msg["seed"])), 0
            reply = {}
        elif msg["cmd"] == "reset":
            i = episode % len(settings["test_task_ids"])
            task = jax.tree.map(lambda x: x[i], params)
            obs, state = reset(jax.random.fold_in(key, episode), task)
            episode += 1
            reply = {"obs": np.asarray(obs).tolist()}
        elif msg["cmd"] == "step":
            obs, state, reward, done, info = step(key, state, np.asarray(msg["action"], np.float32),
                                                  task)
            reply = {"obs": np.asarray(obs).tolist(), "reward": float(reward), "done": bool(done),
                     "success": bool(info["success"])}
        else:
            raise ValueError(f"unknown command {msg['cmd']!r}")
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1])
