"""The control plane's one client against a real control server over loopback, and against peers that
misbehave (a closed port, a server that drips, one that answers too much)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from bir.hooks import api
from bir.hooks.control_client import At, ControlClient, ControlError
from bir.hooks.server.control import ControlServer
from tests.hooks.stub_session import StubSession

pytestmark = pytest.mark.anyio


@pytest.fixture
async def control() -> AsyncIterator[ControlServer]:
    server = ControlServer(token="right", replay_enabled=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_a_route_answers_with_its_own_type(control: ControlServer) -> None:
    async with ControlClient(At(control.url or "", "right")) as client:
        health = await client.call(api.HEALTH)
        registered = await client.call(
            api.PROXY_REGISTER, api.RegisterRequest(server_name="fleet", proxy_id="p-1", pid=1)
        )
    assert isinstance(health, api.Health)
    assert health.ok
    assert isinstance(registered, api.RegisterAnswer)
    assert registered.replay is True


async def test_a_wrong_token_is_refused_with_its_status(control: ControlServer) -> None:
    async with ControlClient(At(control.url or "", "wrong")) as client:
        with pytest.raises(ControlError) as refused:
            await client.call(api.HEALTH)
    assert (refused.value.kind, refused.value.status) == ("refused", 401)


async def test_a_run_answer_comes_back_typed_and_raw(control: ControlServer) -> None:
    async def runner(request: api.ScenarioRunRequest) -> api.ScenarioRunAnswer:
        return api.ScenarioRunAnswer(ok=True, text=f"ran {request.tool_use_id}", steps=1)

    control.handler = StubSession(runner=runner)
    async with ControlClient(At(control.url or "", "right")) as client:
        answer = await client.call(api.SCENARIO_RUN, api.ScenarioRunRequest(tool_use_id="toolu_1"))
        status, raw = await client.send(api.SCENARIO_RUN, api.ScenarioRunRequest(tool_use_id="toolu_2"))
    assert (answer.ok, answer.text) == (True, "ran toolu_1")
    assert status == 200
    assert api.decode(api.ScenarioRunAnswer, raw).text == "ran toolu_2"


async def test_the_servers_routes_are_exactly_the_table(control: ControlServer) -> None:
    served = {(route.path, frozenset(route.methods or ()) - {"HEAD"}) for route in control.app.routes}  # type: ignore[attr-defined]
    assert served == {(route.path, frozenset({route.method})) for route in api.ROUTES}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_closed_port_is_unreachable_at_once() -> None:
    began = time.monotonic()
    async with ControlClient(At(f"http://127.0.0.1:{free_port()}", "t")) as client:
        with pytest.raises(ControlError) as failed:
            await client.call(api.HEALTH, timeout_s=5.0)
    assert failed.value.kind == "unreachable"
    assert time.monotonic() - began < 5.0


async def raw_server(answer: Callable[[asyncio.StreamWriter], Awaitable[None]]) -> tuple[asyncio.Server, str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await answer(writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def test_a_server_that_drips_bytes_is_cut_off_at_the_total_deadline() -> None:
    async def drip(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n")
        while True:
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.05)

    server, url = await raw_server(drip)
    async with server:
        began = time.monotonic()
        async with ControlClient(At(url, "t")) as client:
            with pytest.raises(ControlError) as failed:
                await client.call(api.HEALTH, timeout_s=0.5)
        taken = time.monotonic() - began
    assert failed.value.kind == "timeout"
    assert taken < 3.0


async def test_an_answer_past_the_cap_is_refused_without_reading_it_all() -> None:
    async def flood(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n")
        chunk = b"x" * 65536
        for _ in range(160):
            writer.write(chunk)
            await writer.drain()

    server, url = await raw_server(flood)
    async with server, ControlClient(At(url, "t"), max_answer_bytes=100_000) as client:
        with pytest.raises(ControlError) as failed:
            await client.call(api.HEALTH, timeout_s=10.0)
    assert failed.value.kind == "too_large"


async def test_an_answer_that_is_not_the_routes_shape_is_unreadable() -> None:
    async def wrong(writer: asyncio.StreamWriter) -> None:
        body = b'{"ok": "yes"}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()

    server, url = await raw_server(wrong)
    async with server, ControlClient(At(url, "t")) as client:
        with pytest.raises(ControlError) as failed:
            await client.call(api.HEALTH)
    assert failed.value.kind == "unreadable"
