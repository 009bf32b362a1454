"""bir-scenario's ``hook`` tool (``bir install --mcp-hooks``): over real stdio (the MCP SDK's client),
against the real control server, whose hook handler here notes what it is asked and answers a set answer.

The arguments are what Claude Code sends for ``api.MCP_HOOK_INPUT`` (FACTS.md §3.3, observed on 2.1.197
and 2.1.332): every field a string, "" when absent, objects as JSON text.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from bir.core import installed
from bir.core.paths import off_file, pid_alive, revive_stamp
from bir.hooks import api
from bir.hooks.discovery import read_discovery
from bir.proxy.hook_tool import hook_input
from tests.hooks.stub_session import StubSession
from tests.proxy.test_scenario_server import bir_scenario, control_server, events, text_of


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path.resolve()


SESSION = "85147e85-c1a7-42a2-8851-a8a0450fcad3"


class NotingHandler:
    """The controller's place on the control server: notes each hook and answers ``answer``."""

    def __init__(self, answer: api.HookAnswer = api.EMPTY_HOOK_ANSWER) -> None:
        self.answer = answer
        self.seen: list[tuple[str, api.HookInput]] = []

    async def handle(self, event: str, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        self.seen.append((event, hook))
        return self.answer

    def overdue(self, event: str, hook: api.HookInput) -> api.HookAnswer:
        return api.EMPTY_HOOK_ANSWER


def interpolated(event: str, **fields: str) -> dict[str, str]:
    """The tool's arguments as Claude Code interpolates ``api.MCP_HOOK_INPUT`` for one hook."""
    arguments = {name: "" for name in api.MCP_HOOK_FIELDS}
    arguments.update(session_id=SESSION, hook_event_name=event, cwd="/tmp/p", permission_mode="default")
    arguments.update(fields)
    return arguments


PRE = interpolated(
    "PreToolUse",
    tool_name="Bash",
    tool_input=json.dumps({"command": "true", "description": "b"}),
    tool_use_id="toolu_fake_001",
)


async def call_hook(client: Any, arguments: dict[str, str], meta: types.RequestParamsMeta | None = None) -> str:
    with anyio.fail_after(30):
        result = await client.call_tool(api.MCP_HOOK_TOOL, arguments, meta=meta)
    assert result.is_error is False
    return text_of(result)


@pytest.mark.anyio
async def test_a_pre_tool_use_hook_reaches_the_route_rebuilt_and_its_answer_is_the_hook_output(
    project: Path, tmp_path: Path
) -> None:
    steer = api.HookAnswer(
        hook_specific_output=api.HookSpecificOutput(
            hook_event_name="PreToolUse", permission_decision="allow", updated_input={"command": "echo steered"}
        )
    )
    handler = NotingHandler(steer)
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(hooks=handler)
        text = await call_hook(client, PRE)
    assert json.loads(text) == json.loads(api.encode(steer))
    [(event, hook)] = handler.seen
    assert event == "PreToolUse"
    assert hook.tool_input == {"command": "true", "description": "b"}
    assert (hook.session_id, hook.tool_name, hook.tool_use_id) == (SESSION, "Bash", "toolu_fake_001")
    assert hook.cwd == "/tmp/p"
    assert hook.tool_response is None
    assert hook.error is None
    # bir-scenario runs as this test process's child: the hook's session is that host's.
    assert hook.bir_host_pid == os.getpid()


@pytest.mark.anyio
async def test_post_tool_use_and_its_failure_arrive_with_their_response_duration_and_error(
    project: Path, tmp_path: Path
) -> None:
    handler = NotingHandler()
    response = {"stdout": "", "stderr": "", "interrupted": False}
    post = interpolated(
        "PostToolUse", tool_name="Bash", tool_input='{"command":"true"}', tool_use_id="t1", duration_ms="21"
    )
    post["tool_response"] = json.dumps(response)
    failure = interpolated(
        "PostToolUseFailure", tool_name="Bash", tool_input='{"command":"false"}', tool_use_id="t2", duration_ms="5"
    )
    failure.update(error="Exit code 3\nhi", is_interrupt="false")
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(hooks=handler)
        assert await call_hook(client, post) == "{}"
        assert await call_hook(client, failure) == "{}"
    [(post_event, post_hook), (failure_event, failure_hook)] = handler.seen
    assert (post_event, post_hook.tool_response, post_hook.duration_ms) == ("PostToolUse", response, 21)
    assert failure_event == "PostToolUseFailure"
    assert (failure_hook.error, failure_hook.is_interrupt) == ("Exit code 3\nhi", False)


@pytest.mark.anyio
async def test_without_a_control_server_the_hook_answers_an_empty_object_and_logs_why(
    project: Path, tmp_path: Path
) -> None:
    async with bir_scenario(project, tmp_path / "err") as client:
        assert await call_hook(client, PRE) == "{}"
    [logged] = events(tmp_path / "err", "scenario.hook")
    assert logged["ok"] is False
    assert logged["hookEvent"] == "PreToolUse"
    assert "discovery" in logged["reason"]


@pytest.mark.anyio
async def test_while_bir_is_off_the_hook_answers_an_empty_object_and_asks_nothing(
    project: Path, tmp_path: Path
) -> None:
    handler = NotingHandler(api.HookAnswer(hook_specific_output=api.HookSpecificOutput(hook_event_name="PreToolUse")))
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(hooks=handler)
        off = off_file(Path(os.environ["BIR_HOME"]))
        off.parent.mkdir(parents=True, exist_ok=True)
        off.touch()
        # The off file is read on each hook call, not on the 2 s watch.
        assert await call_hook(client, PRE) == "{}"
        off.unlink()
        assert await call_hook(client, PRE) != "{}"
    assert len(handler.seen) == 1


@pytest.mark.anyio
async def test_the_tool_is_unlisted_and_a_models_call_gets_an_empty_object_and_changes_nothing(
    project: Path, tmp_path: Path
) -> None:
    handler = NotingHandler()
    model_meta: types.RequestParamsMeta = {"claudecode/toolUseId": "toolu_model"}  # type: ignore[typeddict-unknown-key]
    async with control_server(project) as control, bir_scenario(project, tmp_path / "err") as client:
        control.handler = StubSession(hooks=handler)
        listed = await client.list_tools()
        assert await call_hook(client, PRE, model_meta) == "{}"
        assert await call_hook(client, {"anything": "else"}) == "{}"
        assert await call_hook(client, interpolated("SessionEnd")) == "{}"
    assert api.MCP_HOOK_TOOL not in [tool.name for tool in listed.tools]
    assert handler.seen == []


def test_empty_fields_are_absent_and_text_that_is_not_json_stays_text() -> None:
    rebuilt = hook_input(interpolated("PostToolUse", tool_name="mcp__x__y", tool_response="plain words"))
    assert rebuilt == {
        "session_id": SESSION,
        "hook_event_name": "PostToolUse",
        "cwd": "/tmp/p",
        "permission_mode": "default",
        "tool_name": "mcp__x__y",
        "tool_response": "plain words",
    }
    assert hook_input(interpolated("PreToolUse", session_id="")) is None


def test_the_tool_waits_for_the_route_less_than_the_hook_timeout_install_writes() -> None:
    for event in api.MCP_HOOK_EVENTS:
        route = api.HOOK_ROUTES[event]
        assert route.answered_by_ms / 1000 < route.client_s < route.timeout_s


async def _until(condition: Any, seconds: float = 30.0) -> None:
    with anyio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110 - what is awaited is a file another process writes
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_with_no_control_server_the_hook_tool_revives_one_for_an_installed_project_and_never_after_down(
    project: Path, tmp_path: Path
) -> None:
    home = Path(os.environ["BIR_HOME"])
    installed.update(project, replay=False, down=True)
    async with bir_scenario(project, tmp_path / "err") as client:
        # Marked down (`bir down`): nothing revives it, and the hook answers as without bir.
        assert await call_hook(client, PRE) == "{}"
        assert not revive_stamp(home, project).exists()
        installed.update(project, down=False)
        assert await call_hook(client, PRE) == "{}"
        await _until(lambda: read_discovery(project) is not None)
        server = read_discovery(project)
        assert server is not None
        try:
            assert server.pid != os.getpid()
            # The next tool call's hook reaches the revived server.
            assert await call_hook(client, PRE) == "{}"
            assert [e["ok"] for e in events(tmp_path / "err", "scenario.recorder_revive")] == [True]
        finally:
            os.kill(server.pid, signal.SIGTERM)
            await _until(lambda: not pid_alive(server.pid))
