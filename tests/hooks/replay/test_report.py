"""The two renderings of a ``bir replay``: the account a person reads and the document a program reads."""

from __future__ import annotations

import json

from bir.core.handover import Stop
from bir.hooks.replay.report import (
    OUTPUT_CHARS,
    OUTPUT_LINES,
    ReplayReport,
    StepOutcome,
    outcome_sentence,
    readable_output,
    render_json,
    render_text,
)


def call_tool_result(text: str, *, is_error: bool = False) -> str:
    return json.dumps({"content": [{"type": "text", "text": text}], "isError": is_error})


def step(position: int, tool: str, output: str | None, status: str = "ok") -> StepOutcome:
    return StepOutcome(
        position=position,
        step_index=position,
        tool_name=tool,
        reasoning="why it runs",
        tool_input={"region": "eu-west-1"},
        output=output,
        status=status,  # type: ignore[arg-type]
        stage=None if status == "ok" else "call",
        error=None if status == "ok" else "no answer in 60 s",
        duration_ms=12,
    )


def report(*steps: StepOutcome, **fields: object) -> ReplayReport:
    values: dict[str, object] = {
        "scenario_id": "scn_fleet",
        "intent": "find the riskiest device",
        "prompt": "check the fleet",
        "mode": "direct",
        "step_count": 3,
        "params": {"region": "eu-west-1"},
        "steps": steps,
        "outcome": "done",
        "exit_code": 0,
        **fields,
    }
    return ReplayReport(**values)  # type: ignore[arg-type]


def test_a_call_tool_result_reads_as_its_text_and_a_json_list_as_rows() -> None:
    rows = [{"id": "d1", "risk": 3}, {"id": "d2", "risk": 9}]
    assert readable_output(call_tool_result(json.dumps(rows))) == '{"id": "d1", "risk": 3}\n{"id": "d2", "risk": 9}'
    assert readable_output(call_tool_result("plain words")) == "plain words"
    assert readable_output(call_tool_result("boom", is_error=True)) == "(the tool reported an error) boom"
    assert readable_output("not json at all") == "not json at all"


def test_each_step_is_printed_once_with_its_output_as_text_and_bounded() -> None:
    huge = call_tool_result("\n".join(f"line {n} " + "x" * 50 for n in range(500)))
    text = render_text(report(step(0, "mcp__fleet__list_devices", huge), step(1, "mcp__fleet__get_device", "{}")))

    assert text.count("mcp__fleet__list_devices") == 1
    assert text.count("mcp__fleet__get_device") == 1
    assert '\\"' not in text
    assert "more lines)" in text
    assert len(text) < 2 * OUTPUT_CHARS + 2_000
    assert sum(1 for line in text.splitlines() if line.startswith("    line ")) <= OUTPUT_LINES


def test_a_stopped_run_is_told_in_the_operators_words_not_the_models_note() -> None:
    stopped = report(
        step(0, "mcp__fleet__list_devices", call_tool_result("[]")),
        step(1, "mcp__fleet__get_device", None, status="skipped"),
        outcome="stopped",
        exit_code=1,
        stop=Stop("no_answer", 1, "no answer in 60 s"),
        stop_tool="mcp__fleet__get_device",
        note="[BaseInstRunner calculated replay] The calculated scenario for this request stopped…",
    )

    assert outcome_sentence(stopped) == (
        "Stopped at step 2 of 3 (mcp__fleet__get_device): it was sent but did not answer (no answer in 60 s); "
        "it may or may not have completed. 1 of 3 steps ran before it."
    )
    assert "[BaseInstRunner" not in render_text(stopped)
    assert render_json(stopped)["note"] == stopped.note


def test_the_json_document_is_one_serialisable_object_with_the_whole_account() -> None:
    doc = render_json(report(step(0, "mcp__fleet__list_devices", call_tool_result("[]")), response={"top": "d2"}))

    assert json.loads(json.dumps(doc)) == doc
    assert doc["mode"] == "direct"
    assert doc["outcome"] == "done"
    assert doc["responseModel"] == {"top": "d2"}
    assert doc["summary"] == "Done: all 3 steps ran."
    assert doc["exitCode"] == 0


def test_no_escape_sequence_of_an_output_or_a_parameter_reaches_the_terminal() -> None:
    hostile = call_tool_result("\x1b[2J\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07rows")
    text = render_text(report(step(0, "mcp__fleet__list_devices", hostile), params={"region": "eu\x9b31m"}))
    assert not any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in text)
    assert "[2J]0;owned]52;c;cm0gLXJmIH4=rows" in text
