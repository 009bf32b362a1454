"""The pin guard: the same tool is not the same call (spec §7)."""

from __future__ import annotations

import pytest

from bir.core.pin_guard import pin_compatible


def bash(model: str, step: str) -> tuple[bool, str]:
    verdict = pin_compatible("Bash", {"command": model}, {"command": step, "description": "step"})
    return verdict.ok, verdict.reason


# --- shell commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "step"),
    [
        ("git push", "git push origin main"),
        ("python -m pytest -q", "python -m pytest"),
        ("python3 -m pytest", "python -m pytest -x"),
        ("uv run pytest", "uv run pytest tests/ -q"),
        ("uv run --with rich pytest", "uv run pytest"),
        ("git push", "bash -c 'git push'"),
        ("bash -lc 'git push origin'", "git push"),
        ("npm run lint", "npm run lint -- --fix"),
        ("npx -y eslint .", "npx eslint src/"),
        ("python deploy.py", "python ./deploy.py --dry-run"),
        ("git -C repo log -1", "git log -1 --format=%s"),
        ("npm test", "npm test -- --watch=false"),
        ("X=1 make build", "make build"),
        ("env CI=1 npm test", "npm test"),
        ("git add .\ngit commit -m x", "git add . ; git commit -m y;"),
        ("cd app && npm test", "cd /srv/app && npm test"),
        ("ls -la src > out.txt 2>&1", "ls"),
        ("git log | head -5", "git log --oneline | head -n 20"),
        ("find . -name x -exec rm {} \\;", "find . -name y -exec rm {} \\;"),
        ("gh pr merge 12", "gh pr merge 13 --squash"),
    ],
)
def test_a_command_with_the_same_heads_chained_the_same_way_pins(model: str, step: str) -> None:
    ok, reason = bash(model, step)
    assert ok, reason


@pytest.mark.parametrize(
    ("model", "step", "said"),
    [
        ("ls", "git push", "the call runs `ls`, the step runs `git push`"),
        ("npm run test", "npm run lint", "`npm run test`"),
        ("git add . && git commit -m x", "git add .; git commit -m x", "chained differently"),
        ("git add .; git commit -m x", "git add . && git commit -m x", "chained differently"),
        ("git pull", "git push", "`git pull`"),
        ("git push && git tag v1", "git push", "2 command(s), the step 1"),
        ("npx prettier .", "npx eslint .", "`npx prettier`"),
        ("python other.py", "python deploy.py", "`python other.py`"),
        ("python -m pip uninstall x", "python -m pip install x", "pip uninstall"),
        ("uv run ruff check", "uv run pytest", "`uv run ruff check`"),
        ("systemctl restart nginx", "sudo systemctl restart nginx", "sudo systemctl restart"),
        ("sudo rm -rf build", "rm -rf build", "sudo rm"),
        ("git stash drop", "git stash pop", "git stash drop"),
        ("gh pr close 1", "gh pr merge 1", "gh pr close"),
        ("git push &", "git push", "chained differently"),
        ("echo ';' rm x", "echo ; rm x", "1 command(s), the step 2"),
        ("bash -c 'git push && rm -rf /'", "git push", "2 command(s), the step 1"),
        ("python -c 'import os'", "python -c 'print(1)'", "python -c"),
        ("mytool destroy", "mytool deploy", "`mytool destroy`"),
    ],
)
def test_a_different_command_or_chain_is_declined(model: str, step: str, said: str) -> None:
    ok, reason = bash(model, step)
    assert not ok
    assert said in reason


def test_a_step_with_a_command_substitution_pins_only_to_an_exact_copy() -> None:
    step = 'git commit -m "release $(date +%F)"'
    assert bash(step, step)[0]
    assert bash(f"  {step}\n", step)[0]
    ok, reason = bash('git commit -m "release"', step)
    assert not ok
    assert "command substitution" in reason
    assert not bash("echo `date`", "echo `whoami`")[0]


def test_an_unreadable_command_is_declined_with_the_lexer_s_reason() -> None:
    ok, reason = bash("echo 'unclosed", "echo hi")
    assert not ok
    assert "No closing quotation" in reason


def test_a_shell_call_without_a_command_is_declined() -> None:
    assert not pin_compatible("Bash", {}, {"command": "git push"}).ok
    assert not pin_compatible("Bash", None, {"command": "git push"}).ok
    assert not pin_compatible("Bash", {"command": 7}, {"command": "git push"}).ok
    assert not pin_compatible("Bash", {"command": "git push"}, {}).ok


def test_powershell_heads_are_compared_without_case() -> None:
    assert pin_compatible(
        "PowerShell", {"command": "get-childitem -Path C:\\src"}, {"command": "Get-ChildItem C:\\other"}
    ).ok
    assert not pin_compatible("PowerShell", {"command": "Remove-Item x"}, {"command": "Get-Item x"}).ok


def test_a_huge_command_pins_only_to_an_exact_copy() -> None:
    step = "echo " + "a" * 300_000
    assert bash(step, step)[0]
    assert not bash(step + "b", step)[0]


# --- files --------------------------------------------------------------------------------------


def test_a_write_to_another_path_is_declined() -> None:
    verdict = pin_compatible("Write", {"file_path": "/repo/notes.txt", "content": "x"}, {"file_path": "/repo/a.txt"})
    assert not verdict.ok
    assert "/repo/notes.txt" in verdict.reason


@pytest.mark.parametrize("tool", ["Edit", "MultiEdit", "Write"])
def test_a_write_to_the_same_file_pins_after_normalising_the_path(tool: str) -> None:
    assert pin_compatible(tool, {"file_path": "/repo/./src/../a.txt"}, {"file_path": "/repo/a.txt"}).ok


def test_a_notebook_edit_compares_the_notebook_path() -> None:
    assert pin_compatible("NotebookEdit", {"notebook_path": "n.ipynb"}, {"notebook_path": "./n.ipynb"}).ok
    assert not pin_compatible("NotebookEdit", {"notebook_path": "m.ipynb"}, {"notebook_path": "n.ipynb"}).ok


def test_a_write_that_names_no_file_is_declined() -> None:
    assert not pin_compatible("Edit", {"old_string": "a"}, {"file_path": "/a"}).ok


def test_windows_paths_compare_without_case_or_slash_direction() -> None:
    assert pin_compatible("Write", {"file_path": "C:\\Repo\\a.txt"}, {"file_path": "c:/repo/a.txt"}).ok


@pytest.mark.parametrize("tool", ["Read", "Grep", "Glob", "LS", "NotebookRead"])
def test_a_read_only_file_tool_may_be_steered_to_another_path(tool: str) -> None:
    assert pin_compatible(tool, {"file_path": "/etc/hosts", "path": "/x"}, {"file_path": "config/t.json"}).ok


# --- tools that run their input -----------------------------------------------------------------


def test_an_sql_delete_is_not_a_select_step() -> None:
    verdict = pin_compatible("mcp__postgres__query", {"sql": "DELETE FROM devices"}, {"sql": "SELECT * FROM devices"})
    assert not verdict.ok
    assert "DELETE" in verdict.reason
    assert "SELECT" in verdict.reason


@pytest.mark.parametrize(
    ("tool", "model", "step"),
    [
        ("mcp__postgres__query", {"sql": "select id from t"}, {"sql": "SELECT * FROM devices WHERE risk > 3"}),
        ("mcp__db__run_query", {"query": "SELECT 1; SELECT 2"}, {"query": "select a; /* x; */ select b"}),
        ("mcp__db__executeSql", {"statement": "WITH x AS (SELECT 1) SELECT * FROM x"}, {"statement": "SELECT 2"}),
        ("mcp__db__execute_sql", {"sql": "SELECT 1", "params": [1]}, {"sql": "SELECT 2", "params": [2]}),
    ],
)
def test_statements_with_the_same_verbs_pin(tool: str, model: dict[str, object], step: dict[str, object]) -> None:
    verdict = pin_compatible(tool, model, step)
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize(
    ("model", "step"),
    [
        ({"sql": "SELECT 1; DELETE FROM t"}, {"sql": "SELECT 1"}),
        ({"sql": "WITH x AS (SELECT 1) DELETE FROM t"}, {"sql": "SELECT 1"}),
        ({"sql": "SELECT 1 -- ok\n; DROP TABLE t"}, {"sql": "SELECT 1"}),
        ({"sql": "SELECT ';'; DROP TABLE t"}, {"sql": "SELECT ';'"}),
        ({"sql": "EXPLAIN ANALYZE DELETE FROM t"}, {"sql": "EXPLAIN SELECT 1"}),
        ({"query": "SELECT 1"}, {"sql": "SELECT 1"}),
    ],
)
def test_statements_that_add_or_change_a_verb_are_declined(model: dict[str, object], step: dict[str, object]) -> None:
    assert not pin_compatible("mcp__postgres__query", model, step).ok


def test_a_run_tool_called_with_no_arguments_pins() -> None:
    assert pin_compatible("mcp__postgres__query", {}, {"sql": "SELECT 1"}).ok
    assert pin_compatible("mcp__postgres__query", None, {"sql": "SELECT 1"}).ok


def test_an_empty_statement_of_the_step_need_not_be_supplied_but_must_not_run_something() -> None:
    step = {"sql": "SELECT 1", "cleanup_sql": ""}
    assert pin_compatible("mcp__db__run_sql", {"sql": "SELECT 2"}, step).ok
    assert pin_compatible("mcp__db__run_sql", {"sql": "SELECT 2", "cleanup_sql": "  "}, step).ok
    verdict = pin_compatible("mcp__db__run_sql", {"sql": "SELECT 2", "cleanup_sql": "DROP TABLE t"}, step)
    assert not verdict.ok
    assert "where the step runs nothing" in verdict.reason
    extra = {"sql": "SELECT 2", "post_query": "DROP TABLE t"}
    assert not pin_compatible("mcp__db__run_sql", extra, {"sql": "SELECT 1"}).ok


def test_a_run_tool_call_that_leaves_out_the_step_s_statement_is_declined() -> None:
    assert not pin_compatible("mcp__db__run_sql", {"database": "main"}, {"sql": "SELECT 1", "database": "main"}).ok


def test_a_query_against_another_database_is_declined() -> None:
    model = {"sql": "SELECT 1", "database": "prod"}
    verdict = pin_compatible("mcp__db__run_sql", model, {"sql": "SELECT 1", "database": "dev"})
    assert not verdict.ok
    assert "database" in verdict.reason


def test_a_shell_mcp_tool_compares_commands_by_their_heads() -> None:
    assert pin_compatible("mcp__db-shell__run", {"command": "ls -la"}, {"command": "ls"}).ok
    assert not pin_compatible("mcp__db-shell__run", {"command": "rm -rf /"}, {"command": "ls"}).ok


def test_a_run_tool_with_no_statement_named_argument_compares_its_text_arguments() -> None:
    assert pin_compatible("mcp__db-shell__run", {"input": "git status"}, {"input": "git status -s"}).ok
    assert not pin_compatible("mcp__db-shell__run", {"input": "git push"}, {"input": "git status"}).ok


# --- everything else ----------------------------------------------------------------------------


def test_an_mcp_call_with_no_arguments_pins() -> None:
    assert pin_compatible("mcp__chrome-devtools__take_snapshot", {}, {"verbose": True}).ok
    assert pin_compatible("mcp__fleet__list_devices", None, {"region": "eu-west-1"}).ok


def test_navigating_to_another_url_is_declined() -> None:
    verdict = pin_compatible(
        "mcp__chrome-devtools__navigate_page",
        {"url": "https://evil.example/"},
        {"url": "https://fleet.internal/eu-west-1"},
    )
    assert not verdict.ok
    assert "`url` points somewhere else" in verdict.reason


def test_the_same_url_written_differently_pins() -> None:
    assert pin_compatible(
        "mcp__chrome-devtools__navigate_page",
        {"url": "HTTPS://Fleet.Internal:443/eu-west-1/"},
        {"url": "https://fleet.internal/eu-west-1"},
    ).ok


def test_a_call_with_no_argument_in_common_is_declined() -> None:
    verdict = pin_compatible("mcp__fleet__list_devices", {"zone": "a"}, {"region": "eu-west-1"})
    assert not verdict.ok
    assert "no argument in common" in verdict.reason


def test_a_call_sharing_an_argument_pins_even_with_other_values() -> None:
    assert pin_compatible("mcp__fleet__list_devices", {"region": "us-east-1"}, {"region": "eu-west-1", "limit": 5}).ok


@pytest.mark.parametrize(
    ("model", "step"),
    [
        ({"path": "/etc", "q": "x"}, {"path": "/srv", "q": "x"}),
        ({"repo": "acme/other", "title": "t"}, {"repo": "acme/app", "title": "t"}),
        ({"filePath": "/tmp/a", "q": "x"}, {"q": "x"}),
        ({"target": "https://a.example/", "q": "x"}, {"target": "https://b.example/", "q": "x"}),
        ({"working_directory": "/a", "q": 1}, {"working_directory": "/b", "q": 1}),
    ],
)
def test_an_argument_naming_where_the_call_acts_must_point_to_the_same_place(
    model: dict[str, object], step: dict[str, object]
) -> None:
    assert not pin_compatible("mcp__files__search", model, step).ok


def test_a_web_fetch_of_another_url_is_declined() -> None:
    assert not pin_compatible("WebFetch", {"url": "https://a.example", "prompt": "p"}, {"url": "https://b.example"}).ok


def test_reasons_stay_short_whatever_the_arguments() -> None:
    verdict = pin_compatible("mcp__x__nav", {"url": "https://a/" + "x" * 10_000}, {"url": "https://b/" + "y" * 10_000})
    assert not verdict.ok
    assert len(verdict.reason) < 300


# --- what a pinned command writes or executes (issue 16) ----------------------------------------


@pytest.mark.parametrize(
    ("model", "step", "said"),
    [
        ("cat README.md", "cat README.md > /home/user/.bashrc", "`> /home/user/.bashrc`"),
        ("git log -1", "git -c core.pager=sh log -1", "`git -c core.pager=sh`"),
        ("find . -name '*.tmp'", "find . -name '*.tmp' -exec sh -c x {} \\;", "`find -exec sh -c x {}`"),
        ("curl https://example.com", "curl -o /home/user/.bashrc https://example.com", "`curl -o"),
        ("tar -tf a.tar", "tar -C / -xf a.tar", "`tar -C /`"),
        ("sed s/a/b/ f", "sed -i s/a/b/ f", "`sed -i`"),
        ("curl -o a.json https://example.com", "curl -o b.json https://example.com", "`curl -o b.json`"),
    ],
)
def test_a_step_writing_or_executing_where_the_call_does_not_is_declined(model: str, step: str, said: str) -> None:
    ok, reason = bash(model, step)
    assert not ok
    assert said in reason


@pytest.mark.parametrize(
    ("model", "step"),
    [
        ("git log > out.txt", "git log -1 > out.txt"),
        ("curl -o a.json https://x", "curl -sSo a.json https://y"),
        ("ls > listing.txt", "ls"),
        ("git log 2>/dev/null", "git log"),
    ],
)
def test_a_step_writing_only_where_the_call_does_pins(model: str, step: str) -> None:
    ok, reason = bash(model, step)
    assert ok, reason
