"""The packages' import graph has no cycles, and pipesim stays free of torch.

Read from the source with :mod:`ast`, not by importing: every ``import`` and ``from ... import``
counts, at module level or inside a function (a lazy import that closes a loop is still a
loop), except those under ``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "validation", "executor", "pipesim", "plots")

# The layering: each package may import only those named here (and itself). The command line
# sits on top; the simulator at the bottom imports none of the others.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "cli": frozenset({"validation", "executor", "pipesim", "plots"}),
    "validation": frozenset({"executor", "pipesim", "plots"}),
    "executor": frozenset({"pipesim"}),
    "plots": frozenset({"pipesim"}),
    "pipesim": frozenset(),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[_module_name(path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, tuple[str, ...]]]:
    """What ``module`` imports at run time: (module, names taken from it) pairs; a plain
    ``import a.b`` takes no names."""
    found: list[tuple[str, tuple[str, ...]]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                keep = len(base) - node.level + (1 if is_package else 0)
                prefix = ".".join(base[:keep])
                origin = f"{prefix}.{node.module}" if node.module else prefix
            else:
                origin = node.module or ""
            found.append((origin, tuple(alias.name for alias in node.names)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = set()
        for origin, names in _imports(tree, name, path.name == "__init__.py"):
            # ``from a.b import c`` takes module a.b.c when c is one, else a name of a.b.
            submodules = {f"{origin}.{n}" for n in names} & modules.keys()
            targets |= submodules
            if origin in modules and len(submodules) < max(1, len(names)):
                targets.add(origin)
        targets.discard(name)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def connect(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def test_the_reader_sees_a_cycle_when_there_is_one() -> None:
    """The detector itself can fail: a loop through a lazy import is found, and one through
    a TYPE_CHECKING import is not."""
    lazy = ast.parse("def f():\n    from pkg.b import thing\n")
    typing_only = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.b\n"
    )
    assert ("pkg.b", ("thing",)) in _imports(lazy, "pkg.a", False)
    assert _imports(typing_only, "pkg.a", False) == [("typing", ("TYPE_CHECKING",))]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _arrows_against_the_layering(graph: dict[str, set[str]]) -> list[str]:
    """Every import from one of the project's packages into another that the layering
    (:data:`MAY_IMPORT`) does not allow, as ``importer -> imported`` lines."""
    wrong = []
    for importer, targets in sorted(graph.items()):
        home = importer.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != home and other in MAY_IMPORT and other not in MAY_IMPORT[home]:
                wrong.append(f"{importer} -> {target}")
    return wrong


def test_the_layering_check_can_fail() -> None:
    """An arrow back up (the simulator importing the command line) is reported."""
    graph = {"pipesim.engine.fast": {"cli.main", "pipesim.schedules"}, "cli.main": {"plots"}}
    assert _arrows_against_the_layering(graph) == ["pipesim.engine.fast -> cli.main"]


def test_packages_import_one_way_only() -> None:
    """cli -> validation -> executor -> pipesim <- plots, with no arrow back up and no
    exemption: the command line is the one package above all others."""
    wrong = _arrows_against_the_layering(_graph())
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


@pytest.mark.parametrize("package", ["pipesim", "plots"])
def test_simulator_packages_never_import_torch(package: str) -> None:
    """pipesim (and the plots it draws) must run for a user who installed no torch."""
    offenders = []
    for name, path in _modules().items():
        if not name.startswith(package):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for imported, _ in _imports(tree, name, path.name == "__init__.py"):
            if imported.split(".")[0] in ("torch", "executor", "validation", "cli"):
                offenders.append(f"{name} imports {imported}")
    assert not offenders, "\n".join(offenders)
