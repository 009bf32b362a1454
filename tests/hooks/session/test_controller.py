"""The controller through the control server's real routes: real hook shapes (FACTS.md §3.1), the fake
BaseIn over loopback HTTP, a real ``bir-proxy`` wrapping the real demo fleet server, real V8 workers."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from bir.cli import main
from bir.core import log
from tests.fakes.baseinsvc import Canned
from tests.fakes.fixtures import running_fake_service
from tests.hooks.control_rig import (
    PROMPT,
    Rig,
    direct_hit,
    hook_input,
    live_server,
    scenario,
    transcript_call,
)

pytestmark = pytest.mark.anyio


async def test_a_direct_hit_arms_announces_runs_through_the_proxy_and_reports_steered_full(rig: Rig) -> None:
    ticket = direct_hit(rig.fake)
    answer = await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT))
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("[BaseInstRunner calculated replay] A known-good tool sequence was recorded")
    assert "Call mcp__bir__run_scenario once, with no arguments, before any other tool." in context
    [armed] = rig.events("plan.armed")
    assert armed["mode"] == "direct"
    assert armed["tools"] == ["mcp__fleet__list_devices", "mcp__fleet__get_device"]
    assert rig.events("replay.decision") == []

    pre = await rig.hook(
        "/tool/pre", hook_input("PreToolUse", tool_name="mcp__bir__run_scenario", tool_input={}, tool_use_id="toolu_1")
    )
    assert pre["hookSpecificOutput"]["permissionDecision"] == "allow"
    run = await rig.http.post("/scenario/run", json={"toolUseId": "toolu_1"}, timeout=60)
    body = run.json()
    assert body["ok"] is True
    assert body["steps"] == 2
    assert "mcp__fleet__get_device" in body["text"]
    assert "openAlerts" in body["text"]
    # §6.3: the response model the scenario computed comes back with the results.
    assert body["responseModel"]["region"] == "eu-west-1"
    assert body["responseModel"]["device"]["id"] in body["text"]
    again = (await rig.http.post("/scenario/run", json={"toolUseId": "toolu_1"})).json()
    assert again["ok"] is False
    await rig.hook("/tool/post", hook_input("PostToolUse", tool_name="mcp__bir__run_scenario", tool_use_id="toolu_1"))
    await rig.hook("/session/stop", hook_input("Stop", last_assistant_message="done"))
    await rig.hook("/session/end", hook_input("SessionEnd", reason="other"))
    await rig.until(lambda: rig.fake.requests_to("executions"))
    [report] = [r.body for r in rig.fake.requests_to("executions")]
    assert report["ticket"] == ticket
    assert report["outcome"] == "steered_full"
    assert report["stepsPlanned"] == 2
    assert report["stepsPinned"] == 2


async def test_a_match_below_the_steer_similarity_announces_nothing_and_logs_one_decision(rig: Rig) -> None:
    direct_hit(rig.fake, similarity=0.91)
    answer = await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT))
    assert answer == {}
    [decision] = rig.events("replay.decision")
    assert decision["code"] == "similarity_below"
    assert rig.events("plan.armed") == []


async def test_another_first_call_vetoes_a_direct_plan_and_its_post_says_so(rig: Rig) -> None:
    direct_hit(rig.fake)
    await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT))
    pre = await rig.hook(
        "/tool/pre", hook_input("PreToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_use_id="toolu_b")
    )
    assert pre == {}
    [veto] = rig.events("replay.vetoed")
    assert veto["code"] == "vetoed"
    post = await rig.hook(
        "/tool/post",
        hook_input("PostToolUse", tool_name="Bash", tool_use_id="toolu_b", tool_response={"stdout": "x"}),
    )
    assert "not being run" in post["hookSpecificOutput"]["additionalContext"]
    run = (await rig.http.post("/scenario/run", json={"toolUseId": "toolu_z"})).json()
    assert run == {"ok": False, "why": "no_plan"}


async def test_the_runner_off_answers_every_hook_with_an_empty_object(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.switches["off"] = True
    assert await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT)) == {}
    assert rig.events("plan.armed") == []
    assert rig.fake.requests_to("match") == []


async def test_replay_off_matches_without_waiting_and_arms_nothing(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.switches["replay"] = False
    rig.fake.route_latency_s["match"] = 3.0
    with anyio.fail_after(2):
        assert await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT)) == {}
    assert rig.events("plan.armed") == []


@pytest.mark.settings(match_budget_ms=300)
async def test_a_match_that_never_answers_leaves_the_prompt_inside_its_budget(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.fake.route_latency_s["match"] = float("inf")
    with anyio.fail_after(3):
        assert await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT)) == {}
    [decision] = rig.events("replay.decision")
    assert decision["code"] == "match_timeout"


async def test_plan_mode_announces_nothing(rig: Rig) -> None:
    direct_hit(rig.fake)
    answer = await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT, permission_mode="plan"))
    assert answer == {}
    assert [d["code"] for d in rig.events("replay.decision")] == ["plan_mode"]


async def test_a_malformed_hook_body_gets_an_empty_object_not_an_error(rig: Rig) -> None:
    response = await rig.http.post("/tool/pre", content=b"{not json")
    assert response.status_code == 200
    assert response.json() == {}
    assert rig.events("control.hook_malformed")


async def test_two_sessions_run_scenario_binds_only_the_session_whose_call_it_is(rig: Rig) -> None:
    direct_hit(rig.fake)
    await rig.hook("/session/prompt", hook_input("UserPromptSubmit", session="a", prompt=PROMPT))
    await rig.hook("/session/prompt", hook_input("UserPromptSubmit", session="b", prompt=PROMPT))
    await rig.hook(
        "/tool/pre",
        hook_input("PreToolUse", session="a", tool_name="mcp__bir__run_scenario", tool_input={}, tool_use_id="t_a"),
    )
    await rig.hook(
        "/tool/pre",
        hook_input("PreToolUse", session="b", tool_name="mcp__bir__run_scenario", tool_input={}, tool_use_id="t_b"),
    )
    ambiguous = (await rig.http.post("/scenario/run", json={})).json()
    assert ambiguous == {"ok": False, "why": "no_plan"}
    assert rig.events("replay.run_ambiguous")


async def test_a_miss_records_each_settled_call_and_finishes_the_run_once(rig: Rig) -> None:
    await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt="something new"))
    bash = {"command": "echo hi", "description": "d"}
    await rig.hook("/tool/pre", hook_input("PreToolUse", tool_name="Bash", tool_input=bash, tool_use_id="t1"))
    await rig.hook(
        "/tool/post",
        hook_input("PostToolUse", tool_name="Bash", tool_input=bash, tool_use_id="t1", tool_response={"stdout": "hi"}),
    )
    housekeeping = {"command": "bir scenario show scn_1"}
    await rig.hook("/tool/pre", hook_input("PreToolUse", tool_name="Bash", tool_input=housekeeping, tool_use_id="t2"))
    await rig.hook(
        "/tool/post",
        hook_input("PostToolUse", tool_name="Bash", tool_input=housekeeping, tool_use_id="t2", tool_response={}),
    )
    await rig.hook("/session/stop", hook_input("Stop", last_assistant_message="said hi"))
    await rig.hook("/session/end", hook_input("SessionEnd", reason="other"))
    [run_id] = [r.body["id"] for r in rig.fake.requests_to("match")]
    await rig.until(lambda: rig.fake.requests_to("finish"))
    steps = rig.fake.steps_of(run_id)
    assert [(s["stepIndex"], s["toolName"]) for s in steps] == [(0, "Bash")]
    assert json.loads(steps[0]["toolOutput"]) == {"stdout": "hi"}
    [finish] = [r.body for r in rig.fake.requests_to("finish")]
    assert finish["output"] == "said hi"
    assert rig.fake.requests_to("executions") == []


async def test_stop_racing_session_end_books_the_ticket_once(rig: Rig) -> None:
    ticket = direct_hit(rig.fake)
    await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT))
    await rig.hook(
        "/tool/pre", hook_input("PreToolUse", tool_name="Bash", tool_input={"command": "ls"}, tool_use_id="t1")
    )
    async with anyio.create_task_group() as group:
        group.start_soon(rig.hook, "/session/stop", hook_input("Stop", last_assistant_message="done"))
        group.start_soon(rig.hook, "/session/end", hook_input("SessionEnd", reason="other"))
        group.start_soon(rig.hook, "/session/end", hook_input("SessionEnd", reason="other"))
    assert len(rig.events("replay.reported")) == 1
    await rig.until(lambda: ticket in rig.fake.booked_tickets())
    assert [r.body["ticket"] for r in rig.fake.requests_to("executions")] == [ticket]


async def test_esc_cancels_a_direct_run_and_the_note_reaches_the_model_on_its_next_tool_call(rig: Rig) -> None:
    data = scenario()
    data["id"] = "scn_slow"
    slow = {"stepIndex": 0, "toolName": "mcp__fleet__slow_echo", "reasoning": "wait"}
    slow["toolInputLogic"] = "return { text: 'x', delay_ms: 20000 };"
    slow["toolOutputLogic"] = "return {};"
    data["steps"] = [slow] + [dict(s, stepIndex=i + 1) for i, s in enumerate(data["steps"])]
    rig.fake.add_match(PROMPT, data, similarity=0.95)
    rig.fake.derive_answers[data["id"]] = Canned(200, {"params": {"region": "eu-west-1"}, "missing": []})
    await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT))
    run_call = hook_input("PreToolUse", tool_name="mcp__bir__run_scenario", tool_input={}, tool_use_id="toolu_run")
    await rig.hook("/tool/pre", run_call)

    async def run_then_escape() -> None:
        # bir-scenario drops its request when the host cancels the call (Esc): here, the client goes away.
        with anyio.move_on_after(1.0):
            await rig.http.post("/scenario/run", json={"toolUseId": "toolu_run"}, timeout=30)

    await run_then_escape()
    await rig.until(lambda: rig.events("replay.run_cancelled"))
    bash = {"command": "ls"}
    await rig.hook("/tool/pre", hook_input("PreToolUse", tool_name="Bash", tool_input=bash, tool_use_id="t2"))
    answer = await rig.hook(
        "/tool/post", hook_input("PostToolUse", tool_name="Bash", tool_input=bash, tool_use_id="t2", tool_response={})
    )
    note = answer["hookSpecificOutput"]["additionalContext"]
    assert "stopped before finishing" in note
    assert "may or may not have completed" in note
    await rig.hook("/session/end", hook_input("SessionEnd", reason="other"))
    [reported] = rig.events("replay.reported")
    assert reported["outcome"] == "failed"
    assert reported["measured"] is False


async def test_a_first_prompt_waits_a_moment_for_a_bir_scenario_still_starting(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.server.hellos.clear()

    async def hello() -> None:
        body = {"pid": os.getpid(), "version": "test", "tools": 1, "off": False}
        assert (await rig.http.post("/scenario/hello", json=body)).status_code == 200

    answer = await rig.prompt_beside("replay.hello_wait", hello)
    assert "Call mcp__bir__run_scenario once" in answer["hookSpecificOutput"]["additionalContext"]
    assert rig.events("replay.decision") == []


async def test_with_no_bir_scenario_a_direct_plan_declines_no_delivery_tool(rig: Rig) -> None:
    direct_hit(rig.fake)
    rig.server.hellos.clear()
    assert await rig.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT)) == {}
    [declined] = rig.events("replay.decision")
    assert declined["code"] == "no_delivery_tool"


async def test_a_first_prompt_waits_a_moment_for_the_proxies_bir_installed_before_choosing_the_mode(
    rig: Rig,
) -> None:
    data = scenario()
    for step in data["steps"]:
        step["toolName"] = step["toolName"].replace("mcp__fleet__", "mcp__late__")
    rig.fake.add_match(PROMPT, data, similarity=0.95)
    rig.fake.derive_answers[data["id"]] = Canned(200, {"params": {"region": "eu-west-1", "limit": 200}, "missing": []})
    rig.controller.expected_wrapped = lambda: frozenset({"late"})

    async def register() -> None:
        body = {"serverName": "late", "proxyId": "px-late", "pid": os.getpid()}
        assert (await rig.http.post("/proxy/register", json=body)).status_code == 200

    answer = await rig.prompt_beside("replay.proxy_wait", register)
    [armed] = rig.events("plan.armed")
    assert armed["mode"] == "direct"
    assert "Call mcp__bir__run_scenario once" in answer["hookSpecificOutput"]["additionalContext"]


async def test_a_server_approved_since_the_install_is_wrapped_at_session_start_and_the_user_told_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, captured_logs: io.StringIO
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    project = (tmp_path / "project").resolve()
    project.mkdir()
    fleet = {"command": sys.executable, "args": ["-m", "bir.examples.fleet_server"]}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"fleet": fleet}}))
    assert main(["install", "--replay", "--project", str(project)]) == 0
    # A command sends its own log lines to a file; what the server logs next is read here.
    log.set_stream(captured_logs)
    # The user said yes in Claude Code's dialog, which records it where bir reads it.
    settings_path = project / ".claude" / "settings.local.json"
    settings = json.loads(settings_path.read_text())
    settings["enabledMcpjsonServers"] = ["fleet"]
    settings_path.write_text(json.dumps(settings))

    async with running_fake_service() as fake, live_server(project, fake) as http:
        start = hook_input("SessionStart", source="startup", cwd=str(project))
        first = (await http.post("/session/start", json=start)).json()
        second = (await http.post("/session/start", json={**start, "session_id": "sess-2"})).json()
        # This session's fleet started unwrapped: its prompts do not wait for a proxy that never comes.
        direct_hit(fake)
        await http.post("/session/prompt", json=hook_input("UserPromptSubmit", prompt=PROMPT, cwd=str(project)))
    events = [json.loads(line)["event"] for line in captured_logs.getvalue().splitlines()]
    assert "replay.proxy_wait" not in events
    assert "plan.armed" in events or "replay.decision" in events

    assert first == {
        "systemMessage": "bir: fleet was approved in Claude Code since bir was installed here; from the next session"
        " on it runs behind bir-proxy, so scenarios calling its tools can run direct."
    }
    assert "hookSpecificOutput" not in first  # nothing reaches the model
    assert second == {}
    local = json.loads((home / ".claude.json").read_text())["projects"][str(project)]["mcpServers"]
    assert local["fleet"]["args"][:2] == ["--server-name", "fleet"]


async def _settled(
    rig: Rig, transcript: Path, tool: str, tool_input: dict[str, Any], tool_use_id: str, *, out: Any
) -> None:
    """A call both hooks saw: its PostToolUse (its PreToolUse was posted before)."""
    body = hook_input("PostToolUse", tool_name=tool, tool_input=tool_input, tool_use_id=tool_use_id, tool_response=out)
    await rig.hook("/tool/post", {**body, "transcript_path": str(transcript)})


async def _pre(rig: Rig, transcript: Path, tool: str, tool_input: dict[str, Any], tool_use_id: str) -> dict[str, Any]:
    body = hook_input("PreToolUse", tool_name=tool, tool_input=tool_input, tool_use_id=tool_use_id)
    return await rig.hook("/tool/pre", {**body, "transcript_path": str(transcript)})


async def test_a_miss_records_its_steps_in_the_order_the_model_made_them_not_the_order_they_settled(
    rig: Rig, tmp_path: Path
) -> None:
    transcript = tmp_path / "session.jsonl"
    prompt = hook_input("UserPromptSubmit", prompt="something new", transcript_path=str(transcript))
    await rig.hook("/session/prompt", prompt)
    first, second = {"file_path": "/a"}, {"command": "ls", "description": "d"}
    # Two parallel calls: the model made Read, then Bash; Bash settled first.
    await _pre(rig, transcript, "Read", first, "t1")
    await _pre(rig, transcript, "Bash", second, "t2")
    await _settled(rig, transcript, "Bash", second, "t2", out={"stdout": "b"})
    await _settled(rig, transcript, "Read", first, "t1", out={"type": "text", "file": {"content": "a"}})
    transcript_call(transcript, "t1", "Read", first, {"type": "text", "file": {"content": "a"}})
    transcript_call(transcript, "t2", "Bash", second, {"stdout": "b"})
    await rig.hook("/session/end", {**hook_input("SessionEnd", reason="other"), "transcript_path": str(transcript)})
    [run_id] = [r.body["id"] for r in rig.fake.requests_to("match")]
    await rig.until(lambda: rig.fake.requests_to("finish"))
    steps = rig.fake.steps_of(run_id)
    assert [(s["stepIndex"], s["toolName"]) for s in steps] == [(0, "Read"), (1, "Bash")]


async def test_a_call_no_hook_saw_is_recorded_from_the_transcript_in_its_place_and_in_the_canonical_shape(
    rig: Rig, tmp_path: Path
) -> None:
    transcript = tmp_path / "session.jsonl"
    await rig.hook(
        "/session/prompt", hook_input("UserPromptSubmit", prompt="something new", transcript_path=str(transcript))
    )
    # Made before the `bir` server (which carries the tool hooks) was connected: no hook saw it.
    devices = [{"type": "text", "text": '[{"id": "d1"}]'}]
    transcript_call(transcript, "toolu_early", "mcp__fleet__list_devices", {"region": "eu-west-1"}, devices)
    transcript_call(transcript, "toolu_failed_early", "Bash", {"command": "exit 3"}, error="Exit code 3")
    bash = {"command": "echo hi", "description": "d"}
    await _pre(rig, transcript, "Bash", bash, "t_seen")
    await _settled(rig, transcript, "Bash", bash, "t_seen", out={"stdout": "hi"})
    transcript_call(transcript, "t_seen", "Bash", bash, {"stdout": "hi"})
    await rig.hook("/session/stop", {**hook_input("Stop"), "transcript_path": str(transcript)})
    await rig.hook("/session/end", {**hook_input("SessionEnd", reason="other"), "transcript_path": str(transcript)})
    [run_id] = [r.body["id"] for r in rig.fake.requests_to("match")]
    await rig.until(lambda: rig.fake.requests_to("finish"))
    steps = rig.fake.steps_of(run_id)
    assert [s["toolName"] for s in steps] == ["mcp__fleet__list_devices", "Bash", "Bash"]
    # The same CallToolResult a proxy or a hook would have given (core.tool_output.call_result).
    assert json.loads(steps[0]["toolOutput"]) == {"content": devices, "isError": False}
    assert steps[0]["toolInput"] == {"region": "eu-west-1"}
    assert steps[1]["error"] == "Exit code 3"
    assert json.loads(steps[2]["toolOutput"]) == {"stdout": "hi"}
    assert [e["tool_use_id"] for e in rig.events("recording.unseen_call")] == ["toolu_early", "toolu_failed_early"]


async def test_a_direct_plan_whose_run_scenario_comes_after_a_call_no_hook_saw_is_vetoed(
    rig: Rig, tmp_path: Path
) -> None:
    transcript = tmp_path / "session.jsonl"
    direct_hit(rig.fake)
    answer = await rig.hook(
        "/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT, transcript_path=str(transcript))
    )
    assert "Call mcp__bir__run_scenario once" in answer["hookSpecificOutput"]["additionalContext"]
    transcript_call(transcript, "toolu_early", "Bash", {"command": "ls"}, {"stdout": "x"})
    assert await _pre(rig, transcript, "mcp__bir__run_scenario", {}, "toolu_run") == {}
    [vetoed] = rig.events("replay.vetoed")
    assert vetoed["code"] == "vetoed"
    assert rig.fleet_calls() == []
