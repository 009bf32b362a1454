"""``bir-proxy`` between real MCP peers: the official SDK client on one side, real servers on the other.

The servers are installed once under ``<repo>/.peers/`` (gitignored, see ``tests/peers.py``):
``@modelcontextprotocol/server-everything`` from npm and ``mcp-server-time`` from PyPI, in a venv of
its own. A test whose server cannot be installed (no registry) fails, and says why.
Where a test must see what the upstream itself received, the upstream command is wrapped in
``tee``, which copies the upstream's stdin to a file on the way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from anyio.abc import Process
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from bir.hooks.api import CALL_ID_KEY
from bir.hooks.discovery import write_discovery
from bir.hooks.server.control import ControlServer
from bir.hooks.server.work_queue import ProxyCallError, StepTimeoutError
from tests.paths import REPO
from tests.peers import PEERS, npm_install, pip_install

pytestmark = pytest.mark.anyio

EVERYTHING_VERSION = "2026.8.31"
TIME_VERSION = "2026.10.19"


# -- the peers ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def everything() -> list[str]:
    """The command of server-everything (stdio), installed from npm on first use."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: cannot run @modelcontextprotocol/server-everything")
    prefix = PEERS / f"npm-{EVERYTHING_VERSION}"
    entry = prefix / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    npm_install(prefix, f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}", entry)
    return [node, str(entry), "stdio"]


@pytest.fixture(scope="session")
def time_server() -> list[str]:
    """The command of mcp-server-time, installed from PyPI into its own venv on first use."""
    return [str(pip_install(PEERS / f"time-{TIME_VERSION}", f"mcp-server-time=={TIME_VERSION}", "mcp-server-time"))]


def _proxied(command: list[str], *options: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "bir.proxy", *options, "--", *command],
        env={"BIR_HOME": os.environ["BIR_HOME"]},
        cwd=str(REPO),
    )


def _direct(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:])


def _tapped(command: list[str], log: Path) -> list[str]:
    """The same upstream, with everything it is sent copied to ``log``."""
    return ["/bin/sh", "-c", 'tee -a "$0" | exec "$@"', str(log), *command]


def _sent_upstream(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_bytes().splitlines() if line.strip()]


async def _until(condition: Callable[[], bool], within: float = 15) -> None:
    """Wait for a condition another process makes true (a file written, a registration)."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - the change happens in another process
            await anyio.sleep(0.02)


# -- with and without the proxy -------------------------------------------------------------------


async def _listing_and_calls(params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    with anyio.fail_after(60):
        async with Client(params) as client:
            tools = await client.list_tools()
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            return (
                client.protocol_version,
                tools.model_dump(mode="json"),
                [r.model_dump(mode="json") for r in results],
            )


async def test_server_everything_lists_and_calls_the_same_through_the_proxy(everything: list[str]) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get-sum", {"a": 2, "b": 40}),
        ("echo", {"message": "héllo ✓"}),
        ("get-annotated-message", {"messageType": "success"}),
    ]
    direct = await _listing_and_calls(_direct(everything), calls)
    proxied = await _listing_and_calls(_proxied(everything), calls)
    assert proxied == direct
    assert CALL_ID_KEY not in json.dumps(proxied[1])  # no control server: a plain relay


async def test_mcp_server_time_lists_and_calls_the_same_through_the_proxy(time_server: list[str]) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
    ]
    direct = await _listing_and_calls(_direct(time_server), calls)
    proxied = await _listing_and_calls(_proxied(time_server), calls)
    assert proxied == direct
    assert direct[0] == "2026-07-28"  # a modern, handshake-free session: server/discover went through


async def test_a_two_megabyte_message_passes_intact(everything: list[str]) -> None:
    message = "".join(chr(0x41 + i % 26) for i in range(2 * 1024 * 1024 - 7)) + "ünï✓"
    with anyio.fail_after(60):
        async with Client(_proxied(everything)) as client:
            result = await client.call_tool("echo", {"message": message})
    text = result.content[0].model_dump()["text"]
    assert text == f"Echo: {message}"


async def test_a_call_the_client_cancels_is_cancelled_upstream(everything: list[str], tmp_path: Path) -> None:
    log = tmp_path / "upstream-stdin.jsonl"
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    with anyio.fail_after(60):
        async with Client(_proxied(_tapped(everything, log))) as client:
            async with anyio.create_task_group() as group:

                async def long_call() -> None:
                    await client.call_tool(
                        "trigger-long-running-operation", {"duration": 30, "steps": 60}, progress_callback=on_progress
                    )

                group.start_soon(long_call)
                await progressed.wait()  # the upstream is inside the call
                group.cancel_scope.cancel()
            # The session is still usable after the cancellation.
            after = await client.call_tool("get-sum", {"a": 1, "b": 1})
    assert after.content[0].model_dump()["text"].endswith("2.")

    def cancelled_upstream() -> bool:
        sent = _sent_upstream(log)
        calls = [m["id"] for m in sent if m.get("method") == "tools/call"]
        cancels = [m["params"]["requestId"] for m in sent if m.get("method") == "notifications/cancelled"]
        return bool(calls) and calls[0] in cancels

    await _until(cancelled_upstream)


# -- the raw wire: exits and signals --------------------------------------------------------------


class _Wire:
    """A host that speaks raw JSON-RPC lines to a ``bir-proxy`` process."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []
        self._arrived = anyio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(message).encode() + b"\n")

    async def read_all(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self.messages.append(json.loads(line))
                self._arrived.set()
                self._arrived = anyio.Event()

    async def answer(self, request_id: object, within: float = 20) -> dict[str, Any]:
        with anyio.fail_after(within):
            while True:
                for message in self.messages:
                    if message.get("id") == request_id and "method" not in message:
                        return message
                await self._arrived.wait()

    async def initialize(self) -> None:
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert "result" in await self.answer(0)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def upstream(self) -> psutil.Process:
        children = psutil.Process(self.process.pid).children(recursive=True)
        assert len(children) == 1
        return children[0]

    def upstream_launcher(self) -> psutil.Process:
        children = psutil.Process(self.process.pid).children()
        assert len(children) == 1
        return children[0]

    async def exit_code(self, within: float = 15) -> int:
        with anyio.fail_after(within):
            return await self.process.wait()


@asynccontextmanager
async def _raw_proxy(command: list[str], *options: str) -> AsyncIterator[_Wire]:
    process = await anyio.open_process(
        [sys.executable, "-m", "bir.proxy", *options, "--", *command], stderr=None, cwd=str(REPO)
    )
    wire = _Wire(process)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(wire.read_all)
            yield wire
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()


async def test_an_unknown_probe_gets_an_error_answer_not_silence(everything: list[str]) -> None:
    async with _raw_proxy(everything) as wire:
        await wire.send({"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}})
        answer = await wire.answer(0)
        assert answer["error"]["code"] == -32601


async def test_the_upstream_dying_answers_pending_requests_and_the_proxy_exits(everything: list[str]) -> None:
    async with _raw_proxy(everything) as wire:
        await wire.initialize()
        await wire.send(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 60, "steps": 1}},
            }
        )
        await wire.send({"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
        assert "result" in await wire.answer(8)  # the call is in flight upstream by now
        upstream = wire.upstream()
        upstream.kill()
        answer = await wire.answer(7)
        assert answer["error"]["code"] == -32000
        assert "upstream exited" in answer["error"]["message"]
        assert await wire.exit_code() == 128 + signal.SIGKILL


async def test_a_signal_to_the_proxy_reaches_the_upstream(everything: list[str]) -> None:
    async with _raw_proxy(everything) as wire:
        await wire.initialize()
        upstream = wire.upstream()
        wire.process.send_signal(signal.SIGTERM)
        assert await wire.exit_code() == 128 + signal.SIGTERM  # the upstream died of the SIGTERM itself
        assert not upstream.is_running()


async def test_closing_the_proxys_stdin_stops_the_upstream(everything: list[str]) -> None:
    async with _raw_proxy(everything) as wire:
        await wire.initialize()
        upstream = wire.upstream()
        assert wire.process.stdin is not None
        await wire.process.stdin.aclose()
        assert await wire.exit_code() == 0
        assert not upstream.is_running()


async def test_a_launcher_that_ignores_eof_and_sigterm_is_killed_within_the_bound(everything: list[str]) -> None:
    # A launcher shell that outlives its server and ignores SIGTERM: only SIGKILL ends it.
    stubborn = ["/bin/sh", "-c", 'trap "" TERM; "$@"; while :; do sleep 1; done', "sh", *everything]
    async with _raw_proxy(stubborn) as wire:
        await wire.initialize()
        launcher = wire.upstream_launcher()
        assert wire.process.stdin is not None
        await wire.process.stdin.aclose()
        assert await wire.exit_code(within=20) == 128 + signal.SIGKILL
        assert not launcher.is_running()


async def test_a_missing_upstream_command_exits_with_a_clear_status(tmp_path: Path) -> None:
    async with _raw_proxy([str(tmp_path / "no-such-server")]) as wire:
        assert await wire.exit_code() == 127


# -- with a control server ------------------------------------------------------------------------


@asynccontextmanager
async def _control(project: Path) -> AsyncIterator[ControlServer]:
    server = ControlServer(replay_enabled=True)
    await server.start()
    try:
        write_discovery(server.discovery(project))
        yield server
    finally:
        await server.stop()


async def test_with_a_control_server_the_call_id_is_declared_stripped_and_reported(
    everything: list[str], tmp_path: Path
) -> None:
    log = tmp_path / "upstream-stdin.jsonl"
    options = ("--server-name", "everything", "--project", str(tmp_path))
    async with _control(tmp_path) as control:
        with anyio.fail_after(60):
            async with Client(_proxied(_tapped(everything, log), *options)) as client:
                await _until(lambda: control.queue.is_served("everything"))
                tools = await client.list_tools()
                echo = next(t for t in tools.tools if t.name == "echo")
                assert echo.input_schema["properties"][CALL_ID_KEY] == {
                    "type": "string",
                    "description": "Reserved. Leave unset.",
                }
                assert echo.input_schema.get("additionalProperties") is None
                result = await client.call_tool("echo", {"message": "hi", CALL_ID_KEY: "call-42"})
                assert result.content[0].model_dump()["text"] == "Echo: hi"
                await _until(lambda: any(r.report.call_id == "call-42" for r in control.step_reports()))
    report = next(r.report for r in control.step_reports() if r.report.call_id == "call-42")
    assert (report.server_name, report.tool_name, report.arguments, report.error) == (
        "everything",
        "echo",
        {"message": "hi"},
        None,
    )
    assert report.result == {"content": [{"type": "text", "text": "Echo: hi"}]}
    assert CALL_ID_KEY not in log.read_text()


async def test_work_from_the_control_server_runs_on_the_upstream_and_stays_off_the_host(
    everything: list[str], tmp_path: Path
) -> None:
    options = ("--server-name", "everything", "--project", str(tmp_path))
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async with _control(tmp_path) as control:
        with anyio.fail_after(60):
            async with Client(_proxied(everything, *options), message_handler=on_message) as client:
                await _until(lambda: control.queue.is_served("everything"))
                result = await control.queue.call("everything", "get-sum", {"a": 20, "b": 22}, timeout_s=20)
                # The host session goes on undisturbed beside it.
                assert (await client.call_tool("echo", {"message": "still here"})).content
    assert isinstance(result, dict)
    assert result["content"][0]["text"].endswith("42.")
    assert "bir:" not in repr(seen)


async def test_a_step_past_its_budget_is_cancelled_upstream_before_the_control_server_gives_up(
    everything: list[str], tmp_path: Path
) -> None:
    log = tmp_path / "upstream-stdin.jsonl"
    options = ("--server-name", "everything", "--project", str(tmp_path))
    async with _control(tmp_path) as control:
        with anyio.fail_after(60):
            async with Client(_proxied(_tapped(everything, log), *options)):
                await _until(lambda: control.queue.is_served("everything"))
                with pytest.raises((ProxyCallError, StepTimeoutError)):
                    await control.queue.call(
                        "everything", "trigger-long-running-operation", {"duration": 20, "steps": 2}, timeout_s=2
                    )

                def cancelled() -> bool:
                    sent = _sent_upstream(log)
                    own = [m["id"] for m in sent if m.get("method") == "tools/call" and str(m["id"]).startswith("bir:")]
                    cancels = [m["params"]["requestId"] for m in sent if m.get("method") == "notifications/cancelled"]
                    return bool(own) and own[0] in cancels

                await _until(cancelled)


async def test_a_proxy_that_finds_a_control_server_after_the_host_listed_its_tools_says_they_changed(
    everything: list[str], tmp_path: Path
) -> None:
    async with _raw_proxy(everything, "--server-name", "everything", "--project", str(tmp_path)) as wire:
        await wire.initialize()
        await wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        listed = await wire.answer(1)
        assert CALL_ID_KEY not in json.dumps(listed)
        async with _control(tmp_path) as control:
            await _until(lambda: control.queue.is_served("everything"))
            await _until(lambda: any(m.get("method") == "notifications/tools/list_changed" for m in wire.messages))
            await wire.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            assert CALL_ID_KEY in json.dumps(await wire.answer(2))
