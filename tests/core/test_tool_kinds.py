"""Which tools run their input, judged from names in any naming convention."""

from __future__ import annotations

import pytest

from bir.core.tool_kinds import input_is_run, name_words, runs_powershell, runs_shell, writes_file


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("executeSql", ("execute", "sql")),
        ("RunSQLQuery", ("run", "sql", "query")),
        ("run_query", ("run", "query")),
        ("db-shell", ("db", "shell")),
        ("get_v2_items", ("get", "v", "2", "items")),
    ],
)
def test_names_split_into_words_in_any_convention(name: str, words: tuple[str, ...]) -> None:
    assert name_words(name) == words


@pytest.mark.parametrize(
    "tool",
    [
        "Bash",
        "PowerShell",
        "mcp__postgres__query",
        "mcp__db__run_query",
        "mcp__db__executeSql",
        "mcp__db-shell__run",
        "mcp__mysql__list",
        "mcp__warehouse__RunStatement",
        "mcp__box__exec",
        "mcp__api__graphql",
        "mcp__ops__run_command",
    ],
)
def test_tools_named_for_running_input_run_it(tool: str) -> None:
    assert input_is_run(tool)


@pytest.mark.parametrize(
    "tool",
    ["Read", "Edit", "Write", "WebFetch", "mcp__fleet__list_devices", "mcp__github__search_issues", "mcp__shelly__x"],
)
def test_other_tools_do_not_run_their_input(tool: str) -> None:
    assert not input_is_run(tool)


def test_a_query_language_in_the_name_wins_over_a_shell_word() -> None:
    assert not runs_shell("mcp__db__exec_sql_command")
    assert runs_shell("mcp__db-shell__run")
    assert runs_powershell("mcp__pwsh__invoke")


def test_the_file_writing_built_ins_are_known() -> None:
    assert all(writes_file(t) for t in ("Edit", "MultiEdit", "Write", "NotebookEdit"))
    assert not writes_file("Read")
