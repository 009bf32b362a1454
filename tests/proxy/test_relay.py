"""The relay core over in-memory byte streams: what passes byte for byte, what it rewrites, its own ids."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from bir.hooks.api import CALL_ID_KEY, StepReport
from bir.proxy.relay import UPSTREAM_EXITED, Relay, RequestTimedOut, UpstreamGone, UpstreamRequestError

pytestmark = pytest.mark.anyio


class _Out(ByteSendStream):
    def __init__(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._stream = stream

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def aclose(self) -> None:
        await self._stream.aclose()


class _In(ByteReceiveStream):
    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._stream.receive()

    async def aclose(self) -> None:
        await self._stream.aclose()


class _Reader:
    """Collects the lines one side receives."""

    def __init__(self, stream: MemoryObjectReceiveStream[bytes]) -> None:
        self._stream = stream
        self._buffer = b""

    async def line(self) -> bytes:
        with anyio.fail_after(5):
            while b"\n" not in self._buffer:
                self._buffer += await self._stream.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    async def message(self) -> dict[str, Any]:
        value = json.loads(await self.line())
        assert isinstance(value, dict)
        return value

    def nothing_buffered(self) -> bool:
        if self._buffer:
            return False
        try:
            self._buffer += self._stream.receive_nowait()
        except anyio.WouldBlock:
            return True
        return False


@dataclass
class _Harness:
    relay: Relay
    host_send: MemoryObjectSendStream[bytes]
    upstream_send: MemoryObjectSendStream[bytes]
    at_upstream: _Reader
    at_host: _Reader
    group: TaskGroup
    steps: list[StepReport] = field(default_factory=list)
    known: list[bool] = field(default_factory=lambda: [False])

    async def from_host(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.host_send.send(data + b"\n")

    async def from_upstream(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.upstream_send.send(data + b"\n")


@asynccontextmanager
async def _relay() -> AsyncIterator[_Harness]:
    host_send, host_recv = anyio.create_memory_object_stream[bytes](100)
    to_up_send, to_up_recv = anyio.create_memory_object_stream[bytes](100)
    up_send, up_recv = anyio.create_memory_object_stream[bytes](100)
    to_host_send, to_host_recv = anyio.create_memory_object_stream[bytes](100)
    steps: list[StepReport] = []
    known = [False]
    relay = Relay(
        upstream_in=_Out(to_up_send), host_out=_Out(to_host_send), control_known=lambda: known[0], on_step=steps.append
    )
    streams = (host_send, host_recv, to_up_send, to_up_recv, up_send, up_recv, to_host_send, to_host_recv)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(relay.pump_host, _In(host_recv))
            group.start_soon(relay.pump_upstream, _In(up_recv))
            yield _Harness(relay, host_send, up_send, _Reader(to_up_recv), _Reader(to_host_recv), group, steps, known)
            group.cancel_scope.cancel()
    finally:
        for stream in streams:
            stream.close()


async def test_lines_that_need_no_change_pass_byte_for_byte_both_ways() -> None:
    odd = b'{ "method" : "tools/call" ,"id":0, "params":{"name":"x","arguments":{"b":1,"a":2.50}}, "jsonrpc":"2.0"}'
    answer = b'{"result":{"content":[]},"jsonrpc":"2.0","id":0}  '
    async with _relay() as h:
        await h.from_host(odd)
        assert await h.at_upstream.line() == odd
        await h.from_upstream(answer)
        assert await h.at_host.line() == answer
        await h.from_host(b"not json at all")
        assert await h.at_upstream.line() == b"not json at all"


async def test_server_requests_reusing_a_host_id_pass_through_to_the_host() -> None:
    async with _relay() as h:
        await h.from_host({"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
        await h.at_upstream.line()
        # The upstream asks the host something with its own id 0, then answers the host's 0.
        await h.from_upstream({"jsonrpc": "2.0", "id": 0, "method": "roots/list"})
        assert (await h.at_host.message())["method"] == "roots/list"
        await h.from_host({"jsonrpc": "2.0", "id": 0, "result": {"roots": []}})
        assert (await h.at_upstream.message())["result"] == {"roots": []}
        await h.from_upstream({"jsonrpc": "2.0", "id": 0, "result": {"tools": []}})
        assert (await h.at_host.message())["result"] == {"tools": []}


async def test_the_proxys_own_request_uses_a_bir_id_and_its_answer_never_reaches_the_host() -> None:
    async with _relay() as h:
        outcome: list[Any] = []

        async def ask() -> None:
            outcome.append(await h.relay.request("tools/call", {"name": "echo", "arguments": {}}, 5))

        h.group.start_soon(ask)
        sent = await h.at_upstream.message()
        assert isinstance(sent["id"], str)
        assert sent["id"].startswith("bir:")
        await h.from_upstream({"jsonrpc": "2.0", "id": sent["id"], "result": {"content": [{"type": "text"}]}})
        # A host request after it proves the host saw nothing in between.
        await h.from_host({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        await h.at_upstream.line()
        await h.from_upstream({"jsonrpc": "2.0", "id": 1, "result": {}})
        assert (await h.at_host.message())["id"] == 1
        assert outcome == [{"content": [{"type": "text"}]}]


async def _ask_in_background(h: _Harness, params: dict[str, Any], timeout_s: float) -> list[BaseException | Any]:
    outcome: list[BaseException | Any] = []

    async def ask() -> None:
        try:
            outcome.append(await h.relay.request("tools/call", params, timeout_s))
        except (RequestTimedOut, UpstreamRequestError, UpstreamGone) as exc:
            outcome.append(exc)

    h.group.start_soon(ask)
    return outcome


async def test_an_own_request_past_its_budget_is_cancelled_upstream_and_its_late_answer_is_consumed() -> None:
    async with _relay() as h:
        outcome = await _ask_in_background(h, {"name": "slow"}, 0.05)
        sent = await h.at_upstream.message()
        cancel = await h.at_upstream.message()
        assert cancel["method"] == "notifications/cancelled"
        assert cancel["params"]["requestId"] == sent["id"]
        await h.from_upstream({"jsonrpc": "2.0", "id": sent["id"], "result": {}})
        await h.from_upstream({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})
        assert (await h.at_host.message())["method"] == "notifications/message"
        assert len(outcome) == 1
        assert isinstance(outcome[0], RequestTimedOut)


async def test_an_own_request_answered_with_an_error_raises_it() -> None:
    async with _relay() as h:
        outcome = await _ask_in_background(h, {"name": "nope"}, 5)
        sent = await h.at_upstream.message()
        await h.from_upstream(
            {"jsonrpc": "2.0", "id": sent["id"], "error": {"code": -32602, "message": "Unknown tool"}}
        )
        await h.from_host({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await h.at_upstream.line()
        assert len(outcome) == 1
        assert isinstance(outcome[0], UpstreamRequestError)
        assert "Unknown tool" in str(outcome[0])


async def test_pending_host_requests_get_an_error_when_the_upstream_exits() -> None:
    async with _relay() as h:
        await h.from_host({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x"}})
        await h.from_host({"jsonrpc": "2.0", "id": "a", "method": "tools/list"})
        await h.at_upstream.line()
        await h.at_upstream.line()
        await h.relay.fail_pending("upstream exited (exit code 3)")
        answers = {(await h.at_host.message())["id"]: None, (await h.at_host.message())["id"]: None}
        assert set(answers) == {5, "a"}
        await h.from_host({"jsonrpc": "2.0", "id": 6, "method": "ping"})
        late = await h.at_host.message()
        assert late["id"] == 6
        assert late["error"]["code"] == UPSTREAM_EXITED
        assert "upstream exited" in late["error"]["message"]
        with pytest.raises(UpstreamGone):
            await h.relay.request("ping", {}, 1)


async def test_tools_list_declares_the_call_id_only_while_a_control_server_is_known() -> None:
    tools = {"tools": [{"name": "echo", "inputSchema": {"type": "object", "properties": {}}}]}
    async with _relay() as h:
        await h.from_host({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        await h.at_upstream.line()
        plain = json.dumps({"jsonrpc": "2.0", "id": 1, "result": tools}).encode()
        await h.from_upstream(plain)
        assert await h.at_host.line() == plain
        h.known[0] = True
        await h.from_host({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        await h.at_upstream.line()
        await h.from_upstream({"jsonrpc": "2.0", "id": 2, "result": tools})
        declared = (await h.at_host.message())["result"]["tools"][0]["inputSchema"]["properties"]
        assert declared[CALL_ID_KEY]["description"] == "Reserved. Leave unset."


async def test_a_call_id_is_stripped_before_the_upstream_and_joins_the_step_report() -> None:
    async with _relay() as h:
        h.known[0] = True
        await h.from_host(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "hi", CALL_ID_KEY: "call-1"}},
            }
        )
        upstream_saw = await h.at_upstream.line()
        assert CALL_ID_KEY.encode() not in upstream_saw
        assert json.loads(upstream_saw)["params"]["arguments"] == {"message": "hi"}
        assert h.steps == []
        result = {"content": [{"type": "text", "text": "Echo: hi"}]}
        await h.from_upstream({"jsonrpc": "2.0", "id": 3, "result": result})
        await h.at_host.line()
        assert len(h.steps) == 1
        step = h.steps[0]
        assert (step.tool_name, step.arguments, step.result, step.error, step.call_id) == (
            "echo",
            {"message": "hi"},
            result,
            None,
            "call-1",
        )
        assert step.duration_ms >= 0


async def test_a_call_id_is_stripped_even_with_no_control_server() -> None:
    async with _relay() as h:
        await h.from_host(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "e", "arguments": {CALL_ID_KEY: "c"}},
            }
        )
        assert json.loads(await h.at_upstream.line())["params"]["arguments"] == {}


async def test_calls_are_not_reported_without_a_control_server() -> None:
    async with _relay() as h:
        await h.from_host({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e"}})
        await h.at_upstream.line()
        await h.from_upstream({"jsonrpc": "2.0", "id": 1, "result": {}})
        await h.at_host.line()
        assert h.steps == []


async def test_a_call_the_host_cancels_is_reported_as_an_error_without_a_result() -> None:
    async with _relay() as h:
        h.known[0] = True
        await h.from_host({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "slow"}})
        await h.from_host({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}})
        await h.at_upstream.line()
        assert (await h.at_upstream.message())["method"] == "notifications/cancelled"
        assert [(s.tool_name, s.result, s.error) for s in h.steps] == [("slow", None, "cancelled by the host")]


async def test_an_upstream_error_answer_is_reported_as_the_steps_error() -> None:
    async with _relay() as h:
        h.known[0] = True
        await h.from_host({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e"}})
        await h.at_upstream.line()
        await h.from_upstream({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Unknown tool: e"}})
        await h.at_host.line()
        assert [(s.result, s.error) for s in h.steps] == [(None, "Unknown tool: e")]


async def test_the_host_initialized_notification_makes_the_relay_ready() -> None:
    async with _relay() as h:
        assert not h.relay.ready.is_set()
        await h.from_host({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await h.at_upstream.line()
        assert h.relay.ready.is_set()


async def test_own_requests_carry_the_protocol_meta_of_a_modern_host_session() -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "host", "version": "1"},
    }
    async with _relay() as h:
        await h.from_host({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}})
        await h.at_upstream.line()
        await h.from_upstream({"jsonrpc": "2.0", "id": 1, "result": {"supportedVersions": ["2026-07-28"]}})
        await h.at_host.line()
        assert h.relay.ready.is_set()
        async with anyio.create_task_group() as group:

            async def ask() -> None:
                await h.relay.request("tools/call", {"name": "t", "arguments": {}}, 5)

            group.start_soon(ask)
            sent = await h.at_upstream.message()
            assert sent["params"]["_meta"] == meta
            await h.from_upstream({"jsonrpc": "2.0", "id": sent["id"], "result": {}})


TOOLS = {"jsonrpc": "2.0", "id": 3, "result": {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}}


async def test_a_host_that_listed_tools_before_a_control_server_was_known_is_told_to_list_again() -> None:
    async with _relay() as h:
        await h.from_host({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        await h.at_upstream.line()
        await h.from_upstream(TOOLS)
        listed = await h.at_host.message()
        assert "__bir_call_id__" not in json.dumps(listed)
        h.known[0] = True
        await h.relay.control_found()
        assert await h.at_host.message() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        # Listed again, the tools now declare the call id; a second registration says nothing more.
        await h.from_host({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        await h.at_upstream.line()
        await h.from_upstream(TOOLS)
        assert "__bir_call_id__" in json.dumps(await h.at_host.message())
        await h.relay.control_found()
        assert h.at_host.nothing_buffered()


async def test_a_host_that_never_listed_tools_is_not_told_anything_when_a_control_server_appears() -> None:
    async with _relay() as h:
        h.known[0] = True
        await h.relay.control_found()
        assert h.at_host.nothing_buffered()


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


async def test_a_line_nested_too_deeply_to_read_passes_untouched_both_ways() -> None:
    async with _relay() as h:
        h.known[0] = True
        from_host = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":' + _deep(5000) + b"}}"
        )
        await h.from_host(from_host)
        assert await h.at_upstream.line() == from_host
        from_upstream = b'{"jsonrpc":"2.0","id":1,"result":{"content":' + _deep(5000) + b"}}"
        await h.from_upstream(from_upstream)
        assert await h.at_host.line() == from_upstream
        # The relay is still relaying.
        await h.from_host({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert (await h.at_upstream.message())["id"] == 2


def _with_lone_surrogate(request_id: object) -> bytes:
    text = '{"type":"text","text":"\\ud800"}'
    return ('{"jsonrpc":"2.0","id":' + json.dumps(request_id) + ',"result":{"content":[' + text + "]}}").encode()


async def test_an_own_request_whose_answer_cannot_be_read_fails_at_once() -> None:
    async with _relay() as h:

        async def answer() -> None:
            sent = await h.at_upstream.message()
            await h.from_upstream(_with_lone_surrogate(sent["id"]))

        h.group.start_soon(answer)
        with anyio.fail_after(2), pytest.raises(UpstreamRequestError, match="could not be read"):
            await h.relay.request("tools/call", {"name": "odd"}, 30)
        assert h.at_host.nothing_buffered()


async def test_a_host_call_whose_answer_cannot_be_read_reaches_the_host_and_is_reported_as_an_error() -> None:
    async with _relay() as h:
        h.known[0] = True
        await h.from_host({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "odd"}})
        await h.at_upstream.line()
        line = _with_lone_surrogate(3)
        await h.from_upstream(line)
        assert await h.at_host.line() == line
        assert [(s.tool_name, s.result) for s in h.steps] == [("odd", None)]
        assert "could not be read" in (h.steps[0].error or "")
