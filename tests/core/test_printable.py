"""Text safe to print: no control character but newline and tab."""

from __future__ import annotations

import json
import re

import pytest

from bir.core.printable import printable, printable_json


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


@pytest.mark.parametrize(
    "value",
    ["\x1b]0;owned\x07", "\x1b]52;c;ZWNobyBvd25lZA==\x07\x1b[2J", "\x9b31m\x9d0;t\x9c\x7f", "a\r\nb", "plain é ✓"],
)
def test_a_json_document_keeps_its_data_and_carries_no_raw_control_character(value: str) -> None:
    for text in (json.dumps({"v": value}, ensure_ascii=False), json.dumps({"v": value}, ensure_ascii=False, indent=2)):
        safe = printable_json(text)
        assert re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", safe) is None
        assert json.loads(safe) == {"v": value}


def test_json_written_by_the_standard_library_escapes_esc_itself_but_not_c1() -> None:
    # Why printable_json exists: json escapes C0 in strings, never DEL or C1.
    text = json.dumps({"v": "\x1b\x9b\x7f"}, ensure_ascii=False)
    assert "\x1b" not in text
    assert "\x9b" in text
    assert "\x7f" in text
