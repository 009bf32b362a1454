"""The words run_scenario answers with, for every control-server answer of spec §16.1 and its failures."""

from __future__ import annotations

import json

import pytest

from bir.proxy.scenario_answer import (
    ALREADY_RUNNING,
    MAX_ANSWER_CHARS,
    NOT_AVAILABLE,
    NOTHING_TO_RUN,
    RESPONSE_MODEL_LEAD,
    RUN_SCENARIO_DESCRIPTION,
    RUN_SCENARIO_INPUT_SCHEMA,
    Answer,
    answer_from_reply,
    no_control_server,
    runner_off,
    unavailable,
)


def reply(body: object, status: int = 200) -> Answer:
    return answer_from_reply(status, json.dumps(body).encode())


def test_the_tool_definition_is_the_specs_word_for_word() -> None:
    assert RUN_SCENARIO_DESCRIPTION == (
        "Returns the results BaseInstRunner prepared for the current request. Call it only when a BaseInstRunner "
        'note in this turn (text beginning "[BaseInstRunner calculated replay]", in a system note or a tool result) '
        "tells you to; never otherwise."
    )
    assert RUN_SCENARIO_INPUT_SCHEMA == {"type": "object", "properties": {}, "additionalProperties": False}


def test_a_successful_run_hands_over_the_bundle_text_unchanged() -> None:
    text = "[BaseInstRunner calculated replay] results…\n(partial: the scenario stopped before all of its steps ran)"
    answer = reply({"ok": True, "text": text, "responseModel": {}, "steps": 2, "partial": True})
    assert answer.kind == "ran"
    assert answer.render(debug=False) == (text, False)


def test_the_response_model_follows_the_results_in_what_the_model_reads() -> None:
    model = {"region": "eu-west-1", "device": "dev-009", "checkedDevices": 12}
    answer = reply(
        {"ok": True, "text": "[BaseInstRunner calculated replay] results", "responseModel": model, "steps": 2}
    )
    text, is_error = answer.render(debug=False)
    assert is_error is False
    results, lead, shown = text.split("\n", 2)[0], RESPONSE_MODEL_LEAD, text.rsplit("\n", 1)[1]
    assert results == "[BaseInstRunner calculated replay] results"
    assert lead in text
    assert json.loads(shown) == model


def test_a_runaway_bundle_leaves_room_for_its_response_model() -> None:
    answer = reply({"ok": True, "text": "x" * 500_000, "responseModel": {"device": "dev-009"}, "steps": 2})
    text, _ = answer.render(debug=False)
    assert len(text) <= MAX_ANSWER_CHARS
    assert text.endswith('{"device":"dev-009"}')


def test_no_plan_reads_nothing_to_run() -> None:
    answer = reply({"ok": False, "why": "no_plan"})
    assert answer.render(debug=False) == (NOTHING_TO_RUN, False)
    assert answer.reason == "no_plan"


def test_a_hand_over_note_is_what_the_model_reads() -> None:
    note = "[BaseInstRunner calculated replay] The scenario stopped at step 2; step 1 ran: …"
    answer = reply({"ok": False, "why": note, "note": True})
    assert answer.kind == "note"
    assert answer.render(debug=False) == (note, False)


def test_a_second_call_is_told_the_results_come_back_on_the_first() -> None:
    answer = reply({"ok": False, "why": "this scenario is already running for this turn — wait for it"})
    assert answer.render(debug=False) == (ALREADY_RUNNING, False)
    assert answer.reason.startswith("this scenario is already running")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b'{"ok": false, "why": "not_ready"}'),
        (200, b'{"ok": false, "why": "the scenario could not be run"}'),
        (500, b"Internal Server Error"),
        (401, b'{"error": "unauthorized"}'),
        (200, b"not json"),
        (200, b"[1, 2]"),
        (200, b'{"ok": true}'),
        (200, b'{"ok": true, "text": 7}'),
        (200, b'{"ok": false}'),
        (200, b'{"ok": false, "why": ""}'),
    ],
)
def test_anything_else_reads_not_available_and_keeps_the_raw_reason(status: int, body: bytes) -> None:
    answer = answer_from_reply(status, body)
    assert answer.kind == "unavailable"
    assert answer.render(debug=False) == (NOT_AVAILABLE, False)
    assert answer.reason


def test_no_control_server_and_the_off_switch_read_nothing_to_run() -> None:
    assert no_control_server("no discovery file").render(debug=False) == (NOTHING_TO_RUN, False)
    assert runner_off().render(debug=False) == (NOTHING_TO_RUN, False)


def test_debug_mode_brings_raw_reasons_back_as_errors() -> None:
    text, is_error = unavailable("/scenario/run answered HTTP 500: boom").render(debug=True)
    assert is_error is True
    assert "HTTP 500: boom" in text
    assert reply({"ok": False, "why": "no_plan"}).render(debug=True)[1] is True


def test_debug_mode_still_delivers_results_and_notes_as_plain_results() -> None:
    assert reply({"ok": True, "text": "done"}).render(debug=True) == ("done", False)
    assert (
        reply({"ok": False, "why": "[BaseInstRunner calculated replay] n", "note": True}).render(debug=True)[1] is False
    )


def test_a_runaway_bundle_is_cut_to_a_bound() -> None:
    text, _ = reply({"ok": True, "text": "x" * (MAX_ANSWER_CHARS + 5000)}).render(debug=False)
    assert len(text) <= MAX_ANSWER_CHARS
    head, _, tail = text.rpartition("\n…(cut: ")
    assert tail == f"{MAX_ANSWER_CHARS + 5000 - len(head)} more characters)"


def test_a_debug_reason_is_bounded() -> None:
    text, _ = unavailable("r" * 50_000).render(debug=True)
    assert len(text) < 3000
