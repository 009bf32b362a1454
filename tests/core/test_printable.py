"""Text safe to print: no control character but newline and tab."""

from __future__ import annotations

import pytest

from bir.core.printable import printable


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J\x1b[Hcleared", "[2J[Hcleared"),
        ("\x1b]0;owned\x07title", "]0;ownedtitle"),
        ("\x1b]52;c;ZWNobyBvd25lZA==\x07clip", "]52;c;ZWNobyBvd25lZA==clip"),
        ("\x9b31mred", "31mred"),
        ("over\rwrite", "overwrite"),
        ("a\x00b\x7fc\x85d", "abcd"),
        ("lines\nand\ttabs stay, é ü ✓ too", "lines\nand\ttabs stay, é ü ✓ too"),
    ],
)
def test_control_characters_are_stripped_and_newlines_and_tabs_kept(text: str, shown: str) -> None:
    assert printable(text) == shown
