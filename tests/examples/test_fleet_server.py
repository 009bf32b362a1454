"""The demo upstream, driven over real stdio with the MCP SDK's client, as bir-proxy would drive it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

FLEET_SERVER = Path(__file__).resolve().parents[2] / "examples" / "fleet_server.py"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def fleet(stderr_path: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=[str(FLEET_SERVER)])
    with stderr_path.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def wait_for_event(path: Path, event: str) -> dict[str, Any]:
    """The first JSON line on the server's stderr whose event is ``event``."""
    with anyio.fail_after(10):
        while True:
            for line in (await anyio.Path(path).read_text()).splitlines():
                if line.startswith("{") and json.loads(line).get("event") == event:
                    record: dict[str, Any] = json.loads(line)
                    return record
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_it_lists_the_three_tools_the_fixture_scenarios_call(tmp_path: Path) -> None:
    async with fleet(tmp_path / "err") as client:
        listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"list_devices", "get_device", "slow_echo"}
    assert tools["list_devices"].input_schema["required"] == ["region"]
    assert set(tools["list_devices"].input_schema["properties"]) == {"region", "limit"}
    assert tools["get_device"].input_schema["required"] == ["id"]


@pytest.mark.anyio
async def test_list_devices_answers_a_json_array_of_id_name_and_distinct_risks(tmp_path: Path) -> None:
    async with fleet(tmp_path / "err") as client:
        result = await client.call_tool("list_devices", {"region": "eu-west-1"})
    assert result.is_error is False
    rows = json.loads(text_of(result))
    assert len(rows) >= 5
    assert all(set(row) == {"id", "name", "risk"} for row in rows)
    risks = [row["risk"] for row in rows]
    assert len(set(risks)) == len(risks)


@pytest.mark.anyio
async def test_list_devices_is_deterministic_and_honours_the_limit(tmp_path: Path) -> None:
    async with fleet(tmp_path / "err") as client:
        first = await client.call_tool("list_devices", {"region": "us-east-1"})
        again = await client.call_tool("list_devices", {"region": "us-east-1"})
        limited = await client.call_tool("list_devices", {"region": "us-east-1", "limit": 2})
    assert text_of(first) == text_of(again)
    assert json.loads(text_of(limited)) == json.loads(text_of(first))[:2]


@pytest.mark.anyio
async def test_an_unknown_region_lists_no_devices(tmp_path: Path) -> None:
    async with fleet(tmp_path / "err") as client:
        result = await client.call_tool("list_devices", {"region": "mars-north-1"})
    assert result.is_error is False
    assert json.loads(text_of(result)) == []


@pytest.mark.anyio
async def test_get_device_reads_the_riskiest_device_of_a_listing_with_its_details(tmp_path: Path) -> None:
    async with fleet(tmp_path / "err") as client:
        rows = json.loads(text_of(await client.call_tool("list_devices", {"region": "eu-west-1", "limit": 200})))
        riskiest = max(rows, key=lambda row: row["risk"])
        result = await client.call_tool("get_device", {"id": riskiest["id"]})
    assert result.is_error is False
    device = json.loads(text_of(result))
    assert device["id"] == riskiest["id"]
    assert device["risk"] == riskiest["risk"]
    assert device["region"] == "eu-west-1"
    assert {"name", "model", "firmware", "lastSeen"} <= set(device)


@pytest.mark.anyio
async def test_an_unknown_device_id_is_a_tool_error_result_not_a_protocol_error(tmp_path: Path) -> None:
    async with fleet(tmp_path / "err") as client:
        result = await client.call_tool("get_device", {"id": "dev-999"})
    assert result.is_error is True
    assert "dev-999" in text_of(result)


@pytest.mark.anyio
async def test_slow_echo_answers_its_text(tmp_path: Path) -> None:
    async with fleet(tmp_path / "err") as client:
        result = await client.call_tool("slow_echo", {"text": "hello fleet", "delay_ms": 10})
    assert result.is_error is False
    assert text_of(result) == "hello fleet"


@pytest.mark.anyio
async def test_a_cancelled_slow_echo_stops_and_the_server_keeps_serving(tmp_path: Path) -> None:
    err = tmp_path / "err"
    async with fleet(err) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool("slow_echo", {"text": "never", "delay_ms": 100_000})

            tg.start_soon(call)
            await wait_for_event(err, "fleet.slow_echo_started")
            tg.cancel_scope.cancel()
        cancelled = await wait_for_event(err, "fleet.cancelled")
        after = await client.call_tool("slow_echo", {"text": "still here", "delay_ms": 0})
    assert cancelled["tool"] == "slow_echo"
    assert text_of(after) == "still here"
