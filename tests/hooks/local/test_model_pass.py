"""The optional model pass (issue 19 item 4), against the fake Messages API answering forced tool use as the
real one does; the bodies it returns run in the real evaluator pool, and only a self-check decides."""

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
from bir.hooks.local.model_pass import CALCULATE_TOOL, CONFIRM_TOOL, Model
from bir.hooks.local.runtime import LocalService, stats_of
from bir.hooks.local.store import Store
from tests.fakes.anthropicsvc import FakeAnthropic
from tests.fakes.fixtures import running_fake_anthropic

pytestmark = pytest.mark.anyio
ISSUES = "list the open issues of {repo}"


def mcp(value: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


@dataclass
class Local:
    service: LocalService
    client: ServiceClient
    store: Store
    fake: FakeAnthropic

    async def record(self, run_id: str, prompt: str, steps: Sequence[tuple[str, dict[str, Any], object]]) -> None:
        assert await self.client.match(run_id, prompt, {}) is None
        for i, (tool, tool_input, output) in enumerate(steps):
            body = {"stepIndex": i, "toolName": tool, "toolInput": tool_input, "toolOutput": mcp(output)}
            assert (await self.client.post_step(run_id, body)).status == "recorded"
        assert (await self.client.finish_run(run_id, {"output": "done"})).status == "finished"
        assert await self.service.idle()


@contextlib.asynccontextmanager
async def local(
    tmp_path: Path, pool: EvaluatorPool, *, keyed: bool = True, max_usd: float = 0.05, load_model: bool = False
) -> AsyncIterator[Local]:
    store = Store(tmp_path / "store.db")
    try:
        async with running_fake_anthropic() as fake:
            model = Model(fake.api_key, "claude-haiku-4-5-20251001", fake.messages_url, max_usd) if keyed else None
            async with (
                LocalService(store, project="/p", pool=pool, load_model=load_model, model=model) as service,
                ServiceClient(LOCAL_URL, LOCAL_TOKEN, transport=httpx.ASGITransport(app=build_app(service))) as client,
            ):
                yield Local(service, client, store, fake)
    finally:
        store.close()


def issues(owner: str, repo: str) -> list[tuple[str, dict[str, Any], object]]:
    return [("mcp__gh__list_issues", {"owner": owner, "repo": repo, "state": "open"}, [{"number": 7}])]


def proposal(input_logic: str, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "intent": "list the open issues of {owner}/{repo}",
        "params": params
        or [
            {"name": "owner", "promptText": "acme", "value": "acme", "role": "target", "description": "the owner"},
            {"name": "repo", "promptText": "web", "value": "web", "role": "target", "description": "the repository"},
        ],
        "steps": [{"stepIndex": 0, "keep": True, "why": "the listing", "inputLogic": input_logic, "outputLogic": None}],
    }


async def test_a_run_the_inference_left_not_ready_is_made_ready_by_the_model_s_bodies_passing_the_self_check(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    async with local(tmp_path, pool) as lo:
        lo.fake.tool_input = proposal('return {owner: params.owner, repo: params.repo, state: "open"};')
        await lo.record("run_a", ISSUES.format(repo="acme/web"), issues("acme", "web"))
        [request] = lo.fake.requests
        body = request.body
        assert body["tool_choice"] == {"type": "tool", "name": CALCULATE_TOOL, "disable_parallel_tool_use": True}
        assert "acme/web" in body["messages"][0]["content"]
        scenario = lo.store.scenario("scn_a")
        assert scenario is not None
        assert scenario.state == "ready", scenario.reason
        assert scenario.body["calculation"]["by"] == "local+model"
        assert set(scenario.body["paramsObject"]) == {"owner", "repo"}
        hit = await lo.client.match("run_b", ISSUES.format(repo="initech/billing"), {})
        assert hit is not None
        assert hit.matched is not None
        _status, derived = await lo.service.derive("scn_a", {"prompt": ISSUES.format(repo="initech/billing")})
        assert derived["params"] == {"owner": "initech", "repo": "billing"}
        totals = stats_of(lo.store, None)["totals"]
        assert totals["modelCalls"] == 1
        assert totals["modelCostUsd"] > 0


@pytest.mark.parametrize(
    ("why", "logic"),
    [
        (
            "rebuilds another input than was recorded",
            'return {owner: params.owner, repo: params.repo, state: "closed"};',
        ),
        ("pins the recorded values as constants", 'return {owner: "acme", repo: "web", state: "open"};'),
        ("is not JavaScript", "return {owner: params.owner,"),
    ],
)
async def test_a_model_calculation_that_fails_the_self_check_never_makes_the_scenario_ready(
    tmp_path: Path, pool: EvaluatorPool, why: str, logic: str
) -> None:
    async with local(tmp_path, pool) as lo:
        lo.fake.tool_input = proposal(logic)
        await lo.record("run_a", ISSUES.format(repo="acme/web"), issues("acme", "web"))
        scenario = lo.store.scenario("scn_a")
        assert scenario is not None
        assert scenario.state == "not_ready", why
        assert scenario.reason is not None
        assert "failed its self-check" in scenario.reason["modelPass"]
        # The calculator's own reason stays beside the model's.
        assert "transformed" in scenario.reason["message"]
        assert stats_of(lo.store, None)["totals"]["modelCalls"] == 1


async def test_without_a_key_nothing_is_sent_and_past_its_cost_cap_no_call_is_made(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    async with local(tmp_path / "a", pool, keyed=False) as lo:
        await lo.record("run_a", ISSUES.format(repo="acme/web"), issues("acme", "web"))
        assert lo.fake.requests == []
        assert stats_of(lo.store, None)["totals"]["modelCalls"] == 0
    async with local(tmp_path / "b", pool, max_usd=1e-9) as lo:
        await lo.record("run_a", ISSUES.format(repo="acme/web"), issues("acme", "web"))
        assert lo.fake.requests == []
        scenario = lo.store.scenario("scn_a")
        assert scenario is not None
        assert scenario.state == "not_ready"
        assert "cost cap" in str(scenario.reason)


PROJECT = "list the open issues of project {project}"


def search(project: str) -> list[tuple[str, dict[str, Any], object]]:
    return [("mcp__tracker__search_issues", {"project": project, "status": "open"}, {"issues": [{"key": "X-1"}]})]


async def test_a_paraphrase_slot_alignment_cannot_match_is_confirmed_by_one_call_with_its_values(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    async with local(tmp_path, pool, load_model=True) as lo:
        assert lo.service.embedder.wait(30)
        await lo.record("run_a", PROJECT.format(project="WEB"), search("WEB"))
        assert lo.fake.requests == []
        lo.fake.tool_input = {"sameTask": True, "values": {"project": "API", "status": "open"}, "why": "same"}
        hit = await lo.client.match("run_b", "which issues are still open in project API", {})
        assert hit is not None
        assert hit.matched is not None
        assert hit.matched.scenario_id == "scn_a"
        [request] = lo.fake.requests
        assert request.body["tool_choice"]["name"] == CONFIRM_TOOL
        _status, derived = await lo.service.derive("scn_a", {"prompt": "which issues are still open in project API"})
        assert derived["params"]["project"] == "API"

        # Another action ("closed" names one) is never even asked about: a miss, with no call.
        lo.fake.tool_input = {"sameTask": True, "values": {"project": "API", "status": "open"}}
        assert await lo.client.match("run_c", "which issues should be closed in project API", {}) is None
        assert len(lo.fake.requests) == 1
        # The model says it is another task: a miss.
        lo.fake.tool_input = {"sameTask": False, "values": {}, "why": "it asks for the stale ones"}
        assert await lo.client.match("run_d", "which issues are still open in project DATA", {}) is None
        # A value the request does not hold is a guess: a miss.
        lo.fake.tool_input = {"sameTask": True, "values": {"project": "OPS", "status": "open"}}
        assert await lo.client.match("run_e", "which issues are still open in project MOBILE", {}) is None
        assert stats_of(lo.store, None)["totals"]["modelCalls"] == 3
