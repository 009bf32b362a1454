"""The durable outbox against the fake BaseIn service over real HTTP on loopback, and, where a test is
about what reaches the service, against the local service too (issue 18.1: ``backend`` runs it on both).

On the fake only: what needs a fault the fake injects and the in-process local service cannot have (a
service down then up, one not listening at its address, a forced refusal or error). The tests of the
outbox's own files and bounds send nothing and need no backend.
"""

from __future__ import annotations

import io
import json
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

from bir.core import log
from bir.core.service import ServiceClient
from bir.hooks.session.outbox import LEDGER_FILE, Outbox, outbox_dir
from bir.hooks.session.outbox_state import Policy
from tests.backends import Backend
from tests.fakes.baseinsvc import PRICING_VERSION, Canned, FakeBaseIn
from tests.fakes.fixtures import running_fake_service

FAST = Policy(backoff_base_s=0.02, backoff_cap_s=0.1)
DEADLINE_S = 15.0

Logged = Callable[[], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def logged() -> Iterator[Logged]:
    stream = io.StringIO()
    log.set_stream(stream)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        log.set_stream(None)


@pytest.fixture
def box_dir(tmp_path: Path) -> Path:
    return outbox_dir(tmp_path / "project")


def client_for(fake: FakeBaseIn, url: str | None = None) -> ServiceClient:
    return ServiceClient(url or fake.url, fake.token, timeout_s=5.0)


def step(index: int) -> dict[str, Any]:
    return {"stepIndex": index, "toolName": f"tool_{index}", "toolInput": {}, "toolOutput": "ok"}


def report(outcome: str = "steered_full", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "outcome": outcome,
        "deriveCostUsd": 0.001,
        "sessionCostUsd": 0.02,
        "fallbackCostUsd": 0.0,
        "durationMs": 1200,
        "stepsPlanned": 2,
        "stepsPinned": 2,
        "measured": True,
        "pricingVersion": PRICING_VERSION,
    }
    body.update(overrides)
    return body


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def until(condition: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    with anyio.fail_after(timeout_s):
        while not condition():  # noqa: ASYNC110 - the change comes over HTTP, from another thread
            await anyio.sleep(0.01)


def item_files(directory: Path, pattern: str = "s*.json") -> list[Path]:
    return sorted(directory.glob(pattern))


def write_text(path: Path, text: str) -> None:
    path.write_text(text)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def events(logged: Logged, name: str) -> list[dict[str, Any]]:
    return [e for e in logged() if e["event"] == name]


@pytest.mark.anyio
async def test_a_runs_steps_and_finish_reach_the_service_in_order(
    backend: Backend, box_dir: Path, logged: Logged
) -> None:
    await backend.new_run("run_1")
    box = Outbox(box_dir, backend.client, policy=FAST)
    async with box.running():
        for i in range(3):
            assert box.enqueue_step("run_1", i, step(i))
        assert box.enqueue_finish("run_1", {"output": "done"})
        assert await box.flush(DEADLINE_S)
    assert [r.body["stepIndex"] for r in backend.requests_to("steps")] == [0, 1, 2]
    assert [s["stepIndex"] for s in backend.steps_of("run_1")] == [0, 1, 2]
    assert backend.finish_of("run_1") == {"output": "done"}
    assert [e["step_index"] for e in events(logged, "recording.step_sent")] == [0, 1, 2]
    assert events(logged, "recording.finish_sent")[0]["status"] == "finished"
    assert item_files(box_dir) == []


@pytest.mark.anyio
async def test_the_outbox_directory_and_its_files_are_private(box_dir: Path) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        box = Outbox(box_dir, service, policy=FAST)
        box.enqueue_step("run_1", 0, step(0))
        box.enqueue_report("scn_1", "tkt_1", report())
        assert mode_of(box_dir) == 0o700
        files = item_files(box_dir, "*.json")
        assert len(files) == 3
        assert {mode_of(f) for f in files} == {0o600}
        assert read_json(box_dir / LEDGER_FILE)["tickets"].keys() == {"tkt_1"}


@pytest.mark.anyio
async def test_a_restarted_outbox_picks_up_the_pending_items(backend: Backend, box_dir: Path) -> None:
    await backend.new_run("run_1")
    scenario_id, ticket = await backend.ticket()
    sent = len(backend.requests)
    first = Outbox(box_dir, backend.client, policy=FAST)
    first.enqueue_step("run_1", 0, step(0))
    first.enqueue_finish("run_1", {"output": "done"})
    first.enqueue_report(scenario_id, ticket, report())
    first.close()  # the server died before its sender sent anything
    assert len(backend.requests) == sent

    second = Outbox(box_dir, backend.client, policy=FAST)
    assert [i.kind for i in second.pending()] == ["step", "finish", "report"]
    async with second.running():
        assert await second.flush(DEADLINE_S)
    assert [s["stepIndex"] for s in backend.steps_of("run_1")] == [0]
    assert backend.finish_of("run_1") is not None
    assert backend.booked_tickets() == [ticket]


@pytest.mark.anyio
async def test_a_ticket_reported_by_two_racing_tasks_and_again_after_a_restart_books_once(
    backend: Backend, box_dir: Path, logged: Logged
) -> None:
    scenario_id, ticket = await backend.ticket()
    box = Outbox(box_dir, backend.client, policy=FAST)
    results: list[bool] = []

    async def seal(outcome: str) -> None:
        await anyio.lowlevel.checkpoint()
        results.append(box.enqueue_report(scenario_id, ticket, report(outcome)))

    async with box.running():
        async with anyio.create_task_group() as tg:
            tg.start_soon(seal, "steered_full")  # Stop
            tg.start_soon(seal, "diverged")  # SessionEnd
        assert await box.flush(DEADLINE_S)
    assert sorted(results) == [False, True]

    restarted = Outbox(box_dir, backend.client, policy=FAST)
    assert restarted.redeemed(ticket)
    assert not restarted.enqueue_report(scenario_id, ticket, report())
    # A second process on the same directory (an old server still draining) sees the ledger too.
    beside = Outbox(box_dir, backend.client, policy=FAST)
    assert not beside.enqueue_report(scenario_id, ticket, report())
    assert restarted.pending() == []
    assert beside.pending() == []
    assert len(backend.requests_to("executions")) == 1
    assert backend.booked_tickets() == [ticket]
    assert [e["status"] for e in events(logged, "service.report_settled")] == ["booked"]


@pytest.mark.anyio
async def test_a_service_that_is_down_and_then_up_gets_everything_in_order(box_dir: Path, logged: Logged) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.add_run("run_1", [])
        fake.open_ticket("scn_1", "tkt_1")
        fake.down = True
        box = Outbox(box_dir, service, policy=FAST)
        async with box.running():
            for i in range(4):
                box.enqueue_step("run_1", i, step(i))
            box.enqueue_finish("run_1", {"output": "done"})
            box.enqueue_report("scn_1", "tkt_1", report())
            await until(lambda: len(events(logged, "outbox.retry")) >= 2)
            assert fake.steps_of("run_1") == []
            fake.down = False
            assert await box.flush(DEADLINE_S)
        run_order = [r.route for r in fake.requests if r.route in ("steps", "finish")]
        assert run_order[-1] == "finish"
        indices = [r.body["stepIndex"] for r in fake.requests_to("steps")]
        assert indices == sorted(indices)
        assert [s["stepIndex"] for s in fake.steps_of("run_1")] == [0, 1, 2, 3]
        assert fake.booked_tickets() == ["tkt_1"]


@pytest.mark.anyio
async def test_an_unreachable_service_that_comes_back_at_its_address_gets_the_items(box_dir: Path) -> None:
    port = free_port()
    fake = FakeBaseIn()
    url = f"http://127.0.0.1:{port}"
    async with client_for(fake, url) as service:
        box = Outbox(box_dir, service, policy=FAST)
        async with box.running():
            box.enqueue_step("run_1", 0, step(0))
            await until(lambda: box.pending()[0].attempts >= 1)  # refused: nothing listens there yet
            fake.add_run("run_1", [])
            async with running_fake_service(fake, port=port):
                assert await box.flush(DEADLINE_S)
        assert [s["stepIndex"] for s in fake.steps_of("run_1")] == [0]


@pytest.mark.anyio
async def test_an_unknown_run_drops_the_rest_of_its_steps_and_its_finish(
    backend: Backend, box_dir: Path, logged: Logged
) -> None:
    await backend.new_run("run_ok")
    box = Outbox(box_dir, backend.client, policy=FAST)
    for i in range(3):
        box.enqueue_step("run_gone", i, step(i))
    box.enqueue_finish("run_gone", {"output": "x"})
    box.enqueue_step("run_ok", 0, step(0))
    async with box.running():
        assert await box.flush(DEADLINE_S)
    assert [r.path for r in backend.requests_to("steps")] == [
        "/recordings/runs/run_gone/steps",
        "/recordings/runs/run_ok/steps",
    ]
    assert backend.requests_to("finish") == []
    assert [s["stepIndex"] for s in backend.steps_of("run_ok")] == [0]
    [unknown] = events(logged, "recording.run_unknown")
    assert unknown == {**unknown, "run_id": "run_gone", "dropped": 3}


@pytest.mark.anyio
async def test_a_final_refusal_is_dropped_and_logged_without_a_retry(box_dir: Path, logged: Logged) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.forced["steps"] = Canned(400, {"error": "bad step"})
        box = Outbox(box_dir, service, policy=FAST)
        box.enqueue_step("run_1", 0, step(0))
        async with box.running():
            assert await box.flush(DEADLINE_S)
        assert len(fake.requests_to("steps")) == 1
        [dropped] = events(logged, "outbox.dropped")
        assert (dropped["reason"], dropped["status"]) == ("rejected", 400)


@pytest.mark.anyio
async def test_an_item_out_of_attempts_is_dropped(box_dir: Path, logged: Logged) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.forced["executions"] = Canned(500, {"error": "boom"})
        box = Outbox(box_dir, service, policy=Policy(backoff_base_s=0.01, backoff_cap_s=0.02, max_attempts=3))
        box.enqueue_report("scn_1", "tkt_1", report())
        async with box.running():
            assert await box.flush(DEADLINE_S)
        assert len(fake.requests_to("executions")) == 3
        [dropped] = events(logged, "outbox.dropped")
        assert (dropped["reason"], dropped["ticket"]) == ("expired", "tkt_1")
        assert box.redeemed("tkt_1")


@pytest.mark.anyio
async def test_nothing_is_sent_while_the_service_cools_down(box_dir: Path) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.add_run("run_1", [])
        fake.down = True
        box = Outbox(box_dir, service, policy=Policy(backoff_base_s=3600.0, backoff_cap_s=3600.0))
        async with box.running():
            box.enqueue_step("run_1", 0, step(0))
            await until(lambda: len(fake.requests_to("steps")) == 1 and box.cooling_s > 0)
            fake.down = False
            box.enqueue_report("scn_1", "tkt_1", report())
            assert not await box.flush(0.3)
        assert len(fake.requests) == 1


@pytest.mark.anyio
async def test_a_cool_down_seen_elsewhere_holds_the_sender_back(backend: Backend, box_dir: Path) -> None:
    await backend.new_run("run_1")
    sent = len(backend.requests)
    cooling = [3600.0]
    box = Outbox(box_dir, backend.client, policy=FAST, cooldown=lambda: cooling[0])
    async with box.running():
        box.enqueue_step("run_1", 0, step(0))
        assert not await box.flush(0.3)
        assert len(backend.requests) == sent
        cooling[0] = 0.0
        box.enqueue_finish("run_1", {"output": "x"})  # wakes the sender, which looks again
        assert await box.flush(DEADLINE_S)
    assert [s["stepIndex"] for s in backend.steps_of("run_1")] == [0]


@pytest.mark.anyio
async def test_past_its_bounds_the_outbox_drops_the_oldest_recording_items_before_reports(
    box_dir: Path, logged: Logged
) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        box = Outbox(box_dir, service, policy=Policy(max_items=3))
        box.enqueue_report("scn_1", "tkt_1", report())
        for i in range(4):
            box.enqueue_step("run_1", i, step(i))
        kept = box.pending()
        assert [(i.kind, i.step_index) for i in kept] == [("report", None), ("step", 2), ("step", 3)]
        assert len(item_files(box_dir)) == 3
        assert [e["reason"] for e in events(logged, "outbox.dropped")] == ["bounds", "bounds"]
        assert fake.requests == []


@pytest.mark.anyio
async def test_past_its_byte_bound_the_outbox_drops_reports_only_when_no_recording_item_is_left(
    box_dir: Path,
) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        probe = Outbox(box_dir.with_name("probe"), service)
        probe.enqueue_report("scn_0", "tkt_0", report())
        one_report = len(msgspec.json.encode(probe.pending()[0]))
        box = Outbox(box_dir, service, policy=Policy(max_bytes=one_report * 5 // 2))
        box.enqueue_step("run_1", 0, step(0))
        box.enqueue_report("scn_1", "tkt_1", report())
        box.enqueue_report("scn_2", "tkt_2", report())
        box.enqueue_report("scn_3", "tkt_3", report())
        assert [i.ticket for i in box.pending()] == ["tkt_2", "tkt_3"]
        assert not box.enqueue_step("run_1", 1, {**step(1), "toolOutput": "x" * one_report * 3})
        assert [i.ticket for i in box.pending()] == ["tkt_2", "tkt_3"]
        assert fake.requests == []


@pytest.mark.anyio
async def test_a_draft_waits_until_it_is_finalized_and_then_books_its_final_body(
    backend: Backend, box_dir: Path
) -> None:
    scenario_id, ticket = await backend.ticket()
    sent = len(backend.requests)
    box = Outbox(box_dir, backend.client, policy=FAST)
    async with box.running():
        assert box.draft_report(ticket, scenario_id, report("not_steered", measured=False))
        assert await box.flush(DEADLINE_S)  # a draft is not outgoing
        assert len(backend.requests) == sent
        assert not box.enqueue_report(scenario_id, ticket, report())
        assert box.finalize_report(ticket, report("steered_full"))
        assert await box.flush(DEADLINE_S)
    [booked] = backend.booked()
    assert (booked.ticket, booked.outcome, booked.measured, booked.ledger) == (ticket, "steered_full", True, "savings")


@pytest.mark.anyio
async def test_a_draft_finalized_with_nothing_to_report_is_dropped_and_stays_redeemed(box_dir: Path) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        box = Outbox(box_dir, service, policy=FAST)
        box.draft_report("tkt_1", "scn_1", report("not_steered", measured=False))
        assert not box.finalize_report("tkt_1", None)
        assert box.pending() == []
        assert not box.finalize_report("tkt_1", report(), scenario_id="scn_1")
        async with box.running():
            assert await box.flush(DEADLINE_S)
        assert fake.requests == []


@pytest.mark.anyio
async def test_a_final_report_without_a_draft_is_enqueued_once(backend: Backend, box_dir: Path) -> None:
    scenario_id, ticket = await backend.ticket()
    box = Outbox(box_dir, backend.client, policy=FAST)
    assert not box.finalize_report(ticket, report())  # no draft and no scenario: nothing to do
    assert box.finalize_report(ticket, report(), scenario_id=scenario_id)
    assert not box.finalize_report(ticket, report(), scenario_id=scenario_id)
    async with box.running():
        assert await box.flush(DEADLINE_S)
    assert backend.booked_tickets() == [ticket]


@pytest.mark.anyio
async def test_a_draft_left_by_a_dead_server_is_booked_as_its_floor_once_it_is_old_enough(
    backend: Backend, box_dir: Path, logged: Logged
) -> None:
    now = [1_000_000.0]
    policy = Policy(backoff_base_s=0.02, backoff_cap_s=0.1, draft_max_age_s=1_800.0)
    scenario_id, ticket = await backend.ticket()
    dead = Outbox(box_dir, backend.client, policy=policy, clock=lambda: now[0])
    dead.draft_report(ticket, scenario_id, report("not_steered", measured=False))
    dead.close()

    now[0] += 60.0  # restarted a minute later: the turn may still seal elsewhere, the draft waits
    young = Outbox(box_dir, backend.client, policy=policy, clock=lambda: now[0])
    assert [i.draft for i in young.pending()] == [True]

    now[0] += 1_800.0
    aged = Outbox(box_dir, backend.client, policy=policy, clock=lambda: now[0])
    async with aged.running():
        assert await aged.flush(DEADLINE_S)
    [baseline] = backend.booked()
    assert (baseline.outcome, baseline.measured, baseline.ledger) == ("not_steered", False, "baseline")
    assert len(backend.requests_to("executions")) == 1
    assert [e["ticket"] for e in events(logged, "outbox.draft_aged")] == [ticket]


@pytest.mark.anyio
async def test_an_unreadable_item_file_is_set_aside_and_the_rest_delivered(
    backend: Backend, box_dir: Path, logged: Logged
) -> None:
    await backend.new_run("run_1")
    first = Outbox(box_dir, backend.client, policy=FAST)
    first.enqueue_step("run_1", 0, step(0))
    bad = box_dir / "s000000000000-step-broken.json"
    write_text(bad, "{not json")
    second = Outbox(box_dir, backend.client, policy=FAST)
    async with second.running():
        assert await second.flush(DEADLINE_S)
    assert [s["stepIndex"] for s in backend.steps_of("run_1")] == [0]
    assert item_files(box_dir, "*.bad") == [bad.with_suffix(".bad")]
    assert events(logged, "outbox.item_unreadable")
