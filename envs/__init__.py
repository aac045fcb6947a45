"""JAX-native in-context RL environments and their registry.

`make(name, **kwargs)` builds an environment by name; the kwargs go to its constructor. Each
constructor declares what its kwargs take (`KWARGS`, beside it); registering it declares them
for `env.kwargs` (`core.validation.kwargs_of`), so a bad one is refused before anything is built.
"""

from __future__ import annotations

import functools
import inspect

from icrl_jax.core import validation
from icrl_jax.core.extras import defer_import

# gymnax's Pong imports seaborn (and with it pandas and scipy.stats) at module level, for its
# renderer only; loading it lazily takes most of the import time out of every process.
defer_import("seaborn")

from icrl_jax.envs.bandits import BernoulliBandit, ContextualBandit
from icrl_jax.envs.base import (BANDIT, EPISODIC, REGRET, RETURNS, EnvSpec, ICRLEnv, InvalidActionError,
                                check_actions, stack_params)
from icrl_jax.envs.darkroom import (CompositeDarkRoom, DarkRoom, KeyToDoor, composite_actions,
                           headless_ad_action_sets, split_actions)
from icrl_jax.envs.multidiscrete import ButtonRoom
from icrl_jax.envs.continuous import PointMaze
from icrl_jax.envs.continuous.locomotion import HalfCheetah, Hopper, Locomotion, Walker2d
from icrl_jax.envs.continuous.mjx_locomotion import GymMujoco, HalfCheetahV5, HopperV5, Walker2dV5
from icrl_jax.envs.doorkey import DoorKey
from icrl_jax.envs.host.specs import HostEnv, MiniworldRoom, ViZDoom
from icrl_jax.envs.tasks import split_tasks
from icrl_jax.envs.xland import ENV_IDS as XMINIGRID_IDS, XLandMiniGrid
from icrl_jax.core.errors import UserError
from icrl_jax.core.registry import Registry

#: Environment name -> constructor (its kwargs are `env.kwargs`). A paper's own envs register
#: here from its package.
REGISTRY = Registry("environment")
#: Envs whose simulator comes with an optional extra (`core/extras.py`): `make` names the extra
#: while the package is not installed.
SIMULATOR_PACKAGES = {
    "hopper": ("brax",), "walker2d": ("brax",), "halfcheetah": ("brax",),
    "hopper_v5": ("mujoco",), "walker2d_v5": ("mujoco",), "halfcheetah_v5": ("mujoco",),
    "miniworld_darkroom": ("miniworld",), "miniworld_key_to_door": ("miniworld",),
    "vizdoom": ("vizdoom",),
}


def constructor_kwargs(constructor) -> tuple:
    """The declared kwargs (`KWARGS`) of a registered constructor; for a `functools.partial`,
    those its bound arguments leave to `env.kwargs`."""
    if not isinstance(constructor, functools.partial):
        return tuple(constructor.KWARGS)
    params = list(inspect.signature(constructor.func).parameters)
    bound = set(params[:len(constructor.args)]) | set(constructor.keywords)
    return tuple(c for c in constructor.func.KWARGS if not set(c.keys) & bound)


def register(name: str, constructor, needs: tuple[str, ...] = ()) -> None:
    """Register an environment constructor under `name`, with what its kwargs take (and, for a
    host simulator, which `data.source` names its oracle)."""
    REGISTRY.register(name, constructor, needs=needs)
    validation.kwargs_of("env", name, constructor_kwargs(constructor))
    env_class = getattr(constructor, "func", constructor)
    if isinstance(env_class, type) and issubclass(env_class, HostEnv):
        validation.declare(f"oracle:{name}", (_oracle_source(name, env_class.ORACLE_SOURCE),))


def _oracle_source(name: str, source: str) -> validation.Constraint:
    """A host simulator's data is always its own oracle's (`HostEnv.oracle`): `data.source` must
    name it, so that its arguments are checked as that source's and no other source seems to run."""
    return validation.Constraint(
        ("data.source",), "", lambda value: value == source, "", when=(("env.name", name),),
        message=lambda value: f"config data.source={value!r} has no effect with env.name="
                              f"{name!r} (a host simulator's data is its own oracle's, "
                              f"{source!r}); use --config.data.source={source}")


for _name, _constructor in {
    "bernoulli_bandit": BernoulliBandit,
    "contextual_bandit": ContextualBandit,
    "darkroom": DarkRoom,
    "darkroom_composite": CompositeDarkRoom,
    "key_to_door": KeyToDoor,
    "button_room": ButtonRoom,  # multi-discrete (move, press) actions: envs/multidiscrete.py
    "point_maze": PointMaze,  # continuous actions, D4RL maze2d: envs/continuous/point_maze.py
    # brax locomotion, continuous actions, D4RL's 1000-step episodes: envs/continuous/locomotion.py
    "hopper": Hopper,
    "walker2d": Walker2d,
    "halfcheetah": HalfCheetah,
    # gymnasium's MuJoCo v5 tasks (Minari's D4RL datasets) on MJX: envs/continuous/mjx_locomotion.py
    "hopper_v5": HopperV5,
    "walker2d_v5": Walker2dV5,
    "halfcheetah_v5": HalfCheetahV5,
    "unimask_doorkey": DoorKey,  # Uni[MASK]'s 4x4 DoorKey: envs/doorkey.py
    # Host simulators behind the bridge (envs/host/specs.py).
    "miniworld_darkroom": functools.partial(MiniworldRoom, "darkroom"),
    "miniworld_key_to_door": functools.partial(MiniworldRoom, "key_to_door"),
    "vizdoom": ViZDoom,
}.items():
    register(_name, _constructor, needs=SIMULATOR_PACKAGES.get(_name, ()))
# XLand-MiniGrid and MiniGrid through xminigrid, under xminigrid's own ids (envs/xland.py).
for _name in XMINIGRID_IDS:
    register(_name, functools.partial(XLandMiniGrid, _name), needs=("xminigrid",))


def make(name: str, **kwargs) -> EnvSpec:
    """Build the environment registered as `name` with constructor kwargs."""
    constructor = REGISTRY.get(name)
    try:
        return constructor(**kwargs)
    except (TypeError, ValueError) as e:  # what the declared kwargs cannot say (a set's size)
        if isinstance(e, UserError):
            raise
        raise UserError(f"bad env.kwargs for environment {name!r}: {e}") from e


__all__ = [
    "REGISTRY", "make", "register", "constructor_kwargs",
    "BANDIT", "EPISODIC", "REGRET", "RETURNS", "EnvSpec", "HostEnv",
    "Locomotion", "Hopper", "Walker2d", "HalfCheetah", "GymMujoco", "PointMaze", "DoorKey", "MiniworldRoom",
    "ViZDoom", "ICRLEnv", "InvalidActionError", "check_actions", "stack_params",
    "BernoulliBandit", "ContextualBandit", "DarkRoom", "CompositeDarkRoom", "KeyToDoor",
    "ButtonRoom", "XLandMiniGrid", "composite_actions", "split_actions", "headless_ad_action_sets", "split_tasks",
]
