"""The injection guard for derived values (spec §13.2 mitigation 6)."""

from __future__ import annotations

import json

import pytest

from bir.core.safety import check_derived_values, check_output_values, plan_runs_input, strictness
from bir.core.types import Scenario, ScenarioStep, parse_scenario
from tests.paths import SCENARIOS


def plan(*tools: str, **samples: object) -> Scenario:
    return parse_scenario(
        {
            "paramsObject": {name: {"sampleValue": value, "role": "target"} for name, value in samples.items()},
            "steps": [{"stepIndex": n, "toolName": tool} for n, tool in enumerate(tools)],
        }
    )


def test_the_fixture_plans_are_told_apart_by_whether_they_run_input() -> None:
    mixed = parse_scenario(json.loads((SCENARIOS / "fleet-mixed.json").read_text()))
    direct = parse_scenario(json.loads((SCENARIOS / "fleet-direct.json").read_text()))
    assert plan_runs_input(mixed)
    assert not plan_runs_input(direct)


def test_a_shell_metacharacter_in_a_changed_value_is_refused_and_named() -> None:
    verdict = check_derived_values(plan("Bash", region="eu-west-1"), {"region": "us-east-1;rm -rf ~"})
    assert not verdict.ok
    assert verdict.name == "region"
    assert verdict.reason == "region: contains a shell metacharacter ';'"


def test_a_value_equal_to_its_sample_always_passes() -> None:
    odd = "a b; $(x) | *"
    assert check_derived_values(plan("Bash", cmd=odd), {"cmd": odd}).ok
    assert check_derived_values(plan("Bash", rows=[{"q": odd}]), {"rows": [{"q": odd}]}).ok


def test_a_plain_word_of_the_sample_s_shape_passes() -> None:
    verdict = check_derived_values(plan("Bash", region="eu-west-1", limit=5), {"region": "us-east-1", "limit": 20})
    assert verdict.ok, verdict.reason


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("a&b", "shell metacharacter '&'"),
        ("a|b", "shell metacharacter '|'"),
        ("`id`", "shell metacharacter '`'"),
        ("$HOME", "shell metacharacter '$'"),
        ("a>b", "shell metacharacter '>'"),
        ("it's", 'shell metacharacter "\'"'),
        ('a"b', "shell metacharacter '\"'"),
        ("a\\b", "shell metacharacter '\\\\'"),
        ("x--y", "an SQL comment '--'"),
        ("x/*y", "an SQL comment '/*'"),
        ("-rf", "starts with '-'"),
        ("us east", "whitespace the sample did not have"),
        ("us*", "a glob '*'"),
        ("us?", "a glob '?'"),
        ("us[1]", "a glob '['"),
        ("{a,b}", "a brace '{'"),
        ("f(x)", "a parenthesis '('"),
        ("a\nb", "a line break"),
        ("a\rb", "a line break"),
        ("a\u2028b", "a line break"),
        ("a\x00b", "a NUL character"),
        ("a\x1bb", "a control character"),
    ],
)
def test_a_changed_value_in_a_plan_that_runs_input_must_be_a_plain_word(value: str, said: str) -> None:
    verdict = check_derived_values(plan("mcp__postgres__query", region="eu-west-1"), {"region": value})
    assert not verdict.ok
    assert said in verdict.reason


def test_characters_the_sample_had_are_allowed() -> None:
    scenario = plan("Bash", city="New York", pattern="*.log", expr="f(x)")
    assert check_derived_values(scenario, {"city": "San Francisco", "pattern": "*.txt", "expr": "g(y)"}).ok


def test_a_number_stays_a_number() -> None:
    scenario = plan("Bash", limit=10)
    assert check_derived_values(scenario, {"limit": 25}).ok
    assert check_derived_values(scenario, {"limit": 2.5}).ok
    verdict = check_derived_values(scenario, {"limit": "25"})
    assert not verdict.ok
    assert "was a number" in verdict.reason
    assert not check_derived_values(scenario, {"limit": -1}).ok
    assert not check_derived_values(scenario, {"limit": True}).ok


def test_nested_values_are_checked_leaf_by_leaf_and_named_by_their_path() -> None:
    scenario = plan("Bash", hosts=["web-1", "web-2"], filter={"name": "a"})
    assert check_derived_values(scenario, {"hosts": ["web-3", "web-4", "web-5"], "filter": {"name": "b"}}).ok
    verdict = check_derived_values(scenario, {"hosts": ["web-3", "web;4"]})
    assert not verdict.ok
    assert verdict.name == "hosts"
    assert verdict.reason.startswith("hosts[1]:")
    verdict = check_derived_values(scenario, {"filter": {"name": "b", "$where": "1"}})
    assert not verdict.ok
    assert "(key)" in verdict.reason


def test_a_value_without_a_sample_is_held_to_a_plain_word() -> None:
    scenario = plan("Bash")
    assert check_derived_values(scenario, {"extra": "abc"}).ok
    assert not check_derived_values(scenario, {"extra": "a b"}).ok


@pytest.mark.parametrize("tool", ["Edit", "MultiEdit", "Write", "NotebookEdit"])
def test_a_plan_that_only_writes_files_rejects_only_line_breaks_and_nul(tool: str) -> None:
    scenario = plan("Read", tool, title="Q3 report")
    assert strictness(scenario) == "write"
    assert check_derived_values(scenario, {"title": "Q4 report; $(x) -- 'y' *"}).ok
    assert not check_derived_values(scenario, {"title": "a\nb"}).ok
    assert not check_derived_values(scenario, {"title": "a\x00b"}).ok


def test_a_plan_that_neither_runs_nor_writes_accepts_everything() -> None:
    scenario = plan("Read", "mcp__fleet__list_devices", region="eu-west-1")
    assert strictness(scenario) == "none"
    assert check_derived_values(scenario, {"region": "a\nb; rm -rf / $(x)\x00"}).ok


def test_a_run_step_anywhere_makes_the_whole_plan_strict() -> None:
    scenario = plan("Write", "mcp__db__executeSql", name="a")
    assert strictness(scenario) == "run"
    assert not check_derived_values(scenario, {"name": "a b"}).ok


def test_a_huge_value_is_checked_within_bounds() -> None:
    verdict = check_derived_values(plan("Bash", ids=[1]), {"ids": list(range(20_000))})
    assert not verdict.ok
    assert "too many values" in verdict.reason
    deep: object = "x"
    for _ in range(100):
        deep = [deep]
    assert not check_derived_values(plan("Bash", d=None), {"d": deep}).ok


# --- values read from earlier outputs (issue 16) -------------------------------------------------


def step(tool: str, body: str) -> ScenarioStep:
    return ScenarioStep(step_index=1, tool_name=tool, tool_input_logic=body)


CAT_FILE = "return { command: 'cat ' + respParams.file };"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("README.md > /home/user/.bashrc", "contains a shell metacharacter '>'"),
        ("README.md; rm -rf ~", "contains a shell metacharacter ';'"),
        ("-c", "starts with '-'"),
        ("a b", "contains whitespace"),
        ("*.md", "contains a glob"),
        ("~/.bashrc", "contains a tilde"),
        ("x\ny", "contains a line break"),
        (-1, "starts with '-'"),
    ],
)
def test_a_value_from_an_earlier_output_that_a_shell_step_reads_must_be_a_plain_word(value: object, said: str) -> None:
    verdict = check_output_values(step("Bash", CAT_FILE), {"file": value})
    assert not verdict.ok
    assert verdict.name == "file"
    assert verdict.reason.startswith("respParams.file: ")
    assert said in verdict.reason


def test_plain_words_numbers_and_paths_from_earlier_outputs_pass() -> None:
    verdict = check_output_values(step("Bash", CAT_FILE), {"file": "docs/README.md", "n": 3})
    assert verdict.ok, verdict.reason
    assert check_output_values(step("Bash", CAT_FILE), {"file": 12}).ok


def test_only_the_keys_a_body_names_are_checked() -> None:
    resp = {"file": "README.md", "title": "My project; the best > all"}
    assert check_output_values(step("Bash", CAT_FILE), resp).ok
    bracketed = step("Bash", "return { command: 'cat ' + respParams['title'] };")
    assert not check_output_values(bracketed, resp).ok


@pytest.mark.parametrize(
    "body",
    [
        "const { file } = respParams; return { command: 'cat ' + file };",
        "const k = 'title'; return { command: 'cat ' + respParams[k] };",
        "return { command: 'cat ' + arguments[1].title };",
        "return { command: JSON.stringify(respParams) };",
    ],
)
def test_a_body_reading_resp_params_any_other_way_has_every_value_checked(body: str) -> None:
    verdict = check_output_values(step("Bash", body), {"file": "README.md", "title": "a > b"})
    assert not verdict.ok
    assert verdict.name == "title"


def test_an_mcp_tool_that_runs_its_input_is_held_to_the_same_rule() -> None:
    sql = step("mcp__db__execute_sql", "return { sql: 'SELECT * FROM t WHERE id = ' + respParams.id };")
    assert not check_output_values(sql, {"id": "1 OR 1=1"}).ok
    assert check_output_values(sql, {"id": "42"}).ok


def test_a_file_writing_step_refuses_only_line_breaks_and_nul() -> None:
    edit = step("Edit", "return { file_path: 'a.txt', old_string: 'x', new_string: respParams.text };")
    assert check_output_values(edit, {"text": "a > b; c"}).ok
    assert "line break" in check_output_values(edit, {"text": "a\nimport os"}).reason
    assert "NUL" in check_output_values(edit, {"text": "a\x00"}).reason


def test_a_step_that_neither_runs_nor_writes_reads_anything() -> None:
    read = step("Read", "return { file_path: respParams.path };")
    assert check_output_values(read, {"path": "a > b; $(c)"}).ok
    assert check_output_values(step("mcp__fleet__get_device", "return { id: respParams.id };"), {"id": "x;y"}).ok
