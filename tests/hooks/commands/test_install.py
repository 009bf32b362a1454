"""``bir install`` / ``bir uninstall`` as a person or a script runs them: the real console script, in a
temp HOME and project; on a terminal (a real pseudo-terminal) and without one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bir.core import installed
from tests.terminal import BIR, on_a_terminal

FLEET = {"command": "python", "args": ["-m", "fleet"]}
WEB = {"type": "http", "url": "https://example.invalid/mcp"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    values = {k: v for k, v in os.environ.items() if k != "CLAUDE_CONFIG_DIR"}
    values["HOME"] = str(home)
    return values


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project as a fresh clone has it: .mcp.json servers Claude Code never approved."""
    path = tmp_path / "project"
    path.mkdir()
    (path / ".mcp.json").write_text(json.dumps({"mcpServers": {"fleet": FLEET, "db": {"command": "db"}, "web": WEB}}))
    return path.resolve()


def _bir(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIR, *args], capture_output=True, text=True, env=env, check=False, stdin=subprocess.DEVNULL)


def _settings(project: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((project / ".claude" / "settings.local.json").read_text())
    return doc


def _local(env: dict[str, str], project: Path) -> dict[str, Any]:
    servers: dict[str, Any] = json.loads((Path(env["HOME"]) / ".claude.json").read_text())["projects"][str(project)][
        "mcpServers"
    ]
    return servers


def test_the_commands_say_what_changed_and_how_to_undo_it(env: dict[str, str], project: Path) -> None:
    done = _bir("install", "--yes", "--project", str(project), env=env)
    assert done.returncode == 0, done.stderr
    assert "settings.local.json" in done.stdout
    assert "web (http server: not wrapped)" in done.stdout
    assert "Replay is off" in done.stdout
    assert "bir uninstall" in done.stdout

    done = _bir("install", "--replay", "--json", "--project", str(project), env=env)
    report = json.loads(done.stdout)
    assert report["replay"] is True
    assert report["birServer"] is True
    assert report["hookStyle"] == "mcp_tool"
    # The `bir` server was already there: replay on is the store's switch alone.
    assert report["filesChanged"] == []

    done = _bir("uninstall", "--project", str(project), env=env)
    assert done.returncode == 0
    assert "uninstalled" in done.stdout
    assert "Approvals bir had recorded in Claude Code taken back: fleet, db." in done.stdout


def test_the_command_exits_1_naming_a_bad_file(env: dict[str, str], project: Path) -> None:
    claude_json = Path(env["HOME"]) / ".claude.json"
    claude_json.write_text("[1")
    done = _bir("install", "--project", str(project), env=env)
    assert done.returncode == 1
    assert str(claude_json) in done.stderr
    assert done.stdout == ""


def test_without_a_terminal_or_a_flag_nothing_is_approved_and_each_server_is_named_with_the_command_that_wraps_it(
    env: dict[str, str], project: Path
) -> None:
    done = _bir("install", "--replay", "--project", str(project), env=env)

    assert done.returncode == 0, done.stderr
    assert "fleet: python -m fleet — to wrap it: bir install --replay --project" in done.stdout
    assert f"--project {project} --approve fleet" in done.stdout
    assert "--approve db" in done.stdout
    assert "enabledMcpjsonServers" not in _settings(project)
    assert set(_local(env, project)) == {"bir"}
    report = json.loads(_bir("install", "--replay", "--json", "--project", str(project), env=env).stdout)
    assert report["serversUnapproved"] == {"fleet": "python -m fleet", "db": "db"}
    assert report["wrapCommands"]["fleet"].endswith("--approve fleet")

    # The command it named wraps the server, and only that one.
    again = _bir(*report["wrapCommands"]["fleet"].split()[1:], env=env)
    assert again.returncode == 0, again.stderr
    assert _settings(project)["enabledMcpjsonServers"] == ["fleet"]
    assert set(_local(env, project)) == {"bir", "fleet"}


def test_approve_takes_names_and_refuses_one_bir_cannot_approve(env: dict[str, str], project: Path) -> None:
    done = _bir("install", "--approve", "fleet,db", "--project", str(project), env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(_settings(project)["enabledMcpjsonServers"]) == ["db", "fleet"]

    refused = _bir("install", "--approve", "nosuch", "--project", str(project), env=env)
    assert refused.returncode == 1
    assert "nosuch is not a server of this project's .mcp.json (its servers: db, fleet, web)" in refused.stderr

    both = _bir("install", "--yes", "--approve", "db", "--project", str(project), env=env)
    assert both.returncode == 2
    assert "--yes or --approve, not both" in both.stderr


def test_on_a_terminal_install_asks_about_each_unapproved_server_showing_its_command_line(
    env: dict[str, str], project: Path
) -> None:
    code, shown = on_a_terminal(["install", "--replay", "--project", str(project)], env, ["y", "n"])

    assert code == 0, shown
    assert "2 .mcp.json servers of this project are not approved in Claude Code yet" in shown
    assert "  fleet: python -m fleet\nWrap fleet (and allow it in Claude Code)? [y/N]" in shown
    assert "  db: db\nWrap db (and allow it in Claude Code)? [y/N]" in shown
    assert "web" not in shown.split("bir is installed")[0]
    assert _settings(project)["enabledMcpjsonServers"] == ["fleet"]
    assert set(_local(env, project)) == {"bir", "fleet"}
    stored = installed.project(project)
    assert stored is not None
    assert stored.install["approvedServers"] == ["fleet"]


def test_uninstall_replay_only_turns_replay_off_and_says_the_bir_server_stays(
    env: dict[str, str], project: Path
) -> None:
    assert _bir("install", "--replay", "--project", str(project), env=env).returncode == 0
    done = _bir("uninstall", "--replay", "--project", str(project), env=env)
    assert done.returncode == 0, done.stderr
    assert "lists no tools from now on" in done.stdout
    assert "bir" in _local(env, project)


def test_mcp_hooks_is_still_accepted_and_command_hooks_opts_out(env: dict[str, str], project: Path) -> None:
    assert _bir("install", "--mcp-hooks", "--project", str(project), env=env).returncode == 0
    assert _settings(project)["hooks"]["PreToolUse"][0]["hooks"][0]["type"] == "mcp_tool"
    assert _bir("install", "--command-hooks", "--project", str(project), env=env).returncode == 0
    assert _settings(project)["hooks"]["PreToolUse"][0]["hooks"][0]["type"] == "command"
