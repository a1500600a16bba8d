"""The package's import graph: no cycles, and the light layers import no heavy dependency."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import comprl_gym

PACKAGE = Path(comprl_gym.__file__).parent
#: Optional dependencies that cost seconds (or need hardware) to import.
HEAVY = ("torch", "vllm", "swebench", "spacy", "nle", "fastapi", "openenv", "uvicorn", "ray")
#: What a user of the envs, the rollout layer or evaluation imports.
LIGHT = (
    "comprl_gym",
    "comprl_gym.rollouts",
    "comprl_gym.evaluation",
    "comprl_gym.evaluation.eval",
    "comprl_gym.evaluation.leaderboard",
    "comprl_gym.cli",
    "comprl_gym.distributed",
    "comprl_gym.trainers.config",
    "comprl_gym.serving",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` reads (relative ones resolved in ``package``)."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    return base


def _all_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every comprl_gym module ``name`` imports, at module level, inside a function or under
    ``if TYPE_CHECKING`` (``from package import module`` counts as the module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, package)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    found.discard(name)
    return {m for m in found if m.split(".")[0] == "comprl_gym"}


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _all_imports(name, path, known) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (as the list of its nodes, first repeated at the end), or None.

    Example:
        >>> find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}})
        ['a', 'b', 'c', 'a']
        >>> find_cycle({"a": {"b"}, "b": set()}) is None
        True
    """
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


def test_find_cycle_sees_a_cycle_through_a_package():
    # The same check run on a made-up graph with a known cycle must report it.
    graph = {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p"}, "q": {"p.a"}}
    assert find_cycle(graph) == ["p", "p.a", "p.b", "p"]


def test_no_import_cycle_counting_imports_inside_functions():
    # An import inside a function (or under TYPE_CHECKING) that closes a cycle works, but it
    # hides two files that need each other: one of them belongs below the other. The layer
    # test rules out cycles between packages; this one rules them out between files.
    graph = _import_graph()
    unknown = {dep for deps in graph.values() for dep in deps} - set(graph)
    assert not unknown, f"imports of modules that do not exist: {sorted(unknown)}"
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_evaluation_imports_no_env_family():
    # What evaluation needs to know about a family (what decides what a suite plays, what the
    # validator must not see) is on its FamilySpec; evaluation reads the spec, never a family's
    # modules, so a family kept in another package is evaluated like a built-in one.
    graph = _import_graph()
    reached = sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if module.startswith("comprl_gym.evaluation")
        for dep in deps
        if dep.startswith("comprl_gym.envs")
    )
    assert reached == []


def test_light_layers_import_no_heavy_dependency():
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(LIGHT)!r}: importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


@pytest.mark.slow
def test_every_module_imports_first_in_a_fresh_package():
    # Each module is imported with no comprl_gym module loaded before it (third-party
    # packages stay cached, which keeps this to seconds): a module that works only after
    # another one was imported, or a cycle that breaks one entry point, fails here. A missing
    # optional third-party package is not a failure of the package.
    code = (
        "import importlib, sys\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'comprl_gym']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        if (exc.name or '').split('.')[0] == 'comprl_gym':\n"
        "            failed.append(f'{name}: {exc}')\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {type(exc).__name__}: {exc}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    names = sorted(_modules())
    result = subprocess.run(
        [sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


#: The layers, lowest first: a package may import only packages of a lower rank (at module
#: level or inside a function). ``comprl_gym`` is the package's own ``__init__`` (it registers
#: the ids); a top-level module is a layer of its own. A module ranked on its own (``lessons.core``)
#: is a layer apart from the rest of its package: the lessons package's vocabulary sits below
#: the family specs and envs that write lessons with it, its writing, gate and memories above
#: the rollouts, and its probe (which scores a writer with evaluation's intervals) above
#: evaluation. docs/architecture.md draws the same.
LAYERS: dict[str, int] = {
    "core": 0,
    "seeding": 0,
    "utils": 1,
    "lessons.core": 1,
    "families": 2,
    "envs": 3,
    "llm": 3,
    "experience": 3,
    "registration": 4,
    "comprl_gym": 5,
    "wrappers": 6,
    "agents": 6,
    "rollouts": 6,
    "env_factory": 7,
    "lessons": 7,
    "distributed": 8,
    "evaluation": 9,
    "lessons.probe": 10,
    "trainers": 11,
    "serving": 12,
    "integrations": 12,
    "cli": 13,
}


def _layer(module: str, layers: dict[str, int] = LAYERS) -> str:
    """``comprl_gym.trainers.base`` -> ``trainers``; ``comprl_gym`` -> ``comprl_gym``;
    ``comprl_gym.lessons.core`` -> ``lessons.core`` (ranked on its own).

    Example:
        >>> _layer("comprl_gym.lessons.core"), _layer("comprl_gym.lessons.formats")
        ('lessons.core', 'lessons')
    """
    parts = module.split(".")
    if len(parts) == 1:
        return parts[0]
    for end in range(len(parts), 2, -1):
        if ".".join(parts[1:end]) in layers:
            return ".".join(parts[1:end])
    return parts[1]


def layer_violations(imports: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """``"a -> b"`` for every import of a layer by a layer of the same or a lower rank.

    Example:
        >>> layer_violations({"p.x.m": {"p.y.n"}, "p.y.n": {"p.x.m"}}, {"x": 1, "y": 0})
        ['y -> x']
        >>> layer_violations({"p.x.m": {"p.y.n", "p.x.k"}}, {"x": 1, "y": 0})
        []
    """
    bad = set()
    for module, deps in imports.items():
        mine = _layer(module, layers)
        for dep in deps:
            theirs = _layer(dep, layers)
            if theirs != mine and layers[theirs] >= layers[mine]:
                bad.add(f"{mine} -> {theirs}")
    return sorted(bad)


def test_each_layer_imports_only_the_layers_below_it():
    imports = _import_graph()
    unranked = sorted({_layer(m) for m in imports} - set(LAYERS))
    assert not unranked, f"give these packages a rank in LAYERS: {unranked}"
    assert layer_violations(imports, LAYERS) == []
