"""What every command prints goes through one place: no escape sequence a value carried reaches a terminal,
bir's own colour does, and a ``--json`` document keeps its data whole with no raw control character."""

from __future__ import annotations

import io
import json
import re

from bir.hooks.commands.result import CommandResult, print_refusal, print_result
from bir.hooks.commands.term import paint, shown

HOSTILE = "\x1b]0;owned\x07\x1b]52;c;ZWNobyBvd25lZA==\x07\x1b[2J\x1b[8m\x9b31m\x7f\r"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_results_words_and_warnings_reach_a_pipe_without_a_control_character() -> None:
    out = io.StringIO()
    result = CommandResult(text=f"intent: list{HOSTILE}\n\tdone", data={}, warnings=(f"odd{HOSTILE}",))
    assert print_result(result, False, out) == 0
    assert CONTROLS.search(out.getvalue().replace("\n", "").replace("\t", "")) is None
    assert out.getvalue().startswith("intent: list]0;owned]52;c;")


def test_on_a_terminal_bir_keeps_its_own_colour_and_drops_every_other_sequence() -> None:
    text = paint("replay: ON", "red", True) + f" {HOSTILE} " + paint("ok", "green", True)
    kept = shown(text, True)
    assert kept.startswith("\x1b[31mreplay: ON\x1b[0m ")
    assert kept.endswith("\x1b[32mok\x1b[0m")
    assert kept.count("\x1b") == 4
    assert "\x1b[8m" not in kept
    assert "\x1b]" not in kept
    out = Terminal()
    print_result(CommandResult(text=text, data={}, warnings=(HOSTILE,)), False, out)
    assert "\x1b]" not in out.getvalue()
    assert "\x07" not in out.getvalue()


def test_a_json_result_keeps_its_data_and_carries_no_raw_control_character() -> None:
    out = io.StringIO()
    print_result(CommandResult(text="", data={"intent": HOSTILE}, warnings=(HOSTILE,)), True, out)
    assert CONTROLS.search(out.getvalue().replace("\n", "")) is None
    assert json.loads(out.getvalue()) == {"intent": HOSTILE, "warnings": [HOSTILE]}


def test_a_refusal_in_words_or_json_carries_no_control_character() -> None:
    out, err = io.StringIO(), io.StringIO()
    print_refusal("bir scenario show", "failed", f"no scenario {HOSTILE}", as_json=False, out=out, err=err)
    assert out.getvalue() == ""
    assert err.getvalue().startswith("bir scenario show: no scenario ]0;owned")
    assert CONTROLS.search(err.getvalue().rstrip("\n")) is None
    print_refusal("bir scenario show", "failed", f"no scenario {HOSTILE}", as_json=True, out=out, err=err)
    assert CONTROLS.search(out.getvalue().replace("\n", "")) is None
    assert json.loads(out.getvalue())["message"] == f"no scenario {HOSTILE}"
