from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bir.core.transcript import (
    ModelUsage,
    UsageMark,
    mark_transcript_usage,
    session_cost_usd,
    tool_calls_since,
    usage_since,
)
from tests.paths import FIXTURES

HAIKU = "claude-haiku-4-5-20251001"
OPUS = "claude-opus-4-6"


def _assistant(msg_id: str | None, model: str, inp: int, out: int, *, block: str = "text", **extra: int) -> str:
    message: dict[str, object] = {
        "role": "assistant",
        "model": model,
        "content": [{"type": block, "text": "…"}],
        "usage": {"input_tokens": inp, "output_tokens": out, **extra},
    }
    if msg_id is not None:
        message["id"] = msg_id
    return json.dumps({"type": "assistant", "uuid": "u", "message": message})


def _user(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}})


def _append(path: Path, *lines: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line + "\n")


def test_three_prompts_in_one_session_give_three_non_cumulative_deltas(tmp_path: Path) -> None:
    transcript = tmp_path / "session.jsonl"
    deltas = []
    for turn, (inp, out) in enumerate([(100, 10), (200, 20), (300, 30)]):
        mark = mark_transcript_usage(transcript)
        _append(transcript, _user(f"prompt {turn}"), _assistant(f"msg_{turn}", HAIKU, inp, out))
        deltas.append(usage_since(transcript, mark))
    assert deltas == [
        [ModelUsage(HAIKU, input_tokens=100, output_tokens=10)],
        [ModelUsage(HAIKU, input_tokens=200, output_tokens=20)],
        [ModelUsage(HAIKU, input_tokens=300, output_tokens=30)],
    ]


def test_a_message_written_as_several_content_block_lines_is_counted_once(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    _append(
        transcript,
        _assistant("msg_a", OPUS, 50, 7, block="thinking"),
        _assistant("msg_a", OPUS, 50, 7, block="text"),
        _assistant("msg_a", OPUS, 50, 7, block="tool_use"),
        _user("tool result"),
        _assistant("msg_b", OPUS, 60, 3),
    )
    assert usage_since(transcript, mark) == [ModelUsage(OPUS, input_tokens=110, output_tokens=10)]


def test_repeated_lines_of_one_message_keep_its_final_usage(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    _append(transcript, _assistant("msg_a", OPUS, 50, 1), _assistant("msg_a", OPUS, 50, 40))
    assert usage_since(transcript, mark) == [ModelUsage(OPUS, input_tokens=50, output_tokens=40)]


def test_lines_without_a_message_id_each_count_once(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    _append(transcript, _assistant(None, HAIKU, 10, 1), _assistant(None, HAIKU, 10, 1))
    assert usage_since(transcript, mark) == [ModelUsage(HAIKU, input_tokens=20, output_tokens=2)]


def test_usage_is_kept_apart_per_model_with_cache_fields(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    _append(
        transcript,
        _assistant("m1", OPUS, 1, 2, cache_creation_input_tokens=3, cache_read_input_tokens=4),
        _assistant("m2", HAIKU, 5, 6),
    )
    assert usage_since(transcript, mark) == [
        ModelUsage(HAIKU, input_tokens=5, output_tokens=6),
        ModelUsage(OPUS, input_tokens=1, output_tokens=2, cache_creation_input_tokens=3, cache_read_input_tokens=4),
    ]


def test_malformed_lines_are_skipped(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    _append(
        transcript,
        '{"type":"assistant","message":{"usage": ',
        '["assistant", "usage"]',
        json.dumps({"type": "assistant", "message": {"id": "x", "model": OPUS, "usage": "lots"}}),
        json.dumps({"type": "assistant", "message": {"id": "y", "usage": {"input_tokens": -9, "output_tokens": "2"}}}),
        "\x00\xff not json",
        _assistant("ok", OPUS, 8, 9),
    )
    assert usage_since(transcript, mark) == [ModelUsage(OPUS, input_tokens=8, output_tokens=9)]


def test_a_transcript_that_does_not_exist_yet_is_marked_at_its_start(tmp_path: Path) -> None:
    transcript = tmp_path / "later.jsonl"
    mark = mark_transcript_usage(transcript)
    assert usage_since(transcript, mark) == []
    _append(transcript, _assistant("m", HAIKU, 4, 2))
    assert usage_since(transcript, mark) == [ModelUsage(HAIKU, input_tokens=4, output_tokens=2)]


def test_a_run_without_a_transcript_is_unmeasurable_and_reports_no_usage(tmp_path: Path) -> None:
    mark = mark_transcript_usage(None)
    assert not mark.measurable
    assert usage_since(tmp_path / "t.jsonl", mark) == []
    assert usage_since(None, UsageMark(path=str(tmp_path / "t.jsonl"))) == []


def test_a_transcript_that_vanished_reports_no_usage(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    _append(transcript, _assistant("m", HAIKU, 4, 2))
    mark = mark_transcript_usage(transcript)
    transcript.unlink()
    assert usage_since(transcript, mark) == []


def test_a_compacted_transcript_degrades_to_no_usage_never_negative(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    _append(transcript, *[_assistant(f"m{i}", OPUS, 1000, 100) for i in range(5)])
    mark = mark_transcript_usage(transcript)
    with transcript.open("r+", encoding="utf-8") as fh:
        fh.truncate(0)
    _append(transcript, _assistant("summary", OPUS, 10, 1))
    assert usage_since(transcript, mark) == []


def test_a_rotated_transcript_degrades_to_no_usage(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    _append(transcript, _assistant("m0", OPUS, 1, 1))
    mark = mark_transcript_usage(transcript)
    replacement = tmp_path / "new.jsonl"
    _append(replacement, *[_assistant(f"old{i}", OPUS, 1000, 100) for i in range(50)])
    os.replace(replacement, transcript)
    assert usage_since(transcript, mark) == []


def test_lines_of_a_message_begun_before_the_mark_are_not_counted_after_it(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    _append(transcript, _assistant("msg_prev", OPUS, 500, 50, block="text"))
    mark = mark_transcript_usage(transcript)
    _append(transcript, _assistant("msg_prev", OPUS, 500, 50, block="tool_use"), _assistant("msg_new", OPUS, 5, 1))
    assert usage_since(transcript, mark) == [ModelUsage(OPUS, input_tokens=5, output_tokens=1)]


def test_a_line_half_written_when_the_mark_was_taken_belongs_before_it(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    line = _assistant("msg_prev", OPUS, 500, 50)
    half = len(line) // 2
    transcript.write_text(_user("hi") + "\n" + line[:half], encoding="utf-8")
    mark = mark_transcript_usage(transcript)
    with transcript.open("a", encoding="utf-8") as fh:
        fh.write(line[half:] + "\n")
    _append(transcript, _assistant("msg_new", OPUS, 5, 1))
    assert usage_since(transcript, mark) == [ModelUsage(OPUS, input_tokens=5, output_tokens=1)]


def test_a_line_still_being_written_is_not_counted_yet(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    _append(transcript, _assistant("done", HAIKU, 1, 1))
    with transcript.open("a", encoding="utf-8") as fh:
        fh.write(_assistant("writing", HAIKU, 900, 900)[:40])
    assert usage_since(transcript, mark) == [ModelUsage(HAIKU, input_tokens=1, output_tokens=1)]


def test_a_delta_is_priced_and_says_whether_every_token_was_priced(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    _append(transcript, _assistant("m", HAIKU, 1_000_000, 0), _assistant("s", "<synthetic>", 0, 0))
    cost, priced = session_cost_usd(usage_since(transcript, mark))
    assert cost == pytest.approx(1.0)
    assert priced


@pytest.mark.parametrize("version", ["2.1.332", "2.1.197"])
def test_the_tool_calls_of_a_real_transcript_come_in_order_with_what_the_hooks_would_have_seen(
    tmp_path: Path, version: str
) -> None:
    # The user and assistant lines of a real `claude -p` run (FACTS.md §5): `echo hi`, then `exit 3`.
    sample = (FIXTURES / f"transcript-{version}.jsonl").read_bytes()
    transcript = tmp_path / "t.jsonl"
    mark = mark_transcript_usage(transcript)
    transcript.write_bytes(sample)
    ok, failed = tool_calls_since(transcript, mark)
    assert (ok.tool_use_id, ok.name, ok.input) == ("toolu_fake_001", "Bash", {"command": "echo hi", "description": "d"})
    # The hook's tool_response shape, from the result line's toolUseResult.
    assert ok.output == {
        "stdout": "hi",
        "stderr": "",
        "interrupted": False,
        "isImage": False,
        "noOutputExpected": False,
    }
    assert (ok.error, ok.answered) == (None, True)
    assert (failed.tool_use_id, failed.output, failed.error) == ("toolu_fake_002", None, "Exit code 3")


def test_tool_calls_before_the_mark_and_a_call_not_answered_yet_are_told_apart(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"

    def use(tool_id: str) -> str:
        block = {"type": "tool_use", "id": tool_id, "name": "mcp__fleet__list_devices", "input": {"region": "x"}}
        return json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [block]}})

    def result(tool_id: str) -> str:
        content = [{"type": "text", "text": "[]"}]
        block = {"type": "tool_result", "tool_use_id": tool_id, "content": content}
        return json.dumps({"type": "user", "message": {"role": "user", "content": [block]}, "toolUseResult": content})

    _append(transcript, use("before"), result("before"))
    mark = mark_transcript_usage(transcript)
    _append(transcript, use("after"), result("after"), "{not json", use("pending"))
    calls = tool_calls_since(transcript, mark)
    assert [(c.tool_use_id, c.answered) for c in calls] == [("after", True), ("pending", False)]
    assert calls[0].output == [{"type": "text", "text": "[]"}]
    assert tool_calls_since(None, mark) == []
    assert tool_calls_since(tmp_path / "gone.jsonl", mark) == []
