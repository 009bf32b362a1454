"""The scripted fake Messages API answers as the real one does, over real loopback HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx

from bir.benchmarks.fake_model import ApiRequest, FakeMessagesApi, ToolCall, Turn, call, calls, say

HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}


def _body(messages: list[dict[str, Any]], *, stream: bool) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 100, "stream": stream, "messages": messages}


def _stream(url: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of one streamed answer."""
    events = []
    with httpx.stream("POST", f"{url}/v1/messages?beta=true", json=body, headers=HEADERS, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    for chunk in text.split("\n\n"):
        if chunk.strip():
            event, data = chunk.split("\n", 1)
            events.append((event.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def _assembled(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The message a client builds from the stream, as the SDKs do."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for event, data in events:
        assert event == data["type"]
        if event == "message_start":
            message = data["message"]
        elif event == "content_block_start":
            message["content"].append(data["content_block"])
        elif event == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif event == "content_block_stop" and data["index"] in partial:
            message["content"][data["index"]]["input"] = json.loads(partial[data["index"]])
        elif event == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            message["usage"]["output_tokens"] = data["usage"]["output_tokens"]
    return message


def test_a_streamed_tool_turn_follows_the_real_event_order_and_assembles_to_the_script() -> None:
    long_command = {"command": "echo " + "x" * 100}
    turn = calls(ToolCall("Bash", long_command, "toolu_a"), ToolCall("Read", {}), text="Let me look.")
    api = FakeMessagesApi([turn])
    with api.serve():
        events = _stream(api.url, _body([{"role": "user", "content": "hi"}], stream=True))
    names = [e for e, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 3
    message = _assembled(events)
    assert message["stop_reason"] == "tool_use"
    assert message["content"][0] == {"type": "text", "text": "Let me look."}
    assert message["content"][1] == {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "Bash",
        "input": long_command,
    }
    assert message["content"][2]["id"].startswith("toolu_fake_")
    assert message["content"][2]["input"] == {}
    usage = message["usage"]
    assert min(usage["input_tokens"], usage["output_tokens"], usage["cache_read_input_tokens"]) > 0


def test_every_answer_has_its_own_id_and_the_exhausted_script_ends_with_text() -> None:
    api = FakeMessagesApi([say("first")], final_text="the end")
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": "a mid-conversation note"}]
    with api.serve():
        answers = [
            httpx.post(f"{api.url}/v1/messages", json=_body(messages, stream=False), headers=HEADERS, timeout=10)
            for _ in range(2)
        ]
    assert [a.status_code for a in answers] == [200, 200]
    first, second = (a.json() for a in answers)
    assert first["id"] != second["id"]
    assert (first["content"], first["stop_reason"]) == ([{"type": "text", "text": "first"}], "end_turn")
    assert second["content"] == [{"type": "text", "text": "the end"}]
    assert "a mid-conversation note" in api.requests[0].text()


def test_a_callable_turn_is_built_from_the_tool_result_that_came_back() -> None:
    def echo_back(request: ApiRequest) -> Turn:
        return say("saw " + request.tool_result_text("toolu_1"))

    api = FakeMessagesApi([call("Bash", {"command": "echo hi"}, tool_id="toolu_1"), echo_back])
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "hi"}]}
    with api.serve():
        _stream(api.url, _body([{"role": "user", "content": "go"}], stream=True))
        events = _stream(api.url, _body([{"role": "user", "content": [result]}], stream=True))
    assert _assembled(events)["content"] == [{"type": "text", "text": "saw hi"}]
    assert api.failures == []


def test_a_script_step_that_raises_answers_text_and_is_kept_for_the_test() -> None:
    def broken(request: ApiRequest) -> Turn:
        return say(request.tool_result_text("toolu_missing"))

    api = FakeMessagesApi([broken])
    with api.serve():
        events = _stream(api.url, _body([{"role": "user", "content": "go"}], stream=True))
    assert "script failed" in _assembled(events)["content"][0]["text"]
    assert len(api.failures) == 1
    assert isinstance(api.failures[0], KeyError)


def test_head_of_the_root_is_a_404_and_count_tokens_is_answered() -> None:
    api = FakeMessagesApi()
    with api.serve():
        head = httpx.head(f"{api.url}/", timeout=10)
        counted = httpx.post(
            f"{api.url}/v1/messages/count_tokens",
            json={"model": "m", "messages": [{"role": "user", "content": "hello there"}]},
            headers=HEADERS,
            timeout=10,
        )
    assert head.status_code == 404
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] > 0
    assert api.requests == []
    assert [r.path for r in api.other_requests] == ["/", "/v1/messages/count_tokens"]


FORCED_TOOLS = [
    {"name": "record", "description": "d", "input_schema": {"type": "object", "properties": {"x": {}}}},
    {"name": "other", "description": "d", "input_schema": {"type": "object"}},
]


def _forced_body(choice: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    body = _body([{"role": "user", "content": "fill it in, and explain first"}], stream=stream)
    return {**body, "tools": FORCED_TOOLS, "tool_choice": choice}


def test_a_forced_tool_is_answered_as_one_tool_use_block_with_no_text_before_it() -> None:
    turn = calls(ToolCall("other", {"y": 1}), ToolCall("record", {"x": 2}, "toolu_r"), text="Let me explain.")
    api = FakeMessagesApi([turn, turn])
    choice = {"type": "tool", "name": "record", "disable_parallel_tool_use": True}
    with api.serve():
        answer = httpx.post(f"{api.url}/v1/messages", json=_forced_body(choice, stream=False), headers=HEADERS)
        streamed = _assembled(_stream(api.url, _forced_body(choice, stream=True)))
    assert answer.status_code == 200
    for message in (answer.json(), streamed):
        assert message["stop_reason"] == "tool_use"
        assert message["content"] == [{"type": "tool_use", "id": "toolu_r", "name": "record", "input": {"x": 2}}]
    assert api.failures == []


def test_any_keeps_every_scripted_call_and_drops_the_text() -> None:
    turn = calls(ToolCall("other", {}, "toolu_o"), ToolCall("record", {}, "toolu_r"), text="First, a word.")
    api = FakeMessagesApi([turn])
    with api.serve():
        message = httpx.post(
            f"{api.url}/v1/messages", json=_forced_body({"type": "any"}, stream=False), headers=HEADERS
        ).json()
    assert [b["type"] for b in message["content"]] == ["tool_use", "tool_use"]
    assert message["stop_reason"] == "tool_use"


def test_a_script_that_answers_text_under_a_forced_tool_still_calls_it_and_is_kept_as_a_failure() -> None:
    api = FakeMessagesApi([say("no tool for you")])
    with api.serve():
        message = httpx.post(
            f"{api.url}/v1/messages",
            json=_forced_body({"type": "tool", "name": "record"}, stream=False),
            headers=HEADERS,
        ).json()
    assert [(b["type"], b["name"], b["input"]) for b in message["content"]] == [("tool_use", "record", {})]
    assert message["stop_reason"] == "tool_use"
    assert len(api.failures) == 1
    assert "record" in str(api.failures[0])


def test_forcing_a_tool_that_is_not_offered_is_the_real_apis_400_and_uses_no_turn() -> None:
    api = FakeMessagesApi([say("kept")])
    with api.serve():
        missing = httpx.post(
            f"{api.url}/v1/messages", json=_forced_body({"type": "tool", "name": "nope"}, stream=False), headers=HEADERS
        )
        no_tools = _body([{"role": "user", "content": "hi"}], stream=False)
        bare = httpx.post(f"{api.url}/v1/messages", json={**no_tools, "tool_choice": {"type": "any"}}, headers=HEADERS)
        after = httpx.post(f"{api.url}/v1/messages", json=no_tools, headers=HEADERS)
    assert (missing.status_code, bare.status_code) == (400, 400)
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert after.json()["content"] == [{"type": "text", "text": "kept"}]
