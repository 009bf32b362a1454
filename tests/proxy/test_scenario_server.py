"""bir-scenario over real stdio (the MCP SDK's client), against the real control server (``ControlServer``).

The control server runs in the test process; its ``scenario_runner`` plays the armed plan. Where a test
needs what the control server never does by itself (answer 500, report a dropped connection), a thin
ASGI layer wraps the real app.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client import IncomingMessage
from mcp.client.session import MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bir.core import installed
from bir.hooks.api import Hello, ScenarioRunAnswer, ScenarioRunRequest, decode, encode
from bir.hooks.discovery import write_discovery
from bir.hooks.server.control import ControlServer
from bir.hooks.server.hellos import HelloBook, SeenHello
from bir.proxy.scenario_answer import (
    ALREADY_RUNNING,
    NOT_AVAILABLE,
    NOTHING_TO_RUN,
    RUN_SCENARIO_DESCRIPTION,
)
from tests.hooks.stub_session import StubSession

Runner = Callable[[ScenarioRunRequest], Awaitable[ScenarioRunAnswer]]
Wrap = Callable[[ASGIApp], ASGIApp]

TOOL_USE_ID = "toolu_01ABCDEF"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project where replay is on (``bir install --replay`` stores it so)."""
    path = tmp_path / "project"
    path.mkdir()
    installed.update(path, replay=True)
    return path.resolve()


@asynccontextmanager
async def control_server(project: Path, wrap: Wrap | None = None) -> AsyncIterator[WatchedControlServer]:
    server = WatchedControlServer()
    if wrap is not None:
        server.app = wrap(server.app)  # type: ignore[assignment]
    await server.start()
    write_discovery(server.discovery(project))
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def bir_scenario(
    project: Path,
    errlog: Path,
    env: dict[str, str] | None = None,
    on_message: MessageHandlerFnT | None = None,
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bir.proxy.scenario_server"],
        env={"BIR_HOME": os.environ["BIR_HOME"], **(env or {})},
        cwd=project,
    )
    with errlog.open("w") as err:
        async with Client(stdio_client(params, errlog=err), mode="legacy", message_handler=on_message) as client:
            yield client


async def run_scenario(client: Client) -> types.CallToolResult:
    meta: types.RequestParamsMeta = {"claudecode/toolUseId": TOOL_USE_ID}  # type: ignore[typeddict-unknown-key]
    with anyio.fail_after(30):
        return await client.call_tool("run_scenario", {}, meta=meta)


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def events(errlog: Path, name: str) -> list[dict[str, Any]]:
    found = []
    for line in errlog.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == name:
                found.append(record)
    return found


class WatchedHellos(HelloBook):
    """The real hello book, with an event for each hello it notes."""

    def __init__(self) -> None:
        super().__init__()
        self._hello_noted = anyio.Event()

    def note(self, seen: SeenHello) -> None:
        super().note(seen)
        self._hello_noted.set()
        self._hello_noted = anyio.Event()


class WatchedControlServer(ControlServer):
    """The real control server, whose hellos a test can wait for."""

    def __init__(self) -> None:
        self.watched = WatchedHellos()
        super().__init__(hellos=self.watched)

    async def hello_where(self, condition: Callable[[Hello], bool]) -> Hello:
        """The first noted hello (earlier ones included) that meets ``condition``."""
        with anyio.fail_after(10):
            while True:
                noted = self.watched._hello_noted
                for seen in self.watched.seen.values():
                    if condition(seen.hello):
                        return seen.hello
                await noted.wait()


def fixed(answer: Mapping[str, object], seen: list[ScenarioRunRequest] | None = None) -> Runner:
    """A runner answering ``answer`` (given in its wire shape, as the spec writes it)."""
    typed = decode(ScenarioRunAnswer, encode(answer))

    async def runner(request: ScenarioRunRequest) -> ScenarioRunAnswer:
        if seen is not None:
            seen.append(request)
        return typed

    return runner


def answer_500_on_scenario_run(app: ASGIApp) -> ASGIApp:
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/scenario/run":
            await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Internal Server Error"})
            return
        await app(scope, receive, send)

    return wrapped


def report_disconnects(app: ASGIApp, disconnected: anyio.Event) -> ASGIApp:
    """After a /scenario/run body is read, listen for the client dropping the connection."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/scenario/run":
            await app(scope, receive, send)
            return
        body_read = anyio.Event()

        async def reading(message: Message) -> Message:
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_read.set()
            return message

        async def watch() -> None:
            await body_read.wait()
            if (await receive())["type"] == "http.disconnect":
                disconnected.set()

        async def app_receive() -> Message:
            return await reading(await receive())

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await app(scope, app_receive, send)
            tg.cancel_scope.cancel()

    return wrapped


# -- tools/list ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_it_lists_exactly_run_scenario_with_the_specs_definition(project: Path, tmp_path: Path) -> None:
    async with bir_scenario(project, tmp_path / "err") as client:
        listed = await client.list_tools()
        capabilities = client.server_capabilities
    assert [tool.name for tool in listed.tools] == ["run_scenario"]
    wire = listed.tools[0].model_dump(by_alias=True, mode="json", exclude_none=True)
    assert wire == {
        "name": "run_scenario",
        "description": RUN_SCENARIO_DESCRIPTION,
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    }
    assert capabilities.tools is not None
    assert capabilities.tools.list_changed is True


# -- run_scenario's answers ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_without_a_control_server_it_says_nothing_to_run_and_is_not_an_error(
    project: Path, tmp_path: Path
) -> None:
    err = tmp_path / "err"
    async with bir_scenario(project, err) as client:
        result = await run_scenario(client)
    assert result.is_error is False
    assert text_of(result) == NOTHING_TO_RUN
    assert events(err, "scenario.answered")[0]["kind"] == "no_control_server"


@pytest.mark.anyio
async def test_no_plan_says_nothing_to_run(project: Path, tmp_path: Path) -> None:
    err = tmp_path / "err"
    async with control_server(project), bir_scenario(project, err) as client:
        result = await run_scenario(client)
    assert result.is_error is False
    assert text_of(result) == NOTHING_TO_RUN
    assert events(err, "scenario.answered")[0]["reason"] == "no_plan"


@pytest.mark.anyio
async def test_a_successful_run_returns_the_bundle_text_and_forwards_the_hosts_tool_use_id(
    project: Path, tmp_path: Path
) -> None:
    bundle = '[BaseInstRunner calculated replay] Results of 2 steps:\n1. list_devices → [{"id": "dev-009"}]'
    seen: list[ScenarioRunRequest] = []
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(runner=fixed({"ok": True, "text": bundle, "responseModel": {}, "steps": 2}, seen))
        result = await run_scenario(client)
    assert result.is_error is False
    assert text_of(result) == bundle
    assert [request.tool_use_id for request in seen] == [TOOL_USE_ID]


@pytest.mark.anyio
async def test_a_hand_over_note_is_the_answer(project: Path, tmp_path: Path) -> None:
    note = "[BaseInstRunner calculated replay] The scenario stopped at step 2 (get_device failed); step 1 ran."
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(runner=fixed({"ok": False, "why": note, "note": True}))
        result = await run_scenario(client)
    assert result.is_error is False
    assert text_of(result) == note


@pytest.mark.anyio
async def test_a_second_call_is_told_to_wait_for_the_first(project: Path, tmp_path: Path) -> None:
    why = "this scenario is already running for this turn — its results come back on the first call"
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(runner=fixed({"ok": False, "why": why}))
        result = await run_scenario(client)
    assert result.is_error is False
    assert text_of(result) == ALREADY_RUNNING


@pytest.mark.anyio
async def test_a_run_that_threw_on_the_control_server_is_not_available(project: Path, tmp_path: Path) -> None:
    async def broken(request: ScenarioRunRequest) -> ScenarioRunAnswer:
        raise RuntimeError("plan exploded")

    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(runner=broken)
        result = await run_scenario(client)
    assert result.is_error is False
    assert text_of(result) == NOT_AVAILABLE


@pytest.mark.anyio
async def test_an_http_500_is_not_available_and_its_reason_is_logged(project: Path, tmp_path: Path) -> None:
    err = tmp_path / "err"
    async with control_server(project, wrap=answer_500_on_scenario_run), bir_scenario(project, err) as client:
        result = await run_scenario(client)
    assert result.is_error is False
    assert text_of(result) == NOT_AVAILABLE
    assert "HTTP 500" in events(err, "scenario.answered")[0]["reason"]


@pytest.mark.anyio
async def test_debug_mode_returns_the_raw_reason_as_an_error(project: Path, tmp_path: Path) -> None:
    env = {"BIR_SCENARIO_DEBUG": "1"}
    async with (
        control_server(project, wrap=answer_500_on_scenario_run),
        bir_scenario(project, tmp_path / "err", env) as client,
    ):
        result = await run_scenario(client)
    assert result.is_error is True
    assert "HTTP 500" in text_of(result)


@pytest.mark.anyio
async def test_a_run_past_the_timeout_is_not_available(project: Path, tmp_path: Path) -> None:
    release = anyio.Event()

    async def slow(request: ScenarioRunRequest) -> ScenarioRunAnswer:
        await release.wait()
        return ScenarioRunAnswer(ok=True, text="too late")

    env = {"BIR_SCENARIO_RUN_TIMEOUT_MS": "1000"}
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err", env) as client:
        control.handler = StubSession(runner=slow)
        result = await run_scenario(client)
        release.set()
    assert result.is_error is False
    assert text_of(result) == NOT_AVAILABLE


@pytest.mark.anyio
async def test_cancelling_the_call_aborts_the_http_request(project: Path, tmp_path: Path) -> None:
    started, disconnected, release, cancelled = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()

    async def hanging(request: ScenarioRunRequest) -> ScenarioRunAnswer:
        started.set()
        try:
            await release.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.set()  # the control server starts no further step
            raise
        return ScenarioRunAnswer(ok=True, text="never read")

    def wrap(app: ASGIApp) -> ASGIApp:
        return report_disconnects(app, disconnected)

    err = tmp_path / "err"
    async with control_server(project, wrap=wrap) as control, bir_scenario(project, err) as client:
        control.handler = StubSession(runner=hanging)
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_scenario, client)
            with anyio.fail_after(10):
                await started.wait()
            tg.cancel_scope.cancel()
        with anyio.fail_after(10):
            await disconnected.wait()
            await cancelled.wait()
        release.set()
        # The server survives the cancellation and answers the next call.
        control.handler = StubSession(runner=fixed({"ok": False, "why": "no_plan"}))
        after = await run_scenario(client)
    assert text_of(after) == NOTHING_TO_RUN
    assert events(err, "scenario.answered")[0]["kind"] == "cancelled"


# -- it says it is there ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_it_says_hello_to_the_control_server_on_initialize(project: Path, tmp_path: Path) -> None:
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err"):
        hello = await control.hello_where(lambda _: True)
        assert control.hellos.delivery_tool_live()
    assert hello.tools == 1
    assert hello.off is False
    assert hello.version
    assert hello.pid != os.getpid()


@pytest.mark.anyio
async def test_bir_off_lists_no_tools_and_runs_nothing(project: Path, tmp_path: Path) -> None:
    seen: list[ScenarioRunRequest] = []
    env = {"BIR_OFF": "1"}
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err", env) as client:
        control.handler = StubSession(runner=fixed({"ok": True, "text": "should not run"}, seen))
        listed = await client.list_tools()
        result = await run_scenario(client)
        hello = await control.hello_where(lambda _: True)
        assert not control.hellos.delivery_tool_live()
    assert listed.tools == []
    assert text_of(result) == NOTHING_TO_RUN
    assert seen == []
    assert (hello.tools, hello.off) == (0, True)


@pytest.mark.anyio
async def test_flipping_the_off_file_changes_the_tool_list_and_tells_the_client(project: Path, tmp_path: Path) -> None:
    changes: list[anyio.Event] = [anyio.Event(), anyio.Event()]

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            next(event for event in changes if not event.is_set()).set()

    off = Path(os.environ["BIR_HOME"]) / "off"
    async with (
        control_server(project) as control,
        bir_scenario(project, tmp_path / "err", on_message=on_message) as client,
    ):
        assert [tool.name for tool in (await client.list_tools()).tools] == ["run_scenario"]
        off.touch()
        with anyio.fail_after(10):
            await changes[0].wait()
        assert (await client.list_tools()).tools == []
        await control.hello_where(lambda hello: hello.off)
        off.unlink()
        with anyio.fail_after(10):
            await changes[1].wait()
        assert [tool.name for tool in (await client.list_tools()).tools] == ["run_scenario"]


@pytest.mark.anyio
async def test_with_replay_off_it_lists_no_tools_and_turning_replay_on_lists_run_scenario(
    project: Path, tmp_path: Path
) -> None:
    installed.update(project, replay=False)
    changed = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with (
        control_server(project) as control,
        bir_scenario(project, tmp_path / "err", on_message=on_message) as client,
    ):
        assert (await client.list_tools()).tools == []
        hello = await control.hello_where(lambda _: True)
        assert (hello.tools, hello.off) == (0, False)
        assert not control.hellos.delivery_tool_live()
        installed.update(project, replay=True)  # `bir replay on`, mid-session
        with anyio.fail_after(10):
            await changed.wait()
        assert [tool.name for tool in (await client.list_tools()).tools] == ["run_scenario"]
        await control.hello_where(lambda hello: hello.tools == 1)


@pytest.mark.anyio
async def test_the_project_option_picks_the_control_server(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bir.proxy.scenario_server", "--project", str(project)],
        env={"BIR_HOME": os.environ["BIR_HOME"]},
        cwd=elsewhere,
    )
    async with control_server(project) as control:
        control.handler = StubSession(runner=fixed({"ok": True, "text": "ran for the project"}))
        with (tmp_path / "err").open("w") as err:
            async with Client(stdio_client(params, errlog=err), mode="legacy") as client:
                result = await run_scenario(client)
    assert text_of(result) == "ran for the project"


@pytest.mark.anyio
async def test_a_bad_setting_exits_with_one_clear_line(project: Path, tmp_path: Path) -> None:
    env = {**os.environ, "BIR_SCENARIO_RUN_TIMEOUT_MS": "soon"}
    done = await anyio.run_process(
        [sys.executable, "-m", "bir.proxy.scenario_server"], env=env, cwd=project, check=False
    )
    assert done.returncode == 2
    (line,) = done.stderr.decode().splitlines()
    assert json.loads(line)["event"] == "scenario.config_error"
    assert "BIR_SCENARIO_RUN_TIMEOUT_MS" in line
