"""The README and the documentation site stay true to the code.

* every relative link in README.md resolves to a file in the repository (mkdocs --strict checks
  the links inside docs/; the README is outside the site);
* every ``$ pipesim ...`` command shown in README.md and docs/ parses with today's parser (a
  command elided with ``...`` must at least name only options its sub-command has);
* the CLI reference, generated at build time by docs/hooks/cli_reference.py, covers every
  sub-command with its ``--help`` word for word (a usage block re-indented where argparse's
  alignment would overflow the page's code box), and the API reference pages name only
  packages that exist;
* the set-up commands on the site's home page are the README's.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _hook() -> ModuleType:
    path = DOCS / "hooks" / "cli_reference.py"
    spec = importlib.util.spec_from_file_location("cli_reference_hook", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _console_commands(text: str) -> list[str]:
    """The ``$ `` lines of every ``console`` block, continuation lines joined."""
    commands = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("$ "):
                command = lines[i][2:]
                while command.rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command = command.rstrip()[:-1] + " " + lines[i].strip()
                commands.append(command)
            i += 1
    return commands


def _pipesim_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for command in _console_commands(page.read_text()):
            argv = shlex.split(command, comments=True)
            for at, word in enumerate(argv):  # a redirection or a pipe ends pipesim's words
                if word in (">", ">>", "|", "&&", ";", "2>", "&"):
                    argv = argv[:at]
                    break
            if argv and argv[0] == "pipesim":
                found.append((f"{page.relative_to(ROOT)}: {command}", argv[1:]))
    return found


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    raise AssertionError(f"no sub-command {name!r}")


def test_the_docs_show_pipesim_commands() -> None:
    assert len(_pipesim_commands()) >= 30
    readme = [where for where, _ in _pipesim_commands() if where.startswith("README.md")]
    assert len(readme) >= 3  # the three first commands


@pytest.mark.parametrize(("where", "argv"), _pipesim_commands(), ids=lambda x: str(x)[:80])
def test_every_shown_command_parses(where: str, argv: list[str]) -> None:
    parser = build_parser()
    # an elided command, or one whose required options a run file gives: its options must exist
    if "..." in argv or {"--run", "--megatron-args", "--torchtitan"} & set(argv):
        sub = _subparser(parser, argv[0])
        known = {s for action in sub._actions for s in action.option_strings}
        unknown = [a for a in argv if a.startswith("--") and a not in known]
        assert not unknown, f"{where}: unknown options {unknown}"
        return
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # pragma: no cover - the failure message is the point
        pytest.fail(f"{where}: does not parse (exit {exit_.code})")
    except Exception as error:  # pragma: no cover
        pytest.fail(f"{where}: does not parse ({error})")
    assert callable(args.handler)


def test_every_relative_link_in_the_readme_resolves() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert relative, "the README links to the docs"
    missing = [link for link in relative if not (ROOT / link.split("#", 1)[0]).exists()]
    assert not missing


def test_the_cli_reference_covers_every_sub_command() -> None:
    hook = _hook()
    parser = build_parser()
    paths = {" ".join(path) for path, _ in hook.walk(parser)}
    assert set(_subparser_names(parser)) <= paths
    assert {"schedule show", "hardware list", "models list"} <= paths  # nested ones too
    page = hook.render(parser)
    width = int(hook.WIDTH)
    with hook.terminal_columns(hook.WIDTH):  # each section is the parser's own --help
        for path, sub in hook.walk(parser):
            title = " ".join(("pipesim", *path))
            assert f"`{title}`" in page
            own = sub.format_help().rstrip()
            assert hook.fitted_usage(own, width) in page, title
            # only a usage block's indentation may differ, and only where it overflows
            words = [line.split() for line in own.splitlines()]
            fitted = [line.split() for line in hook.fitted_usage(own, width).splitlines()]
            assert words == fitted, title


def _subparser_names(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def test_the_cli_reference_is_not_committed() -> None:
    assert not (DOCS / "cli.md").exists(), "docs/cli.md is generated at build time"


def test_the_api_reference_names_real_packages() -> None:
    for page in sorted((DOCS / "reference").glob("*.md")):
        for target in re.findall(r"^::: ([\w.]+)", page.read_text(), re.M):
            top = target.split(".")[0]
            assert top in {"pipesim", "application", "executor", "validation", "plots", "cli"}, page
            assert (ROOT / Path(*target.split("."))).is_dir() or (
                ROOT / Path(*target.split("."))
            ).with_suffix(".py").exists(), f"{page.name}: {target}"


def test_the_home_page_shows_the_readme_set_up_commands() -> None:
    def setup(text: str) -> list[str]:
        section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
        return re.findall(r"```bash\n(.+?)\n```", section)

    assert setup((DOCS / "index.md").read_text()) == setup((ROOT / "README.md").read_text())
