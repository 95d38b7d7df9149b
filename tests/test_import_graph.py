"""The packages' import graph has no cycles, every arrow runs down the layering (the project's
packages, and pipesim's sub-packages inside it), and pipesim stays free of torch.

Read from the source with :mod:`ast`, not by importing: every ``import`` and ``from ... import``
counts, at module level or inside a function (a lazy import that closes a loop is still a
loop), except those under ``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "validation", "executor", "application", "pipesim", "plots")

# The layering: each package may import only those named here (and itself). The command line
# sits on top; the simulator at the bottom imports none of the others; the application (pools,
# signals, argument plumbing, output files) sits right above it, under everything that runs as
# a process.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "cli": frozenset({"validation", "executor", "application", "pipesim", "plots"}),
    "validation": frozenset({"executor", "application", "pipesim", "plots"}),
    "executor": frozenset({"application", "pipesim"}),
    "plots": frozenset({"application", "pipesim"}),
    "application": frozenset({"pipesim"}),
    "pipesim": frozenset(),
}

# pipesim's sub-packages (and its top-level modules), the lowest floor first: a sub-package may
# import those on floors below its own, never one on its floor or above. Synthesis sits above
# the engine it tries its orders on; placements and rank groups sit in ``parallel``, under the
# schedules and costs that use them.
PIPESIM_FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor)
    for floor in (
        ("errors",),
        ("common",),
        ("files",),
        ("hardware",),
        ("parallel",),
        ("schedules", "workload"),
        ("config",),
        ("costs",),
        ("analysis", "memory"),
        ("engine", "partition"),
        ("export", "request", "synthesis"),
        ("plan", "sweep"),
    )
)


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
    """cli -> validation -> executor -> application -> pipesim, plots -> application, with no
    arrow back up and no exemption: the command line is the one package above all others."""
    wrong = _arrows_against_the_layering(_graph())
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def _floor_of(module: str) -> int | None:
    """The floor of a pipesim module's sub-package (None for ``pipesim`` itself and
    ``pipesim.__main__``, which stand above every floor)."""
    parts = module.split(".")
    if parts[0] != "pipesim" or len(parts) < 2 or parts[1] == "__main__":
        return None
    for number, floor in enumerate(PIPESIM_FLOORS):
        if parts[1] in floor:
            return number
    raise AssertionError(f"{module}: sub-package {parts[1]!r} is on no floor of PIPESIM_FLOORS")


def _arrows_up_inside_pipesim(graph: dict[str, set[str]]) -> list[str]:
    """Every import between two of pipesim's sub-packages that does not run to a lower floor,
    as ``importer -> imported (floor a -> floor b)`` lines."""
    wrong = []
    for importer, targets in sorted(graph.items()):
        low = _floor_of(importer)
        if low is None:
            continue
        for target in sorted(targets):
            high = _floor_of(target)
            if high is None or target.split(".")[1] == importer.split(".")[1]:
                continue
            if high >= low:
                wrong.append(f"{importer} -> {target} (floor {low} -> floor {high})")
    return wrong


def test_the_floor_check_can_fail() -> None:
    """An arrow up (the schedules importing the engine) and one across a floor (the workload
    importing the schedules) are reported; one down is not."""
    graph = {
        "pipesim.schedules.synthesis": {"pipesim.engine.simulate", "pipesim.common.checks"},
        "pipesim.workload.model": {"pipesim.schedules.schedule"},
    }
    assert _arrows_up_inside_pipesim(graph) == [
        "pipesim.schedules.synthesis -> pipesim.engine.simulate (floor 5 -> floor 9)",
        "pipesim.workload.model -> pipesim.schedules.schedule (floor 5 -> floor 5)",
    ]
    with pytest.raises(AssertionError, match="on no floor"):
        _arrows_up_inside_pipesim({"pipesim.newcomer.thing": {"pipesim.common.checks"}})


def test_every_pipesim_sub_package_has_a_floor() -> None:
    """A new sub-package cannot slip past the layering by being on no floor."""
    floored = set().union(*PIPESIM_FLOORS)
    present = {
        path.stem if path.is_file() else path.name
        for path in (ROOT / "pipesim").iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.stem not in ("__init__", "__main__"))
    }
    assert present == floored


def test_pipesim_sub_packages_import_only_downward() -> None:
    """Inside the simulator, every arrow between sub-packages runs to a lower floor: lazy
    imports included, so no loop can hide inside a function."""
    wrong = _arrows_up_inside_pipesim(_graph())
    assert not wrong, "pipesim imports that do not run down its floors:\n" + "\n".join(wrong)


@pytest.mark.parametrize("package", ["pipesim", "plots", "application"])
def test_simulator_packages_never_import_torch(package: str) -> None:
    """pipesim (and the plots it draws, and the application around it) must run for a user who
    installed no torch."""
    offenders = []
    for name, path in _modules().items():
        if not name.startswith(package):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for imported, _ in _imports(tree, name, path.name == "__init__.py"):
            if imported.split(".")[0] in ("torch", "executor", "validation", "cli"):
                offenders.append(f"{name} imports {imported}")
    assert not offenders, "\n".join(offenders)
