"""The command that makes the table of docs/synthesis-optimality.md runs, and its row for the
6.2B model at m = 24 says what the page says."""

from __future__ import annotations

import pytest

from tests.synthesis import zero_bubble_table


def test_one_row_of_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    zero_bubble_table.main(["--rows", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| model | p | m | ZB-2p (paper) | before |")
    assert lines[2].startswith("| 6.2B | 8 | 24 | 0.29% | 5.97% | 0.29% | 0.12% | 0.00% |")
