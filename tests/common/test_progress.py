"""When a progress bar is drawn: on a terminal only, never in CI or under --json."""

from __future__ import annotations

import io
import sys

import pytest

from pipesim.common.progress import progress, progress_wanted


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> _Terminal:
    """Standard error a terminal, no CI, no override (inside the test: pytest's capture
    replaces sys.stderr again between a fixture and the test body)."""
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("PIPESIM_PROGRESS", raising=False)
    return stream


def test_a_bar_is_drawn_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _on_a_terminal(monkeypatch)
    assert progress_wanted()
    with progress(3, "work") as bar:
        bar.update()
    assert "work" in terminal.getvalue()


def test_no_bar_under_json_in_ci_or_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    _on_a_terminal(monkeypatch)
    assert progress_wanted()
    assert not progress_wanted(enabled=False)  # --json
    monkeypatch.setenv("CI", "true")
    assert not progress_wanted()
    monkeypatch.delenv("CI")
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    assert not progress_wanted()
    with progress(3, "work") as bar:
        bar.update()
        bar.set_postfix_str("quiet")


@pytest.mark.parametrize(("value", "wanted"), [("1", True), ("0", False), ("no", False)])
def test_pipesim_progress_overrides_the_rule(
    value: str, wanted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPESIM_PROGRESS", value)
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert progress_wanted(enabled=False) is wanted
