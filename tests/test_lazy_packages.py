"""The packages whose names load on first use (:mod:`pipesim.common.lazy`): each name of their
``__all__`` is the object its module defines, as the imports under ``if TYPE_CHECKING:`` say;
importing one of their modules loads none of the others' weight."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAZY = (
    "pipesim.config",
    "pipesim.costs",
    "pipesim.hardware",
    "pipesim.schedules",
    "pipesim.workload",
)


def _stated(package: str) -> dict[str, str]:
    """name -> the module the package's ``if TYPE_CHECKING:`` block imports it from."""
    path = ROOT.joinpath(*package.split("."), "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module is not None
                for alias in statement.names:
                    found[alias.asname or alias.name] = statement.module
    return found


def _fresh(code: str) -> object:
    """What a fresh process running ``code`` prints last, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", LAZY)
def test_every_exported_name_is_the_object_its_module_defines(package: str) -> None:
    module = importlib.import_module(package)
    stated = _stated(package)
    assert sorted(stated) == sorted(module.__all__)
    for name, where in stated.items():
        assert getattr(module, name) is getattr(importlib.import_module(where), name), name
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("package", LAZY)
def test_every_exported_name_imports_from_a_fresh_package(package: str) -> None:
    names = _stated(package)
    code = (
        "import importlib, json\n"
        f"from {package} import {', '.join(sorted(names))}\n"
        f"found = {{n: globals()[n] is getattr(importlib.import_module(m), n) for n, m in {names!r}.items()}}\n"
        "print(json.dumps(found))\n"
    )
    assert _fresh(code) == dict.fromkeys(names, True)


@pytest.mark.parametrize("package", LAZY)
def test_an_unknown_name_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {package} import no_such_name")


def test_a_submodule_still_imports_by_name_from_its_package() -> None:
    from pipesim.schedules import closed_forms
    from pipesim.workload import transformer

    assert closed_forms is sys.modules["pipesim.schedules.closed_forms"]
    assert transformer is sys.modules["pipesim.workload.transformer"]


@pytest.mark.parametrize(
    "first",
    [
        "import pipesim.workload.model",
        "import pipesim.workload",
        "from pipesim.workload import Model",
    ],
)
def test_workload_model_is_the_catalogues_function_whatever_loaded_first(first: str) -> None:
    """The package exports the function ``model``; its submodule of the same name, loaded
    before or after, does not take the package's attribute."""
    code = (
        f"{first}\n"
        "import json, types\n"
        "import pipesim.workload as package\n"
        "from pipesim.workload import model\n"
        "from pipesim.workload.catalogue import model as function\n"
        "import pipesim.workload.model\n"
        "import sys\n"
        "print(json.dumps([model is function, package.model is function,\n"
        "    isinstance(sys.modules['pipesim.workload.model'], types.ModuleType)]))\n"
    )
    assert _fresh(code) == [True, True, True]


@pytest.mark.parametrize(
    "module",
    ["pipesim.schedules.action", "pipesim.config.recipes", "pipesim.workload.architecture"],
)
def test_a_light_module_of_a_lazy_package_loads_no_numpy(module: str) -> None:
    code = f"import json, sys\nimport {module}\nprint(json.dumps('numpy' in sys.modules))\n"
    assert _fresh(code) is False
