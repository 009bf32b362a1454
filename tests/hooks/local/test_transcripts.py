"""Reading a transcript as prompt turns, on lines shaped as Claude Code 2.1.197 and 2.1.332 write them
(FACTS.md §5; the real binaries' transcripts are read in ``test_learn``)."""

from __future__ import annotations

import json
from typing import Any

from bir.core.directive import TAG
from bir.hooks.local.transcripts import MAX_LINE_BYTES, prompt_of, read_turns, sidechain_usage

SESSION = "9f0c6d1e-0000-4000-8000-000000000001"


def line(record: dict[str, Any]) -> bytes:
    return json.dumps({"sessionId": SESSION, "cwd": "/p", "version": "2.1.332", **record}).encode() + b"\n"


def prompt(text: str, prompt_id: str, at: str = "2026-11-29T18:17:30.000Z") -> bytes:
    return line(
        {
            "type": "user",
            "isSidechain": False,
            "promptId": prompt_id,
            "timestamp": at,
            "message": {"role": "user", "content": text},
        }
    )


def usage(n: int) -> dict[str, int]:
    return {"input_tokens": n, "output_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def assistant(
    msg_id: str,
    blocks: list[dict[str, Any]],
    *,
    stop: str = "tool_use",
    tokens: int = 100,
    sidechain: bool = False,
    at: str = "2026-11-29T18:17:31.000Z",
) -> bytes:
    message: dict[str, Any] = {"id": msg_id, "model": "claude-sonnet-4-5", "role": "assistant", "content": blocks}
    message.update(stop_reason=stop, usage=usage(tokens))
    return line({"type": "assistant", "isSidechain": sidechain, "timestamp": at, "message": message})


def use(tool_id: str, name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def result(
    tool_id: str,
    content: Any,
    structured: Any,
    *,
    error: bool = False,
    prompt_id: str = "p1",
    at: str = "2026-11-29T18:17:32.500Z",
) -> bytes:
    block = {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": error}
    record = {"type": "user", "promptId": prompt_id, "timestamp": at, "message": {"role": "user", "content": [block]}}
    return line({**record, "toolUseResult": structured})


def text(msg_id: str, said: str, tokens: int = 100) -> bytes:
    return assistant(msg_id, [{"type": "text", "text": said}], stop="end_turn", tokens=tokens)


ROWS = [{"type": "text", "text": '[{"id": "dev-001", "risk": 3}]'}]
ONE_TURN = b"".join(
    [
        line({"type": "queue-operation", "operation": "enqueue", "content": "list devices"}),
        prompt("list the devices in eu-west-1", "p1"),
        line({"type": "attachment", "attachment": {"type": "skill_listing"}}),
        assistant("msg_1", [use("t1", "mcp__fleet__list_devices", {"region": "eu-west-1"})]),
        # The same message again, for its next content block: its usage counts once.
        assistant("msg_1", [{"type": "text", "text": "listing"}], tokens=100),
        result("t1", ROWS, ROWS),
        assistant("msg_2", [use("t2", "Bash", {"command": "exit 3"})], tokens=120),
        result("t2", "Exit code 3", "Error: Exit code 3", error=True),
        text("msg_3", "one device"),
        line({"type": "last-prompt", "lastPrompt": "list devices"}),
    ]
)


def test_a_turn_is_its_prompt_its_calls_joined_to_their_results_and_its_usage_once_per_message() -> None:
    reading = read_turns(ONE_TURN, 0, at_eof=True)
    [turn] = reading.turns
    assert turn.prompt == "list the devices in eu-west-1"
    assert (turn.session_id, turn.prompt_id, turn.cwd, turn.version) == (SESSION, "p1", "/p", "2.1.332")
    listing, failed = turn.calls
    assert (listing.name, listing.input, listing.result, listing.error) == (
        "mcp__fleet__list_devices",
        {"region": "eu-west-1"},
        ROWS,
        None,
    )
    assert listing.duration_ms == 1500
    assert failed.error == "Exit code 3"
    assert failed.result == {"error": "Exit code 3"}
    assert turn.answer == "one device"
    assert turn.usage_by_model() == {
        "claude-sonnet-4-5": {
            "input_tokens": 320,
            "output_tokens": 30,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    }
    assert reading.resume_at == len(ONE_TURN)


def test_a_turn_still_being_written_is_left_for_the_next_read_which_starts_at_its_prompt() -> None:
    second = prompt("list the devices in us-east-1", "p2") + assistant(
        "msg_9", [use("t9", "mcp__fleet__list_devices", {"region": "us-east-1"})]
    )
    data = ONE_TURN + second + b'{"type":"user","partial'
    reading = read_turns(data, 0, at_eof=True)
    assert [t.prompt_id for t in reading.turns] == ["p1"]
    assert reading.incomplete == 1
    assert reading.resume_at == len(ONE_TURN)
    grown = data[: len(ONE_TURN) + len(second)] + result("t9", ROWS, ROWS, prompt_id="p2") + text("msg_10", "done")
    again = read_turns(grown[reading.resume_at :], reading.resume_at, at_eof=True)
    assert [t.prompt_id for t in again.turns] == ["p2"]
    assert again.turns[0].start_offset == len(ONE_TURN)
    assert again.resume_at == len(grown)


def test_a_turn_left_open_in_an_idle_transcript_is_taken_as_it_is() -> None:
    data = prompt("list the devices in us-east-1", "p2") + assistant(
        "msg_9", [use("t9", "mcp__fleet__list_devices", {"region": "us-east-1"})]
    )
    assert read_turns(data, 0, at_eof=True).turns == []
    [turn] = read_turns(data, 0, at_eof=True, idle=True).turns
    assert turn.open_calls == 1


def test_a_side_chain_s_calls_are_never_steps_but_its_usage_is_the_turn_s_cost() -> None:
    data = b"".join(
        [
            prompt("ask a helper to look at sa-east-1", "p4"),
            assistant("msg_1", [use("t1", "Task", {"prompt": "List devices in sa-east-1"})]),
            assistant("msg_s1", [use("s1", "mcp__fleet__list_devices", {"region": "sa-east-1"})], sidechain=True),
            result("s1", ROWS, ROWS, prompt_id="p4"),
            assistant("msg_s2", [{"type": "text", "text": "sub done"}], stop="end_turn", sidechain=True),
            result("t1", [{"type": "text", "text": "sub done"}], {"status": "completed"}, prompt_id="p4"),
            text("msg_2", "main done"),
        ]
    )
    [turn] = read_turns(data, 0, at_eof=True).turns
    assert [c.name for c in turn.calls] == ["Task"]
    assert (turn.subagents, turn.sidechain_calls) == (1, 1)
    assert turn.answer == "main done"
    assert turn.usage_by_model()["claude-sonnet-4-5"]["input_tokens"] == 400


def test_a_subagent_file_s_usage_is_read_by_its_parent_turn_s_prompt_id() -> None:
    sub = line({"type": "user", "isSidechain": True, "promptId": "p4", "message": {"role": "user", "content": "x"}})
    sub += assistant("msg_s1", [{"type": "text", "text": "sub done"}], stop="end_turn", sidechain=True, tokens=77)
    found = sidechain_usage(sub)
    assert list(found) == ["p4"]
    assert found["p4"]["msg_s1"][1]["input_tokens"] == 77


def test_a_turn_bir_replayed_says_so() -> None:
    directive = line({"type": "attachment", "attachment": {"type": "hook_additional_context", "content": [TAG]}})
    data = prompt("find the riskiest device in eu-west-1", "p1") + directive + text("msg_1", "done")
    [turn] = read_turns(data, 0, at_eof=True).turns
    assert turn.replayed
    run = prompt("find the riskiest device in eu-west-1", "p2") + assistant(
        "msg_2", [use("t1", "mcp__bir__run_scenario", {})]
    )
    run += result("t1", [{"type": "text", "text": "ok"}], [], prompt_id="p2") + text("msg_3", "done")
    [turn] = read_turns(run, 0, at_eof=True).turns
    assert turn.replayed


def test_command_echoes_interruptions_meta_and_tool_results_start_no_turn() -> None:
    def user(content: Any, **more: Any) -> dict[str, Any]:
        return {"type": "user", "message": {"role": "user", "content": content}, **more}

    assert prompt_of(user("<command-name>/clear</command-name>")) is None
    assert prompt_of(user("<local-command-stdout>ok</local-command-stdout>")) is None
    assert prompt_of(user("[Request interrupted by user]")) is None
    assert prompt_of(user("hello", isMeta=True)) is None
    assert prompt_of(user("hello", isSidechain=True)) is None
    assert prompt_of(user([{"type": "tool_result", "tool_use_id": "t", "content": "x"}])) is None
    assert prompt_of(user([{"type": "text", "text": "  look at  this "}])) == "look at  this"


def test_a_result_line_too_large_to_read_leaves_its_call_unread_not_the_turn_lost() -> None:
    big = result("t1", [{"type": "text", "text": "x" * (MAX_LINE_BYTES + 10)}], None)
    data = b"".join(
        [
            prompt("dump the logs", "p1"),
            assistant("msg_1", [use("t1", "mcp__logs__dump", {})]),
            big,
            text("msg_2", "done"),
        ]
    )
    reading = read_turns(data, 0, at_eof=True)
    [turn] = reading.turns
    [call] = turn.calls
    assert call.answered
    assert call.unread == len(big) - 1
    assert "too large to read" in str(call.result)
    assert reading.unreadable_lines == 1
