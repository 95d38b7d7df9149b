"""griffe extension: docstrings written for Python's tools, shown as Markdown.

The docstrings hold doctests (run by ``pytest --doctest-modules``) without Markdown fences; as
plain Markdown their output (``['1F0', '1B0']``) would read as broken cross-references. This
wraps every run of ``>>>`` lines and their output in a ``pycon`` fence, and shows Sphinx roles
(``:func:`build```, ``:class:`~pipesim.schedules.Schedule```) as code, when the API reference
is built; the source stays as it is.
"""

from __future__ import annotations

import re
from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """``text`` with each doctest block (``>>>`` lines, ``...`` continuations and the output up
    to the next blank line) inside a fenced ``pycon`` block; fenced code is left alone."""
    out: list[str] = []
    in_fence = in_doctest = False
    indent = ""
    for line in text.splitlines():
        stripped = line.strip()
        if in_doctest and not stripped:
            out.append(f"{indent}```")
            in_doctest = False
        if not in_doctest and stripped.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and not in_doctest and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            in_doctest = True
        out.append(line)
    if in_doctest:
        out.append(f"{indent}```")
    return "\n".join(out)


ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`~?([^`]+)`")


def roles_as_code(text: str) -> str:
    """Sphinx roles as Markdown code spans (``~a.b`` shows ``b``, as Sphinx does)."""

    def code(match: re.Match[str]) -> str:
        target = match.group(1)
        if match.group(0).split("`", 1)[1].startswith("~"):
            target = target.rsplit(".", 1)[-1]
        return f"`{target}`"

    return ROLE.sub(code, text)


class DoctestFences(griffe.Extension):
    """Fence bare doctests and turn Sphinx roles into code in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        # Called for every object as it is loaded, top-level packages included (``on_object``
        # skips those); rewriting twice changes nothing, fenced code is left alone.
        if obj.docstring is not None:
            obj.docstring.value = roles_as_code(fence_doctests(obj.docstring.value))
