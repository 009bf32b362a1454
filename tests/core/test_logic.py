"""The four logic entry points, run by a real evaluator pool."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bir.core.logic import (
    eval_params_logic,
    eval_response_params_logic,
    eval_tool_input_logic,
    eval_tool_output_logic,
    merge_resp_params,
)
from bir.core.types import Scenario, ScenarioStep, parse_scenario
from bir.evaluator import EvaluatorPool, LogicError
from tests.paths import load_scenario as fixture

pytestmark = pytest.mark.anyio


def step(tool_input: str = "return {};", tool_output: str | None = None) -> ScenarioStep:
    return ScenarioStep(step_index=0, tool_name="mcp__fleet__list_devices", tool_input_logic=tool_input,
                        tool_output_logic=tool_output)  # fmt: skip


def call_tool_result(payload: Any) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(payload)}], "isError": False})


async def test_params_logic_of_the_direct_fixture_normalises_the_derived_values(pool: EvaluatorPool) -> None:
    scenario = fixture("fleet-direct.json")

    params = await eval_params_logic(pool, scenario, {"region": "EU-West-1", "limit": "50"})

    assert params == {"region": "eu-west-1", "limit": 50}


async def test_a_scenario_without_params_logic_keeps_the_derived_params(pool: EvaluatorPool) -> None:
    scenario = Scenario(params_logic=None)
    derived = {"region": "eu-west-1"}

    params = await eval_params_logic(pool, scenario, derived)

    assert params == derived
    assert params is not derived


async def test_a_blank_params_logic_counts_as_missing(pool: EvaluatorPool) -> None:
    assert await eval_params_logic(pool, Scenario(params_logic="  \n "), {"a": 1}) == {"a": 1}


async def test_tool_input_logic_reads_params_and_resp_params(pool: EvaluatorPool) -> None:
    body = "return { region: params.region, id: respParams.highestRiskDeviceId };"

    tool_input = await eval_tool_input_logic(pool, step(body), {"region": "us-east-2"}, {"highestRiskDeviceId": "d7"})

    assert tool_input == {"region": "us-east-2", "id": "d7"}


async def test_a_blank_tool_input_logic_gives_no_arguments(pool: EvaluatorPool) -> None:
    assert await eval_tool_input_logic(pool, step(""), {"a": 1}, {}) == {}


async def test_tool_output_logic_reads_the_exact_output_text(pool: EvaluatorPool) -> None:
    scenario = fixture("fleet-direct.json")
    output = call_tool_result([{"id": "d1", "risk": 3}, {"id": "d2", "risk": 9}, {"id": "d3", "risk": 5}])

    derived = await eval_tool_output_logic(pool, scenario.steps[0], output, {"region": "eu-west-1"}, {})

    assert derived == {"highestRiskDeviceId": "d2", "deviceCount": 3}


async def test_a_step_without_output_logic_adds_nothing_to_resp_params(pool: EvaluatorPool) -> None:
    derived = await eval_tool_output_logic(pool, step(tool_output=None), "{}", {}, {"kept": True})

    assert derived == {}


async def test_a_scenario_without_response_logic_answers_resp_params(pool: EvaluatorPool) -> None:
    resp = {"device": {"id": "d2"}}

    model = await eval_response_params_logic(pool, Scenario(response_params_logic=None), {"region": "x"}, resp)

    assert model == resp


async def test_response_logic_of_the_direct_fixture_builds_the_model(pool: EvaluatorPool) -> None:
    scenario = fixture("fleet-direct.json")

    model = await eval_response_params_logic(
        pool, scenario, {"region": "eu-west-1"}, {"device": {"id": "d2"}, "deviceCount": 3}
    )

    assert model == {"region": "eu-west-1", "device": {"id": "d2"}, "checkedDevices": 3}


async def test_a_body_that_mutates_its_arguments_changes_nothing_outside(pool: EvaluatorPool) -> None:
    params = {"list": [1, 2]}
    resp: dict[str, object] = {"n": 1}

    await eval_tool_input_logic(pool, step("params.list.push(3); respParams.n = 2; return {};"), params, resp)

    assert params == {"list": [1, 2]}
    assert resp == {"n": 1}


async def test_a_throwing_body_raises_a_logic_error_naming_its_kind(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await eval_tool_input_logic(pool, step("return { id: respParams.device.id };"), {}, {})

    assert caught.value.reason == "threw"
    assert caught.value.kind == "toolInputLogic"
    assert "TypeError" in caught.value.message


async def test_a_body_returning_a_non_object_is_refused(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await eval_params_logic(pool, Scenario(params_logic="return [params];"), {})

    assert caught.value.reason == "result"
    assert "array" in caught.value.message


async def test_a_body_that_runs_too_long_is_stopped(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await eval_response_params_logic(pool, Scenario(response_params_logic="for (;;) {}"), {}, {})

    assert caught.value.reason == "timeout"
    assert "ran longer than 300 ms" in caught.value.message


async def test_an_argument_that_is_not_json_is_a_logic_error(pool: EvaluatorPool) -> None:
    with pytest.raises(LogicError) as caught:
        await eval_params_logic(pool, Scenario(params_logic="return params;"), {"when": object()})

    assert caught.value.kind == "paramsLogic"
    assert "could not be given its arguments" in caught.value.message


def test_merged_output_keys_replace_earlier_ones() -> None:
    assert merge_resp_params({"a": 1, "b": 2}, {"b": 3, "c": 4}) == {"a": 1, "b": 3, "c": 4}


def test_the_contract_names_each_bodys_parameters_as_the_evaluator_compiles_them() -> None:
    from bir.core.logic import PARAMETERS
    from bir.evaluator.realm import PARAMETERS as REALM

    assert dict(PARAMETERS) == REALM


async def test_every_body_that_does_not_compile_is_found_without_running_any(pool: EvaluatorPool) -> None:
    from bir.core.logic import compile_check

    scenario = parse_scenario(
        {
            "paramsLogic": "while (true) {}",  # compiles: it is never run here
            "responseParamsLogic": "return { a: ;",
            "steps": [
                {"stepIndex": 0, "toolName": "Read", "toolInputLogic": "return {}; }; const x = function () {"},
                {"stepIndex": 1, "toolName": "Read", "toolOutputLogic": "const t = 1;\nreturn t..y;"},
            ],
        }
    )
    failures = await compile_check(pool, scenario)
    assert [(f.label, f.step_index) for f in failures] == [
        ("step 0 toolInputLogic", 0),
        ("step 1 toolOutputLogic", 1),
        ("responseParamsLogic", None),
    ]
    assert failures[0].message == "toolInputLogic is not a function body: it closes its function early"
    assert failures[1].message.startswith("toolOutputLogic does not compile: SyntaxError")
    assert failures[1].message.endswith("(line 2 of the body)")
    assert await compile_check(pool, fixture("fleet-direct.json")) == []
