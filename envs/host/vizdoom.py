"""ViZDoom Deadly Corridor and My Way Home with M-SAT's multi-discrete actions (msat.txt 5, 7.2).

Headless (no window), RGB frames rendered at 256x144 and 2x2 mean-pooled to uint8 `(72, 128, 3)`,
frame skip 4, the scenarios' own rewards and time limits (`.cfg`/`.wad` shipped inside the
vizdoom package). Actions are `MultiDiscrete` (M-SAT Table 1):

    Deadly Corridor: [turn {noop, left, right}, move {noop, forward, backward},
                      strafe {noop, left, right}, attack {noop, attack}]      nvec (3, 3, 3, 2)
    My Way Home:     [turn {noop, left, right}, move {noop, forward, backward}] nvec (3, 3)

`multidiscrete_to_buttons` maps an action to the button vector in `BUTTONS[scenario]` order (set
explicitly here, not taken from the .cfg). Episodes end by death/goal (terminated) or the
scenario's timeout (truncated). Seeding: `reset(seed)` seeds the game; each later episode takes
its game seed from the env's seeded RNG.

`privileged()` float32 `(7,)` = (x, y, angle rad, health, waypoint x, waypoint y, enemy flag):
the waypoint is the next cell on a breadth-first path to the green vest over an occupancy grid
rasterised from the map's blocking lines (or the nearest enemy ahead in Deadly Corridor, flag 1).
`expert_policy` steers to it with action noise (a `HostPolicy`).

Importing datasets recorded elsewhere: see `save_episodes` / `load_episodes` (format below).
`complete_episodes` cuts a bridge rollout into episodes of that format (the M-SAT paper's package
records Decision Transformer datasets with them).
`episode_stats` scores rollouts (return, success) without favouring short episodes.
"""

from __future__ import annotations

import functools
import json
import os
from collections import deque

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.envs.host.bridge import HostStep, HostVectorEnv

SCENARIOS = ("deadly_corridor", "my_way_home")
FRAME_SKIP = 4
OBS_SHAPE = (72, 128, 3)
BUTTONS = {
    "deadly_corridor": ("TURN_LEFT", "TURN_RIGHT", "MOVE_FORWARD", "MOVE_BACKWARD", "MOVE_LEFT",
                        "MOVE_RIGHT", "ATTACK"),
    "my_way_home": ("TURN_LEFT", "TURN_RIGHT", "MOVE_FORWARD", "MOVE_BACKWARD"),
}
#: Per action component: the button pressed by each value (value 0 = noop presses nothing).
COMPONENTS = {
    "deadly_corridor": ((None, "TURN_LEFT", "TURN_RIGHT"), (None, "MOVE_FORWARD", "MOVE_BACKWARD"),
                        (None, "MOVE_LEFT", "MOVE_RIGHT"), (None, "ATTACK")),
    "my_way_home": ((None, "TURN_LEFT", "TURN_RIGHT"), (None, "MOVE_FORWARD", "MOVE_BACKWARD")),
}
ENEMIES = ("Zombieman", "ShotgunGuy", "ChaingunGuy", "DoomImp", "Demon")
GRID = 16  # occupancy cell side in map units (the player radius is 16)


def action_nvec(scenario: str) -> np.ndarray:
    """Sizes of the action components, int `(n,)`."""
    return np.array([len(c) for c in COMPONENTS[scenario]])


def multidiscrete_to_buttons(scenario: str, action) -> list[int]:
    """Button vector (0/1 per `BUTTONS[scenario]`) for one multi-discrete action `(n,)`."""
    comps, buttons = COMPONENTS[scenario], BUTTONS[scenario]
    action = np.asarray(action).reshape(-1)
    if action.shape[0] != len(comps) or (action < 0).any() or (action >= action_nvec(scenario)).any():
        raise ValueError(f"{scenario} action must be in MultiDiscrete{tuple(action_nvec(scenario))}, "
                         f"got {action.tolist()}")
    pressed = {comps[i][v] for i, v in enumerate(action) if v}
    return [int(b in pressed) for b in buttons]


class DoomEnv(gym.Env):
    """One ViZDoom scenario as a gymnasium env (see module docstring)."""

    def __init__(self, scenario: str):
        import vizdoom as vzd

        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {SCENARIOS}")
        self.scenario = self.env_name = scenario
        game = vzd.DoomGame()
        game.load_config(os.path.join(vzd.scenarios_path, f"{scenario}.cfg"))
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_screen_resolution(vzd.ScreenResolution.RES_256X144)
        game.set_screen_format(vzd.ScreenFormat.RGB24)
        game.set_available_buttons([getattr(vzd.Button, b) for b in BUTTONS[scenario]])
        game.set_available_game_variables([vzd.GameVariable.POSITION_X, vzd.GameVariable.POSITION_Y,
                                           vzd.GameVariable.ANGLE, vzd.GameVariable.HEALTH])
        game.set_objects_info_enabled(True)  # privileged: vest and enemy positions (expert only)
        game.set_sectors_info_enabled(True)  # privileged: map lines for the expert's planner
        game.set_mode(vzd.Mode.PLAYER)
        game.init()
        self.game = game
        self.observation_space = gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8)
        self.action_space = gym.spaces.MultiDiscrete(action_nvec(scenario))
        self._obs = np.zeros(OBS_SHAPE, np.uint8)
        self._priv = np.zeros(7, np.float32)

    # --- episode control ----------------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        # The game's own RNG (spawn point, monster behaviour) is seeded from ours every episode.
        self.game.set_seed(int(self.np_random.integers(0, 2 ** 31 - 1)))
        self.game.new_episode()
        self._plan()
        self._read_state()
        return self._obs.copy(), {}

    def step(self, action):
        reward = self.game.make_action(multidiscrete_to_buttons(self.scenario, action), FRAME_SKIP)
        finished = self.game.is_episode_finished()
        truncated = finished and self.game.is_episode_timeout_reached()
        if not finished:
            self._read_state()  # at the end there is no state: keep the last frame
        return self._obs.copy(), float(reward), bool(finished and not truncated), bool(truncated), {}

    def close(self):
        self.game.close()

    def _read_state(self) -> None:
        state = self.game.get_state()
        frame = state.screen_buffer.astype(np.uint16)  # (144, 256, 3)
        # 2x2 mean pool in integers: exact and deterministic
        self._obs = ((frame.reshape(72, 2, 128, 2, 3).sum((1, 3)) + 2) // 4).astype(np.uint8)
        x, y, angle, health = state.game_variables
        tx, ty, enemy = self._waypoint(x, y, angle, state.objects)
        self._priv = np.array([x, y, np.deg2rad(angle), health, tx, ty, enemy], np.float32)

    def privileged(self) -> np.ndarray:
        return self._priv

    # --- privileged planner for the expert ----------------------------------------------------
    def _plan(self) -> None:
        """Occupancy grid from blocking lines and BFS distances (in cells) to the vest."""
        state = self.game.get_state()
        lines = [(l.x1, l.y1, l.x2, l.y2) for s in state.sectors for l in s.lines if l.is_blocking]
        pts = np.array(lines, np.float32).reshape(-1, 2, 2)
        self._origin = pts.reshape(-1, 2).min(0) - 2 * GRID
        shape = tuple(((pts.reshape(-1, 2).max(0) - self._origin) // GRID + 3).astype(int))
        blocked = np.zeros(shape, bool)
        for (a, b) in pts:
            n = int(np.linalg.norm(b - a) // 4) + 2
            for p in np.linspace(a, b, n):
                i, j = ((p - self._origin) // GRID).astype(int)
                blocked[max(i - 1, 0):i + 2, max(j - 1, 0):j + 2] = True  # inflate by the radius
        vest = next(o for o in state.objects if o.name == "GreenArmor")
        goal = self._cell(vest.position_x, vest.position_y)
        dist = np.full(shape, np.inf, np.float32)
        dist[goal] = 0
        queue = deque([goal])
        while queue:
            i, j = queue.popleft()
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                q = (i + di, j + dj)
                if 0 <= q[0] < shape[0] and 0 <= q[1] < shape[1] and not blocked[q] and dist[q] == np.inf:
                    dist[q] = dist[i, j] + 1
                    queue.append(q)
        self._dist, self._vest = dist, (vest.position_x, vest.position_y)

    def _cell(self, x, y) -> tuple[int, int]:
        i, j = ((np.array([x, y]) - self._origin) // GRID).astype(int)
        return int(np.clip(i, 0, self._dist.shape[0] - 1) if hasattr(self, "_dist") else i), \
            int(np.clip(j, 0, self._dist.shape[1] - 1) if hasattr(self, "_dist") else j)

    def _waypoint(self, x, y, angle, objects):
        if self.scenario == "deadly_corridor":
            ahead = [o for o in objects if o.name in ENEMIES and x - 32 < o.position_x < x + 450]
            if ahead:
                o = min(ahead, key=lambda o: o.position_x)
                return o.position_x, o.position_y, 1.0
        # follow the BFS distance downhill three cells ahead (greedy over 8 neighbours)
        cell = self._cell(x, y)
        for _ in range(3):
            i, j = cell
            nbrs = [(i + a, j + b) for a in (-1, 0, 1) for b in (-1, 0, 1)
                    if 0 <= i + a < self._dist.shape[0] and 0 <= j + b < self._dist.shape[1]]
            best = min(nbrs, key=lambda q: self._dist[q])
            if self._dist[best] >= self._dist[cell] or self._dist[best] == 0:
                if self._dist[best] == 0:
                    cell = best
                break
            cell = best
        if self._dist[cell] == 0:
            return self._vest[0], self._vest[1], 0.0
        centre = self._origin + (np.array(cell) + 0.5) * GRID
        return float(centre[0]), float(centre[1]), 0.0


def make_doom(scenario: str) -> gym.Env:
    return DoomEnv(scenario)


def doom_env_fns(scenario: str, num_envs: int) -> list:
    """Picklable constructors of `num_envs` copies of a scenario (seeded apart by reset)."""
    return [functools.partial(make_doom, scenario)] * num_envs


def doom_bridge(scenario: str, num_envs: int, **kwargs) -> HostVectorEnv:
    """A `HostVectorEnv` of `num_envs` copies of a scenario (seeded apart by `reset(seed)`)."""
    return HostVectorEnv(doom_env_fns(scenario, num_envs), **kwargs)


class DoomExpert:
    """Privileged expert with action noise (a `HostPolicy`): turn toward the waypoint, move
    forward when roughly facing it, attack when it is an enemy (Deadly Corridor); each action
    component is replaced by a uniform value with probability `noise`: one float for every env,
    or one per env (a sequence of N values, for datasets that mix expert qualities)."""

    def __init__(self, scenario: str, noise=0.1):
        self.scenario = scenario
        noise = np.asarray(noise, np.float32)
        if noise.ndim > 1 or (noise < 0).any() or (noise > 1).any():
            raise ValueError(f"noise must be a probability or one per env, got {noise}")
        self.noise = float(noise) if noise.ndim == 0 else tuple(noise.tolist())
        self.nvec = jnp.asarray(action_nvec(scenario), jnp.int32)

    def init(self, key, num_envs):
        return ()

    def act(self, key, state, step: HostStep):
        p = step.privileged  # (N, 7)
        x, y, ang, tx, ty, enemy = p[:, 0], p[:, 1], p[:, 2], p[:, 4], p[:, 5], p[:, 6] > 0
        # Doom angles are counter-clockwise from +x with +y up: the usual atan2 bearing
        diff = jnp.mod(jnp.arctan2(ty - y, tx - x) - ang + jnp.pi, 2 * jnp.pi) - jnp.pi
        turn = jnp.where(jnp.abs(diff) < jnp.deg2rad(6), 0, jnp.where(diff > 0, 1, 2))
        move = jnp.where(jnp.abs(diff) < jnp.deg2rad(50), 1, 0)
        comps = [turn, move]
        if self.scenario == "deadly_corridor":
            aimed = enemy & (jnp.abs(diff) < jnp.deg2rad(10))
            comps += [jnp.zeros_like(turn), aimed.astype(jnp.int32)]
            comps[1] = jnp.where(enemy, 0, move)  # stand and shoot, then advance
        expert = jnp.stack(comps, -1).astype(jnp.int32)  # (N, n)
        k_mask, k_rand = jax.random.split(key)
        noise = jnp.asarray(self.noise, jnp.float32)
        if noise.ndim:
            if noise.shape[0] != expert.shape[0]:
                raise ValueError(f"{noise.shape[0]} noise levels for {expert.shape[0]} envs")
            noise = noise[:, None]
        noisy = jax.random.uniform(k_mask, expert.shape) < noise
        rand = jax.random.randint(k_rand, expert.shape, 0, self.nvec)
        return jnp.where(noisy, rand, expert), state


# --- on-disk episodes recorded elsewhere ------------------------------------------------------
#
# Format (one directory per dataset; version 1):
#   meta.json   {"format": "icrl-jax-doom-episodes", "version": 1, "scenario": str,
#                "obs_shape": [72, 128, 3], "action_nvec": [...], "num_episodes": E}
#   episode_{k:06d}.npz, k = 0..E-1, each with
#     observations uint8 (T, 72, 128, 3)   frame the action was taken in (RGB, HWC)
#     actions      int32 (T, n)            multi-discrete action, components as in COMPONENTS
#     rewards      float32 (T,)            the scenario's reward for that step
#     terminated   bool (T,)  truncated bool (T,)   only the last step may be True
# Frames of another size or layout must be converted before saving (e.g. CHW -> HWC).

EPISODE_FORMAT = "icrl-jax-doom-episodes"


def save_episodes(directory: str, scenario: str, episodes: list[dict[str, np.ndarray]]) -> None:
    """Write episodes (dicts with the arrays above) in the documented format (validated)."""
    os.makedirs(directory, exist_ok=True)
    for k, ep in enumerate(episodes):
        check_episode(ep, scenario, f"episode {k}")
        np.savez(os.path.join(directory, f"episode_{k:06d}.npz"), **ep)
    meta = {"format": EPISODE_FORMAT, "version": 1, "scenario": scenario,
            "obs_shape": list(OBS_SHAPE), "action_nvec": action_nvec(scenario).tolist(),
            "num_episodes": len(episodes)}
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f)


def load_episodes(directory: str) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """Read and validate a dataset in the documented format -> (meta, episodes)."""
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    if meta.get("format") != EPISODE_FORMAT or meta.get("version") != 1:
        raise ValueError(f"{directory}: not a version-1 {EPISODE_FORMAT} dataset: {meta}")
    episodes = []
    for k in range(meta["num_episodes"]):
        path = os.path.join(directory, f"episode_{k:06d}.npz")
        with np.load(path) as data:
            ep = {name: data[name] for name in data.files}
        check_episode(ep, meta["scenario"], path)
        episodes.append(ep)
    return meta, episodes


def check_episode(ep, scenario, where) -> None:
    t = len(ep.get("actions", ()))
    want = {"observations": ((t, *OBS_SHAPE), np.uint8), "actions": ((t, len(COMPONENTS[scenario])), None),
            "rewards": ((t,), np.float32), "terminated": ((t,), np.bool_), "truncated": ((t,), np.bool_)}
    for name, (shape, dtype) in want.items():
        if name not in ep:
            raise ValueError(f"{where}: missing array {name!r}")
        arr = np.asarray(ep[name])
        if arr.shape != shape or (dtype is not None and arr.dtype != dtype):
            raise ValueError(f"{where}: {name} is {arr.dtype}{arr.shape}, expected "
                             f"{np.dtype(dtype) if dtype else 'int'}{shape}")
    acts = np.asarray(ep["actions"])
    if not np.issubdtype(acts.dtype, np.integer) or (acts < 0).any() or (acts >= action_nvec(scenario)).any():
        raise ValueError(f"{where}: actions outside MultiDiscrete{tuple(action_nvec(scenario))}")


# --- expert datasets for Decision Transformers ------------------------------------------------


def complete_episodes(out: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Cut a `host_rollout` result (batch-major `(N, T, ...)` arrays) into its complete episodes,
    env by env, in the documented episode format; each env's unfinished last episode is dropped."""
    episodes = []
    for i in range(np.asarray(out["dones"]).shape[0]):
        start = 0
        for end in np.flatnonzero(np.asarray(out["dones"][i])):
            steps = slice(start, end + 1)
            episodes.append(dict(
                observations=np.asarray(out["observations"][i, steps], np.uint8),
                actions=np.asarray(out["actions"][i, steps], np.int32),
                rewards=np.asarray(out["rewards"][i, steps], np.float32),
                terminated=np.asarray(out["terminated"][i, steps], bool),
                truncated=np.asarray(out["truncated"][i, steps], bool)))
            start = end + 1
    return episodes


#: Deadly Corridor success: the vest was reached, i.e. the return exceeds the most the
#: x-progress reward alone can pay (~1312 units of corridor); reaching the vest adds +1000.
DC_SUCCESS_RETURN = 1500.0


#: Both scenarios time out after 2100 tics: 525 steps at frame skip 4.
MAX_EPISODE_STEPS = 2100 // FRAME_SKIP


def episode_stats(rewards: np.ndarray, dones: np.ndarray, terminated: np.ndarray, scenario: str,
                  max_start: int | None = None):
    """Per complete episode (return float32 `(E,)`, success bool `(E,)`) from `(N, T)` rollout
    arrays; each env's unfinished last episode is left out. Success: My Way Home = the vest was
    reached (the episode terminated: there is no death); Deadly Corridor = return above
    `DC_SUCCESS_RETURN`.

    `max_start`: keep only episodes that start at step <= max_start. With max_start =
    T - MAX_EPISODE_STEPS every such episode finishes inside the rollout whatever its outcome, so
    the estimate is not biased towards short (e.g. successful) episodes, as dropping the
    unfinished ones alone would be."""
    returns, successes = [], []
    for r, d, te in zip(np.asarray(rewards), np.asarray(dones), np.asarray(terminated)):
        start = 0
        for end in np.flatnonzero(d):
            if max_start is not None and start > max_start:
                break
            ret = float(r[start:end + 1].sum())
            returns.append(ret)
            successes.append(ret > DC_SUCCESS_RETURN if scenario == "deadly_corridor"
                             else bool(te[end]))
            start = end + 1
    return np.array(returns, np.float32), np.array(successes, bool)
