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
