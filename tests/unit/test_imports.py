"""No import cycles in streamon's packages: every module imports on its own and in any order.

A cycle works or fails depending on which module a process happens to import first, so it shows
up as an ImportError in one command and not in the tests. Two checks: a static one over the
module-level imports (it names the cycle), and real imports in fresh interpreters (it catches
what the static view cannot, such as an import that fails only when its module comes first).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("processors", "topics", "spark_bridge")
#: scripts run by the peers' own interpreter (`streamon bench peers`), each with its folder on
#: the path and no streamon import: not modules of streamon's packages
SCRIPTS = (ROOT / "processors" / "bench" / "peer_programs",)


def _modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its ``__init__``)."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if any(path.is_relative_to(folder) for folder in SCRIPTS):
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: not those in functions or under TYPE_CHECKING."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse):
                yield from _module_level_imports(block)
            yield from _module_level_imports(node.finalbody)
        elif isinstance(node, ast.With | ast.ClassDef):
            yield from _module_level_imports(node.body)


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The package modules ``node`` makes ``module`` import.

    ``from a.b import c`` depends on the module ``a.b.c`` if there is one, else on ``a.b`` (its
    ``__init__``, which defines ``c``). Parent packages, which Python imports first, are not
    edges: a package's ``__init__`` may import its own modules without forming a cycle.
    """
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in MODULES}
    base = node.module or ""
    if node.level:
        package = module.split(".")
        if MODULES[module].name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    out = set()
    for alias in node.names:
        target = f"{base}.{alias.name}"
        out.add(target if target in MODULES else base)
    return out & MODULES.keys()


def import_graph() -> dict[str, set[str]]:
    """Module -> package modules it imports at module level."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        deps: set[str] = set()
        for node in _module_level_imports(tree.body):
            deps |= _imported(module, node)
        graph[module] = deps - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle ``[a, b, ..., a]`` of the graph, or None (depth-first, iterative)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_finds_and_names_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_imports_under_type_checking_and_in_functions_are_not_edges() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import processors.core.plan\n"
        "if TYPE_CHECKING:\n    import processors.core.query\n"
        "def f():\n    import processors.cli\n"
    )
    found = set()
    for node in _module_level_imports(tree.body):
        found |= _imported("processors.core.columns", node)
    assert found == {"processors.core.plan"}


def test_no_import_cycle_among_the_packages_modules() -> None:
    assert len(MODULES) > 50  # the walk found the packages
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_plan_is_data_without_fastavro_or_the_builder() -> None:
    graph = import_graph()
    assert not graph["processors.core.plan"] & {"processors.core.query"}
    code = (
        "import sys, processors.core.plan\n"
        "print(sorted(m for m in ('fastavro', 'processors.core.query') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# Run in a fresh interpreter: import each module in turn, every package module forgotten before
# the next, so each is the first of its packages to load (third-party imports stay cached, which
# keeps this fast); then import all of them in shuffled orders. Prints failures as JSON.
_IMPORTER = """
import importlib, json, random, sys, traceback
modules, packages, seeds = json.loads(sys.argv[1])
failures = []
def attempt(module, how):
    try:
        importlib.import_module(module)
    except BaseException:
        failures.append([how, module, traceback.format_exc(limit=-3)])
for module in modules:
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[name]
    attempt(module, "alone")
for seed in seeds:
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[name]
    order = list(modules)
    random.Random(seed).shuffle(order)
    for module in order:
        attempt(module, f"order seed {seed}")
print(json.dumps(failures))
"""


@pytest.mark.slow  # 4.9-9.2 s measured
@pytest.mark.timeout(120)
def test_every_module_imports_alone_and_in_any_order() -> None:
    args = json.dumps([sorted(MODULES), list(PACKAGES), [0, 1, 2, 3]])
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTER, args], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert failures == [], "\n".join(f"{how}: {module}\n{tb}" for how, module, tb in failures)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_in_a_fresh_interpreter(package: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {package}"], cwd=ROOT, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()[-4000:]
