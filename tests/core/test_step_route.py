"""The rules every direct executor applies before it sends a step, as a table."""

from __future__ import annotations

import time

import pytest

from bir.core.step_result import StepNotSent
from bir.core.step_route import Route, route_step
from bir.core.types import ScenarioStep, parse_scenario


def step(name: str) -> ScenarioStep:
    return parse_scenario({"steps": [{"stepIndex": 0, "toolName": name}]}).steps[0]


@pytest.mark.parametrize(
    ("tool", "allow", "deadline_in_s", "expected"),
    [
        ("mcp__fleet__get_device", None, None, Route("fleet", "get_device", 30.0)),
        ("mcp__fleet__get_device", {"fleet"}, None, Route("fleet", "get_device", 30.0)),
        ("mcp__fleet__get_device", {"github"}, None, "fleet is not in BIR_REPLAY_ALLOW_SERVERS"),
        ("mcp__fleet__get_device", frozenset(), None, "fleet is not in BIR_REPLAY_ALLOW_SERVERS"),
        ("Bash", None, None, "Bash is a built-in: only the model can call it"),
        ("mcp__fleet__get_device", None, -1.0, "the plan's time budget ran out before it"),
    ],
)
def test_a_step_is_routed_only_to_an_allowed_wrapped_server_with_time_left(
    tool: str, allow: frozenset[str] | None, deadline_in_s: float | None, expected: Route | str
) -> None:
    deadline = None if deadline_in_s is None else time.monotonic() + deadline_in_s
    got = route_step(
        step(tool), allow=allow, step_timeout_s=30.0, deadline=deadline, builtin_why="only the model can call it"
    )
    if isinstance(expected, Route):
        assert got == expected
    else:
        assert isinstance(got, StepNotSent)
        assert got.reason == expected


def test_a_deadline_closer_than_the_step_timeout_clips_it() -> None:
    got = route_step(
        step("mcp__fleet__list_devices"),
        allow=None,
        step_timeout_s=30.0,
        deadline=time.monotonic() + 2.0,
        builtin_why="x",
    )
    assert isinstance(got, Route)
    assert 0 < got.timeout_s <= 2.0
