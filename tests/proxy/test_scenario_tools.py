"""The scenario tools of a real ``bir-scenario`` process, driven by the MCP SDK's client over stdio (spec §16.5).

Each call runs the real ``bir … --json`` against the fake BaseIn over real HTTP; the editing switch is the
real installed-projects store, flipped while the server runs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import psutil
import pytest
from mcp import Client
from mcp.client import IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client

from bir.core import installed
from bir.core.housekeeping import is_housekeeping
from bir.proxy.scenario_tools import CHANGE_TOOLS, EDITING_OFF, NOTHING_TO_READ, OFF_REFUSED, READ_TOOLS
from tests.fakes.baseinsvc import FakeBaseIn
from tests.fakes.fixtures import running_fake_service
from tests.paths import SCENARIOS

SCN = "scn_fleet_direct"
CALL_TIMEOUT_S = 60


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project where replay is on, so ``run_scenario`` is listed beside the scenario tools."""
    path = tmp_path / "project"
    path.mkdir()
    installed.update(path, replay=True)
    return path.resolve()


def scenario() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCENARIOS / "fleet-direct.json").read_text(encoding="utf-8"))
    return data


@asynccontextmanager
async def fake_service() -> AsyncIterator[FakeBaseIn]:
    fake = FakeBaseIn()
    fake.add_owned_run("run_fleet", scenario())
    async with running_fake_service(fake) as running:
        yield running


@asynccontextmanager
async def bir_scenario(
    project: Path,
    errlog: Path,
    fake: FakeBaseIn | None = None,
    env: dict[str, str] | None = None,
    changes: list[anyio.Event] | None = None,
) -> AsyncIterator[Client]:
    async def on_message(message: IncomingMessage) -> None:
        if changes is not None and isinstance(message, types.ToolListChangedNotification):
            next(event for event in changes if not event.is_set()).set()

    service = {} if fake is None else {"BIR_AUTH_URL": fake.url, "BIR_TOKEN": fake.token}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bir.proxy.scenario_server"],
        env={"BIR_HOME": os.environ["BIR_HOME"], **service, **(env or {})},
        cwd=project,
    )
    with errlog.open("w") as err:
        async with Client(stdio_client(params, errlog=err), mode="legacy", message_handler=on_message) as client:
            yield client


async def call(client: Client, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    with anyio.fail_after(CALL_TIMEOUT_S):
        return await client.call_tool(name, arguments)


def text_of(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


async def listed(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


def events(errlog: Path, name: str) -> list[dict[str, Any]]:
    found = []
    for line in errlog.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("event") == name:
                found.append(record)
    return found


def tmp_root() -> Path:
    return Path(os.environ["BIR_HOME"]) / "tmp" / "scenario-tools"


# -- what is listed ------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_list_follows_the_editing_switch_without_a_restart(project: Path, tmp_path: Path) -> None:
    changes = [anyio.Event(), anyio.Event()]
    installed.update(project)
    async with bir_scenario(project, tmp_path / "err", changes=changes) as client:
        assert await listed(client) == ["run_scenario"]
        installed.update(project, editing=True)
        with anyio.fail_after(10):
            await changes[0].wait()
        assert await listed(client) == ["run_scenario", *READ_TOOLS, *CHANGE_TOOLS]
        installed.update(project, editing=False)
        with anyio.fail_after(10):
            await changes[1].wait()
        assert await listed(client) == ["run_scenario"]


@pytest.mark.anyio
async def test_scenario_tools_read_lists_only_the_reading_tools(project: Path, tmp_path: Path) -> None:
    async with bir_scenario(project, tmp_path / "err", env={"BIR_SCENARIO_TOOLS": "read"}) as client:
        assert await listed(client) == ["run_scenario", *READ_TOOLS]


# -- calls -------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_reading_tool_answers_unlisted_with_the_services_body(project: Path, tmp_path: Path) -> None:
    async with fake_service() as fake, bir_scenario(project, tmp_path / "err", fake) as client:
        result = await call(client, "scenario_show", {"target": "run_fleet", "step": 1})
    assert not result.is_error
    step = json.loads(text_of(result))
    assert (step["scenarioId"], step["chainRevision"], step["toolName"]) == (SCN, 1, "mcp__fleet__get_device")


@pytest.mark.anyio
async def test_a_reading_tools_answer_is_capped(project: Path, tmp_path: Path) -> None:
    env = {"BIR_SCENARIO_MAX_OUTPUT_CHARS": "1000"}
    async with fake_service() as fake, bir_scenario(project, tmp_path / "err", fake, env) as client:
        fake.scenarios[SCN]["intent"] = "x" * 5000
        result = await call(client, "investigate", {"id": SCN})
    text = text_of(result)
    assert len(text) == 1000
    assert text.endswith("more characters cut]")


@pytest.mark.anyio
async def test_a_changing_tool_is_refused_while_editing_is_off(project: Path, tmp_path: Path) -> None:
    async with fake_service() as fake, bir_scenario(project, tmp_path / "err", fake) as client:
        result = await call(client, "scenario_check", {"target": SCN, "step": 1, "inputLogic": "return {};"})
    assert result.is_error
    assert text_of(result) == EDITING_OFF
    assert fake.requests == []


@pytest.mark.anyio
async def test_an_edit_sends_its_logic_through_a_file_and_a_refusal_carries_the_report(
    project: Path, tmp_path: Path
) -> None:
    installed.update(project, editing=True)
    body = "return { id: 'it''s \"quoted\" $(not run)' };".replace("''", "\\'")
    async with fake_service() as fake, bir_scenario(project, tmp_path / "err", fake) as client:
        fake.check_problems[(SCN, 1)] = [{"code": "not_reproduced", "message": "another device"}]
        refused = await call(client, "scenario_edit", {"target": SCN, "step": 1, "inputLogic": body})
        forced = await call(
            client, "scenario_edit", {"target": SCN, "step": 1, "inputLogic": body, "force": True, "note": "on purpose"}
        )
        undone = await call(client, "scenario_undo", {"target": SCN})
    assert refused.is_error
    report = json.loads(text_of(refused).split("\n\n")[0])
    assert report["error"] == "check_failed"
    assert report["report"]["problems"][0]["code"] == "not_reproduced"
    assert not forced.is_error
    assert json.loads(text_of(forced))["forced"] is True
    assert [r.body["inputLogic"] for r in fake.requests_to("save")] == [body, body]
    assert json.loads(text_of(undone))["undone"] == "sedit_0"
    assert list(tmp_root().iterdir()) == []


@pytest.mark.anyio
async def test_while_off_reading_finds_nothing_and_changing_is_refused(project: Path, tmp_path: Path) -> None:
    installed.update(project, editing=True)
    env = {"BIR_OFF": "1"}
    async with fake_service() as fake, bir_scenario(project, tmp_path / "err", fake, env) as client:
        assert await listed(client) == []
        read = await call(client, "scenario_edits", {"target": SCN})
        change = await call(client, "scenario_undo", {"target": SCN})
    assert (text_of(read), read.is_error) == (NOTHING_TO_READ, False)
    assert (text_of(change), change.is_error) == (OFF_REFUSED, True)
    assert fake.requests == []


@pytest.mark.anyio
async def test_a_cancelled_call_leaves_no_process_and_no_temp_file(project: Path, tmp_path: Path) -> None:
    installed.update(project, editing=True)
    err = tmp_path / "err"
    async with fake_service() as fake, bir_scenario(project, err, fake) as client:
        fake.route_latency_s["check"] = float("inf")
        arguments = {"target": SCN, "step": 1, "inputLogic": "return { id: 'd1' };"}
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, client, "scenario_check", arguments)
            with anyio.fail_after(CALL_TIMEOUT_S):
                while not fake.requests_to("check"):  # noqa: ASYNC110 - the request comes from another process
                    await anyio.sleep(0.05)
            (started,) = events(err, "scenario.tool_started")
            assert any(tmp_root().iterdir())
            tg.cancel_scope.cancel()
        with anyio.fail_after(10):
            while not events(err, "scenario.tool_answered"):  # noqa: ASYNC110 - the line comes from another process
                await anyio.sleep(0.05)
        # The server lives on and answers the next call.
        after = await call(client, "scenario_edits", {"target": SCN})
    assert events(err, "scenario.tool_answered")[0]["kind"] == "cancelled"
    assert not psutil.pid_exists(started["pid"])
    assert list(tmp_root().iterdir()) == []
    assert not after.is_error


def test_every_scenario_tool_the_server_offers_is_housekeeping() -> None:
    for name in (*READ_TOOLS, *CHANGE_TOOLS):
        assert is_housekeeping(f"mcp__bir__{name}", {"target": SCN})


def rpc(message_id: int | None, method: str, params: dict[str, Any]) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if message_id is not None:
        message["id"] = message_id
    return json.dumps(message).encode() + b"\n"


@pytest.mark.anyio
async def test_a_call_left_behind_when_the_host_exits_has_its_bir_stopped_and_files_removed(
    project: Path, tmp_path: Path
) -> None:
    installed.update(project, editing=True)
    err = tmp_path / "err"
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
    arguments = {"target": SCN, "step": 1, "inputLogic": "return { id: 'd1' };"}
    async with fake_service() as fake:
        fake.route_latency_s["save"] = float("inf")
        env = {**os.environ, "BIR_AUTH_URL": fake.url, "BIR_TOKEN": fake.token}
        with err.open("wb") as errlog:
            server = await anyio.open_process(
                [sys.executable, "-m", "bir.proxy.scenario_server"], env=env, cwd=project, stderr=errlog
            )
            async with server:
                assert server.stdin is not None
                await server.stdin.send(rpc(1, "initialize", hello))
                await server.stdin.send(rpc(None, "notifications/initialized", {}))
                await server.stdin.send(rpc(2, "tools/call", {"name": "scenario_edit", "arguments": arguments}))
                with anyio.fail_after(CALL_TIMEOUT_S):
                    while not fake.requests_to("save"):  # noqa: ASYNC110 - the request comes from another process
                        await anyio.sleep(0.05)
                (started,) = events(err, "scenario.tool_started")
                # The host leaves without cancelling: its end of stdin closes.
                await server.stdin.aclose()
                with anyio.fail_after(10):
                    await server.wait()
    assert not psutil.pid_exists(started["pid"])
    assert list(tmp_root().iterdir()) == []
