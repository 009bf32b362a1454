"""The calculator on the corpus of recorded runs: each run is ready, with a self-check that passes in the
real pool and a replay on new data that gives the right inputs, or not ready with its reason."""

from __future__ import annotations

import json
import time

import pytest

from bir.evaluator import EvaluatorPool
from bir.hooks.local.calculate import draft_scenario, recorded_steps, sort_steps, template_of
from bir.hooks.local.match import derive_values
from bir.hooks.local.selfcheck import check, dry_run, same_json
from tests.hooks.local.corpus import CASES, Case, ten_step_run

pytestmark = pytest.mark.anyio


def test_the_corpus_holds_at_least_ten_runs_of_different_shapes() -> None:
    assert len(CASES) >= 10
    assert len({c.name for c in CASES}) == len(CASES)
    assert sum(c.ready for c in CASES) >= 5
    assert sum(not c.ready for c in CASES) >= 3


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_each_recorded_run_is_ready_with_a_passing_self_check_or_not_ready_with_its_reason(
    case: Case, pool: EvaluatorPool
) -> None:
    draft = draft_scenario(case.prompt, recorded_steps(case.bodies()))
    verdict = await check(pool, "scn_case", draft)
    if not case.ready:
        assert verdict.state == "not_ready"
        assert verdict.reason is not None
        assert case.reason in verdict.reason["message"]
        return
    assert verdict.state == "ready", verdict.reason
    assert verdict.reason is None
    steps = verdict.scenario["steps"]
    assert len(steps) == (case.kept if case.kept is not None else len(case.steps))
    excluded = [e["toolName"] for e in verdict.scenario["excluded"]]
    assert excluded == list(case.excluded)
    # Every step's sample holds what the recording gave it, for `bir scenario check`.
    assert all("params" in s["sample"] and "toolOutput" in s["sample"] for s in steps)


@pytest.mark.parametrize("case", [c for c in CASES if c.replay is not None], ids=lambda c: c.name)
async def test_a_ready_scenario_replayed_on_new_data_picks_the_right_rows(case: Case, pool: EvaluatorPool) -> None:
    assert case.replay is not None
    draft = draft_scenario(case.prompt, recorded_steps(case.bodies()))
    verdict = await check(pool, "scn_case", draft)
    assert verdict.state == "ready", verdict.reason
    values = derive_values(template_of(case.prompt, draft.params), draft.params_sample(), case.replay.prompt)
    assert values == case.replay.params
    run = await dry_run(pool, verdict.scenario, values, case.replay.outputs)
    assert run.ok, run.error
    assert [s["input"] for s in run.steps] == case.replay.inputs
    assert all(same_json(s["input"], want) for s, want in zip(run.steps, case.replay.inputs, strict=True))


async def test_an_output_rule_that_no_longer_holds_fails_closed(pool: EvaluatorPool) -> None:
    case = next(c for c in CASES if c.name == "hostile_field_names_on_an_output_path")
    verdict = await check(pool, "scn_case", draft_scenario(case.prompt, recorded_steps(case.bodies())))
    assert verdict.state == "ready"
    two_rows = (
        '{"content": [{"type": "text", "text": "[{\\"id\\\\\\"); throw 1; (\\\\\\"\\": \\"a\\"}, {\\"x\\": 1}]"}]}'
    )
    run = await dry_run(pool, verdict.scenario, {"region": "us-east-1"}, [two_rows, "{}"])
    assert not run.ok
    assert run.error is not None
    assert run.error["stage"] == "output"
    assert "expected exactly one row" in run.error["message"]


async def test_a_tie_for_the_highest_value_on_new_data_fails_closed(pool: EvaluatorPool) -> None:
    case = next(c for c in CASES if c.name == "list_pick_detail")
    verdict = await check(pool, "scn_case", draft_scenario(case.prompt, recorded_steps(case.bodies())))
    rows = [{"id": "a", "risk": 5}, {"id": "b", "risk": 5}]
    tie = json.dumps({"content": [{"type": "text", "text": json.dumps(rows)}]})
    run = await dry_run(pool, verdict.scenario, {"region": "x"}, [tie, "{}"])
    assert not run.ok
    assert run.error is not None
    assert "more than one row has the highest" in run.error["message"]


async def test_a_recording_that_carries_structured_content_gives_bodies_that_read_only_the_content(
    pool: EvaluatorPool,
) -> None:
    # Recorded through a proxy before structuredContent left the canonical form: the scenario must still run
    # where the host's hook (the bare content array) is all there is.
    rows = [{"key": "WEB-101", "priority": 41}, {"key": "WEB-115", "priority": 82}]
    listed = {"issues": rows}
    search = {"content": [{"type": "text", "text": json.dumps(listed)}], "structuredContent": listed}
    got = {"content": [{"type": "text", "text": json.dumps(rows[1])}], "structuredContent": rows[1]}
    run = [
        {"stepIndex": 0, "toolName": "mcp__tracker__search_issues", "toolInput": {"project": "WEB"}},
        {"stepIndex": 1, "toolName": "mcp__tracker__get_issue", "toolInput": {"key": "WEB-115"}},
    ]
    run[0]["toolOutput"], run[1]["toolOutput"] = json.dumps(search), json.dumps(got)
    draft = draft_scenario("show the top priority issue of project WEB", recorded_steps(run))
    verdict = await check(pool, "scn_case", draft)
    assert verdict.state == "ready", verdict.reason
    assert "structuredContent" not in str(verdict.scenario["steps"][0]["toolOutputLogic"])
    api = [{"key": "API-107", "priority": 93}, {"key": "API-110", "priority": 37}]
    from_hook = json.dumps([{"type": "text", "text": json.dumps({"issues": api})}])
    replayed = await dry_run(pool, verdict.scenario, {"project": "API"}, [from_hook, "{}"])
    assert replayed.ok, replayed.error
    assert [s["input"] for s in replayed.steps] == [{"project": "API"}, {"key": "API-107"}]


def test_housekeeping_failures_and_model_written_steps_are_sorted_out_with_their_reasons() -> None:
    case = next(c for c in CASES if c.name == "a_failed_step_and_a_retry")
    kept, excluded = sort_steps(case.prompt, recorded_steps(case.bodies()))
    assert [s.tool for s in kept] == ["Glob", "Read"]
    assert excluded[0].why.startswith("it failed")
    bir_call = recorded_steps(
        [{"stepIndex": 0, "toolName": "Bash", "toolInput": {"command": "bir scenario list"}, "toolOutput": "{}"}]
    )
    assert sort_steps("x", bir_call)[1][0].why == "it is bir's own housekeeping"


async def test_a_ten_step_run_calculates_and_checks(pool: EvaluatorPool) -> None:
    case = ten_step_run()
    began = time.perf_counter()
    verdict = await check(pool, "scn_ten", draft_scenario(case.prompt, recorded_steps(case.bodies())))
    took = time.perf_counter() - began
    assert verdict.state == "ready", verdict.reason
    assert len(verdict.scenario["steps"]) == 10
    # The time itself is a benchmark figure (bir bench match); here only that it finished.
    assert took > 0
