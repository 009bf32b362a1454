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
          project: Path, partial: bool = False) -> ReplayArgs:  # fmt: skip
    return ReplayArgs(
        scenario=str(scenario),
        prompt="check the fleet",
        params=params or {},
        wraps={"fleet": FLEET} if wrap else {},
        dry=dry,
        project=project,
        partial=partial,
    )


def _calls(log: Path) -> list[str]:
    """The tools that reached the fleet server (``FLEET_CALL_LOG``)."""
    return [json.loads(line)["tool"] for line in log.read_text().splitlines()] if log.exists() else []


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


async def test_a_plan_with_a_built_in_step_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FLEET_CALL_LOG", str(log))
    code, doc, _ = await _replay(_args(FIXTURES / "fleet-mixed.json", params={"region": "eu-west-1"}, project=tmp_path))
    assert code == EXIT_FAILED
    assert (doc["error"], doc["outcome"], doc["steps"]) == ("cannot_finish_here", "refused", [])
    assert doc["blocked"]["step"] == 1
    assert "Read is a built-in tool" in doc["message"]
    assert "--partial" in doc["message"]
    assert _calls(log) == []


async def test_partial_runs_the_steps_before_a_built_in_and_stops_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FLEET_CALL_LOG", str(log))
    args = _args(FIXTURES / "fleet-mixed.json", params={"region": "eu-west-1"}, project=tmp_path, partial=True)
    code, doc, _ = await _replay(args)
    assert code == EXIT_FAILED
    assert [s["status"] for s in doc["steps"]] == ["ok", "skipped"]
    assert "Nothing of it happened" in doc["note"]
    assert doc["summary"].startswith("Stopped, as --partial asked, at step 2 of 3 (Read)")
    assert _calls(log) == ["list_devices"]


async def test_a_dry_run_says_where_a_real_run_would_stop(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-mixed.json", params={"region": "eu-west-1"}, project=tmp_path, dry=True)
    code, doc, _ = await _replay(args)
    assert code == EXIT_OK
    assert doc["blocked"]["step"] == 1
    assert "A real run would stop at step 2 of 3 (Read)" in doc["summary"]


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


async def test_the_printed_mode_is_the_scenarios_own_whatever_is_wrapped(tmp_path: Path) -> None:
    region: dict[str, object] = {"region": "eu-west-1"}
    for wrap, dry in ((True, False), (False, False), (True, True), (False, True)):
        _, doc, _ = await _replay(
            _args(FIXTURES / "fleet-direct.json", params=region, wrap=wrap, dry=dry, project=tmp_path)
        )
        assert doc["mode"] == "direct", (wrap, dry)
    _, doc, _ = await _replay(_args(FIXTURES / "fleet-mixed.json", params=region, project=tmp_path, dry=True))
    assert doc["mode"] == "steer"  # Read and Bash run only inside a session


async def test_with_no_proxy_for_a_server_the_run_is_refused_with_the_wrap_it_needs(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path, wrap=False)
    code, doc, _ = await _replay(args)
    assert code == EXIT_FAILED
    assert doc["error"] == "cannot_finish_here"
    assert "no proxy serves fleet" in doc["message"]
    assert "--wrap fleet=COMMAND" in doc["message"]


async def test_the_mode_follows_what_a_running_control_server_serves(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path, wrap=False)
    async with _running_control_server(tmp_path):
        code, doc, _ = await _replay(args)
    assert code == EXIT_OK
    assert doc["mode"] == "direct"


async def test_a_value_the_injection_guard_refuses_hands_over_before_any_step_runs(tmp_path: Path) -> None:
    code, doc, _ = await _replay(
        _args(FIXTURES / "fleet-mixed.json", params={"region": "eu-west-1;rm -rf ~"}, project=tmp_path, partial=True)
    )
    assert code == EXIT_FAILED
    assert doc["steps"] == []
    assert "refused as unsafe" in doc["note"]


async def test_an_explicit_wrap_is_used_although_a_control_server_with_no_proxy_runs_here(tmp_path: Path) -> None:
    # An installed project whose control server is up with no live session: no proxy polls it.
    server = ControlServer(replay_enabled=True)
    await server.start()
    write_discovery(server.discovery(tmp_path))
    try:
        code, doc, _ = await _replay(
            _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path)
        )
    finally:
        await server.stop()
    assert code == EXIT_OK
    assert [s["status"] for s in doc["steps"]] == ["ok", "ok"]


async def test_a_param_the_scenario_does_not_have_is_refused_with_the_names_it_has(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-direct.json", params={"regoin": "eu-west-1"}, project=tmp_path)
    with pytest.raises(ReplayUsageError, match=r"no parameter 'regoin'; its parameters: region, limit"):
        await run_replay(args)
    assert _proxy_processes() == []


async def test_a_body_that_does_not_compile_refuses_the_run_before_its_first_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FLEET_CALL_LOG", str(log))
    broken = json.loads((FIXTURES / "fleet-direct.json").read_text())
    broken["steps"][1]["toolOutputLogic"] = "const r = JSON.parse(toolOutput);\nreturn { device: r.. };"
    scenario = tmp_path / "broken.json"
    scenario.write_text(json.dumps(broken))
    code, doc, _ = await _replay(_args(scenario, params={"region": "eu-west-1"}, project=tmp_path))
    assert code == EXIT_FAILED
    assert (doc["error"], doc["steps"]) == ("does_not_compile", [])
    assert "step 1 toolOutputLogic: toolOutputLogic does not compile" in doc["message"]
    assert "(line 2 of the body)" in doc["message"]
    assert _calls(log) == []
    # --dry checks first too.
    code, doc, _ = await _replay(_args(scenario, params={"region": "eu-west-1"}, project=tmp_path, dry=True))
    assert (code, doc["error"]) == (EXIT_FAILED, "does_not_compile")


async def test_a_packaged_scenario_is_found_by_its_name(tmp_path: Path) -> None:
    code, doc, _ = await _replay(_args("fleet-direct", params={"region": "eu-west-1"}, project=tmp_path))
    assert (code, doc["scenario"]) == (EXIT_OK, "scn_fleet_direct")
    with pytest.raises(ReplayUsageError, match=r"fleet-direct, fleet-mixed: `bir replay --list`"):
        await run_replay(_args("fleet-nosuch", project=tmp_path))


async def test_an_interrupt_stops_what_it_started_and_reports_what_ran_and_what_did_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_STEP_TIMEOUT_MS", "60000")
    slow = json.loads(json.dumps(THREE_STEPS))
    slow["paramsObject"]["delay"]["sampleValue"] = 30_000
    slow["steps"].append({**slow["steps"][1], "stepIndex": 3})
    scenario = tmp_path / "slow.json"
    scenario.write_text(json.dumps(slow))
    child_log = tmp_path / "children.log"
    args = _args(scenario, params={"region": "eu-west-1"}, project=tmp_path)
    run = asyncio.ensure_future(run_replay(args, child_log=child_log))
    with anyio.fail_after(60):
        for _ in range(3000):
            if "fleet.slow_echo_started" in (child_log.read_text() if child_log.exists() else ""):
                break
            await asyncio.sleep(0.02)
        run.cancel()
        report = await run
    doc = render_json(report)
    assert report.exit_code == 130
    assert (doc["error"], doc["outcome"]) == ("interrupted", "interrupted")
    assert [s.status for s in report.steps] == ["ok", "ok", "skipped"]
    assert doc["message"] == (
        "Interrupted (Ctrl-C). Ran: step 1, 2. Step 3 (mcp__fleet__slow_echo) was sent and may or may not have "
        "completed. Not run: step 4."
    )
    assert _proxy_processes() == []


async def test_a_wrap_that_is_not_an_mcp_server_fails_at_the_handshake_timeout_with_a_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import gc

    from bir.hooks.replay import host

    monkeypatch.setattr(host, "INITIALIZE_TIMEOUT_S", 1.0)
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path)
    args = ReplayArgs(**{**args.__dict__, "wraps": {"fleet": "sleep 600"}})
    with anyio.fail_after(20), pytest.raises(HostSessionError) as failed:
        await run_replay(args)
    assert str(failed.value) == (
        "--wrap fleet: `sleep 600` did not answer MCP's initialize within 1 s, so it is not a stdio MCP server "
        "(or it never finished starting)"
    )
    gc.collect()
    await asyncio.sleep(0.05)
    assert "never retrieved" not in caplog.text
    assert _proxy_processes() == []


async def test_a_wrap_command_that_is_not_there_is_named(tmp_path: Path) -> None:
    args = _args(FIXTURES / "fleet-direct.json", params={"region": "eu-west-1"}, project=tmp_path)
    args = ReplayArgs(**{**args.__dict__, "wraps": {"fleet": "fleet-server-nosuch --stdio"}})
    with pytest.raises(HostSessionError, match=r"there is no command 'fleet-server-nosuch'"):
        await run_replay(args)
