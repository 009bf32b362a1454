"""Which tool calls are bir's own housekeeping and never recorded."""

from __future__ import annotations

import pytest

from bir.core.housekeeping import is_housekeeping


@pytest.mark.parametrize(
    "command",
    [
        "bir scenario show scn_1 && cd x",
        "bir doctor",
        "cd /tmp && bir status --json 2>&1",
        "BIR_HOME=/x bir doctor",
        "/usr/local/bin/bir scenario list",
        "bir login; bir replay on",
        "bir-hooks revive || bir doctor",
    ],
)
def test_a_shell_command_made_only_of_bir_invocations_is_housekeeping(command: str) -> None:
    assert is_housekeeping("Bash", {"command": command})


@pytest.mark.parametrize(
    "command",
    [
        "bir x; rm -rf /",
        "bir x | sh",
        "bir scenario show $(rm -rf /)",
        "bir x `whoami`",
        "cd /tmp",
        "ls && bir doctor",
        "birx status",
        "bir x &",
        "bir 'unclosed",
        "",
    ],
)
def test_a_shell_command_with_anything_but_bir_and_cd_is_recorded(command: str) -> None:
    assert not is_housekeeping("Bash", {"command": command})


def test_bir_mcp_tools_and_tool_search_are_housekeeping() -> None:
    assert is_housekeeping("mcp__bir__run_scenario", {"request": "x"})
    assert is_housekeeping("mcp__bir__scenario_show", {})
    assert is_housekeeping("mcp__bir__hook", {"session_id": "s", "hook_event_name": "PreToolUse"})
    assert is_housekeeping("ToolSearch", {"query": "select:mcp__bir__run_scenario"})


@pytest.mark.parametrize(
    "tool", ["scenario_show", "scenario_edits", "investigate", "scenario_check", "scenario_edit", "scenario_undo"]
)
def test_the_bir_servers_scenario_tools_are_housekeeping_never_recorded(tool: str) -> None:
    assert is_housekeeping(f"mcp__bir__{tool}", {"target": "scn_1", "step": 1, "inputLogic": "return {};"})


def test_a_bash_call_of_bir_scenario_commands_is_housekeeping_and_a_pipe_is_not() -> None:
    assert is_housekeeping("Bash", {"command": "cd /tmp && bir scenario edit scn_1 --step 1 --output-logic out.js"})
    assert is_housekeeping("Bash", {"command": "bir scenario undo scn_1 --step 1; bir investigate scn_1"})
    assert not is_housekeeping("Bash", {"command": "bir scenario show scn_1 | tee out.json"})


def test_other_tools_and_malformed_inputs_are_not_housekeeping() -> None:
    assert not is_housekeeping("mcp__fleet__list_devices", {})
    assert not is_housekeeping("mcp__birds__list", {})
    assert not is_housekeeping("Read", {"file_path": "/x"})
    assert not is_housekeeping("Bash", {"command": 42})
    assert not is_housekeeping("Bash", "bir doctor")
    assert not is_housekeeping("Bash", {})


def test_a_powershell_command_of_bir_and_set_location_is_housekeeping() -> None:
    assert is_housekeeping("PowerShell", {"command": "Set-Location C:\\work; bir.exe doctor"})
    assert not is_housekeeping("PowerShell", {"command": "bir doctor; Remove-Item -Recurse C:\\x"})
