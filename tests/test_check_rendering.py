"""docs/check_rendering.py finds the rendering defects a newcomer met, on a built site's HTML."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINKED = '<link rel="stylesheet" href="../stylesheets/extra.css">'


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_rendering", ROOT / "docs" / "check_rendering.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _site(tmp_path: Path, pages: dict[str, str]) -> Path:
    for name, body in pages.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"<html><head>{LINKED}</head><body>{body}</body></html>")
    return tmp_path


def test_a_clean_site_has_no_defect(tmp_path: Path) -> None:
    site = _site(tmp_path, {"index.html": "<table><tr><td><code>--zero 0</code></td></tr></table>"})
    assert _checker().static_defects(site) == []


@pytest.mark.parametrize(
    ("pages", "defect"),
    [
        (
            {"index.html": r"<table><tr><td><code>--zero 0\|1</code></td></tr></table>"},
            r"a table cell shows a literal \|",
        ),
        (
            {"cli/index.html": "<pre><code>usage: " + "x" * 90 + "</code></pre>"},
            "cli/index.html: a help line of 97 columns",
        ),
    ],
)
def test_each_defect_is_found(tmp_path: Path, pages: dict[str, str], defect: str) -> None:
    site = _site(tmp_path, {"index.html": "", **pages})
    found = _checker().static_defects(site)
    assert len(found) == 1 and defect in found[0], found


def test_a_page_without_the_stylesheet_and_a_grep_pattern(tmp_path: Path) -> None:
    """A grep pattern's \\| is meant; a page without the site's stylesheet is a defect."""
    site = _site(
        tmp_path, {"index.html": r"<table><tr><td><code>grep 'a\|b'</code></td></tr></table>"}
    )
    (site / "bare").mkdir()
    (site / "bare" / "index.html").write_text("<html><body>no style</body></html>")
    assert _checker().static_defects(site) == [
        "bare/index.html: the site's stylesheet is not linked"
    ]


def test_no_built_site_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _checker().main([str(tmp_path)]) == 2
    assert "holds no built site" in capsys.readouterr().err
