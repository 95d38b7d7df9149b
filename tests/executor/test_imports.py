"""The executor's modules import one another without a cycle, and importing the package (or
its torch-free modules) loads no torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import executor

PACKAGE = Path(executor.__file__).parent


def imports_of(path: Path) -> set[str]:
    """The executor modules ``path`` imports, at any depth (lazy imports in functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n.startswith("executor.") and module_path(n).exists())
    return found


def module_path(name: str) -> Path:
    return PACKAGE / (name.removeprefix("executor.").replace(".", "/") + ".py")


def test_no_import_cycle_between_executor_modules() -> None:
    graph = {
        f"executor.{path.stem}": imports_of(path)
        for path in PACKAGE.glob("*.py")
        if path.stem not in ("__init__", "__main__")
    }
    assert graph["executor.distributed"] and graph["executor.step"]  # the graph is not empty
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"import cycle: {' -> '.join(error.args[1])}") from None


def test_the_step_modules_do_not_import_each_other_back() -> None:
    assert "executor.step" not in imports_of(PACKAGE / "distributed.py")
    assert "executor.step" not in imports_of(PACKAGE / "runtime.py")


def test_importing_the_package_loads_no_torch() -> None:
    code = "import sys, executor, executor.backends, executor.errors; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "False", result.stderr
