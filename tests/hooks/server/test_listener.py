"""The control server's connections: idle, slow or untrusted ones never starve a hook or a proxy."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from bir.hooks import api
from bir.hooks.discovery import write_discovery
from bir.hooks.server.control import ControlServer
from bir.hooks.server.listener import MAX_UNTRUSTED, REQUEST_READ_S, SPEAK_GRACE_S
from bir.proxy.control_client import ProxyLink
from tests.hooks.stub_session import StubSession

pytestmark = pytest.mark.anyio

HOOK = str(Path(sys.executable).parent / "bir-hook")
IDLE = 600


@dataclass(frozen=True)
class _Endpoint:
    url: str
    token: str


class _Answers:
    async def handle(self, event: str, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        return api.HookAnswer(api.HookSpecificOutput(hook_event_name=event, additional_context="answered"))

    def overdue(self, event: str, hook: api.HookInput) -> api.HookAnswer:
        return api.EMPTY_HOOK_ANSWER


@pytest.fixture
async def server() -> AsyncIterator[ControlServer]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * IDLE:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * IDLE), hard))
    control = ControlServer(handler=StubSession(hooks=_Answers()), replay_enabled=True)
    await control.start()
    try:
        yield control
    finally:
        await control.stop()


def _address(server: ControlServer) -> tuple[str, int]:
    assert server.url is not None
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    return host, int(port)


async def _closed_by_the_server(stream: anyio.abc.SocketStream) -> bool:
    try:
        data = await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        return True
    return data == b""


async def test_six_hundred_idle_connections_never_starve_hooks_or_proxies(
    server: ControlServer, tmp_path: Path
) -> None:
    host, port = _address(server)
    idle = [await anyio.connect_tcp(host, port) for _ in range(IDLE)]
    slow = await anyio.connect_tcp(host, port)
    await slow.send(b"POST /tool/pre HTTP/1.1\r\nHost: ")
    try:
        # A hook, as Claude Code runs it.
        project = tmp_path / "project"
        project.mkdir()
        write_discovery(server.discovery(project))
        env = {**os.environ, "CLAUDE_PROJECT_DIR": str(project)}
        body = json.dumps({"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Bash"}).encode()
        with anyio.fail_after(20):
            done = await anyio.run_process([HOOK, "PreToolUse"], input=body, env=env, check=False)
        assert json.loads(done.stdout) == {
            "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "answered"}
        }
        # A proxy, through its own client: registers, polls, reports a step.
        proxy = ProxyLink(_Endpoint(server.url or "", server.token), server_name="fleet", proxy_id="fleet#1")
        try:
            with anyio.fail_after(20):
                assert (await proxy.register()).replay is True
                assert (await proxy.poll(100)).work is None
                await proxy.step(api.StepReport(server_name="fleet", tool_name="t", arguments={}, duration_ms=1.0))
        finally:
            await proxy.aclose()
        assert len(server.step_reports()) == 1
        # The oldest connections without the token made room once their grace to speak was over; the rest
        # are held to the read deadline.
        with anyio.fail_after(SPEAK_GRACE_S + 10):
            while server.connections.untrusted > MAX_UNTRUSTED:  # noqa: ASYNC110 - the server sweeps meanwhile
                await anyio.sleep(0.01)
        assert server.connections.dropped["evicted"] >= IDLE - MAX_UNTRUSTED
        with anyio.fail_after(REQUEST_READ_S + 10):
            assert await _closed_by_the_server(idle[-1])
            assert await _closed_by_the_server(slow)
        assert server.connections.dropped["slow"] >= 1
    finally:
        for stream in [*idle, slow]:
            await stream.aclose()


async def test_a_request_trickled_byte_by_byte_is_cut_at_the_deadline(server: ControlServer) -> None:
    host, port = _address(server)
    stream = await anyio.connect_tcp(host, port)
    started = time.monotonic()
    request = f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {server.token}\r\n"
    try:
        with anyio.fail_after(REQUEST_READ_S + 10):
            for byte in request.encode():
                try:
                    await stream.send(bytes([byte]))
                except (anyio.BrokenResourceError, ConnectionResetError):
                    break
                with anyio.move_on_after(0.05):
                    if await _closed_by_the_server(stream):
                        break
            else:
                assert await _closed_by_the_server(stream)
    finally:
        await stream.aclose()
    assert time.monotonic() - started < REQUEST_READ_S + 5
    async with httpx.AsyncClient(trust_env=False) as http:
        health = await http.get(f"{server.url}/health", headers={"Authorization": f"Bearer {server.token}"})
    assert health.status_code == 200


async def test_a_connection_that_showed_the_token_is_never_evicted(server: ControlServer) -> None:
    assert server.url is not None
    host, port = _address(server)
    async with httpx.AsyncClient(base_url=server.url, trust_env=False) as http:
        auth = {"Authorization": f"Bearer {server.token}"}
        assert (await http.get("/health", headers=auth)).status_code == 200
        idle = [await anyio.connect_tcp(host, port) for _ in range(MAX_UNTRUSTED + 50)]
        try:
            with anyio.fail_after(10):
                while server.connections.dropped["evicted"] < 50:  # noqa: ASYNC110 - the server accepts meanwhile
                    await anyio.sleep(0.01)
            # Only the idle ones made room: the connection that showed the token was not among them.
            assert server.connections.dropped["evicted"] == 50
            assert (await http.get("/health", headers=auth)).status_code == 200
        finally:
            for stream in idle:
                await stream.aclose()


# Another process that opens connections in a loop without a byte, holding the newest few hundred and
# closing the oldest: a churn that keeps the server past its limit of connections without the token.
CHURN = """
import collections, socket, sys
host, port, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = collections.deque()
while True:
    try:
        held.append(socket.create_connection((host, port)))
    except OSError:
        continue
    if len(held) > hold:
        held.popleft().close()
"""


async def test_a_churning_flood_without_the_token_never_costs_a_hook_its_request(server: ControlServer) -> None:
    assert server.url is not None
    host, port = _address(server)
    flood = await anyio.open_process([sys.executable, "-c", CHURN, host, str(port), str(MAX_UNTRUSTED + 150)])
    try:
        with anyio.fail_after(60):
            while server.connections.dropped["evicted"] == 0:  # noqa: ASYNC110 - the flood meanwhile
                await anyio.sleep(0.01)
        # Each request on a connection of its own, as every bir-hook process makes one.
        limits = httpx.Limits(max_keepalive_connections=0)
        auth = {"Authorization": f"Bearer {server.token}"}
        body = {"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Bash"}
        failed: list[str] = []
        busiest = 0
        async with httpx.AsyncClient(base_url=server.url, limits=limits, trust_env=False) as http:
            for _ in range(150):
                try:
                    answer = await http.post("/tool/pre", json=body, headers=auth)
                    if answer.status_code != 200:
                        failed.append(f"HTTP {answer.status_code}")
                except httpx.HTTPError as exc:
                    failed.append(type(exc).__name__)
                busiest = max(busiest, server.connections.untrusted)
        evicted = server.connections.dropped["evicted"]
    finally:
        flood.kill()
        await flood.wait()
    assert failed == []
    # The flood kept the server past its limit meanwhile, and connections were evicted for it.
    assert busiest > MAX_UNTRUSTED
    assert evicted > 0
