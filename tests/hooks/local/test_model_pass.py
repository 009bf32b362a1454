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

from bir.cli import main
from bir.core import config
from bir.core.log import logging_to, logs_dir
from bir.core.pricing import cost_usd, price_of
from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.hooks.local import LOCAL_TOKEN, LOCAL_URL
from bir.hooks.local.app import build_app
from bir.hooks.local.model_pass import CALCULATE_TOOL, CONFIRM_TOOL, Model, input_tokens
from bir.hooks.local.runtime import LocalService, stats_of
from bir.hooks.local.store import Store, default_path
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
    tmp_path: Path,
    pool: EvaluatorPool,
    *,
    keyed: bool = True,
    max_usd: float = 0.05,
    load_model: bool = False,
    store_path: Path | None = None,
) -> AsyncIterator[Local]:
    store = Store(store_path or tmp_path / "store.db")
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


# --- the cost cap is per run ------------------------------------------------------------------------

HAIKU = "claude-haiku-4-5-20251001"
# What the fake API says each answer used: $0.0075 on Haiku 4.5 ($1 in, $5 out per million tokens).
USED = {"input_tokens": 5_000, "output_tokens": 500}
USED_USD = cost_usd(HAIKU, USED)
ACME = "list the open issues of acme/web"
# A paraphrase of ACME's task the cascade misses, whose own run the inference leaves not ready too.
PARAPHRASE = "which issues are still open in repo initech/billing"


async def paraphrase_run(lo: Local) -> None:
    """ACME made ready by the model; then PARAPHRASE, which the model says is another task (a confirmation
    at its match), recorded as a run of its own (a calculation at its finish, if the cap leaves one)."""
    assert lo.service.embedder.wait(30)
    lo.fake.usage = dict(USED)
    lo.fake.tool_input = proposal('return {owner: params.owner, repo: params.repo, state: "open"};')
    await lo.record("run_a", ACME, issues("acme", "web"))
    scenario = lo.store.scenario("scn_a")
    assert scenario is not None
    assert scenario.state == "ready", scenario.reason
    lo.fake.tool_input = {"sameTask": False, "values": {}, "why": "another repository's task"}
    # Its issue is the first row and the riskiest: the inference cannot tell which was meant.
    rows = [{"key": "BIL-7", "risk": 90}, {"key": "BIL-3", "risk": 20}, {"key": "BIL-5", "risk": 50}]
    listed = ("mcp__gh__list_issues", {"owner": "initech", "repo": "billing", "state": "open"}, rows)
    shown = ("mcp__gh__get_issue", {"owner": "initech", "repo": "billing", "key": "BIL-7"}, {"key": "BIL-7"})
    await lo.record("run_b", PARAPHRASE, [listed, shown])


async def test_the_calls_the_model_pass_makes_for_one_run_stay_under_its_cap_together_at_their_real_cost(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    # The cap covers one answer and not the estimate of a second: the run's calculation is not asked for.
    cap = USED_USD + 0.0015
    async with local(tmp_path / "a", pool, max_usd=cap, load_model=True) as lo:
        await paraphrase_run(lo)
        tools = [r.body["tool_choice"]["name"] for r in lo.fake.requests]
        assert tools == [CALCULATE_TOOL, CONFIRM_TOOL]
        # Counted at the answer's real usage, not at the call's estimate.
        assert lo.store.model_spent("run_b") == pytest.approx(USED_USD, abs=1e-6)
        assert lo.store.model_spent("run_a") == pytest.approx(USED_USD, abs=1e-6)
        paraphrased = lo.store.scenario_of_run("run_b")
        assert paraphrased is not None
        assert paraphrased.state == "not_ready"
        assert "cost cap" in str(paraphrased.reason["modelPass"] if paraphrased.reason else None)
        totals = stats_of(lo.store, None)["totals"]
        assert (totals["modelCalls"], totals["modelCostUsd"]) == (2, round(2 * USED_USD, 6))

    # A cap that leaves room for both: the second call's output is capped at what the first left.
    cap = 0.02
    async with local(tmp_path / "b", pool, max_usd=cap, load_model=True) as lo:
        await paraphrase_run(lo)
        first, confirm, second = (r.body for r in lo.fake.requests)
        assert (first["tool_choice"]["name"], confirm["tool_choice"]["name"]) == (CALCULATE_TOOL, CONFIRM_TOOL)
        assert second["tool_choice"]["name"] == CALCULATE_TOOL
        price = price_of(HAIKU)
        assert price is not None
        estimated_in = input_tokens({**second, "max_tokens": 4_096}) * price.input_per_mtok / 1_000_000
        left_for_output = cap - USED_USD - estimated_in
        assert second["max_tokens"] == int(left_for_output / (price.output_per_mtok / 1_000_000))
        assert second["max_tokens"] < first["max_tokens"]
        assert lo.store.model_spent("run_b") == pytest.approx(2 * USED_USD, abs=1e-6)
        assert lo.store.model_spent("run_b") <= cap


# --- nothing secret leaves, and every call is logged and counted -------------------------------------

TOKEN = "q7Rw2mZk9vLx4NpT8sYd"
KEY = "ghp_" + "Z3x9Kq2Lw8Vn5Rt7Bm4Pc6Hy1Jd0Fs"


async def test_nothing_secret_is_sent_to_the_model_the_recorders_redaction_applies(
    tmp_path: Path, pool: EvaluatorPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_TOKEN", TOKEN)
    leaked = [{"number": 7, "note": f"deploy token {TOKEN}", "auth": f"Authorization: Bearer {KEY}"}]
    async with local(tmp_path, pool) as lo:
        lo.fake.tool_input = proposal('return {owner: params.owner, repo: params.repo, state: "open"};')
        steps = [("mcp__gh__list_issues", {"owner": "acme", "repo": "web", "state": "open", "note": KEY}, leaked)]
        await lo.record("run_a", f"list the open issues of acme/web with {TOKEN}", steps)
        [request] = lo.fake.requests
        sent = json.dumps(request.body)
        assert TOKEN not in sent
        assert KEY not in sent
        assert "[REDACTED]" in sent
        # What was sent is the run's own: its prompt and its call.
        assert "list the open issues of acme/web" in sent
        assert "mcp__gh__list_issues" in sent


async def test_a_model_call_reaches_the_log_file_and_bir_stats_counts_its_cost(
    tmp_path: Path, pool: EvaluatorPool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.setenv("BIR_SERVICE", "local")
    log = logs_dir(config.home()) / "local.log"
    with logging_to(log):
        async with local(tmp_path, pool, store_path=default_path(config.home())) as lo:
            lo.fake.usage = dict(USED)
            lo.fake.tool_input = proposal('return {owner: params.owner, repo: params.repo, state: "open"};')
            await lo.record("run_a", ISSUES.format(repo="acme/web"), issues("acme", "web"))
    events = [json.loads(line) for line in log.read_text().splitlines()]
    [called] = [e for e in events if e["event"] == "local.model_call"]
    assert (called["purpose"], called["made"], called["run_id"]) == ("calculate", True, "run_a")
    assert called["cost_usd"] == pytest.approx(USED_USD, abs=1e-6)

    capsys.readouterr()
    assert main(["stats", "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert (totals["modelCalls"], totals["modelCostUsd"]) == (1, round(USED_USD, 6))
    assert main(["stats"]) == 0
    assert f"model pass: 1 calls, ${USED_USD:.4f}" in capsys.readouterr().out


# --- a row rule from the prompt's wording, and content the model wrote ------------------------------

# Wording the inference reads no rule in; the model reads "the highest risk" in it.
WORRIES = "show the device that worries us most in {region}"
# The first row is also the riskiest: the inference cannot tell which rule was meant from one run.
FIRST_AND_TOP = [{"id": "dev-100", "risk": 90}, {"id": "dev-101", "risk": 20}, {"id": "dev-102", "risk": 50}]


def riskiest_steps() -> list[tuple[str, dict[str, Any], object]]:
    return [
        ("mcp__fleet__list_devices", {"region": "eu-west-1"}, FIRST_AND_TOP),
        ("mcp__fleet__get_device", {"id": "dev-100"}, {"id": "dev-100", "status": "online"}),
    ]


def rule_proposal(pick: str) -> dict[str, Any]:
    rows = "JSON.parse(JSON.parse(toolOutput).content[0].text)"
    region = {"name": "region", "promptText": "eu-west-1", "value": "eu-west-1", "role": "target"}
    return {
        "intent": "show the device of the highest risk in {region}",
        "params": [region],
        "steps": [
            {
                "stepIndex": 0,
                "keep": True,
                "why": "the listing; what worries us most is the row of the highest risk",
                "inputLogic": "return {region: params.region};",
                "outputLogic": f"const rows = {rows}; return {{id: rows.reduce((a, b) => ({pick})).id}};",
            },
            {"stepIndex": 1, "keep": True, "why": "its details", "inputLogic": "return {id: respParams.id};"},
        ],
    }


@pytest.mark.parametrize(
    ("rule", "pick", "ready"),
    [
        ("the highest risk, as the prompt's wording means", "b.risk > a.risk ? b : a", True),
        ("the lowest risk, which picks another row than was recorded", "b.risk < a.risk ? b : a", False),
    ],
)
async def test_a_row_rule_the_model_resolves_from_the_prompt_s_wording_is_ready_only_when_it_passes_the_self_check(
    tmp_path: Path, pool: EvaluatorPool, rule: str, pick: str, ready: bool
) -> None:
    async with local(tmp_path, pool) as lo:
        lo.fake.tool_input = rule_proposal(pick)
        await lo.record("run_a", WORRIES.format(region="eu-west-1"), riskiest_steps())
        [request] = lo.fake.requests
        # The model was asked because the inference could not choose.
        assert "selector ambiguity" in request.body["messages"][0]["content"]
        scenario = lo.store.scenario("scn_a")
        assert scenario is not None
        assert (scenario.state == "ready") is ready, (rule, scenario.reason)
        if not ready:
            assert scenario.reason is not None
            assert "failed its self-check" in scenario.reason["modelPass"]
            assert "selector ambiguity" in scenario.reason["message"]
            return
        assert "b.risk > a.risk" in str(scenario.body["steps"][0]["toolOutputLogic"])
        _status, derived = await lo.service.derive("scn_a", {"prompt": WORRIES.format(region="us-east-1")})
        assert derived["params"] == {"region": "us-east-1"}


COMMENT = "Triaged: this one has been waiting for a reviewer for weeks and should be looked at soon."


def triage_steps() -> list[tuple[str, dict[str, Any], object]]:
    return [
        *issues("acme", "web"),
        (
            "mcp__gh__add_comment",
            {"owner": "acme", "repo": "web", "number": 7, "body": COMMENT},
            {"id": 991, "created": True},
        ),
    ]


def triage_proposal(mark_comment: bool) -> dict[str, Any]:
    answer = proposal('return {owner: params.owner, repo: params.repo, state: "open"};')
    comment = 'return {owner: params.owner, repo: params.repo, number: 7, body: "' + COMMENT + '"};'
    answer["steps"].append(
        {
            "stepIndex": 1,
            "keep": not mark_comment,
            "modelWritten": mark_comment,
            "why": "the comment's text is the model's own" if mark_comment else "the comment",
            "inputLogic": comment,
        }
    )
    return answer


@pytest.mark.parametrize(
    ("marked", "ready"),
    [(True, True), (False, False)],
    ids=["marked as model-written", "kept as a constant"],
)
async def test_content_the_model_wrote_is_left_out_when_marked_and_a_proposal_that_keeps_it_stays_not_ready(
    tmp_path: Path, pool: EvaluatorPool, marked: bool, ready: bool
) -> None:
    async with local(tmp_path, pool) as lo:
        lo.fake.tool_input = triage_proposal(marked)
        await lo.record("run_a", "list the open issues of acme/web and triage them", triage_steps())
        assert len(lo.fake.requests) == 1
        scenario = lo.store.scenario("scn_a")
        assert scenario is not None
        assert (scenario.state == "ready") is ready, scenario.reason
        if ready:
            assert [s["toolName"] for s in scenario.body["steps"]] == ["mcp__gh__list_issues"]
            [left_out] = scenario.body["excluded"]
            assert (left_out["toolName"], left_out["why"]) == (
                "mcp__gh__add_comment",
                "the comment's text is the model's own",
            )
        else:
            assert scenario.reason is not None
            assert "failed its self-check" in scenario.reason["modelPass"]
            assert "content the model wrote" in scenario.reason["modelPass"] or "prose" in scenario.reason["modelPass"]
