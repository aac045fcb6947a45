"""Host simulators behind one batched JAX callback per step.

Simulators that are not JAX programs (ViZDoom, Miniworld) run as N gymnasium envs in N worker
processes, wrapped as one gymnasium `VectorEnv` (`HostVectorEnv`). JAX drives them through
`host_rollout`, which is a jitted `lax.scan` over steps whose body makes ONE `io_callback` per step
carrying the whole batch: actions `(N, *action_shape)` go to the host, the N workers step in
parallel, and obs `(N, *obs_shape)`, rewards, terminated, truncated and privileged info come back.

How a host env plugs in next to the on-device envs (`icrl_jax.data.history_generation.generate_histories`
vmaps over tasks and scans over steps): here the task batch is the worker pool, so the vmap is
replaced by the batch dimension inside the callback, and the scan is the same. The policy is pure
JAX (`HostPolicy.init/act`) and sees the batch, e.g. a `vmap`ped per-env policy or a model.

Conventions (the same as envs/base.py): each worker env holds its task; episodes auto-reset inside
the same step (gymnasium's SAME_STEP autoreset: the returned obs is the first obs of the next
episode), so one stream under a fixed env is a learning history across episodes.

Seeding: `reset(seed)` seeds env i with `env_seeds(seed, N)[i]`; later episodes reuse each env's
own seeded RNG, so (seed, actions) fixes the whole rollout. The policy's randomness comes from the
JAX key.

Failures: a worker that dies, raises, or does not answer within `timeout_s` raises
`HostEnvError` naming the env, the worker and the step; the steps recorded so far (host side) ride
on the error (`.recorded`), the broken pool refuses further steps, and `restart()` brings up fresh
workers (then `reset`).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import time
import traceback
from typing import Any, Callable, NamedTuple, Protocol, Sequence

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium.vector.utils import batch_space
from jax.experimental import io_callback

#: Worker start (imports + simulator boot) may be slow on a loaded machine.
DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_TIMEOUT_S = 60.0


class HostEnvError(RuntimeError):
    """A host simulator failed. Attributes: env_name, worker, step (0-based step of the rollout
    since the last reset; -1 = during reset/start), reason ('died' | 'timeout' | 'error'), and
    recorded: dict of the host-side arrays recorded before the failure (see `HostVectorEnv`)."""

    def __init__(self, message: str, *, env_name: str, worker: int, step: int, reason: str,
                 recorded: dict[str, np.ndarray] | None = None):
        super().__init__(message)
        self.env_name, self.worker, self.step, self.reason = env_name, worker, step, reason
        self.recorded = recorded or {}


def env_seeds(seed: int, num_envs: int) -> list[int]:
    """Per-env reset seeds derived from one seed (independent streams, not seed+i)."""
    children = np.random.SeedSequence(int(seed)).spawn(num_envs)
    return [int(c.generate_state(1, np.uint32)[0]) for c in children]


def privileged(env: gym.Env) -> np.ndarray:
    """float32 `(P,)` privileged state of an env (for oracles/experts); empty if it has none."""
    fn = getattr(env.unwrapped, "privileged", None)
    return np.zeros(0, np.float32) if fn is None else np.asarray(fn(), np.float32)


def _describe(fn) -> str:
    """A readable name for an env constructor, e.g. "make_darkroom(3, 50)"."""
    if isinstance(fn, functools.partial):
        args = [repr(a) for a in fn.args] + [f"{k}={v!r}" for k, v in fn.keywords.items()]
        return f"{_describe(fn.func)}({', '.join(args)})"
    return getattr(fn, "__qualname__", repr(fn))


def _spec(index: int, env: gym.Env) -> tuple:
    """What a worker reports about its env: (obs space, action space, privileged size, name)."""
    return (env.observation_space, env.action_space, privileged(env).shape[0],
            getattr(env.unwrapped, "env_name", type(env.unwrapped).__name__) + f"[{index}]")


def _worker(index: int, env_fn: Callable[[], gym.Env], conn) -> None:
    """Worker loop: owns one env; answers (status, payload) to each command."""
    try:
        env = env_fn()
        conn.send(("ok", _spec(index, env)))
        while True:
            cmd, arg = conn.recv()
            if cmd == "reset":
                obs, _ = env.reset(seed=arg)
                conn.send(("ok", (obs, privileged(env))))
            elif cmd == "step":
                obs, reward, term, trunc, _ = env.step(arg)
                if term or trunc:  # SAME_STEP autoreset: the task stays, the episode restarts
                    obs, _ = env.reset()
                conn.send(("ok", (obs, float(reward), bool(term), bool(trunc), privileged(env))))
            elif cmd == "rebuild":  # a new task in the running process (see `set_envs`)
                env.close()
                env = arg()
                conn.send(("ok", _spec(index, env)))
            elif cmd == "close":
                env.close()
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
    except (EOFError, KeyboardInterrupt):
        return
    except BaseException:  # report anything else to the parent instead of dying silently
        try:
            conn.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass


class HostVectorEnv(gym.vector.VectorEnv):
    """N gymnasium envs in N worker processes, stepped together (SAME_STEP autoreset).

    Args:
      env_fns: N picklable zero-argument constructors (module-level functions or partials; the
        workers are spawned, not forked, because JAX in the parent is multithreaded).
      timeout_s: seconds a worker may take to answer one step/reset before it counts as hung.
      start_timeout_s: seconds a worker may take to start and build its env.
      record: keep every step host-side (returned with a `HostEnvError`, or by `recorded()`).

    `reset(seed)` -> obs `(N, *obs_shape)`, info {"privileged": float32 `(N, P)`}.
    `step(actions (N, *action_shape))` -> obs, rewards float32 `(N,)`, terminated bool `(N,)`,
    truncated bool `(N,)`, info {"privileged": `(N, P)`}.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 start_timeout_s: float = DEFAULT_START_TIMEOUT_S, record: bool = True):
        if not env_fns:
            raise ValueError("HostVectorEnv needs at least one env constructor")
        self.env_fns = list(env_fns)
        self.num_envs = len(self.env_fns)
        self.timeout_s, self.start_timeout_s, self.record = timeout_s, start_timeout_s, record
        self._ctx = mp.get_context("spawn")
        self.processes: list[Any] = []
        self._conns: list[Any] = []
        self.closed = False
        self._start()

    # --- pool lifecycle -------------------------------------------------------------------
    def _start(self) -> None:
        self.processes, self._conns = [], []
        for i, fn in enumerate(self.env_fns):
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=_worker, args=(i, fn, child), daemon=True,
                                     name=f"host-env-{i}")
            proc.start()
            child.close()
            self.processes.append(proc)
            self._conns.append(parent)
        self.env_names = [_describe(fn) for fn in self.env_fns]  # until workers report names
        self.broken: HostEnvError | None = None
        self.step_count = -1
        self._clear_record()
        self._adopt_specs(self._gather(range(self.num_envs), self.start_timeout_s, "start"),
                          first=True)

    def _adopt_specs(self, specs: list[tuple], first: bool) -> None:
        """Take the workers' reported spaces (all alike; after a rebuild, alike the pool's)."""
        spaces = (specs[0][:3] if first else (self.single_observation_space,
                                              self.single_action_space, self.privileged_size))
        self.env_names = [s[3] for s in specs]
        for i, s in enumerate(specs):
            if s[0] != spaces[0] or s[1] != spaces[1] or s[2] != spaces[2]:
                self._fail(i, "error", f"its spaces {s[:3]} differ from "
                                       f"{'worker 0' if first else 'the pool'}'s {spaces}")
        self.single_observation_space, self.single_action_space = spaces[0], spaces[1]
        self.observation_space = batch_space(spaces[0], self.num_envs)
        self.action_space = batch_space(spaces[1], self.num_envs)
        self.privileged_size = int(spaces[2])

    def set_envs(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        """Give the running workers new envs (e.g. the next tasks) without new processes.

        Worker i closes its env and builds `env_fns[i]` in place; workers beyond
        `len(env_fns)` are closed. A pool start spawns processes that import the simulator and
        boot its renderer (tens of seconds under load); a rebuild skips that, and rollouts
        compiled for this pool stay valid while the pool keeps its size. The new envs must have
        the pool's spaces. Call `reset` before stepping again.
        """
        env_fns = list(env_fns)
        if not 1 <= len(env_fns) <= self.num_envs:
            raise ValueError(f"set_envs takes 1 to {self.num_envs} constructors (the pool's "
                             f"workers), got {len(env_fns)}")
        extra = range(len(env_fns), self.num_envs)
        self._send_all("close", [None] * len(extra), extra)  # shrink first: these end cleanly
        self._gather(extra, 10.0, "close")
        for i in extra:
            self.processes[i].join(timeout=5)
            self._conns[i].close()
        self.processes, self._conns = self.processes[:len(env_fns)], self._conns[:len(env_fns)]
        self.env_fns, self.num_envs = env_fns, len(env_fns)
        self.env_names = [_describe(fn) for fn in env_fns]  # until workers report names
        self.step_count = -1
        self._clear_record()
        self._send_all("rebuild", env_fns)
        self._adopt_specs(self._gather(range(self.num_envs), self.start_timeout_s, "rebuild"),
                          first=False)

    def restart(self) -> None:
        """Kill every worker and start a fresh pool (call `reset` before stepping again)."""
        self._kill_all()
        self._start()

    def _kill_all(self) -> None:
        for proc in self.processes:
            if proc.is_alive():
                proc.kill()
        for proc in self.processes:
            proc.join(timeout=5)
        for conn in self._conns:
            conn.close()

    def close_extras(self, **kwargs) -> None:
        if not self.processes:
            return
        if self.broken is None:
            for conn in self._conns:
                try:
                    conn.send(("close", None))
                except (BrokenPipeError, OSError):
                    pass
            try:
                self._gather(range(self.num_envs), 10.0, "close")
            except HostEnvError:
                pass
        self._kill_all()
        self.processes = []

    # --- messaging --------------------------------------------------------------------------
    def _fail(self, worker: int, reason: str, detail: str):
        phase = "during reset/start" if self.step_count < 0 else f"at step {self.step_count}"
        err = HostEnvError(
            f"host env {self.env_names[worker]!r} (worker {worker}, pid "
            f"{self.processes[worker].pid}) {reason} {phase}: {detail}. "
            f"{self._num_recorded()} steps recorded so far are in .recorded; call restart() "
            f"then reset() to continue.",
            env_name=self.env_names[worker], worker=worker, step=self.step_count, reason=reason,
            recorded=self.recorded())
        self.broken = err
        # A hung or half-dead pool cannot be trusted: stop every worker now.
        self._kill_all()
        raise err

    def _gather(self, workers, timeout_s: float, what: str) -> list[Any]:
        """Receive one answer from each worker, in order, within a shared deadline."""
        deadline = time.monotonic() + timeout_s
        out = []
        for i in workers:
            conn, proc = self._conns[i], self.processes[i]
            try:
                ready = conn.poll(max(0.0, deadline - time.monotonic()))
                if not ready:
                    if not proc.is_alive():
                        self._fail(i, "died", f"process exited with code {proc.exitcode} ({what})")
                    self._fail(i, "timeout", f"no answer to {what} within {timeout_s:.1f}s")
                status, payload = conn.recv()
            except (EOFError, ConnectionResetError, BrokenPipeError, OSError):
                proc.join(timeout=1)
                self._fail(i, "died", f"process exited with code {proc.exitcode} ({what})")
            if status != "ok":
                self._fail(i, "error", f"raised during {what}:\n{payload}")
            out.append(payload)
        return out

    def _send_all(self, cmd: str, args: Sequence[Any], workers: Sequence[int] | None = None
                  ) -> None:
        """Send `(cmd, args[k])` to worker `workers[k]` (default: every worker)."""
        if self.broken is not None:
            raise HostEnvError(f"the pool is broken ({self.broken}); call restart() first",
                               env_name=self.broken.env_name, worker=self.broken.worker,
                               step=self.broken.step, reason=self.broken.reason,
                               recorded=self.broken.recorded)
        workers = range(self.num_envs) if workers is None else workers
        for i, arg in zip(workers, args):
            try:
                self._conns[i].send((cmd, arg))
            except (BrokenPipeError, OSError):
                self._fail(i, "died", f"pipe closed when sending {cmd}")

    # --- recording --------------------------------------------------------------------------
    def _clear_record(self) -> None:
        self._rec: dict[str, list[np.ndarray]] = {k: [] for k in (
            "observations", "actions", "rewards", "terminated", "truncated", "privileged")}

    def _num_recorded(self) -> int:
        return len(self._rec["actions"])

    def recorded(self) -> dict[str, np.ndarray]:
        """Host-side record since the last reset, time-major: observations `(T, N, *obs)` (the
        obs each action was taken in), actions `(T, N, *act)`, rewards/terminated/truncated
        `(T, N)`, privileged `(T, N, P)`; T = completed steps."""
        t = self._num_recorded()
        return {k: np.stack(v[:t]) for k, v in self._rec.items() if v[:t]}

    # --- gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        if options:
            raise ValueError("HostVectorEnv.reset takes no options: tasks live in the env_fns")
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif np.ndim(seed) == 0:
            seeds = env_seeds(int(seed), self.num_envs)
        else:
            seeds = [int(s) for s in seed]
        self.step_count = -1
        self._clear_record()
        self._send_all("reset", seeds)
        out = self._gather(range(self.num_envs), self.timeout_s, "reset")
        obs = np.stack([o for o, _ in out])
        priv = np.stack([p for _, p in out]).astype(np.float32).reshape(self.num_envs, -1)
        self.step_count = 0
        self._last = (obs, priv)
        return obs, {"privileged": priv}

    def step(self, actions):
        actions = np.asarray(actions)
        if actions.shape[0] != self.num_envs:
            raise ValueError(f"actions have leading dim {actions.shape[0]}, expected {self.num_envs}")
        if self.step_count < 0:
            raise RuntimeError("call reset(seed) before step")
        self._send_all("step", [a if a.ndim else a.item() for a in actions])
        out = self._gather(range(self.num_envs), self.timeout_s, "step")
        obs = np.stack([o[0] for o in out])
        rewards = np.array([o[1] for o in out], np.float32)
        term = np.array([o[2] for o in out], bool)
        trunc = np.array([o[3] for o in out], bool)
        priv = np.stack([o[4] for o in out]).astype(np.float32).reshape(self.num_envs, -1)
        if self.record:
            for k, v in zip(self._rec, (self._last[0], actions, rewards, term, trunc, self._last[1])):
                self._rec[k].append(v)
        self._last = (obs, priv)
        self.step_count += 1
        return obs, rewards, term, trunc, {"privileged": priv}


# --- JAX side ------------------------------------------------------------------------------


class HostStep(NamedTuple):
    """What a policy sees before acting, batched over the N envs.

    obs: `(N, *obs_shape)` (uint8 pixels for the simulators here); privileged: float32 `(N, P)`;
    reward: float32 `(N,)` and done: bool `(N,)` of the previous step (0/False at t=0);
    t: int32 `()` steps taken in this rollout.
    """

    obs: jax.Array
    privileged: jax.Array
    reward: jax.Array
    done: jax.Array
    t: jax.Array


class HostPolicy(Protocol):
    """A pure-JAX batched policy. `init(key, num_envs) -> state`;
    `act(key, state, step: HostStep) -> (actions (N, *action_shape) int32, state)`."""

    def init(self, key: jax.Array, num_envs: int) -> Any: ...

    def act(self, key: jax.Array, state: Any, step: HostStep) -> tuple[jax.Array, Any]: ...


def _shape_dtype(space: gym.Space, n: int) -> jax.ShapeDtypeStruct:
    dtype = np.dtype(space.dtype)
    if dtype == np.float64:  # no float64 on device
        dtype = np.dtype(np.float32)
    if dtype == np.int64:
        dtype = np.dtype(np.int32)
    return jax.ShapeDtypeStruct((n, *space.shape), dtype)


def _build_rollout(bridge: HostVectorEnv, policy: HostPolicy, num_steps: int):
    n, p = bridge.num_envs, bridge.privileged_size
    obs_sd = _shape_dtype(bridge.single_observation_space, n)
    priv_sd = jax.ShapeDtypeStruct((n, p), np.float32)
    vec_f = jax.ShapeDtypeStruct((n,), np.float32)
    vec_b = jax.ShapeDtypeStruct((n,), np.bool_)

    def reset_cb(seed):
        obs, info = bridge.reset(seed=int(seed))
        return obs.astype(obs_sd.dtype), info["privileged"]

    def step_cb(actions):
        obs, r, term, trunc, info = bridge.step(np.asarray(actions))
        return obs.astype(obs_sd.dtype), r, term, trunc, info["privileged"]

    def rollout(key, seed):
        # ordered io_callbacks: simulator steps are side effects that must run once, in order.
        obs, priv = io_callback(reset_cb, (obs_sd, priv_sd), seed, ordered=True)
        k_init, k_run = jax.random.split(key)
        pstate = policy.init(k_init, n)
        first = HostStep(obs, priv, jnp.zeros(n, jnp.float32), jnp.zeros(n, bool), jnp.int32(0))

        def body(carry, k):
            step, pstate = carry
            actions, pstate = policy.act(k, pstate, step)
            actions = jnp.asarray(actions, jnp.int32)
            nobs, r, term, trunc, npriv = io_callback(
                step_cb, (obs_sd, vec_f, vec_b, vec_b, priv_sd), actions, ordered=True)
            done = term | trunc
            out = {"observations": step.obs, "privileged": step.privileged, "actions": actions,
                   "rewards": r, "terminated": term, "truncated": trunc, "dones": done}
            return (HostStep(nobs, npriv, r, done, step.t + 1), pstate), out

        (_, pstate), out = jax.lax.scan(body, (first, pstate), jax.random.split(k_run, num_steps))
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), out), pstate  # (T, N) -> (N, T)

    return jax.jit(rollout)


def host_rollout(bridge: HostVectorEnv, policy: HostPolicy, num_steps: int, key: jax.Array,
                 seed: int, return_state: bool = False):
    """Reset `bridge` with `seed`, then run `policy` for `num_steps` steps in one jitted scan.

    Returns a dict of batch-major arrays: observations `(N, T, *obs_shape)` (the obs each action
    was taken in), privileged float32 `(N, T, P)`, actions int32 `(N, T, *action_shape)`, rewards
    float32 `(N, T)`, terminated/truncated/dones bool `(N, T)` — the layout of a `History`.
    With `return_state`, returns `(that dict, the policy's final state)`.
    Raises `HostEnvError` (with the host-side record up to the failure) if a simulator fails.
    Not vmappable: the batch is the worker pool, inside the callback.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    # One compiled rollout per (policy, length, pool size): a pool whose workers were given new
    # tasks (`set_envs`) reuses it. The entry holds the policy, so its id cannot be reused.
    cache = bridge.__dict__.setdefault("_rollout_cache", {})
    entry = cache.get((id(policy), num_steps, bridge.num_envs))
    if entry is None:
        entry = cache[(id(policy), num_steps, bridge.num_envs)] = (
            policy, _build_rollout(bridge, policy, int(num_steps)))
    fn = entry[1]
    try:
        out, state = jax.block_until_ready(fn(key, jnp.uint32(seed)))
        return (out, state) if return_state else out
    except Exception as exc:
        if bridge.broken is not None:  # unwrap the runtime's wrapping of the callback's error
            raise bridge.broken from exc
        raise


class RandomPolicy:
    """Uniform random actions for a Discrete or MultiDiscrete action space."""

    def __init__(self, action_space: gym.Space):
        if isinstance(action_space, gym.spaces.Discrete):
            self.nvec = np.array([action_space.n])
            self.scalar = True
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            self.nvec, self.scalar = np.asarray(action_space.nvec).reshape(-1), False
        else:
            raise TypeError(f"RandomPolicy needs Discrete/MultiDiscrete, got {action_space}")

    def init(self, key, num_envs):
        return ()

    def act(self, key, state, step: HostStep):
        n = step.obs.shape[0]
        a = jax.random.randint(key, (n, len(self.nvec)), 0, jnp.asarray(self.nvec, jnp.int32))
        return (a[:, 0] if self.scalar else a), state
