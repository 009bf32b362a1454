"""What ``bir install`` writes and ``bir uninstall`` takes back (``bir.hooks.wiring``), against real files in
a temp HOME and project."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from bir.core import installed
from bir.hooks import api
from bir.hooks.wiring import (
    HOOK_EVENTS,
    InstallError,
    find_executables,
    install,
    merge_hooks,
    uninstall,
    unwrapped_servers,
    wrap_approved,
)

EXES = find_executables()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    values = {k: v for k, v in os.environ.items() if k != "CLAUDE_CONFIG_DIR"}
    values["HOME"] = str(home)
    return values


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def _claude_json(env: dict[str, str]) -> Path:
    return Path(env["HOME"]) / ".claude.json"


def _write_json(path: Path, value: Any, indent: int | None = 2) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(value, indent=indent).encode()
    path.write_bytes(data)
    return data


def _local(env: dict[str, str], project: Path) -> dict[str, Any]:
    doc = json.loads(_claude_json(env).read_text())
    servers: dict[str, Any] = doc["projects"][str(project)]["mcpServers"]
    return servers


def _settings(project: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((project / ".claude" / "settings.local.json").read_text())
    return doc


CLAUDE_DOC: dict[str, Any] = {
    "numStartups": 3,
    "mcpServers": {
        "usr": {"type": "stdio", "command": "usr-server", "args": ["--x"], "env": {"TOKEN": "t"}},
        "web": {"type": "http", "url": "https://example.invalid/mcp"},
    },
    "projects": {},
    "zLast": True,
}


def _seed(env: dict[str, str], project: Path, local: dict[str, Any] | None = None) -> bytes:
    doc = json.loads(json.dumps(CLAUDE_DOC))
    doc["projects"][str(project)] = {
        "allowedTools": [],
        "mcpServers": local or {},
        "enabledMcpjsonServers": ["fleet"],
        "hasTrustDialogAccepted": True,
    }
    _write_json(project / ".mcp.json", {"mcpServers": {"fleet": {"command": "python", "args": ["-m", "fleet"]}}})
    data = _write_json(_claude_json(env), doc)
    _claude_json(env).chmod(0o600)
    return data


def test_install_writes_the_seven_hooks_with_their_timeouts_and_never_async(env: dict[str, str], project: Path) -> None:
    _seed(env, project)
    change = install(project, replay=False, exes=EXES, env=env, command_hooks=True)

    hooks = _settings(project)["hooks"]
    assert list(hooks) == list(HOOK_EVENTS)
    for event, (timeout, tool_event) in HOOK_EVENTS.items():
        [group] = hooks[event]
        assert ("matcher" in group) is tool_event
        if tool_event:
            assert group["matcher"] == "*"
        [hook] = group["hooks"]
        assert hook == {"type": "command", "command": f"{EXES.hook} {event}", "timeout": timeout}
        assert Path(hook["command"].split()[0]).is_file()
    assert {e: t for e, (t, _) in HOOK_EVENTS.items()} == {
        "SessionStart": 10,
        "UserPromptSubmit": 10,
        "PreToolUse": 15,
        "PostToolUse": 5,
        "PostToolUseFailure": 5,
        "Stop": 5,
        "SessionEnd": 5,
    }
    assert change.files_created == [str(project / ".claude" / "settings.local.json")]
    assert change.files_changed == [str(_claude_json(env))]


def test_install_wraps_stdio_servers_of_every_scope_in_the_local_scope_and_leaves_http_alone(
    env: dict[str, str], project: Path
) -> None:
    _seed(env, project)
    change = install(project, replay=False, exes=EXES, env=env)

    local = _local(env, project)
    assert local["fleet"] == {
        "type": "stdio",
        "command": str(EXES.proxy),
        "args": ["--server-name", "fleet", "--", "python", "-m", "fleet"],
        "env": {},
    }
    assert local["usr"] == {
        "type": "stdio",
        "command": str(EXES.proxy),
        "args": ["--server-name", "usr", "--", "usr-server", "--x"],
        "env": {"TOKEN": "t"},
    }
    assert "web" not in local
    # The `bir` server is always there: it carries the tool events' hooks (and lists no tools without replay).
    assert local["bir"] == {"type": "stdio", "command": str(EXES.scenario), "args": [], "env": {}}
    assert change.servers_left == {"web": "http server: not wrapped"}
    assert sorted(change.servers_wrapped) == ["fleet", "usr"]
    # The project's own file is never touched.
    assert json.loads((project / ".mcp.json").read_text())["mcpServers"]["fleet"]["command"] == "python"
    assert installed.project(project) is not None


def test_install_keeps_every_other_key_and_the_files_mode(env: dict[str, str], project: Path) -> None:
    _seed(env, project)
    install(project, replay=False, exes=EXES, env=env)
    doc = json.loads(_claude_json(env).read_text())
    assert list(doc) == ["numStartups", "mcpServers", "projects", "zLast"]
    assert list(doc["projects"][str(project)]) == [
        "allowedTools",
        "mcpServers",
        "enabledMcpjsonServers",
        "hasTrustDialogAccepted",
    ]
    assert doc["mcpServers"] == CLAUDE_DOC["mcpServers"]
    assert stat.S_IMODE(_claude_json(env).stat().st_mode) == 0o600


def test_install_twice_changes_nothing_the_second_time(env: dict[str, str], project: Path, tmp_path: Path) -> None:
    _seed(env, project)
    install(project, replay=True, exes=EXES, env=env)
    settings = (project / ".claude" / "settings.local.json").read_bytes()
    claude = _claude_json(env).read_bytes()
    store = installed.load()

    again = install(project, replay=True, exes=EXES, env=env)

    assert again.files_changed == []
    assert again.files_created == []
    assert again.backup_dir is None
    assert (project / ".claude" / "settings.local.json").read_bytes() == settings
    assert _claude_json(env).read_bytes() == claude
    assert installed.load() == store
    assert sorted(again.servers_wrapped) == ["fleet", "usr"]


def test_foreign_hooks_stay_in_order_and_bir_is_replaced_in_place(env: dict[str, str], project: Path) -> None:
    foreign_a = {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint.sh"}]}
    old_bir = {"matcher": "*", "hooks": [{"type": "command", "command": "/old/bin/bir-hook PreToolUse", "timeout": 9}]}
    foreign_b = {"hooks": [{"type": "http", "url": "http://127.0.0.1:1/x"}]}
    mixed = {"hooks": [{"type": "command", "command": "mine"}, {"type": "command", "command": "/old/bir-hook Stop"}]}
    settings = {
        "permissions": {"allow": ["Bash(ls)"]},
        "hooks": {"Notification": [foreign_a], "PreToolUse": [foreign_a, old_bir, foreign_b], "Stop": [mixed]},
        "env": {"A": "1"},
    }
    _write_json(project / ".claude" / "settings.local.json", settings)

    install(project, replay=False, exes=EXES, env=env, command_hooks=True)

    after = _settings(project)
    assert list(after) == ["permissions", "hooks", "env"]
    assert list(after["hooks"])[:3] == ["Notification", "PreToolUse", "Stop"]
    assert after["hooks"]["Notification"] == [foreign_a]
    pre = after["hooks"]["PreToolUse"]
    assert pre[0] == foreign_a
    assert pre[1] == {
        "matcher": "*",
        "hooks": [{"type": "command", "command": f"{EXES.hook} PreToolUse", "timeout": 15}],
    }
    assert pre[2] == foreign_b
    assert after["hooks"]["Stop"] == [
        {
            "hooks": [
                {"type": "command", "command": "mine"},
                {"type": "command", "command": f"{EXES.hook} Stop", "timeout": 5},
            ]
        }
    ]


def test_uninstall_restores_both_files_byte_for_byte(env: dict[str, str], project: Path) -> None:
    original_claude = _seed(
        env, project, local={"fleet": {"type": "stdio", "command": "own-fleet", "args": [], "env": {}}}
    )
    settings_path = project / ".claude" / "settings.local.json"
    settings_path.parent.mkdir()
    original_settings = b'{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "bye"}]}]}, "x": 1}\n'
    settings_path.write_bytes(original_settings)
    settings_path.chmod(0o640)

    install(project, replay=True, exes=EXES, env=env)
    assert _local(env, project)["fleet"]["command"] == str(EXES.proxy)
    change = uninstall(project, env=env)

    assert settings_path.read_bytes() == original_settings
    assert stat.S_IMODE(settings_path.stat().st_mode) == 0o640
    assert _claude_json(env).read_bytes() == original_claude
    assert installed.project(project) is None
    assert change.files_removed == []


def test_uninstall_removes_the_files_install_created(env: dict[str, str], project: Path) -> None:
    install(project, replay=False, exes=EXES, env=env)
    assert (project / ".claude" / "settings.local.json").exists()
    change = uninstall(project, env=env)
    assert not (project / ".claude").exists()
    assert not _claude_json(env).exists()
    assert sorted(change.files_removed) == sorted(
        [str(project / ".claude" / "settings.local.json"), str(_claude_json(env))]
    )


def test_uninstall_after_claude_code_rewrote_its_config_keeps_that_and_restores_the_old_local_server(
    env: dict[str, str], project: Path
) -> None:
    own = {"type": "stdio", "command": "own-fleet", "args": ["a"], "env": {"K": "V"}}
    _seed(env, project, local={"fleet": own})
    install(project, replay=True, exes=EXES, env=env)
    # Claude Code rewrites its config while it runs: a counter, and a server the user added meanwhile.
    doc = json.loads(_claude_json(env).read_text())
    doc["numStartups"] = 4
    doc["projects"][str(project)]["mcpServers"]["added"] = {"type": "stdio", "command": "new", "args": [], "env": {}}
    _write_json(_claude_json(env), doc)

    change = uninstall(project, env=env)

    after = json.loads(_claude_json(env).read_text())
    assert after["numStartups"] == 4
    assert after["projects"][str(project)]["mcpServers"] == {
        "fleet": own,
        "added": {"type": "stdio", "command": "new", "args": [], "env": {}},
    }
    assert change.servers_restored == ["fleet"]


def test_a_project_server_the_user_has_not_approved_is_not_wrapped(env: dict[str, str], project: Path) -> None:
    _seed(env, project)
    servers = {"fleet": {"command": "python"}, "new": {"command": "evil", "args": ["--all"]}, "off": {"command": "x"}}
    _write_json(project / ".mcp.json", {"mcpServers": servers})
    doc = json.loads(_claude_json(env).read_text())
    doc["projects"][str(project)]["disabledMcpjsonServers"] = ["off"]
    _write_json(_claude_json(env), doc)

    change = install(project, replay=False, exes=EXES, env=env)

    assert set(_local(env, project)) == {"fleet", "usr", "bir"}
    assert "not approved" in change.servers_left["new"]
    assert change.servers_unapproved == {"new": "evil --all"}
    assert change.servers_left["off"] == "rejected in Claude Code for this project"
    assert "enabledMcpjsonServers" not in _settings(project)


def test_enable_all_project_servers_in_the_settings_approves_them(env: dict[str, str], project: Path) -> None:
    _write_json(project / ".mcp.json", {"mcpServers": {"a": {"command": "a"}, "b": {"command": "b"}}})
    _write_json(project / ".claude" / "settings.json", {"enableAllProjectMcpServers": True})
    change = install(project, replay=False, exes=EXES, env=env)
    assert sorted(change.servers_wrapped) == ["a", "b"]


def test_a_server_already_behind_bir_proxy_is_not_wrapped_twice(env: dict[str, str], project: Path) -> None:
    wrapped = {"type": "stdio", "command": str(EXES.proxy), "args": ["--server-name", "w", "--", "w"], "env": {}}
    _seed(env, project, local={"w": wrapped})
    install(project, replay=False, exes=EXES, env=env)
    assert _local(env, project)["w"] == wrapped
    uninstall(project, env=env)
    # It was there before install: it is the user's, and stays.
    assert _local(env, project)["w"] == wrapped


def test_install_refuses_a_file_that_is_not_json_and_changes_nothing(env: dict[str, str], project: Path) -> None:
    original = _seed(env, project)
    bad = project / ".claude" / "settings.local.json"
    bad.parent.mkdir()
    bad.write_text('{"hooks": ')
    with pytest.raises(InstallError, match=r"settings\.local\.json is not valid JSON"):
        install(project, replay=True, exes=EXES, env=env)
    assert bad.read_text() == '{"hooks": '
    assert _claude_json(env).read_bytes() == original
    assert installed.project(project) is None


def test_install_refuses_a_claude_config_that_is_not_json(env: dict[str, str], project: Path) -> None:
    _claude_json(env).write_text("{oops")
    with pytest.raises(InstallError, match=r"\.claude\.json is not valid JSON"):
        install(project, replay=False, exes=EXES, env=env)
    assert not (project / ".claude").exists()
    assert _claude_json(env).read_text() == "{oops"


def test_uninstall_replay_only_turns_replay_off_and_the_bir_server_with_its_hooks_stays(
    env: dict[str, str], project: Path
) -> None:
    _seed(env, project)
    install(project, replay=True, exes=EXES, env=env)
    switches = installed.project(project)
    assert switches is not None
    assert switches.replay is True
    settings, claude = (project / ".claude" / "settings.local.json").read_bytes(), _claude_json(env).read_bytes()

    change = uninstall(project, replay_only=True, env=env)

    # The `bir` server carries the tool events' hooks: it stays, and lists no tools while replay is off.
    assert (project / ".claude" / "settings.local.json").read_bytes() == settings
    assert _claude_json(env).read_bytes() == claude
    assert change.files_changed == []
    switches = installed.project(project)
    assert switches is not None
    assert switches.replay is False


def test_install_without_replay_turns_it_off_and_clears_down(env: dict[str, str], project: Path) -> None:
    _seed(env, project)
    install(project, replay=True, exes=EXES, env=env)
    installed.update(project, down=True)
    install(project, replay=False, exes=EXES, env=env)
    switches = installed.project(project)
    assert switches is not None
    assert (switches.replay, switches.down) == (False, False)
    assert _local(env, project)["bir"]["command"] == str(EXES.scenario)


def test_claude_config_dir_moves_the_user_config(env: dict[str, str], project: Path, tmp_path: Path) -> None:
    env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "cfg")
    install(project, replay=False, exes=EXES, env=env)
    assert (tmp_path / "cfg" / ".claude.json").exists()
    assert not _claude_json(env).exists()


def test_merge_hooks_refuses_hooks_that_are_not_an_object() -> None:
    with pytest.raises(InstallError, match='"hooks" is not an object'):
        merge_hooks({"hooks": []}, EXES)


# -- the tool events as mcp_tool hooks on the bir server (the default) -------------------------------------


def _mcp_hook(event: str) -> dict[str, Any]:
    return {
        "type": "mcp_tool",
        "server": "bir",
        "tool": "hook",
        "input": {name: "${" + name + "}" for name in api.MCP_HOOK_FIELDS},
        "timeout": HOOK_EVENTS[event][0],
    }


def test_by_default_the_tool_events_are_mcp_tool_hooks_and_the_other_four_commands(
    env: dict[str, str], project: Path
) -> None:
    _seed(env, project)
    change = install(project, replay=False, exes=EXES, env=env)

    hooks = _settings(project)["hooks"]
    assert list(hooks) == list(HOOK_EVENTS)
    for event, (timeout, _) in HOOK_EVENTS.items():
        [group] = hooks[event]
        [hook] = group["hooks"]
        if event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
            assert group["matcher"] == "*"
            assert hook == _mcp_hook(event)
        else:
            assert hook == {"type": "command", "command": f"{EXES.hook} {event}", "timeout": timeout}
    assert hooks["PreToolUse"][0]["hooks"][0]["input"]["tool_input"] == "${tool_input}"
    assert _local(env, project)["bir"]["command"] == str(EXES.scenario)
    assert change.mcp_hooks is True
    assert installed.project(project) is not None


def test_installing_again_with_command_hooks_puts_the_commands_in_place_and_back(
    env: dict[str, str], project: Path
) -> None:
    _seed(env, project)
    install(project, replay=True, exes=EXES, env=env, command_hooks=True)
    plain = _settings(project)
    install(project, replay=True, exes=EXES, env=env)
    assert _settings(project) != plain
    install(project, replay=True, exes=EXES, env=env, command_hooks=True)
    assert _settings(project) == plain


def test_uninstall_restores_every_byte_of_settings_that_had_foreign_hooks(env: dict[str, str], project: Path) -> None:
    original_claude = _seed(env, project)
    settings_path = project / ".claude" / "settings.local.json"
    settings_path.parent.mkdir()
    theirs = {"type": "command", "command": "lint"}
    original_settings = _write_json(settings_path, {"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [theirs]}]}})
    install(project, replay=True, exes=EXES, env=env)
    assert _settings(project)["hooks"]["PostToolUse"][0]["hooks"] == [theirs]

    uninstall(project, env=env)
    assert settings_path.read_bytes() == original_settings
    assert _claude_json(env).read_bytes() == original_claude


def test_uninstall_takes_the_mcp_hooks_out_exactly_when_someone_changed_the_file_since(
    env: dict[str, str], project: Path
) -> None:
    _seed(env, project)
    install(project, replay=True, exes=EXES, env=env)
    settings_path = project / ".claude" / "settings.local.json"
    doc = _settings(project)
    doc["permissions"] = {"allow": ["Bash(ls)"]}
    _write_json(settings_path, doc)

    uninstall(project, env=env)

    assert _settings(project) == {"permissions": {"allow": ["Bash(ls)"]}}


# -- .mcp.json servers Claude Code has not approved ---------------------------------------------------------


def _unapproved_project(env: dict[str, str], project: Path) -> None:
    """A project as a fresh clone has it: two .mcp.json servers, one turned down, none approved yet."""
    servers = {
        "fleet": {"command": "python", "args": ["-m", "fleet"]},
        "db": {"command": "db-server"},
        "gone": {"command": "nope"},
        "web": {"type": "http", "url": "https://example.invalid/mcp"},
    }
    _write_json(project / ".mcp.json", {"mcpServers": servers})
    _write_json(project / ".claude" / "settings.local.json", {"disabledMcpjsonServers": ["gone"]})


def test_a_server_approved_through_install_is_recorded_where_claude_code_keeps_approvals_and_wrapped(
    env: dict[str, str], project: Path
) -> None:
    _unapproved_project(env, project)
    change = install(project, replay=True, exes=EXES, env=env, approve=frozenset({"fleet"}))

    assert change.servers_approved == ["fleet"]
    assert change.servers_unapproved == {"db": "db-server"}
    # Where Claude Code's own "New MCP server found" dialog writes the user's yes (2.1.197 and 2.1.332).
    assert _settings(project)["enabledMcpjsonServers"] == ["fleet"]
    assert _local(env, project)["fleet"]["args"] == ["--server-name", "fleet", "--", "python", "-m", "fleet"]
    assert "db" not in _local(env, project)
    assert "web" not in _local(env, project)


def test_yes_approves_every_unapproved_stdio_server_but_never_one_the_user_turned_down(
    env: dict[str, str], project: Path
) -> None:
    _unapproved_project(env, project)
    change = install(project, replay=True, exes=EXES, env=env, approve="all")
    assert sorted(change.servers_approved) == ["db", "fleet"]
    assert change.servers_unapproved == {}
    settings = _settings(project)
    assert sorted(settings["enabledMcpjsonServers"]) == ["db", "fleet"]
    assert settings["disabledMcpjsonServers"] == ["gone"]
    assert "gone" not in _local(env, project)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("gone", "turned down in Claude Code"),
        ("nosuch", "not a server of this project's .mcp.json"),
        ("web", "http server: not wrapped"),
    ],
)
def test_approving_a_server_bir_cannot_approve_is_refused_and_changes_nothing(
    env: dict[str, str], project: Path, name: str, message: str
) -> None:
    _unapproved_project(env, project)
    before = (project / ".claude" / "settings.local.json").read_bytes()
    with pytest.raises(InstallError, match=message):
        install(project, replay=True, exes=EXES, env=env, approve=frozenset({name}))
    assert (project / ".claude" / "settings.local.json").read_bytes() == before
    assert not _claude_json(env).exists()
    assert installed.project(project) is None


def test_uninstall_takes_back_only_the_approvals_bir_added_byte_for_byte_or_by_name(
    env: dict[str, str], project: Path
) -> None:
    _unapproved_project(env, project)
    settings_path = project / ".claude" / "settings.local.json"
    original = settings_path.read_bytes()
    install(project, replay=True, exes=EXES, env=env, approve=frozenset({"fleet"}))
    change = uninstall(project, env=env)
    assert settings_path.read_bytes() == original
    assert change.approvals_taken_back == ["fleet"]

    install(project, replay=True, exes=EXES, env=env, approve=frozenset({"fleet"}))
    # Then the user approves db in Claude Code's dialog, which rewrites the file.
    doc = _settings(project)
    doc["enabledMcpjsonServers"].append("db")
    _write_json(settings_path, doc)
    uninstall(project, env=env)
    assert _settings(project) == {"disabledMcpjsonServers": ["gone"], "enabledMcpjsonServers": ["db"]}


def test_a_server_approved_in_claude_code_after_the_install_is_wrapped_once_for_the_next_session(
    env: dict[str, str], project: Path
) -> None:
    _unapproved_project(env, project)
    install(project, replay=True, exes=EXES, env=env)
    assert "fleet" not in _local(env, project)
    assert [u.name for u in unwrapped_servers(project, env) if u.fix] == ["db", "fleet"]

    # The user says yes in Claude Code's dialog: it writes the approval into settings.local.json.
    doc = _settings(project)
    doc["enabledMcpjsonServers"] = ["fleet"]
    _write_json(project / ".claude" / "settings.local.json", doc)
    assert (
        "approved in Claude Code since bir install" in {u.name: u.why for u in unwrapped_servers(project, env)}["fleet"]
    )

    assert wrap_approved(project, exes=EXES, env=env) == ["fleet"]
    assert _local(env, project)["fleet"]["command"] == str(EXES.proxy)
    assert wrap_approved(project, exes=EXES, env=env) == []
    assert "fleet" not in {u.name for u in unwrapped_servers(project, env)}

    uninstall(project, env=env)
    # Install had created the user config; the late wrap's entry goes with it.
    assert not _claude_json(env).exists()


def test_nothing_is_wrapped_late_where_bir_is_not_installed(env: dict[str, str], project: Path) -> None:
    _unapproved_project(env, project)
    _write_json(project / ".claude" / "settings.local.json", {"enabledMcpjsonServers": ["fleet"]})
    assert wrap_approved(project, exes=EXES, env=env) == []
    assert not _claude_json(env).exists()
