"""The library speaks its fields, never the command line's flags.

No string in ``pipesim/`` outside a docstring names a flag of the ``pipesim`` command line
(``-K``, ``--tensor-parallel``): a message names a field through :func:`pipesim.errors.named`
(``tensor_parallel 3 must divide ...``), and the command line spells it as its flag from one
table, :data:`cli.flags.FLAGS`, while a command runs. Every field the library names has a
spelling there, and every spelling there is an option the command line defines.

Read from the source with :mod:`ast`, so a flag in an f-string's literal text counts, and one in
a docstring (documentation of how the command line uses the library) does not.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.flags import FLAGS
from cli.main import build_parser
from pipesim.common.workers import ordered_map
from pipesim.errors import fields_spelled, named, spelling
from pipesim.export import saved
from pipesim.parallel.config import Parallelism

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "pipesim"

# A flag standing alone: -K, -M, -v, --tensor-parallel, --no-master-weights; not the dash inside
# a word or a number (1F1B-I, non-negative, x - y, -1, 2022-02-22, a --- rule).
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[A-Za-z])(?![\w-])")

# What an f-string's replacement field reads as: a word character, so the text around it is
# never taken for a flag by what the value holds (f"{policy}-W" is no -W).
FORMATTED = "0"

# Flags of another program that the library cites as sources, where pipesim's command line has
# an option of the same name: (file under the repository, flag) and why.
CITED: dict[tuple[str, str], str] = {
    ("pipesim/config/recipes.py", "--overlap-grad-reduce"): "Megatron-LM's flag, a recipe's source",
    ("pipesim/config/recipes.py", "--tp-comm-overlap"): "Megatron-LM's flag, a recipe's source",
    # a warning that Megatron-Core asserts its own two options together
    ("pipesim/config/run_config.py", "--tp-comm-overlap"): "Megatron-Core's option, cited",
    ("pipesim/config/run_config.py", "--sequence-parallel"): "Megatron-Core's option, cited",
    # the Megatron-LM translator reads and writes Megatron's own options, six of which are
    # spelled as pipesim's flags are
    **{
        ("pipesim/config/translate/megatron.py", flag): "Megatron-LM's option, translated"
        for flag in (
            "--seq-length",
            "--optimizer",
            "--sequence-parallel",
            "--overlap-grad-reduce",
            "--tp-comm-overlap",
            "--save",
        )
    },
}


def _options(parser: argparse.ArgumentParser) -> dict[str, frozenset[str]]:
    """Each sub-command's option strings ('' for the top-level parser's own)."""
    found = {"": frozenset(o for a in parser._actions for o in a.option_strings)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = frozenset(o for a in sub._actions for o in a.option_strings)
    return found


OPTIONS = _options(build_parser())
EVERY_OPTION = frozenset().union(*OPTIONS.values())


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the module's, classes' and functions' docstring nodes."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.add(id(first.value))
    return found


def _strings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every string outside a docstring: each constant, and each f-string as
    one text (its literal parts, with a word character for each replacement field)."""
    tree = ast.parse(source)
    skipped = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skipped.update(id(value) for value in node.values)
            text = "".join(
                str(value.value) if isinstance(value, ast.Constant) else FORMATTED
                for value in node.values
            )
            yield node.lineno, text
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skipped
        ):
            yield node.lineno, node.value


def flags_named(source: str, path: str = "<source>") -> list[str]:
    """Each flag of the command line (any short flag, or a long one some command defines) that
    a string of ``source`` outside a docstring names, as ``path:line: flag in 'text'``."""
    found = []
    for line, text in _strings(source):
        for match in FLAG.finditer(text):
            flag = match[0]
            if flag.startswith("--") and flag not in EVERY_OPTION:
                continue  # another program's flag, cited (torchrun's, Megatron-LM's)
            if (path, flag) in CITED:
                continue
            found.append(f"{path}:{line}: {flag} in {text[:80]!r}")
    return found


def _library_files() -> list[Path]:
    return sorted(LIBRARY.rglob("*.py"))


def test_no_library_string_names_a_flag() -> None:
    found = [
        hit
        for path in _library_files()
        for hit in flags_named(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not found, "name fields with pipesim.errors.named:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('raise ValueError("--tensor-parallel must divide the heads")', ["--tensor-parallel"]),
        ('message = f"-K {devices} x --data-parallel {replicas}"', ["-K", "--data-parallel"]),
        ("message = f\"{named('x')} and -v/--chunks\"", ["-v", "--chunks"]),
        ('options = ["--remat", "-M"]', ["--remat", "-M"]),
        ('def f():\n    """Runs as ``-K 4 --tensor-parallel 2``."""\n', []),
        ('"""The ``--recompute`` modes."""\nclass C:\n    """-M micro-batches."""\n', []),
        ('text = "1F1B-I, non-negative, x - y, -1, 2022-02-22, ---, e-5"', []),
        ('name = f"{policy}-W"', []),
        ('cited = "torchrun --nproc-per-node, Megatron-LM\'s --use-flash-attn"', []),
    ],
)
def test_the_check_finds_flags_outside_docstrings_only(source: str, found: list[str]) -> None:
    assert [hit.split(": ")[1].split(" in ")[0] for hit in flags_named(source)] == found


def _named_fields() -> Iterator[tuple[str, int, str]]:
    """(file, line, field) of every ``named("field")`` call in the library."""
    for path in _library_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or len(node.args) != 1:
                continue
            function = node.func
            name = function.id if isinstance(function, ast.Name) else None
            if isinstance(function, ast.Attribute):
                name = function.attr
            argument = node.args[0]
            if (
                name == "named"
                and isinstance(argument, ast.Constant)
                and isinstance(argument.value, str)
            ):
                yield str(path.relative_to(ROOT)), node.lineno, argument.value


def test_every_field_the_library_names_has_a_spelling() -> None:
    named_fields = list(_named_fields())
    assert len({field for _, _, field in named_fields}) >= 20  # the scan sees the calls
    missing = [
        f"{path}:{line}: {field}" for path, line, field in named_fields if field not in FLAGS
    ]
    # what writes a saved file is a field too, named where a refusal is built
    missing += [
        f"pipesim/export/saved.py: {field}"
        for field in (saved.RUN_FROM, saved.SWEEP_FROM, saved.RECORDS_FROM)
        if field not in FLAGS
    ]
    assert not missing, "add to cli.flags.FLAGS:\n" + "\n".join(missing)


def test_flags_is_sorted_with_field_names_for_keys() -> None:
    assert list(FLAGS) == sorted(FLAGS)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", field) for field in FLAGS)


@pytest.mark.parametrize("field", sorted(FLAGS))
def test_every_spelling_is_an_option_the_command_line_defines(field: str) -> None:
    spelling = FLAGS[field]
    if spelling.startswith("-"):  # a flag, or the flags of one option: -v/--chunks
        for flag in spelling.split("/"):
            assert flag in EVERY_OPTION, f"{field}: no command defines {flag}"
        return
    # a command and the options it is given with: pipesim sweep --out FILE.json
    words = spelling.split()
    assert words[:1] == ["pipesim"] and len(words) >= 2, spelling
    command = words[1]
    assert command in OPTIONS and command, f"{field}: no command {command!r}"
    for word in words[2:]:
        if word.startswith("-"):
            assert word in OPTIONS[command], f"{field}: pipesim {command} has no {word}"


def test_named_spells_a_field_as_the_application_says_and_restores() -> None:
    assert named("tensor_parallel") == "tensor_parallel"
    assert named("pipeline_devices") == "pipeline_devices"
    with fields_spelled(FLAGS):
        assert named("tensor_parallel") == "--tensor-parallel"
        assert named("pipeline_devices") == "-K"
        assert named("not_a_field") == "not_a_field"
        with fields_spelled({"tensor_parallel": "T"}):
            assert named("tensor_parallel") == "T"
            assert named("pipeline_devices") == "pipeline_devices"
        assert named("tensor_parallel") == "--tensor-parallel"
    assert named("tensor_parallel") == "tensor_parallel"
    assert spelling() == {}
    with pytest.raises(RuntimeError), fields_spelled(FLAGS):
        raise RuntimeError
    assert named("tensor_parallel") == "tensor_parallel"


def test_a_library_error_names_the_field_and_the_command_line_its_flag() -> None:
    with pytest.raises(ValueError, match=r"^tensor_parallel must be an integer >= 1, got 0$"):
        Parallelism(tensor=0)
    with fields_spelled(FLAGS), pytest.raises(ValueError, match=r"^--tensor-parallel must be"):
        Parallelism(tensor=0)
    with pytest.raises(
        ValueError, match=r"^sequence_parallel splits .* it needs tensor_parallel of 2 or more"
    ):
        Parallelism(sequence_parallel=True)


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value

    def cancel(self) -> bool:
        return False


class _FreshProcess:
    """Workers in a process of their own, which starts with no spelling (a Dask worker's)."""

    width = 2

    def submit(self, function: Any, *arguments: Any) -> _Done:
        with fields_spelled({}):
            return _Done(function(*arguments))

    def share(self, value: Any) -> Any:
        return value


def _spell(field: str) -> str:
    return named(field)


def test_work_in_another_process_names_fields_as_its_caller() -> None:
    fields = ["tensor_parallel", "pipeline_devices"]
    assert list(ordered_map(_FreshProcess(), _spell, fields)) == fields
    with fields_spelled(FLAGS):
        assert list(ordered_map(_FreshProcess(), _spell, fields)) == ["--tensor-parallel", "-K"]
