"""XLand-MiniGrid rulesets without a download: a seeded generator, benchmark files, splits.

A ruleset is a goal, production rules and the objects placed at reset, each encoded by
`xminigrid`'s own goal and rule types (`goal.encode()`: uint8 `(5,)`, `rule.encode()`: uint8
`(7,)`, tiles uint8 `(2,)` = (tile, colour)). A benchmark is rulesets padded to common shapes:
`goals` `(R, 5)`, `rules` `(R, max_rules, 7)` (padded with the empty rule), `init_tiles`
`(R, max_tiles, 2)` (padded with the empty tile, which reset skips), `num_rules` `(R,)`.

`generate_benchmark(kind, num_rulesets, seed)` samples unique rulesets with NumPy's seeded
generator, so the same arguments give the same benchmark on every machine:

* "trivial": one goal over its objects and three distractor objects, no rules (the shape of
  xminigrid's `trivial-21k`).
* "small": one goal; each of its objects is, with probability 0.7, produced by a rule whose
  inputs are placed instead (else placed itself); up to two distractor rules whose inputs are
  placed too; two distractor objects (the shape of `small-1m`).

`load_benchmark_file(path)` reads a benchmark file the user has (xminigrid's bz2 pickle, as
`xminigrid.benchmarks.load_benchmark_from_path` reads it); `save_benchmark` writes one.
"""

from __future__ import annotations

import functools
import os
from itertools import product

import numpy as np

from icrl_jax.core.errors import UserError
from icrl_jax.core.extras import import_extra
from icrl_jax.envs.tasks import split_tasks

#: Rulesets kinds `generate_benchmark` makes.
KINDS = ("trivial", "small")
#: xminigrid's hosted benchmarks, which `load_benchmark_file` finds in its data folder when a user
#: has downloaded them there (xminigrid's name -> its file name).
HOSTED_FILES = {"trivial-21k": "trivial_21k", "small-1m": "small_1m_v3", "medium-1m": "medium_1m_v3",
                "medium-3m": "medium_3m_v3", "high-1m": "high_1m_v3", "high-3m": "high_3m_v3"}
HOSTED_URL = "https://huggingface.co/datasets/Howuhh/xland_minigrid/resolve/main/"

#: kind -> (chain depth, probability a goal object is placed rather than produced, most
#: distractor rules, distractor objects).
_SHAPES = {"trivial": (0, 1.0, 0, 3), "small": (1, 0.3, 2, 2)}


def _xminigrid():
    return import_extra("xminigrid", "XLand-MiniGrid rulesets")


@functools.lru_cache(maxsize=None)
def _vocabulary():
    """The tiles and the goal / rule types rulesets are drawn from (xminigrid's constants)."""
    import_extra("xminigrid", "XLand-MiniGrid rulesets")
    from xminigrid.core import goals as G, rules as R
    from xminigrid.core.constants import Colors, Tiles

    colours = (Colors.RED, Colors.GREEN, Colors.BLUE, Colors.PURPLE, Colors.YELLOW, Colors.GREY,
               Colors.WHITE, Colors.BROWN, Colors.PINK, Colors.ORANGE)
    objects = (Tiles.BALL, Tiles.SQUARE, Tiles.PYRAMID, Tiles.KEY, Tiles.STAR, Tiles.HEX)
    pickable = [tuple(t) for t in product(objects, colours)]
    # A goal tile cannot be picked up, so it is only ever the first tile of a "near" condition.
    nearable = pickable + [(Tiles.GOAL, c) for c in colours]
    floor = (Tiles.FLOOR, Colors.BLACK)  # a rule that produces floor makes its input vanish
    one_tile_goals = (G.AgentNearGoal, G.AgentNearUpGoal, G.AgentNearRightGoal, G.AgentNearDownGoal,
                      G.AgentNearLeftGoal)
    two_tile_goals = (G.TileNearGoal, G.TileNearUpGoal, G.TileNearRightGoal, G.TileNearDownGoal,
                      G.TileNearLeftGoal)
    one_tile_rules = (R.AgentHoldRule, R.AgentNearRule, R.AgentNearUpRule, R.AgentNearRightRule,
                      R.AgentNearDownRule, R.AgentNearLeftRule)
    two_tile_rules = (R.TileNearRule, R.TileNearUpRule, R.TileNearRightRule, R.TileNearDownRule,
                      R.TileNearLeftRule)
    return dict(pickable=pickable, nearable=nearable, floor=floor, hold_goal=G.AgentHoldGoal,
                one_tile_goals=one_tile_goals, two_tile_goals=two_tile_goals,
                one_tile_rules=one_tile_rules, two_tile_rules=two_tile_rules, empty_rule=R.EmptyRule)


def _pick(rng: np.random.Generator, tiles, exclude=()) -> tuple[int, int]:
    choices = [t for t in tiles if t not in set(exclude)]
    return choices[int(rng.integers(len(choices)))]


def _sample_goal(rng, v):
    """A goal of one of xminigrid's 11 generated kinds (hold, 5 agent-near, 5 tile-near)."""
    kind = int(rng.integers(11))
    if kind == 0:
        tile = _pick(rng, v["pickable"])
        return v["hold_goal"](tile=np.array(tile, np.uint8)), [tile]
    if kind <= 5:
        tile = _pick(rng, v["nearable"])
        return v["one_tile_goals"][kind - 1](tile=np.array(tile, np.uint8)), [tile]
    a = _pick(rng, v["nearable"])
    b = _pick(rng, v["pickable"], exclude=[a])
    goal = v["two_tile_goals"][kind - 6](tile_a=np.array(a, np.uint8), tile_b=np.array(b, np.uint8))
    return goal, [a, b]


def _sample_rule(rng, v, product_tile, used):
    """A rule producing `product_tile` from tiles not in `used`; returns it and its inputs."""
    kinds = len(v["one_tile_rules"]) + len(v["two_tile_rules"])
    kind = int(rng.integers(kinds))
    prod = np.array(product_tile, np.uint8)
    if kind < len(v["one_tile_rules"]):
        tile = _pick(rng, v["pickable"], used)
        return v["one_tile_rules"][kind](tile=np.array(tile, np.uint8), prod_tile=prod), [tile]
    a = _pick(rng, v["nearable"], used)
    b = _pick(rng, v["pickable"], list(used) + [a])
    rule = v["two_tile_rules"][kind - len(v["one_tile_rules"])](
        tile_a=np.array(a, np.uint8), tile_b=np.array(b, np.uint8), prod_tile=prod)
    return rule, [a, b]


def sample_ruleset(rng: np.random.Generator, kind: str) -> dict[str, np.ndarray]:
    """One ruleset of `kind` ("trivial" | "small"): `goal` uint8 `(5,)`, `rules` uint8
    `(n_rules, 7)` (one empty rule when it has none), `init_tiles` uint8 `(n_tiles, 2)`,
    `num_rules` (rules that are not the empty one)."""
    depth, keep_probability, max_distractor_rules, distractor_objects = _SHAPES[kind]
    v = _vocabulary()
    goal, goal_tiles = _sample_goal(rng, v)
    used, rules, init_tiles = list(goal_tiles), [], []
    for tile in goal_tiles if depth else ():
        if rng.random() < keep_probability:
            init_tiles.append(tile)
            continue
        rule, inputs = _sample_rule(rng, v, tile, used)
        rules.append(rule)
        used += inputs
        init_tiles += inputs
    if not depth:
        init_tiles += goal_tiles
    for _ in range(distractor_objects):
        tile = _pick(rng, v["nearable"], used)
        used.append(tile)
        init_tiles.append(tile)
    for _ in range(int(rng.integers(max_distractor_rules + 1))):
        # A dead end: its product is never needed; its inputs may repeat the chain's.
        rule, inputs = _sample_rule(rng, v, _pick(rng, v["pickable"] + [v["floor"]], used), ())
        rules.append(rule)
        init_tiles += inputs
    num_rules = len(rules)
    encoded_rules = [np.asarray(r.encode()) for r in rules] or [np.asarray(v["empty_rule"]().encode())]
    return dict(goal=np.asarray(goal.encode(), np.uint8), rules=np.stack(encoded_rules).astype(np.uint8),
                init_tiles=np.array(init_tiles, np.uint8).reshape(-1, 2), num_rules=num_rules)


def _pad(rows: list[np.ndarray], length: int) -> np.ndarray:
    out = np.zeros((len(rows), length, rows[0].shape[-1]), np.uint8)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


@functools.lru_cache(maxsize=8)
def generate_benchmark(kind: str, num_rulesets: int, seed: int = 0):
    """`num_rulesets` unique rulesets of `kind` as an `xminigrid.benchmarks.Benchmark`
    (host arrays), the same for the same arguments."""
    if kind not in KINDS:
        raise UserError(f"unknown XLand ruleset kind {kind!r}; generated kinds: {', '.join(KINDS)}")
    if int(num_rulesets) < 1:
        raise UserError(f"XLand num_rulesets must be >= 1, got {num_rulesets}")
    rng = np.random.default_rng([int(seed), KINDS.index(kind)])
    seen, rulesets = set(), []
    while len(rulesets) < int(num_rulesets):
        ruleset = sample_ruleset(rng, kind)
        signature = (ruleset["goal"].tobytes(), ruleset["rules"].tobytes())
        if signature in seen:  # unique by goal and rules (as xminigrid's generator)
            continue
        seen.add(signature)
        rulesets.append(ruleset)
    return _benchmark(
        goals=np.stack([r["goal"] for r in rulesets]),
        rules=_pad([r["rules"] for r in rulesets], max(len(r["rules"]) for r in rulesets)),
        init_tiles=_pad([r["init_tiles"] for r in rulesets], max(len(r["init_tiles"]) for r in rulesets)),
        num_rules=np.array([r["num_rules"] for r in rulesets], np.uint8))


def _benchmark(goals, rules, init_tiles, num_rules):
    return _xminigrid().benchmarks.Benchmark(goals=goals, rules=rules, init_tiles=init_tiles,
                                             num_rules=num_rules)


def save_benchmark(benchmark, path: str) -> None:
    """Write `benchmark` as xminigrid's benchmark file (bz2 pickle of its four arrays)."""
    arrays = {k: np.asarray(getattr(benchmark, k)) for k in ("goals", "rules", "init_tiles", "num_rules")}
    _xminigrid().benchmarks.save_bz2_pickle(arrays, path)


def load_benchmark_file(path_or_name: str):
    """A benchmark file the user has: a path, or the name of one of xminigrid's hosted benchmarks
    (`HOSTED_FILES`) already downloaded to xminigrid's data folder (`XLAND_MINIGRID_DATA`, default
    `~/.xland_minigrid`). Nothing is downloaded; a missing file is a `UserError` naming where to
    get it."""
    benchmarks = _xminigrid().benchmarks
    path = path_or_name
    if path_or_name in HOSTED_FILES:
        path = os.path.join(benchmarks.DATA_PATH, HOSTED_FILES[path_or_name])
    if not os.path.isfile(path):
        name = HOSTED_FILES.get(path_or_name, "trivial_21k")
        raise UserError(f"no XLand-MiniGrid benchmark file at {path}: download it "
                        f"(curl -L -o {path} {HOSTED_URL}{name}), or generate rulesets with "
                        f"env.kwargs.benchmark='trivial' or 'small'")
    try:
        return benchmarks.load_benchmark_from_path(path)
    except (OSError, EOFError, KeyError, ValueError) as e:
        raise UserError(f"{path} is not an XLand-MiniGrid benchmark file ({type(e).__name__}: {e})") from None


def split_benchmark(benchmark, num_train: int, num_test: int | None = None, seed: int = 0):
    """Disjoint train and held-out rulesets: `(train_ids, test_ids)` from a seeded permutation of
    the benchmark's rows (`envs.tasks.split_tasks`), and the two sub-benchmarks."""
    train_ids, test_ids = split_tasks(len(np.asarray(benchmark.goals)), num_train, seed, num_test)

    def rows(ids):
        return _benchmark(*(np.asarray(getattr(benchmark, k))[ids]
                            for k in ("goals", "rules", "init_tiles", "num_rules")))

    return (train_ids, test_ids), (rows(train_ids), rows(test_ids))
