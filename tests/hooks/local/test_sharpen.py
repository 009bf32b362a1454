"""A second run sharpens a scenario (issue 19 item 2): runs recorded through the local service's routes, as
the outbox sends them, calculated together in the real evaluator pool."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.hooks.local import LOCAL_TOKEN, LOCAL_URL
from bir.hooks.local.app import build_app
from bir.hooks.local.runtime import LocalService, stats_of
from bir.hooks.local.sharpen import prompt_seeds, same_task
from bir.hooks.local.store import ScenarioRow, Store

pytestmark = pytest.mark.anyio


def mcp(value: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


@dataclass
class Local:
    service: LocalService
    client: ServiceClient
    store: Store

    async def record(self, run_id: str, prompt: str, steps: Sequence[tuple[str, dict[str, Any], object]]) -> None:
        """One missed turn, as the outbox sends it: the match, each step, the finish."""
        assert await self.client.match(run_id, prompt, {}) is None
        for i, (tool, tool_input, output) in enumerate(steps):
            body = {"stepIndex": i, "toolName": tool, "toolInput": tool_input, "toolOutput": mcp(output)}
            assert (await self.client.post_step(run_id, body)).status == "recorded"
        assert (await self.client.finish_run(run_id, {"output": "done", "durationMs": 900})).status == "finished"
        assert await self.service.idle()

    def scenarios(self) -> list[ScenarioRow]:
        with self.store.raw() as conn:
            ids = [r[0] for r in conn.execute("SELECT id FROM scenarios ORDER BY created_at").fetchall()]
        return [s for s in (self.store.scenario(i) for i in ids) if s is not None]


@contextlib.asynccontextmanager
async def local(tmp_path: Path, pool: EvaluatorPool, *, min_runs: int = 1) -> AsyncIterator[Local]:
    store = Store(tmp_path / "store.db")
    try:
        async with (
            LocalService(store, project="/p", pool=pool, load_model=False, min_runs=min_runs) as service,
            ServiceClient(LOCAL_URL, LOCAL_TOKEN, transport=httpx.ASGITransport(app=build_app(service))) as client,
        ):
            yield Local(service, client, store)
    finally:
        store.close()


ASK = "check the device to look at in {region}"
# Rows whose chosen one is both the first and the riskiest: one recording cannot tell which was meant.
FIRST_AND_TOP = [{"id": "dev-100", "risk": 90}, {"id": "dev-101", "risk": 20}, {"id": "dev-102", "risk": 50}]
TOP_NOT_FIRST = [{"id": "dev-200", "risk": 10}, {"id": "dev-201", "risk": 95}, {"id": "dev-202", "risk": 40}]


def pick(region: str, rows: list[dict[str, Any]], chosen: str) -> list[tuple[str, dict[str, Any], object]]:
    return [
        ("mcp__fleet__list_devices", {"region": region}, rows),
        ("mcp__fleet__get_device", {"id": chosen}, {"id": chosen, "status": "online"}),
    ]


async def test_a_second_run_resolves_the_row_rule_one_run_left_ambiguous(tmp_path: Path, pool: EvaluatorPool) -> None:
    async with local(tmp_path, pool) as lo:
        await lo.record(
            "run_a", "check the device to look at in eu-west-1", pick("eu-west-1", FIRST_AND_TOP, "dev-100")
        )
        [alone] = lo.scenarios()
        assert alone.state == "not_ready"
        assert "selector ambiguity" in str(alone.reason)

        await lo.record(
            "run_b", "check the device to look at in us-east-1", pick("us-east-1", TOP_NOT_FIRST, "dev-201")
        )
        [both] = lo.scenarios()
        assert both.id == alone.id
        assert both.state == "ready", both.reason
        assert both.body["support"] == {"runs": 2}
        assert {rid for rid, _ in lo.store.runs_of(both.id)} == {"run_a", "run_b"}
        assert '"max"' in str(both.body["steps"][0]["toolOutputLogic"])
        edits = lo.store.edits(both.id)
        assert [e.kind for e in edits] == ["calculation"]
        assert edits[0].entry["runs"] == ["run_b", "run_a"]
        assert edits[0].before is not None
        assert edits[0].before["state"] == "not_ready"

        # A calculation edit is not undone step by step; a recalculation uses every run again.
        status, refused = await lo.service.revert(both.id, edits[0].id, {})
        assert (status, refused["error"]) == (409, "calculation_edit")
        status, again = await lo.service.recalculate(both.id, {})
        assert (status, again["state"]) == (202, "ready")
        recalculated = lo.store.scenario(both.id)
        assert recalculated is not None
        assert recalculated.body["support"] == {"runs": 2}

        # A third prompt of the task now matches, with its value, by slot.
        hit = await lo.client.match("run_c", ASK.format(region="sa-east-1"), {})
        assert hit is not None
        assert hit.matched is not None
        assert hit.matched.scenario_id == both.id


async def test_two_runs_agreeing_on_a_pick_that_is_first_and_riskiest_in_both_stay_not_ready_saying_so(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    async with local(tmp_path, pool) as lo:
        await lo.record(
            "run_a", "check the device to look at in eu-west-1", pick("eu-west-1", FIRST_AND_TOP, "dev-100")
        )
        rows = [{"id": "dev-300", "risk": 70}, {"id": "dev-301", "risk": 5}]
        await lo.record("run_b", ASK.format(region="us-east-1"), pick("us-east-1", rows, "dev-300"))
        [scenario] = lo.scenarios()
        assert scenario.state == "not_ready"
        assert "reproduce all 2 runs" in str(scenario.reason)
        assert scenario.body["support"] == {"runs": 2}


async def test_a_value_the_prompt_holds_inside_another_becomes_parameters_from_two_runs(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    def issues(owner: str, repo: str) -> list[tuple[str, dict[str, Any], object]]:
        return [("mcp__gh__list_issues", {"owner": owner, "repo": repo, "state": "open"}, [{"number": 1}])]

    async with local(tmp_path, pool) as lo:
        await lo.record("run_a", "list the open issues of acme/web", issues("acme", "web"))
        [alone] = lo.scenarios()
        assert alone.state == "not_ready"
        await lo.record("run_b", "list the open issues of globex/api", issues("globex", "api"))
        [both] = lo.scenarios()
        assert both.state == "ready", both.reason
        # "open" is in the prompt too: a parameter, though no run varied it.
        assert set(both.body["paramsObject"]) == {"owner", "repo", "state"}
        hit = await lo.client.match("run_c", "list the open issues of initech/billing", {})
        assert hit is not None
        assert hit.matched is not None
        derived = await lo.service.derive(both.id, {"prompt": "list the open issues of initech/billing"})
        assert derived[1]["params"] == {"owner": "initech", "repo": "billing", "state": "open"}


async def test_a_run_that_does_not_agree_stays_apart_and_the_scenario_keeps_its_support(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    def listing(region: str, limit: int) -> list[tuple[str, dict[str, Any], object]]:
        return [("mcp__fleet__list_devices", {"region": region, "limit": limit}, [{"id": "dev-1", "risk": 1}])]

    async with local(tmp_path, pool, min_runs=2) as lo:
        await lo.record("run_a", "list the devices in eu-west-1", listing("eu-west-1", 50))
        # Another limit with nothing in the prompt saying so: a constant that differs, which nothing explains.
        await lo.record("run_b", "list the devices in us-east-1", listing("us-east-1", 10))
        first, second = lo.scenarios()
        assert first.body.get("support", {"runs": 1}) == {"runs": 1}
        assert second.run_id == "run_b"
        assert first.state == second.state == "ready"


async def test_stats_count_every_run_a_scenario_rests_on(tmp_path: Path, pool: EvaluatorPool) -> None:
    async with local(tmp_path, pool) as lo:
        await lo.record("run_a", ASK.format(region="eu-west-1"), pick("eu-west-1", FIRST_AND_TOP, "dev-100"))
        await lo.record("run_b", ASK.format(region="us-east-1"), pick("us-east-1", TOP_NOT_FIRST, "dev-201"))
        # A run of another task: its scenario rests on it alone.
        await lo.record("run_c", "show device dev-007", [("mcp__fleet__get_device", {"id": "dev-007"}, {"id": "x"})])
        lines = {line["scenarioId"]: line for line in stats_of(lo.store, None)["scenarios"]}
        by_run = {s.run_id: s.id for s in lo.scenarios()}
        assert len(lines) == 2
        assert lines[by_run["run_b"]]["runs"] == 2
        assert lines[by_run["run_c"]]["runs"] == 1


async def test_a_step_only_one_run_made_is_left_out_as_exploration(tmp_path: Path, pool: EvaluatorPool) -> None:
    async with local(tmp_path, pool, min_runs=2) as lo:
        await lo.record(
            "run_a",
            "show device dev-007",
            [
                ("mcp__fleet__list_devices", {"region": "eu-west-1"}, [{"id": "dev-001", "risk": 3}]),
                ("mcp__fleet__get_device", {"id": "dev-007"}, {"id": "dev-007"}),
            ],
        )
        await lo.record(
            "run_b", "show device dev-011", [("mcp__fleet__get_device", {"id": "dev-011"}, {"id": "dev-011"})]
        )
        [scenario] = lo.scenarios()
        assert scenario.state == "ready", scenario.reason
        assert [s["toolName"] for s in scenario.body["steps"]] == ["mcp__fleet__get_device"]
        assert scenario.body["support"] == {"runs": 2}


async def test_a_scenario_is_replayed_only_once_it_rests_on_BIR_LOCAL_MIN_RUNS_agreeing_runs(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    async with local(tmp_path, pool, min_runs=2) as lo:
        rows = [{"id": "dev-500", "risk": 1}]
        await lo.record("run_a", "show the only device in eu-west-1", pick("eu-west-1", rows, "dev-500"))
        [scenario] = lo.scenarios()
        assert scenario.state == "ready"
        # Ready, but one run is not enough: the next prompt of the task is a miss, recorded, and joins.
        rows_us = [{"id": "dev-600", "risk": 7}]
        await lo.record("run_b", "show the only device in us-east-1", pick("us-east-1", rows_us, "dev-600"))
        [scenario] = lo.scenarios()
        assert scenario.body["support"] == {"runs": 2}
        hit = await lo.client.match("run_c", "show the only device in sa-east-1", {})
        assert hit is not None
        assert hit.matched is not None
        assert hit.matched.scenario_id == scenario.id


def test_prompts_that_differ_in_a_word_naming_an_action_are_never_one_task() -> None:
    template = {"text": "list the open incidents for fleet eu-west", "slots": []}
    assert same_task(template, "list the open incidents for fleet us-east") is not None
    assert same_task(template, "close the open incidents for fleet eu-west") is None
    assert same_task(template, "list the open incidents for fleet eu-west and delete them") is None
    assert same_task(template, "what is the weather in Lisbon") is None


def test_the_spans_that_differ_between_two_prompts_seed_parameters() -> None:
    base = "list the open issues of acme/web"
    spans = prompt_seeds(base, ["list the open issues of globex/api"])
    assert [base[a:b] for a, b in spans] == ["acme", "web"]
