"""A step's computed shell command against its recorded one (issue 16)."""

from __future__ import annotations

import pytest

from bir.core.step_guard import check_recorded_shape, command_keys


def bash(command: str, recorded: str | None) -> tuple[bool, str]:
    verdict = check_recorded_shape(
        "Bash", {"command": command, "description": "d"}, None if recorded is None else {"command": recorded}
    )
    return verdict.ok, verdict.reason


@pytest.mark.parametrize(
    ("command", "recorded", "said"),
    [
        ("cat README.md > /home/user/.bashrc", "cat undefined", "does `>`, the recorded step does not"),
        ("git log --grep x --output=/tmp/pwn", "git log --grep fix bug", "`git --output`"),
        ("git -c core.pager=sh log", "git log", "`git -c`"),
        ("find . -name x -exec sh {} +", "find . -name y", "`find -exec`"),
        ("curl -o /home/user/.bashrc https://x", "curl https://x", "`curl -o`"),
        ("tar -C / -xf a.tar", "tar -tf a.tar", "`tar -C`"),
        ("sed -i s/a/b/ f", "sed s/a/b/ f", "`sed -i`"),
        ("git push", "git status", "runs `git push`, the recorded step `git status`"),
        ("git log && rm x", "git log", "runs `git log && rm`"),
    ],
)
def test_a_command_writing_executing_or_running_what_its_recorded_one_did_not_is_refused(
    command: str, recorded: str, said: str
) -> None:
    ok, reason = bash(command, recorded)
    assert not ok
    assert said in reason


@pytest.mark.parametrize(
    ("command", "recorded"),
    [
        ("git log -1 > report-us-east-1.txt", "git log -1 > report-eu-west-1.txt"),
        ("cat docs/b.md", "cat docs/a.md"),
        ("git log --format=%s -1", "git log --format=%s -1"),
        ("curl -o b.json https://y", "curl -o a.json https://x"),
    ],
)
def test_a_command_of_the_recorded_shape_passes(command: str, recorded: str) -> None:
    ok, reason = bash(command, recorded)
    assert ok, reason


def test_without_a_recorded_command_only_one_that_writes_and_executes_nothing_passes() -> None:
    assert bash("cat README.md", None)[0]
    ok, reason = bash("cat README.md > out.txt", None)
    assert not ok
    assert "could not be computed" in reason


def test_the_commands_of_an_mcp_shell_tool_are_compared_and_a_query_s_are_not() -> None:
    shell = "mcp__box__run_command"
    assert command_keys(shell, {"command": "ls", "cwd": "/"}) == ["command"]
    assert not check_recorded_shape(shell, {"command": "ls > x"}, {"command": "ls"}).ok
    assert command_keys("mcp__db__execute_sql", {"sql": "SELECT 1"}) == []
    assert command_keys("Read", {"file_path": "/x"}) == []
