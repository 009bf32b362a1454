"""The end-to-end harness works: a real Claude Code (each version) against the scripted fake model, offline.

These run without bir's hooks; they prove that the harness delivers what the scenario tests need: an
MCP tool call reaching a real stdio server and its result reaching the model, a transcript with usage,
and a command hook's context reaching the model.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from bir.benchmarks.claude_host import command_hook
from bir.benchmarks.fake_model import ApiRequest, FakeMessagesApi, Turn, call, say
from tests.claude_host import run_claude, write_local_mcp, write_project
from tests.peers import INSTALLING_TEST_TIMEOUT_S

pytestmark = pytest.mark.timeout(INSTALLING_TEST_TIMEOUT_S)

FLEET = {"fleet": {"command": sys.executable, "args": ["-m", "bir.examples.fleet_server"]}}


def test_a_scripted_mcp_call_reaches_the_fleet_server_and_its_result_reaches_the_model(
    claude_binary: Path, tmp_path: Path
) -> None:
    project = write_project(tmp_path / "project", mcp_servers=FLEET)

    def answer(request: ApiRequest) -> Turn:
        devices = json.loads(request.tool_result_text("toolu_list"))
        return say(f"The riskiest is {max(devices, key=lambda d: d['risk'])['id']}.")

    api = FakeMessagesApi([call("mcp__fleet__list_devices", {"region": "eu-west-1"}, tool_id="toolu_list"), answer])
    with api.serve():
        run = run_claude(claude_binary, project, "the riskiest device?", api_url=api.url, allowed_tools=["mcp__fleet"])

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert len(api.requests) == 2
    first, second = api.requests
    # MCP_CONNECTION_NONBLOCKING=false: the server is connected before the first request.
    assert "mcp__fleet__list_devices" in first.tool_names()
    assert second.tool_results()["toolu_list"].get("is_error") is not True
    devices = json.loads(second.tool_result_text("toolu_list"))
    assert len(devices) > 1
    assert all(d["name"].startswith("eu-west-1-") for d in devices)
    assert run.result is not None
    assert run.result["result"].startswith("The riskiest is dev-")
    assert run.result["total_cost_usd"] > 0
    usage = run.assistant_usage()
    assert len(usage) == 2  # one per API message, however many lines each became
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage.values())


def test_a_command_hooks_additional_context_reaches_the_first_model_request(
    claude_binary: Path, tmp_path: Path
) -> None:
    log = tmp_path / "hook-stdin.jsonl"
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import json, os, sys\n"
        "data = json.load(sys.stdin)\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'input': data, 'bir_home': os.environ.get('BIR_HOME')}) + '\\n')\n"
        "out = {'hookEventName': 'UserPromptSubmit', 'additionalContext': 'MARK'}\n"
        "print(json.dumps({'hookSpecificOutput': out}))\n",
        encoding="utf-8",
    )
    hooks = {"hooks": {"UserPromptSubmit": [command_hook(f"{sys.executable} {hook}", timeout_s=30)]}}
    project = write_project(tmp_path / "project", settings=hooks)
    api = FakeMessagesApi([say("hello")])
    with api.serve():
        run = run_claude(claude_binary, project, "say hi", api_url=api.url)

    assert run.exit_code == 0, run.describe()
    assert len(api.requests) == 1
    assert "UserPromptSubmit hook additional context: MARK" in api.requests[0].text()
    seen = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert len(seen) == 1
    assert seen[0]["input"]["hook_event_name"] == "UserPromptSubmit"
    assert seen[0]["input"]["prompt"] == "say hi"
    assert seen[0]["input"]["session_id"] == run.session_id
    assert seen[0]["input"]["transcript_path"] == str(run.transcript_path)
    assert seen[0]["bir_home"] == os.environ["BIR_HOME"]  # the test's own home, passed through
    assert run.transcript_path.exists()


def test_a_local_scope_server_in_the_users_config_is_started_and_a_stream_json_run_reports_each_event(
    claude_binary: Path, tmp_path: Path
) -> None:
    project = write_project(tmp_path / "project")
    write_local_mcp(tmp_path, project, FLEET)
    api = FakeMessagesApi([call("mcp__fleet__get_device", {"id": "dev-002"}, tool_id="toolu_get")])
    with api.serve():
        run = run_claude(
            claude_binary,
            project,
            "show dev-002",
            api_url=api.url,
            allowed_tools=["mcp__fleet"],
            output_format="stream-json",
        )

    assert run.exit_code == 0, run.describe()
    assert len(api.requests) == 2
    assert json.loads(api.requests[1].tool_result_text("toolu_get"))["id"] == "dev-002"
    assert run.events[0]["type"] == "system"
    assert run.result is not None
    assert run.result["type"] == "result"
    assert run.result["result"] == "Done."
