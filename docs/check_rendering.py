"""Check that the built documentation site renders cleanly: ``python docs/check_rendering.py SITE``.

``mkdocs build --strict`` proves the links and the docstrings; it cannot see what a reader sees.
This check reads the built HTML for the defects a newcomer met, and, where a headless Chromium
is on the machine (Debian's ``chromium`` and the ``playwright`` package), lays the pages out in
it, measures them and keeps screenshots:

* a table cell's code span showing a literal ``\\|`` (Markdown does not unescape in code spans;
  a ``grep`` pattern's is meant);
* the site's stylesheet missing from a page (it keeps table names from breaking mid-word);
* a line of the CLI reference's help text longer than its code box (a clipped box);
* in the browser: a name in a table's first column laid out on two lines (``pipesim.schedul
  es``), and a code box on the CLI reference wider than its page (clipped, scrolled).

Exit 0 when clean, 1 with one line per defect, 2 for a bad argument. Without Chromium the
browser checks are skipped, and the output says so.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path

# Pages a newcomer opens first, and those that held the defects.
PAGES = (
    "index.html",
    "reference/index.html",
    "guide/hybrid/index.html",
    "guide/recipes/index.html",
    "guide/run-files/index.html",
    "guide/planning/index.html",
    "cli/index.html",
)
CLI_WIDTH = 80  # docs/hooks/cli_reference.py wraps the help to this many columns
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def static_defects(site: Path) -> list[str]:
    """What the HTML itself shows, on every page of the site."""
    found = []
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(site)
        if "stylesheets/extra.css" not in text and page.name == "index.html":
            found.append(f"{where}: the site's stylesheet is not linked")
        for cell in re.findall(r"<td>(.*?)</td>", text, re.S):
            for code in re.findall(r"<code>(.*?)</code>", cell, re.S):
                text = html.unescape(code)
                # a grep pattern's \| is meant (basic regular expressions' alternation)
                if "\\|" in text and not text.startswith("grep "):
                    found.append(f"{where}: a table cell shows a literal \\| in {code[:40]!r}")
    cli = site / "cli" / "index.html"
    if cli.exists():
        for block in re.findall(r"<pre[^>]*>(.*?)</pre>", cli.read_text(encoding="utf-8"), re.S):
            plain = html.unescape(re.sub(r"<[^>]+>", "", block))
            for line in plain.splitlines():
                if len(line) > CLI_WIDTH:
                    found.append(
                        f"cli/index.html: a help line of {len(line)} columns: {line[:50]!r}"
                    )
    return found


def browser_defects(site: Path, screenshots: Path | None) -> list[str] | None:
    """What the pages show laid out in headless Chromium at 1280 x 900; None without one."""
    executable = next((path for path in CHROMIUM if Path(path).exists()), None)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if executable is None:
        return None
    found = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=executable,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name in PAGES:
            path = site / name
            if not path.exists():
                found.append(f"{name}: not built")
                continue
            page.goto(path.resolve().as_uri())
            broken = page.evaluate(
                """() => [...document.querySelectorAll('table td:first-child code')]
                .filter(e => e.getClientRects().length > 1).map(e => e.textContent)"""
            )
            found += [f"{name}: {text!r} is laid out on two lines" for text in broken]
            if name.startswith("cli/"):
                clipped = page.evaluate(
                    """() => [...document.querySelectorAll('pre > code')]
                    .filter(e => e.scrollWidth > e.clientWidth + 1).length"""
                )
                if clipped:
                    found.append(f"{name}: {clipped} code box(es) wider than the page")
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                shot = screenshots / (name.replace("/index.html", "").replace("/", "-") + ".png")
                page.screenshot(path=str(shot), full_page=False)
        browser.close()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build --site-dir)")
    parser.add_argument("--screenshots", type=Path, help="keep a screenshot of each page here")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        sys.stderr.write(f"check_rendering: error: {args.site} holds no built site\n")
        return 2
    found = static_defects(args.site)
    browser = browser_defects(args.site, args.screenshots)
    for defect in [*found, *(browser or [])]:
        sys.stdout.write(f"{defect}\n")
    checked = (
        f"{len(PAGES)} pages in headless Chromium"
        if browser is not None
        else (
            "no headless Chromium here (Debian's chromium and the playwright package): "
            "browser checks skipped"
        )
    )
    sys.stdout.write(
        f"check_rendering: {len(found) + len(browser or [])} defect(s); HTML of every page "
        f"read; {checked}\n"
    )
    return 1 if found or browser else 0


if __name__ == "__main__":
    sys.exit(main())
