"""Service payloads are read at the boundary; a payload that cannot be read names its field."""

from __future__ import annotations

import json

import msgspec
import pytest

from bir.core.types import (
    MAX_ERROR_CHARS,
    PayloadError,
    Scenario,
    ScenarioStep,
    parse_match,
    parse_qualified_name,
    parse_recorded_steps,
    parse_scenario,
)
from tests.paths import FIXTURES, SCENARIOS


def _fixture(name: str) -> str:
    return (SCENARIOS / name).read_text(encoding="utf-8")


def test_the_fixture_scenarios_read_with_their_roles_and_ordered_steps() -> None:
    direct = parse_scenario(_fixture("fleet-direct.json"))
    assert direct.id == "scn_fleet_direct"
    assert direct.targets == ("region",)
    assert direct.settings == ("limit",)
    assert [s.tool_name for s in direct.steps] == ["mcp__fleet__list_devices", "mcp__fleet__get_device"]
    mixed = parse_scenario(_fixture("fleet-mixed.json"))
    assert [s.tool_name for s in mixed.steps] == ["mcp__fleet__list_devices", "Read", "Bash"]


def test_unknown_fields_are_tolerated_and_missing_optional_ones_defaulted() -> None:
    scenario = parse_scenario(
        {
            "futureField": {"x": 1},
            "paramsObject": {"a": {"sampleValue": 1, "description": None}},
            "steps": [{"stepIndex": 1, "toolName": "Bash", "extra": True}, {"stepIndex": 0, "toolName": "Read"}],
        }
    )
    assert scenario.params_object["a"].role == "setting"
    assert [s.step_index for s in scenario.steps] == [0, 1]
    assert scenario.steps[0].tool_input_logic == "return {};"


def test_what_cannot_be_read_is_said_in_plain_words_not_pydantics() -> None:
    with pytest.raises(PayloadError) as not_an_object:
        parse_scenario([1, 2])
    assert str(not_an_object.value) == "scenario: expected a JSON object"
    with pytest.raises(PayloadError) as missing:
        parse_scenario({"steps": [{"stepIndex": 0, "toolName": 3}]})
    assert str(missing.value) == "scenario: steps.0.toolName: expected text"


def test_a_null_where_a_field_has_a_default_reads_as_the_default() -> None:
    scenario = parse_scenario(
        {
            "intent": None,
            "paramsObject": {"a": {"sampleValue": None, "description": None, "role": None}},
            "steps": [{"stepIndex": 0, "toolName": "Read", "reasoning": None, "toolInputLogic": None}],
        }
    )
    assert scenario.intent == ""
    assert (scenario.params_object["a"].description, scenario.params_object["a"].role) == ("", "setting")
    assert (scenario.steps[0].reasoning, scenario.steps[0].tool_input_logic) == ("", "return {};")
    assert parse_scenario({"paramsObject": None}).params_object == {}


def test_a_step_index_sent_as_text_reads_as_a_number() -> None:
    scenario = parse_scenario({"steps": [{"stepIndex": "2", "toolName": "Bash"}, {"stepIndex": 1, "toolName": "Read"}]})
    assert [(s.step_index, s.tool_name) for s in scenario.steps] == [(1, "Read"), (2, "Bash")]


def test_a_scenario_built_or_changed_in_code_keeps_its_steps_in_index_order() -> None:
    late, early = ScenarioStep(step_index=5, tool_name="Bash"), ScenarioStep(step_index=1, tool_name="Read")
    built = Scenario(steps=(late, early))
    assert built.steps == (early, late)
    moved = msgspec.structs.replace(built, steps=(early, msgspec.structs.replace(late, step_index=0)))
    assert [s.step_index for s in moved.steps] == [0, 1]


def test_a_scenario_written_back_has_the_wire_names_and_reads_back_the_same() -> None:
    scenario = parse_scenario(_fixture("fleet-mixed.json"))
    wire = msgspec.to_builtins(scenario)
    assert "paramsObject" in wire
    assert "stepIndex" in wire["steps"][0]
    assert "sampleValue" in next(iter(wire["paramsObject"].values()))
    assert parse_scenario(json.dumps(wire)) == scenario


def test_an_unknown_role_is_read_as_a_target_which_is_never_guessed() -> None:
    scenario = parse_scenario({"paramsObject": {"x": {"sampleValue": 1, "role": "subject"}}, "steps": []})
    assert scenario.targets == ("x",)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"steps": [{"stepIndex": 0}]}, "steps.0.toolName"),
        ({"steps": [{"stepIndex": "first", "toolName": "Read"}]}, "steps.0.stepIndex"),
        ({"paramsObject": {"x": {"role": 5}}}, "paramsObject.x.role"),
        ("{not json", "not JSON ("),
    ],
)
def test_a_scenario_that_cannot_be_read_names_the_field(payload: object, field: str) -> None:
    with pytest.raises(PayloadError) as caught:
        parse_scenario(payload)
    assert field in str(caught.value)


def test_an_error_names_the_path_inside_a_match_and_stays_short() -> None:
    with pytest.raises(PayloadError, match=r"^match: matched\.scenario\.steps\.0\.toolName: "):
        parse_match({"matched": {"runId": "run_1", "scenario": {"steps": [{"stepIndex": 0}]}}})
    with pytest.raises(PayloadError, match=r"matched\.runId"):
        parse_match({"matched": {}})
    with pytest.raises(PayloadError) as caught:
        parse_scenario({"paramsObject": {"p" * 10_000: {"role": 5}}})
    assert len(str(caught.value)) <= MAX_ERROR_CHARS + len("scenario: ")


def test_a_match_hit_reads_with_its_scenario() -> None:
    hit = json.loads((FIXTURES / "match-hit.json").read_text(encoding="utf-8"))
    hit["matched"]["scenario"] = json.loads(_fixture("fleet-direct.json"))
    answer = parse_match(hit)
    assert answer.matched is not None
    assert answer.matched.execution_ticket == "tkt_01HXFLEET"
    assert answer.matched.scenario is not None
    assert answer.matched.scenario.id == "scn_fleet_direct"
    assert parse_match({"id": "run_1", "matched": None}).matched is None


def test_recorded_steps_accept_both_spellings() -> None:
    steps = parse_recorded_steps(
        {"steps": [{"toolName": "Read", "toolOutput": "a"}, {"tool_name": "Bash", "tool_output": {"stdout": "b"}}]}
    )
    assert [(s.tool_name, s.tool_output) for s in steps] == [("Read", "a"), ("Bash", {"stdout": "b"})]
    with pytest.raises(PayloadError, match=r"steps\.0"):
        parse_recorded_steps({"steps": [{"toolOutput": "x"}]})


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("mcp__fleet__list_devices", ("fleet", "list_devices")),
        ("mcp__chrome-devtools__navigate_page", ("chrome-devtools", "navigate_page")),
        ("mcp__my_server__do_thing", ("my_server", "do_thing")),
        ("Bash", None),
        ("mcp__fleet__", None),
        ("mcp____tool", None),
    ],
)
def test_qualified_mcp_names_split_into_server_and_tool(name: str, parsed: tuple[str, str] | None) -> None:
    assert parse_qualified_name(name) == parsed
