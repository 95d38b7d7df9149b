"""MkDocs hook: the CLI reference page, rendered from ``cli.main``'s parser at every build.

``docs/cli.md`` is never written by hand or committed: :func:`on_files` adds it to the build as
a generated file, with the ``--help`` of ``pipesim`` and of every sub-command (and their own
sub-commands) as the parser prints it, so the page cannot drift from the code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGE = "cli.md"
WIDTH = (
    "76"  # help text is wrapped to the terminal: fixed, and narrow enough for the page's code box
)


@contextmanager
def terminal_columns(width: str) -> Iterator[None]:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub-command path, parser) pair, depth first: ``()`` is ``pipesim`` itself."""
    yield path, parser
    for name, sub in _subcommands(parser).items():
        yield from walk(sub, (*path, name))


def build_parser() -> argparse.ArgumentParser:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from cli.main import build_parser as build

    return build()


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The Markdown of the CLI reference page."""
    parser = parser or build_parser()
    out = [
        "# CLI reference",
        "",
        "Generated from the parser in `cli/main.py` at every build of this site: each section",
        "is exactly what `--help` prints. Exit status of every command: 0 done; 1 a check or a",
        "write failed; 2 bad input; 130 interrupted (see",
        "[errors, limits and interrupts](guide/errors.md)).",
        "",
    ]
    with terminal_columns(WIDTH):
        for path, sub in walk(parser):
            title = " ".join(("pipesim", *path))
            level = "#" * min(2 + max(len(path) - 1, 0), 4)
            help_text = fitted_usage(sub.format_help().rstrip(), int(WIDTH))
            out += [f"{level} `{title}`", "", "```text", help_text, "```", ""]
    return "\n".join(out)


def fitted_usage(help_text: str, width: int) -> str:
    """``help_text`` with its usage block's continuation lines indented by 6 spaces where
    argparse's alignment under the command's name pushes one past ``width`` (an option group
    such as ``[--overlap-grad-reduce | --no-overlap-grad-reduce]`` cannot be broken, and the
    page's code box holds about 80 columns)."""
    usage, _, rest = help_text.partition("\n\n")
    lines = usage.splitlines()
    if all(len(line) <= width for line in lines):
        return help_text
    fitted = [lines[0], *("      " + line.strip() for line in lines[1:])]
    return "\n".join(fitted) + ("\n\n" + rest if rest else "")


def on_files(files: Any, config: Any) -> Any:
    """Add the generated ``cli.md`` to the site (mkdocs hook)."""
    from mkdocs.structure.files import File

    existing = files.get_file_from_path(PAGE)
    if existing is not None:
        files.remove(existing)
    files.append(File.generated(config, PAGE, content=render()))
    return files
