"""The layout contract: the core names no paper, layers import one way, no import circles, and
the installed distribution holds nothing but the `icrl_jax` namespace.

These read the source (AST), so they run in milliseconds and need nothing installed beyond the
project itself.
"""

from __future__ import annotations

import ast
import os
import re
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Where each installed package's source lives (pyproject's package-dir mapping).
SOURCE_ROOTS = {"icrl_jax.envs": "envs", "icrl_jax.experiments": "experiments",
                "icrl_jax": "icrl_jax"}

#: Names of the papers, their methods and their envs: none may appear in the core's code.
PAPER_NAMES = re.compile(
    r"unimask|uni\[mask\]|headless|gpt_dt|gpt-dt|gptdt|dtma|msat|m-sat|vizdoom|miniworld|"
    r"masking_grid|lm_pretrain|vq_pretrain|ngram|n-gram|key_to_door|darkroom|bandit|hopper|"
    r"walker|halfcheetah|point_maze|maze2d|doorkey|table1|markov", re.I)

#: Layers, lowest first: a module may import only from its own layer or lower ones.
LAYERS = [
    ("core", ("icrl_jax.core",)),
    ("envs", ("icrl_jax.envs",)),
    ("data", ("icrl_jax.data",)),
    ("models", ("icrl_jax.models",)),
    ("methods", ("icrl_jax.methods",)),
    ("pipeline", ("icrl_jax.pipeline",)),
    ("reports", ("icrl_jax.reports",)),
    ("tools", ("icrl_jax.tools",)),
    ("papers", ("icrl_jax.papers",)),
    ("experiments", ("icrl_jax.experiments",)),
]


def _modules() -> dict[str, str]:
    """Installed module name -> source path, for every module of the distribution."""
    found = {}
    for package, folder in SOURCE_ROOTS.items():
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            if "__pycache__" in directory:
                continue
            rel = os.path.relpath(directory, os.path.join(ROOT, folder))
            prefix = package if rel == "." else f"{package}.{rel.replace(os.sep, '.')}"
            for name in files:
                if name.endswith(".py"):
                    module = prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"
                    found.setdefault(module, os.path.join(directory, name))
    return found


MODULES = _modules()


def _layer(module: str) -> int:
    if module in ("icrl_jax", "icrl_jax.core"):  # package docstrings only
        return 0
    best, index = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    return index


def _imports(path: str, top_level_only: bool = False) -> list[tuple[int, str]]:
    """(line, imported project module) of every import in a file (also inside functions, unless
    `top_level_only`)."""
    tree = ast.parse(open(path).read())
    nodes = tree.body if top_level_only else ast.walk(tree)
    out = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            for name in names:  # `from pkg import module` imports the module
                out.append((node.lineno, name if name in MODULES else node.module))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return [(line, m) for line, m in out if m == "icrl_jax" or m.startswith("icrl_jax.")]


def _code_names(path: str) -> list[tuple[int, str]]:
    """Names and strings of a module's code (docstrings and comments left out)."""
    tree = ast.parse(open(path).read())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    names = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            text = node.name
        elif isinstance(node, ast.alias):
            text = node.name
        elif isinstance(node, ast.keyword):
            text = node.arg
        elif isinstance(node, ast.arg):
            text = node.arg
        elif isinstance(node, ast.ImportFrom):
            text = node.module or ""
        if text and "experiments/" not in text:
            names.append((getattr(node, "lineno", 0), text))
    return names


CORE = sorted(m for m in MODULES if m.split(".")[1:2] in (["core"], ["pipeline"], ["reports"], ["tools"])
              or m == "icrl_jax")


@pytest.mark.parametrize("module", CORE)
def test_the_core_names_no_paper_method_or_env(module):
    hits = [f"{line}: {text!r}" for line, text in _code_names(MODULES[module])
            if PAPER_NAMES.search(text)]
    assert not hits, f"{module} names a paper's part in code: {hits[:5]}"


def test_the_name_check_finds_a_paper_name_in_code(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""Mentions Headless-AD in a docstring only."""\nx = "headless_ad"\n'
                    'def f(ngram_order=2):\n    return dict(vizdoom_skip=1)\n')
    assert sorted(text for _, text in _code_names(str(path)) if PAPER_NAMES.search(text)) == \
        ["headless_ad", "ngram_order", "vizdoom_skip"]


def test_every_module_has_a_layer():
    assert [m for m in MODULES if _layer(m) is None] == []


def test_layers_import_one_way():
    upward = []
    for module, path in sorted(MODULES.items()):
        own = _layer(module)
        for line, imported in _imports(path):
            theirs = _layer(imported)
            if theirs is not None and theirs > own:
                upward.append(f"{module}:{line} ({LAYERS[own][0]}) imports {imported} "
                              f"({LAYERS[theirs][0]})")
    assert upward == []


def test_the_core_and_shared_layers_never_import_a_paper():
    found = [f"{m}:{line} -> {imported}" for m, path in MODULES.items()
             if not m.startswith(("icrl_jax.papers", "icrl_jax.experiments"))
             for line, imported in _imports(path) if imported.startswith("icrl_jax.papers")]
    assert found == []


def test_the_env_layer_imports_only_the_base():
    found = [f"{m}:{line} -> {imported}" for m, path in MODULES.items()
             if m.startswith("icrl_jax.envs") for line, imported in _imports(path)
             if not imported.startswith(("icrl_jax.envs", "icrl_jax.core.errors",
                                         "icrl_jax.core.extras", "icrl_jax.core.registry",
                                         "icrl_jax.core.validation"))]
    assert found == []


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles of a directed graph found by depth-first search (each as a closed path)."""
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def is_package_export(cycle: list[str], packages: set[str]) -> bool:
    """A package whose `__init__` imports its own submodules, which import the package back for
    what it defines: how a package exports names, not a circle between parts."""
    return any(p in cycle and all(m == p or m.startswith(p + ".") for m in cycle)
               for p in packages)


def test_the_cycle_check_finds_a_circle_between_modules():
    graph = {"a.run": {"a.columns"}, "a.columns": {"a.run"}, "b": {"b.x"}, "b.x": {"b"}}
    cycles = find_cycles(graph)
    assert [c for c in cycles if not is_package_export(c, {"b"})] == [
        ["a.columns", "a.run", "a.columns"]]


def test_no_import_circles():
    """Over every project import, those inside functions too."""
    graph = {m: {imp for _, imp in _imports(p) if imp in MODULES and imp != m}
             for m, p in MODULES.items()}
    packages = {m for m, p in MODULES.items() if p.endswith("__init__.py")}
    assert [c for c in find_cycles(graph) if not is_package_export(c, packages)] == []


def test_every_package_folder_is_installed_and_nothing_outside_the_namespace():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        setup = tomllib.load(f)["tool"]["setuptools"]
    listed = set(setup["packages"])
    packages = {m for m, p in MODULES.items() if p.endswith("__init__.py")}
    assert packages == listed
    assert all(p == "icrl_jax" or p.startswith("icrl_jax.") for p in listed)
    assert setup["package-dir"] == {"icrl_jax": "icrl_jax", **{
        k: v for k, v in SOURCE_ROOTS.items() if k != "icrl_jax"}}
