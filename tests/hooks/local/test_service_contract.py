"""The service's contract, run against the fake service and the local one alike through the real
``ServiceClient`` (and the real outbox): the local service keeps the fake's server-side rules."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bir.core.pricing import PRICING_VERSION
from bir.core.service import ServiceClient, ServiceError
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.local import open_local_service
from bir.hooks.local.runtime import LocalService
from bir.hooks.session.outbox import Outbox
from bir.hooks.session.outbox_state import Policy
from tests.fakes.baseinsvc import FakeBaseIn
from tests.fakes.fixtures import running_fake_service
from tests.paths import SCENARIOS

pytestmark = pytest.mark.anyio
PROMPT = "show the details of the riskiest device in eu-west-1"


def mcp(value: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


def finish_body() -> dict[str, Any]:
    usage = [
        {
            "model": "claude-opus-4-6",
            "inputTokens": 900,
            "outputTokens": 100,
            "cacheCreationInputTokens": 0,
            "cacheReadInputTokens": 4000,
        }
    ]
    return {
        "output": "done",
        "durationMs": 8000,
        "usage": usage,
        "costUsd": 0.0092,
        "measured": True,
        "pricingVersion": PRICING_VERSION,
    }


@dataclass
class Backend:
    name: str
    client: ServiceClient
    fake: FakeBaseIn | None = None
    local: LocalService | None = None
    recorded: bool = False

    async def hit(self, prompt: str) -> tuple[str, str]:
        """A prompt that matches a ready scenario: its scenario id and ticket."""
        if self.fake is not None:
            scenario = json.loads((SCENARIOS / "fleet-direct.json").read_text())
            ticket = self.fake.add_match(prompt, scenario)
            return str(scenario["id"]), ticket
        assert self.local is not None
        if not self.recorded:
            await self._record()
        answer = await self.client.match("run_probe", prompt, {"cwd": "/p"})
        assert answer is not None
        assert answer.matched is not None
        assert answer.matched.scenario_id is not None
        assert answer.matched.execution_ticket is not None
        return answer.matched.scenario_id, answer.matched.execution_ticket

    async def _record(self) -> None:
        assert self.local is not None
        self.recorded = True
        assert await self.client.match("run_rec", PROMPT, {"cwd": "/p"}) is None
        rows = list_devices_in("eu-west-1")
        top = max(rows, key=lambda r: r["risk"])
        await self.client.post_step(
            "run_rec",
            {
                "stepIndex": 0,
                "toolName": "mcp__fleet__list_devices",
                "toolInput": {"region": "eu-west-1"},
                "toolOutput": mcp(rows),
            },
        )
        await self.client.post_step(
            "run_rec",
            {
                "stepIndex": 1,
                "toolName": "mcp__fleet__get_device",
                "toolInput": {"id": top["id"]},
                "toolOutput": mcp(device_by_id(top["id"])),
            },
        )
        await self.client.finish_run("run_rec", finish_body())
        assert await self.local.idle()

    def steps_of(self, run_id: str) -> list[int]:
        if self.fake is not None:
            return [s["stepIndex"] for s in self.fake.steps_of(run_id)]
        assert self.local is not None
        return [s.step_index for s in self.local.store.steps(run_id)]


@pytest.fixture(scope="module")
async def pool() -> AsyncIterator[EvaluatorPool]:
    async with EvaluatorPool(workers=1) as running:
        yield running


@pytest.fixture(params=["fake", "local"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path, pool: EvaluatorPool) -> AsyncIterator[Backend]:
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "fake":
            fake = await stack.enter_async_context(running_fake_service())
            client = await stack.enter_async_context(ServiceClient(fake.url, fake.token))
            yield Backend("fake", client, fake=fake)
        else:
            local = await stack.enter_async_context(open_local_service(tmp_path, project="/p", pool=pool))
            client = await stack.enter_async_context(ServiceClient(local.base_url, "local", transport=local.transport))
            yield Backend("local", client, local=local.service)


async def test_a_miss_creates_the_run_and_its_steps_are_kept_in_step_order(backend: Backend) -> None:
    assert await backend.client.match("run_1", "something new", {"cwd": "/p"}) is None
    for index in (2, 0, 1):
        result = await backend.client.post_step(
            "run_1", {"stepIndex": index, "toolName": "Read", "toolInput": {}, "toolOutput": "{}"}
        )
        assert result.status == "recorded"
    assert backend.steps_of("run_1") == [0, 1, 2]


async def test_a_step_or_finish_for_an_unknown_run_is_an_answer_and_a_second_finish_a_duplicate(
    backend: Backend,
) -> None:
    assert (await backend.client.post_step("run_nope", {"stepIndex": 0, "toolName": "Read"})).status == "unknown_run"
    assert (await backend.client.finish_run("run_nope", {"output": ""})).status == "unknown_run"
    assert await backend.client.match("run_2", "another new prompt", {}) is None
    assert (await backend.client.finish_run("run_2", finish_body())).status == "finished"
    assert (await backend.client.finish_run("run_2", finish_body())).status == "duplicate"


async def test_a_hit_carries_a_ready_scenario_and_a_ticket_and_only_the_local_service_records_the_replayed_turn(
    backend: Backend,
) -> None:
    scenario_id, _ = await backend.hit("show the details of the riskiest device in us-east-1")
    answer = await backend.client.match("run_3", "show the details of the riskiest device in us-east-1", {})
    assert answer is not None
    assert answer.matched is not None
    assert answer.matched.scenario is not None
    assert answer.matched.scenario.state in (None, "ready")
    assert answer.matched.scenario.steps
    step = {"stepIndex": 0, "toolName": "Read", "toolInput": {}, "toolOutput": "{}"}
    if backend.name == "local":
        # The local service's extension (issue 19): the hit names the turn's run, which a repair may need.
        assert answer.id == "run_3"
        assert (await backend.client.post_step("run_3", step)).status == "recorded"
    else:
        assert answer.id is None
        assert (await backend.client.post_step("run_3", step)).status == "unknown_run"
    scenario = await backend.client.get_scenario(scenario_id)
    assert scenario.steps


async def test_a_ticket_books_once_an_unknown_one_is_refused_and_a_costless_report_is_not_recorded(
    backend: Backend,
) -> None:
    scenario_id, ticket = await backend.hit("show the details of the riskiest device in sa-east-1")
    body = {
        "ticket": ticket,
        "outcome": "steered_full",
        "deriveCostUsd": 0.0,
        "sessionCostUsd": 0.002,
        "fallbackCostUsd": 0.0,
        "durationMs": 1500,
        "measured": True,
        "pricingVersion": PRICING_VERSION,
    }
    assert (await backend.client.report_execution(scenario_id, body)).status == "booked"
    assert (await backend.client.report_execution(scenario_id, body)).status == "duplicate"
    unknown = {**body, "ticket": "tkt_never_issued"}
    assert (await backend.client.report_execution(scenario_id, unknown)).status == "ticket_unknown"
    _, second = await backend.hit("show the details of the riskiest device in ap-southeast-2")
    costless = {"ticket": second, "outcome": "not_steered", "measured": False}
    assert (await backend.client.report_execution(scenario_id, costless)).status == "not_recorded"


async def test_the_outbox_delivers_a_runs_steps_then_its_finish(backend: Backend, tmp_path: Path) -> None:
    assert await backend.client.match("run_4", "a prompt the outbox records", {}) is None
    box = Outbox(tmp_path / "outbox", backend.client, policy=Policy(backoff_base_s=0.02, backoff_cap_s=0.1))
    async with box.running():
        for i in range(3):
            assert box.enqueue_step(
                "run_4", i, {"stepIndex": i, "toolName": "Read", "toolInput": {}, "toolOutput": "{}"}
            )
        assert box.enqueue_finish("run_4", finish_body())
        assert await box.flush(10.0)
    assert backend.steps_of("run_4") == [0, 1, 2]
    assert (await backend.client.finish_run("run_4", finish_body())).status == "duplicate"


async def test_a_full_local_store_answers_503_so_the_outbox_tries_again(tmp_path: Path, pool: EvaluatorPool) -> None:
    async with (
        open_local_service(tmp_path, project="/p", pool=pool) as local,
        ServiceClient(local.base_url, "local", transport=local.transport) as client,
    ):
        assert await client.match("run_5", "a prompt", {}) is None
        with local.service.store.raw() as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")
        statuses = []
        for i in range(50):
            try:
                await client.post_step("run_5", {"stepIndex": i, "toolName": "Read", "toolOutput": "x" * 20_000})
            except ServiceError as exc:
                statuses.append(exc.status)
                break
        assert statuses == [503]
        assert local.service.store.run("run_5") is not None


async def test_derivation_answers_the_slot_values_at_no_cost(tmp_path: Path, pool: EvaluatorPool) -> None:
    async with (
        open_local_service(tmp_path, project="/p", pool=pool) as local,
        ServiceClient(local.base_url, "local", transport=local.transport) as client,
    ):
        backend = Backend("local", client, local=local.service)
        scenario_id, _ = await backend.hit("show the details of the riskiest device in us-east-1")
        answer = await client.derive(scenario_id, "show the details of the riskiest device in ap-southeast-2")
        assert answer == {"params": {"region": "ap-southeast-2"}, "derived": True, "missing": [], "costUsd": 0.0}
        unrelated = await client.derive(scenario_id, "write a poem")
        assert unrelated == {"params": {"region": None}, "derived": False, "missing": ["region"], "costUsd": 0.0}
        stats = await local.service.stats()
        assert stats["totals"]["hits"] == 1
