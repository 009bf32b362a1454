"""Tool coverage decides the mode (spec §5)."""

from __future__ import annotations

import pytest

from bir.core.coverage import mode_for, reach_of
from bir.core.types import ScenarioStep

WRAPPED = frozenset({"fleet", "db_main", "chrome-devtools"})


@pytest.mark.parametrize(
    ("tool", "reach"),
    [
        ("mcp__fleet__list_devices", "direct"),
        ("mcp__db_main__run_query", "direct"),
        ("mcp__chrome-devtools__navigate_page", "direct"),
        ("mcp__github__create_issue", "live"),
        ("mcp__claude-in-chrome__navigate", "live"),
        ("Bash", "live"),
        ("Read", "live"),
        ("Task", "live"),
        ("mcp__fleet", "live"),
        ("mcp____tool", "live"),
    ],
)
def test_a_step_is_direct_only_on_a_wrapped_mcp_server(tool: str, reach: str) -> None:
    assert reach_of(tool, WRAPPED) == reach


def test_a_server_name_with_underscores_and_dashes_is_matched_whole() -> None:
    assert reach_of("mcp__db_main__query", frozenset({"db"})) == "live"
    assert reach_of("mcp__db_main__query", frozenset({"db_main"})) == "direct"


def test_an_empty_plan_is_not_replayed() -> None:
    assert mode_for([], WRAPPED) == "none"


def test_a_plan_of_wrapped_mcp_steps_runs_direct() -> None:
    assert mode_for(["mcp__fleet__list_devices", "mcp__fleet__get_device"], WRAPPED) == "direct"


@pytest.mark.parametrize(
    "tools",
    [
        ["mcp__fleet__list_devices", "Read", "Bash"],
        ["mcp__fleet__list_devices", "mcp__github__create_issue"],
        ["Bash"],
        ["Read", "Grep"],
        ["mcp__github__create_issue"],
    ],
)
def test_a_plan_with_any_live_step_is_steered(tools: list[str]) -> None:
    assert mode_for(tools, WRAPPED) == "steer"


def test_nothing_wrapped_steers_every_mcp_plan() -> None:
    assert mode_for(["mcp__fleet__list_devices"], frozenset()) == "steer"


def test_mode_reads_scenario_steps_as_well_as_names() -> None:
    steps = [ScenarioStep(step_index=0, tool_name="mcp__fleet__list_devices")]
    assert mode_for(steps, WRAPPED) == "direct"
    steps.append(ScenarioStep(step_index=1, tool_name="Read"))
    assert mode_for(steps, WRAPPED) == "steer"
