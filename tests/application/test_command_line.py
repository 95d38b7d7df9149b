"""The argparse plumbing shared by the sub-commands (application.command_line)."""

from __future__ import annotations

import pytest

from application.command_line import positive_ints


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", (1,)),
        ("1,2,4", (1, 2, 4)),
        (" 8, 16", (8, 16)),
        ("", None),
        ("1,", None),
        ("1,0", None),
        ("-2", None),
        ("2,x", None),
        ("1.5", None),
    ],
)
def test_positive_ints(text: str, expected: tuple[int, ...] | None) -> None:
    assert positive_ints(text) == expected
