"""The M-SAT paper's ViZDoom datasets: the privileged expert's episodes recorded through the host
bridge into a pixel trajectory store (the `vizdoom_expert` data builder), and episodes recorded
elsewhere (e.g. by an APPO agent, as in the paper) imported into one.
"""

from __future__ import annotations

import os
import shutil
import time

import jax
import numpy as np

from icrl_jax.core import validation
from icrl_jax.core.files import write_json
from icrl_jax.data.builders import BUILDERS, Builder
from icrl_jax.data.pixel_store import PixelStoreWriter
from icrl_jax.data.pixel_trajectories import PixelTrajectoryStore
from icrl_jax.envs.host.bridge import host_rollout
# The simulator is an optional extra: this module is imported only by configs that use it.
from icrl_jax.envs.host import vizdoom as vd


def write_store_episodes(writer, scenario: str, episodes: list[dict[str, np.ndarray]]) -> None:
    """Append episodes (episode format, validated) to a `PixelStoreWriter`, one history each:
    the store layout `icrl_jax.data.pixel_trajectories.PixelTrajectoryStore` reads."""
    for k, ep in enumerate(episodes):
        vd.check_episode(ep, scenario, f"episode {k}")
        dones = np.zeros(len(ep["rewards"]), bool)
        dones[-1] = True
        writer.add_history(ep["observations"], ep["actions"], ep["rewards"], dones)


def record_expert_dataset(directory: str, scenario: str, num_steps: int, num_envs: int = 8,
                          noise=(0.0, 0.3), seed: int = 0, steps_per_call: int = 1000,
                          episodes_dir: str = "", chunk_steps: int = 4096) -> dict:
    """Record `DoomExpert` episodes through the bridge into a pixel store at `directory`.

    The N envs run `host_rollout` (one jitted scan, one batched callback per step) in calls of
    `steps_per_call` steps until at least `num_steps` steps of complete episodes are stored (an
    env's episode still running at the end of a call is dropped). `noise`: one probability, or a
    (low, high) range spread evenly over the N envs, so the dataset mixes expert qualities (the
    spread of returns a DT conditions on). `episodes_dir`: also write the documented episode
    format there. Writes `<directory>/dataset.json` (size, returns, generation time) and returns it.
    """
    if num_steps < 1 or num_envs < 1 or steps_per_call < 1:
        raise ValueError("num_steps, num_envs and steps_per_call must be positive")
    noise = np.asarray(noise, np.float32)
    levels = (np.full(num_envs, float(noise)) if noise.ndim == 0 else
              np.linspace(float(noise[0]), float(noise[-1]), num_envs))
    policy = vd.DoomExpert(scenario, levels)
    start = time.perf_counter()
    pool = vd.doom_bridge(scenario, num_envs, record=False)
    stored, returns, lengths, calls, all_episodes = 0, [], [], 0, []
    try:
        with PixelStoreWriter(directory, vd.OBS_SHAPE, (len(vd.COMPONENTS[scenario]),),
                              chunk_steps=chunk_steps) as writer:
            while stored < num_steps:
                out = host_rollout(pool, policy, steps_per_call,
                                   jax.random.PRNGKey(seed * 100_003 + calls), seed=seed + calls)
                episodes = vd.complete_episodes(jax.device_get(out))
                del out
                calls += 1
                if not episodes and calls >= 3:
                    raise RuntimeError(f"no {scenario} episode finished in {steps_per_call} steps "
                                       f"({calls} calls): raise steps_per_call")
                write_store_episodes(writer, scenario, episodes)
                if episodes_dir:
                    all_episodes += episodes
                stored += sum(len(ep["rewards"]) for ep in episodes)
                returns += [float(ep["rewards"].sum()) for ep in episodes]
                lengths += [len(ep["rewards"]) for ep in episodes]
    finally:
        pool.close()
    if episodes_dir:
        vd.save_episodes(episodes_dir, scenario, all_episodes)
    seconds = time.perf_counter() - start
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
    returns_arr = np.asarray(returns)
    info = dict(scenario=scenario, steps=int(stored), episodes=len(returns), num_envs=num_envs,
                noise=[round(float(x), 4) for x in levels], seed=seed, rollout_calls=calls,
                generation_seconds=round(seconds, 1), steps_per_second=round(stored / seconds, 1),
                bytes=int(size), mean_return=float(returns_arr.mean()),
                max_return=float(returns_arr.max()), min_return=float(returns_arr.min()),
                mean_length=float(np.mean(lengths)), max_length=int(np.max(lengths)))
    write_json(os.path.join(directory, "dataset.json"), info, indent=1)
    return info


def import_episodes_to_store(episodes_dir: str, directory: str, chunk_steps: int = 4096) -> dict:
    """Convert a dataset in the documented episode format (recorded elsewhere, e.g. by an APPO
    agent as in the M-SAT paper) into the pixel store a DT trains from. Returns its summary."""
    meta, episodes = vd.load_episodes(episodes_dir)
    scenario = meta["scenario"]
    with PixelStoreWriter(directory, vd.OBS_SHAPE, (len(vd.COMPONENTS[scenario]),),
                          chunk_steps=chunk_steps) as writer:
        write_store_episodes(writer, scenario, episodes)
    returns = [float(ep["rewards"].sum()) for ep in episodes]
    info = dict(scenario=scenario, steps=int(sum(len(ep["rewards"]) for ep in episodes)),
                episodes=len(episodes), imported_from=os.path.abspath(episodes_dir),
                mean_return=float(np.mean(returns)) if returns else None)
    write_json(os.path.join(directory, "dataset.json"), info, indent=1)
    return info



class ViZDoomExpert(Builder):
    """ViZDoom expert episodes in a pixel trajectory store (`envs/host/vizdoom.py`).

    The store's folder is named by everything the recording depends on (scenario, steps, envs,
    noise range, steps per call, seed), so configs that record the same data share it and a
    changed `data.noise` never reads another recording."""

    def path(self, config, env) -> str:
        data = config.data
        noise = "-".join(f"{float(x):g}" for x in np.atleast_1d(data.noise))
        name = (f"vizdoom_{env.scenario}_{int(data.num_steps)}steps_{int(data.num_envs)}envs_"
                f"noise{noise}_call{int(data.steps_per_call)}_seed{int(config.seed)}")
        return config.data.path or os.path.join("runs", "datasets", name)

    def exists(self, path: str, env) -> bool:
        return os.path.exists(os.path.join(path, "meta.json"))

    def build(self, config, env, path: str) -> None:
        if os.path.isdir(path):
            shutil.rmtree(path)  # a store is only our own chunk files
        info = record_expert_dataset(
            path, env.scenario, int(config.data.num_steps), num_envs=int(config.data.num_envs),
            noise=tuple(config.data.noise), seed=int(config.seed),
            steps_per_call=int(config.data.steps_per_call))
        print(f"recorded {info['steps']} steps ({info['episodes']} episodes, "
              f"{info['bytes'] / 2**30:.2f} GiB) in {info['generation_seconds']} s -> {path}")

    def open(self, config, env, path: str):
        return PixelTrajectoryStore(path)


BUILDERS.register("vizdoom_expert", ViZDoomExpert())


def _is_noise(value) -> bool:
    """One probability, or a (low, high) pair of them (spread over the recording envs)."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    return (len(values) in (1, 2) and all(validation.is_number(v) and 0 <= v <= 1 for v in values))


_WHEN = (("data.builder", "vizdoom_expert"),)
#: What the recording's data settings take (core/validation.py): the expert's action noise is
#: `data.noise`, so `data.source_kwargs` (the oracle's arguments on the histories builder) are
#: named as having no effect here.
RECORDING_CONSTRAINTS = validation.declare("vizdoom_expert", (
    validation.Constraint(("data.noise",), "must be a probability or a pair (low, high) of them",
                          _is_noise, "'(0.05, 0.3)'", when=_WHEN),
    validation.Constraint(("data.num_envs",), "must be a positive integer", lambda v: (
        validation.is_int(v) and v >= 1), 16, when=_WHEN),
    validation.Constraint(("data.steps_per_call",), "must be a positive integer", lambda v: (
        validation.is_int(v) and v >= 1), 1000, when=_WHEN),
    validation.Constraint(("data.source_kwargs",), "", lambda kwargs: not len(kwargs), "",
                          when=_WHEN, message=lambda kwargs: (
                              f"config data.source_kwargs={kwargs.to_dict()!r} has no effect with "
                              f"data.builder='vizdoom_expert' (the expert's action noise is "
                              f"data.noise); leave it empty")),
))
