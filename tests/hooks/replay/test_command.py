"""``bir replay`` end to end: the plan, a real control server, its work queue, a real ``bir-proxy``
and the real fleet MCP server, with ``respParams`` threaded from step to step."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from bir.core import config
from bir.core.exits import EXIT_FAILED, EXIT_MISSING_TARGET, EXIT_OK
from bir.core.handover import OPENING
from bir.hooks.discovery import write_discovery
from bir.hooks.replay.command import ReplayArgs, ReplayUsageError, run_replay
from bir.hooks.replay.host import HostSessionError, ProxyHost, proxy_environment
from bir.hooks.replay.report import ReplayReport, render_json
from bir.hooks.server.control import ControlServer
from tests.paths import REPO, SCENARIOS

pytestmark = pytest.mark.anyio

ROOT = REPO
FIXTURES = SCENARIOS
FLEET = f"{sys.executable} {ROOT / 'examples' / 'fleet_server.py'}"


def _fleet_module() -> Any:
    spec = importlib.util.spec_from_file_location("fleet_server", ROOT / "examples" / "fleet_server.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fleet = _fleet_module()


def device_by_id(device_id: str) -> dict[str, Any]:
    return dict(_fleet.device_by_id(device_id))


def list_devices_in(region: str) -> list[dict[str, Any]]:
    return list(_fleet.list_devices_in(region))


RANK = (
    "const r = JSON.parse(toolOutput); const rows = JSON.parse(r.content[0].text);"
    " rows.sort((a, b) => b.risk - a.risk); return { topId: rows[0].id };"
)
THREE_STEPS = {
    "id": "scn_three_steps",
    "state": "ready",
    "intent": "find the riskiest device, read it, and echo its name",
    "paramsObject": {
        "region": {"sampleValue": "eu-west-1", "description": "region", "role": "target"},
        "delay": {"sampleValue": 5, "description": "echo delay", "role": "setting"},
    },
    "paramsLogic": "return params;",
    "responseParamsLogic": "return { top: respParams.topId, name: respParams.deviceName, echoed: respParams.echoed };",
    "steps": [
        {
            "stepIndex": 0,
            "toolName": "mcp__fleet__list_devices",
            "toolInputLogic": "return { region: params.region };",
            "toolOutputLogic": RANK,
            "reasoning": "list the region's devices",
        },
        {
            "stepIndex": 1,
            "toolName": "mcp__fleet__get_device",
            "toolInputLogic": "return { id: respParams.topId };",
            "toolOutputLogic": "return { deviceName: JSON.parse(JSON.parse(toolOutput).content[0].text).name };",
            "reasoning": "read the riskiest device",
        },
        {
            "stepIndex": 2,
            "toolName": "mcp__fleet__slow_echo",
            "toolInputLogic": "return { text: respParams.deviceName, delay_ms: params.delay };",
            "toolOutputLogic": "return { echoed: JSON.parse(toolOutput).content[0].text };",
            "reasoning": "echo the name",
        },
    ],
}


def _args(scenario: Path | str, *, params: dict[str, object] | None = None, wrap: bool = True, dry: bool = False,
          project: Path) -> ReplayArgs:  # fmt: skip
    return ReplayArgs(
        scenario=str(scenario),
        prompt="check the fleet",
        params=params or {},
        wraps={"fleet": FLEET} if wrap else {},
        dry=dry,
        project=project,
    )


async def _replay(args: ReplayArgs) -> tuple[int, dict[str, Any], ReplayReport]:
    """The exit code, the document ``--json`` prints (through a JSON round trip), and the report."""
    report = await run_replay(args)
    doc: dict[str, Any] = json.loads(json.dumps(render_json(report), default=str))
    return report.exit_code, doc, report


def _riskiest(region: str) -> dict[str, Any]:
    return device_by_id(max(list_devices_in(region), key=lambda d: d["risk"])["id"])


async def test_the_direct_fleet_scenario_replays_against_the_live_server(tmp_path: Path) -> None:
    code, doc, _ = await _replay(
        _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path)
    )
    assert code == EXIT_OK
    assert [s["status"] for s in doc["steps"]] == ["ok", "ok"]
    assert doc["steps"][1]["input"] == {"id": _riskiest("eu-west-1")["id"]}
    assert doc["responseModel"] == {
        "region": "eu-west-1",
        "device": _riskiest("eu-west-1"),
        "checkedDevices": len(list_devices_in("eu-west-1")),
    }
    assert doc["note"] is None


async def test_a_three_step_direct_plan_threads_resp_params_through_the_proxy(tmp_path: Path) -> None:
    scenario = tmp_path / "three.json"
    scenario.write_text(json.dumps(THREE_STEPS))
    region = "us-east-1"
    code, doc, _ = await _replay(_args(scenario, params={"region": region}, project=tmp_path))
    top = _riskiest(region)
    assert code == EXIT_OK
    assert [s["input"] for s in doc["steps"]] == [
        {"region": region},
        {"id": top["id"]},
        {"text": top["name"], "delay_ms": 5},
    ]
    assert doc["responseModel"] == {"top": top["id"], "name": top["name"], "echoed": top["name"]}


@contextlib.asynccontextmanager
async def _running_control_server(project: Path) -> AsyncIterator[tuple[ControlServer, ProxyHost]]:
    """A control server announced for ``project`` (as ``bir-hooks`` would) and a proxy polling it."""
    server = ControlServer(replay_enabled=True)
    await server.start()
    write_discovery(server.discovery(project))
    host = ProxyHost("fleet", FLEET, project=project, env=proxy_environment(config.home()))
    try:
        await host.start()
        with anyio.fail_after(30):
            await server.queue.wait_served("fleet")
        yield server, host
    finally:
        await host.stop()
        await server.stop()


def _proxy_processes() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if "bir.proxy" in " ".join(p.cmdline()) and "--server-name" in p.cmdline()
    ]


async def test_killing_the_proxy_mid_plan_stops_at_that_step_with_the_may_or_may_not_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_STEP_TIMEOUT_MS", "60000")
    scenario = tmp_path / "three.json"
    slow = json.loads(json.dumps(THREE_STEPS))
    slow["paramsObject"]["delay"]["sampleValue"] = 30_000
    scenario.write_text(json.dumps(slow))
    args = ReplayArgs(**{**_args(scenario, params={"region": "eu-west-1"}, project=tmp_path).__dict__, "wraps": {}})
    async with _running_control_server(tmp_path) as (server, _host):
        run = asyncio.ensure_future(_replay(args))
        with anyio.fail_after(60):
            # Step 3 is the proxy's: taken off the queue, its call in flight upstream.
            for _ in range(6000):
                if [w.tool_name for w in server.queue.in_flight()] == ["slow_echo"]:
                    break
                await asyncio.sleep(0.01)
            [proxy] = _proxy_processes()
            proxy.kill()
            code, doc, _ = await run
    assert code == EXIT_FAILED
    assert [s["status"] for s in doc["steps"]] == ["ok", "ok", "skipped"]
    assert doc["note"].startswith(OPENING)
    assert "may or may not have completed" in doc["note"]
    assert doc["partial"] is True
    assert doc["responseModel"] is None


async def test_a_target_left_without_a_value_ends_the_run_with_the_missing_target_note(tmp_path: Path) -> None:
    code, doc, _ = await _replay(_args(FIXTURES / "fleet-direct.json", project=tmp_path, wrap=False))
    assert code == EXIT_MISSING_TARGET
    assert doc["missing"] == ["region"]
    assert doc["note"].startswith(OPENING)
    assert "region" in doc["note"]


async def test_a_dry_run_derives_and_plans_without_running_a_step(tmp_path: Path) -> None:
    code, doc, _ = await _replay(
        _args(FIXTURES / "fleet-direct.json", params={"region": "EU-WEST-1"}, project=tmp_path, wrap=False, dry=True)
    )
    assert code == EXIT_OK
    assert doc["params"] == {"region": "eu-west-1", "limit": 200}
    assert doc["steps"][0]["input"] == {"region": "eu-west-1", "limit": 200}
    assert doc["steps"][1]["input"] is None  # it reads step 1's output


async def test_a_step_that_cannot_be_sent_stops_the_plan_with_nothing_of_it_happened(tmp_path: Path) -> None:
    code, doc, _ = await _replay(_args(FIXTURES / "fleet-mixed.json", params={"region": "eu-west-1"}, project=tmp_path))
    assert code == EXIT_FAILED
    assert [s["status"] for s in doc["steps"]] == ["ok", "skipped"]
    assert "Nothing of it happened" in doc["note"]


async def test_an_unreadable_scenario_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"steps": [{"stepIndex": 0}]}')
    with pytest.raises(ReplayUsageError, match=r"steps\.0\.toolName"):
        await run_replay(_args(bad, project=tmp_path, wrap=False))
    with pytest.raises(ReplayUsageError, match=r"missing\.json"):
        await run_replay(_args(tmp_path / "missing.json", project=tmp_path, wrap=False))


async def test_a_wrapped_command_that_does_not_start_is_a_clear_error(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path)
    args = ReplayArgs(**{**args.__dict__, "wraps": {"fleet": "/nonexistent/server --stdio"}})
    with pytest.raises(HostSessionError, match="fleet"):
        await run_replay(args)
    assert _proxy_processes() == []


async def test_a_running_control_server_is_used_with_the_proxies_it_already_has(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "ap-southeast-2"}, project=tmp_path)
    async with _running_control_server(tmp_path):
        code, doc, _ = await _replay(ReplayArgs(**{**args.__dict__, "wraps": {}}))
    assert code == EXIT_OK
    assert doc["responseModel"]["device"] == _riskiest("ap-southeast-2")
    assert _proxy_processes() == []


async def test_a_missing_target_note_lists_every_step_as_not_run(tmp_path: Path) -> None:
    code, doc, _ = await _replay(_args(FIXTURES / "fleet-direct.json", project=tmp_path, wrap=False))
    assert code == EXIT_MISSING_TARGET
    rest = doc["note"].split("The rest of the plan:")[1]
    assert "1. mcp__fleet__list_devices" in rest
    assert "2. mcp__fleet__get_device" in rest


async def test_the_mode_follows_the_servers_that_are_wrapped(tmp_path: Path) -> None:
    code, doc, _ = await _replay(
        _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path)
    )
    assert code == EXIT_OK
    assert doc["mode"] == "direct"
    code, doc, _ = await _replay(_args(FIXTURES / "fleet-mixed.json", params={"region": "eu-west-1"}, project=tmp_path))
    assert doc["mode"] == "steer"  # Read and Bash run only inside a session
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path, wrap=False)
    code, doc, _ = await _replay(args)
    assert doc["mode"] == "steer"  # nothing wrapped, no control server


async def test_the_mode_follows_what_a_running_control_server_serves(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path, wrap=False)
    async with _running_control_server(tmp_path):
        code, doc, _ = await _replay(args)
    assert code == EXIT_OK
    assert doc["mode"] == "direct"


async def test_a_value_the_injection_guard_refuses_hands_over_before_any_step_runs(tmp_path: Path) -> None:
    code, doc, _ = await _replay(
        _args(FIXTURES / "fleet-mixed.json", params={"region": "eu-west-1;rm -rf ~"}, project=tmp_path)
    )
    assert code == EXIT_FAILED
    assert doc["steps"] == []
    assert "refused as unsafe" in doc["note"]
