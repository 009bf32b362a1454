"""The service client against the fake BaseIn service over real HTTP, and, where a test is about the
service's contract, against the local service too (issue 18.1: ``backend`` runs it on both).

On the fake only, each for its reason: what the client reads from the environment or a sign-in (a URL
names a remote service; the local one is reached in process); a wrong token (the local service has one
user and checks none); and what only the fake can be made to do: a canned answer, a planted malformed
scenario or step spelling, a forced status, a slow route, a service that is down.
"""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import httpx
import pytest

from bir.core import credentials, log
from bir.core.service import MAX_ERROR_CHARS, ServiceClient, ServiceError
from tests.backends import Backend
from tests.fakes.baseinsvc import PRICING_VERSION, Canned, FakeBaseIn
from tests.fakes.fixtures import running_fake_service
from tests.paths import SCENARIOS


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def logged() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    stream = io.StringIO()
    log.set_stream(stream)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        log.set_stream(None)


def scenario_fixture(name: str = "fleet-direct") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCENARIOS / f"{name}.json").read_text())
    return data


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def report(ticket: str, outcome: str = "steered_full", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ticket": ticket,
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


def client_for(fake: FakeBaseIn, **kwargs: Any) -> ServiceClient:
    return ServiceClient(fake.url, fake.token, **kwargs)


@pytest.mark.anyio
async def test_a_hit_returns_the_matched_scenario_and_its_ticket(backend: Backend) -> None:
    scenario_id = await backend.ready_scenario()
    answer = await backend.hit("run_new")
    assert answer.matched is not None
    assert answer.matched.run_id == backend.source_run
    assert answer.matched.scenario_id == scenario_id
    assert answer.matched.execution_ticket
    assert answer.matched.similarity == (0.94 if backend.fake is not None else 1.0)
    assert answer.matched.scenario is not None
    assert answer.matched.scenario.state in (None, "ready")
    assert [s.tool_name for s in answer.matched.scenario.steps] == [
        "mcp__fleet__list_devices",
        "mcp__fleet__get_device",
    ]
    step = await backend.client.post_step("run_new", step_body(0))
    if backend.fake is not None:
        # The remote service creates no run on a hit: its own canonical run stands (spec §2, §12).
        assert answer.id is None
        assert not backend.has_run("run_new")
        assert step.status == "unknown_run"
    else:
        # The local service keeps the replayed turn's run (issue 19: a repair may need it).
        assert answer.id == "run_new"
        assert step.status == "recorded"


@pytest.mark.anyio
async def test_a_miss_returns_none_and_the_service_keeps_the_new_run(backend: Backend) -> None:
    assert await backend.client.match("run_new", "something never asked", {"cwd": "/x"}) is None
    assert backend.has_run("run_new")
    [seen] = backend.requests_to("match")
    assert seen.body == {
        "id": "run_new",
        "framework": "claude-code",
        "input": "something never asked",
        "metadata": {"cwd": "/x"},
    }
    assert seen.headers["authorization"] == f"Bearer {backend.token}"


@pytest.mark.anyio
async def test_the_base_url_token_and_timeout_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_fake_service() as fake:
        monkeypatch.setenv("BIR_AUTH_URL", fake.url + "/")
        monkeypatch.setenv("BIR_TOKEN", fake.token)
        monkeypatch.setenv("BIR_SERVICE_TIMEOUT_MS", "2500")
        async with ServiceClient() as service:
            assert service.configured
            assert service.timeout_s == 2.5
            assert await service.match("run_env", "hello", None) is None
        assert fake.requests_to("match")[0].headers["authorization"] == f"Bearer {fake.token}"


@pytest.mark.anyio
async def test_a_client_without_a_url_asks_nothing_and_says_it_is_not_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    async with ServiceClient() as service:
        assert not service.configured
        assert await service.match("run_x", "hello", {}) is None
        assert await service.derive("scn_x", "hello") is None
        with pytest.raises(ServiceError) as caught:
            await service.get_scenario("scn_x")
        assert caught.value.kind == "not_configured"


@pytest.mark.anyio
async def test_a_wrong_token_is_a_status_error_naming_the_route() -> None:
    async with running_fake_service() as fake, ServiceClient(fake.url, "wrong") as service:
        with pytest.raises(ServiceError) as caught:
            await service.match("run_x", "hello", {})
        assert caught.value.kind == "status"
        assert caught.value.status == 401
        assert str(caught.value) == "match: HTTP 401 (unauthorized)"


@pytest.mark.anyio
async def test_run_steps_are_read_in_both_spellings() -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.add_run(
            "run_src",
            [
                {"stepIndex": 0, "toolName": "mcp__fleet__list_devices", "toolOutput": {"content": []}},
                {"step_index": 1, "tool_name": "Read", "tool_output": "file text"},
            ],
        )
        steps = await service.get_run_steps("run_src")
        assert [(s.step_index, s.tool_name, s.tool_output) for s in steps] == [
            (0, "mcp__fleet__list_devices", {"content": []}),
            (1, "Read", "file text"),
        ]


@pytest.mark.anyio
async def test_an_unknown_run_is_a_404_service_error(backend: Backend) -> None:
    with pytest.raises(ServiceError) as caught:
        await backend.client.get_run_steps("run_missing")
    assert (caught.value.kind, caught.value.status) == ("status", 404)


@pytest.mark.anyio
async def test_identifiers_are_quoted_into_one_path_segment() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(404, json={"error": "run not found"})

    async with ServiceClient("https://service.invalid", "t", transport=httpx.MockTransport(handler)) as service:
        with pytest.raises(ServiceError):
            await service.get_run_steps("../../scenarios/scn_x")
    assert seen == [b"/recordings/runs/..%2F..%2Fscenarios%2Fscn_x"]


@pytest.mark.anyio
async def test_a_report_is_booked_once_and_a_second_is_a_duplicate(backend: Backend) -> None:
    scenario_id, ticket = await backend.ticket()
    first = await backend.client.report_execution(scenario_id, report(ticket))
    second = await backend.client.report_execution(scenario_id, report(ticket))
    assert (first.status, first.http_status, first.execution_id, first.booked) == ("booked", 201, ticket, True)
    assert (second.status, second.http_status, second.booked) == ("duplicate", 200, False)
    assert [(b.ticket, b.ledger) for b in backend.booked()] == [(ticket, "savings")]


@pytest.mark.anyio
async def test_an_unknown_or_expired_ticket_is_answered_not_raised(backend: Backend) -> None:
    scenario_id, ticket = await backend.ticket()
    backend.expire_ticket(ticket)
    result = await backend.client.report_execution(scenario_id, report(ticket))
    unknown = await backend.client.report_execution(scenario_id, report("tkt_never_issued"))
    assert (result.status, result.http_status) == ("ticket_unknown", 409)
    assert unknown.status == "ticket_unknown"
    assert backend.booked() == []


@pytest.mark.anyio
async def test_a_costless_report_without_an_error_is_not_recorded(backend: Backend) -> None:
    scenario_id, ticket = await backend.ticket()
    body = report(ticket, "not_steered", deriveCostUsd=0, sessionCostUsd=0)
    result = await backend.client.report_execution(scenario_id, body)
    assert (result.status, result.http_status) == ("not_recorded", 202)
    assert backend.booked() == []


@pytest.mark.anyio
async def test_declines_go_to_the_baseline_and_a_pricing_mismatch_is_unmeasured(backend: Backend) -> None:
    tickets = [await backend.ticket() for _ in range(3)]
    (scenario_id, first), (_, second), (_, third) = tickets
    await backend.client.report_execution(scenario_id, report(first, "not_steered"))
    await backend.client.report_execution(scenario_id, report(second, "failed"))
    await backend.client.report_execution(scenario_id, report(third, "diverged", pricingVersion="1999-01-01"))
    baseline = [b for b in backend.booked() if b.ledger == "baseline"]
    assert sorted(b.outcome for b in baseline) == ["failed", "not_steered"]
    assert all(b.measured for b in baseline)
    [savings] = [b for b in backend.booked() if b.ledger == "savings"]
    assert (savings.outcome, savings.measured) == ("diverged", False)


@pytest.mark.anyio
async def test_a_server_error_on_report_raises_a_bounded_error_without_the_body() -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.forced["executions"] = Canned(500, raw=b"<html>" + b"x" * 50_000 + b"</html>")
        with pytest.raises(ServiceError) as caught:
            await service.report_execution("scn_fleet_direct", report("tkt_1"))
        assert caught.value.status == 500
        assert len(str(caught.value)) <= MAX_ERROR_CHARS
        assert "x" * 200 not in str(caught.value)


@pytest.mark.anyio
async def test_derive_returns_the_answer_and_none_when_the_service_declines() -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.add_scenario(scenario_fixture())
        assert await service.derive("scn_fleet_direct", "eu devices") is None
        answer = {"params": {"region": "us-east-1"}, "derived": True, "missing": [], "costUsd": 0.0004}
        fake.derive_answers["scn_fleet_direct"] = Canned(200, answer)
        got = await service.derive("scn_fleet_direct", "us devices", '{"tool":"x"}', "[]")
        assert got == answer
        assert fake.requests_to("derive")[-1].body == {
            "prompt": "us devices",
            "liveCall": '{"tool":"x"}',
            "recentResults": "[]",
        }


@pytest.mark.anyio
async def test_get_scenario_reads_the_serialized_scenario(backend: Backend) -> None:
    scenario_id = await backend.ready_scenario()
    scenario = await backend.client.get_scenario(scenario_id)
    assert scenario.id == scenario_id
    assert [s.tool_name for s in scenario.steps] == ["mcp__fleet__list_devices", "mcp__fleet__get_device"]


@pytest.mark.anyio
async def test_an_unreadable_scenario_is_a_bad_answer() -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.scenarios["scn_bad"] = {"steps": [{"stepIndex": "not a number"}]}
        with pytest.raises(ServiceError) as caught:
            await service.get_scenario("scn_bad")
        assert caught.value.kind == "bad_answer"
        assert len(str(caught.value)) <= MAX_ERROR_CHARS


@pytest.mark.anyio
async def test_an_answer_that_is_not_json_is_a_bad_answer() -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.forced["match"] = Canned(200, raw=b"not json at all")
        with pytest.raises(ServiceError) as caught:
            await service.match("run_x", "hello", {})
        assert caught.value.kind == "bad_answer"


@pytest.mark.anyio
async def test_a_slow_service_times_out_with_a_timeout_error_and_a_log_line(
    logged: Callable[[], list[dict[str, Any]]],
) -> None:
    async with running_fake_service() as fake, client_for(fake, timeout_s=0.2) as service:
        fake.route_latency_s["match"] = float("inf")
        with pytest.raises(ServiceError) as caught:
            await service.match("run_x", "hello", {})
        assert caught.value.kind == "timeout"
    failures = [line for line in logged() if line["event"] == "service.request_failed"]
    assert [(line["route"], line["kind"]) for line in failures] == [("match", "timeout")]


@pytest.mark.anyio
async def test_an_unreachable_service_is_an_unreachable_error() -> None:
    async with ServiceClient(closed_port_url(), "t") as service:
        with pytest.raises(ServiceError) as caught:
            await service.get_scenario("scn_x")
        assert caught.value.kind == "unreachable"
        assert len(str(caught.value)) <= MAX_ERROR_CHARS


@pytest.mark.anyio
async def test_an_oversized_answer_is_refused() -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.forced["scenario"] = Canned(200, raw=b"[" + b"0," * 9_000_000 + b"0]")
        with pytest.raises(ServiceError) as caught:
            await service.get_scenario("scn_x")
        assert caught.value.kind == "too_large"


@pytest.mark.anyio
async def test_an_injected_client_is_used_and_left_open() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": "run_x", "matched": None})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        async with ServiceClient("https://service.invalid", "tok", client=http) as service:
            assert await service.match("run_x", "hello", {}) is None
        assert not http.is_closed
    assert seen[0].url == httpx.URL("https://service.invalid/recordings/runs")


@pytest.mark.anyio
async def test_an_injected_transport_is_used_and_closed_with_the_client() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": "ticket unknown"})

    service = ServiceClient("https://service.invalid", "tok", transport=httpx.MockTransport(handler))
    async with service:
        result = await service.report_execution("scn_x", {"ticket": "t", "outcome": "failed"})
    assert result.status == "ticket_unknown"


def step_body(index: int, tool: str = "mcp__fleet__list_devices") -> dict[str, Any]:
    return {"stepIndex": index, "toolName": tool, "toolInput": {"region": "eu"}, "toolOutput": '{"ok":true}'}


@pytest.mark.anyio
async def test_steps_of_a_missed_run_are_recorded_in_step_order_whatever_order_they_arrive_in(
    backend: Backend,
) -> None:
    assert await backend.client.match("run_new", "never asked before") is None
    second = await backend.client.post_step("run_new", step_body(1, "mcp__fleet__get_device"))
    first = await backend.client.post_step("run_new", step_body(0))
    assert (first.status, first.http_status) == ("recorded", 201)
    assert second.status == "recorded"
    assert [s["toolName"] for s in backend.steps_of("run_new")] == [
        "mcp__fleet__list_devices",
        "mcp__fleet__get_device",
    ]
    assert [s.step_index for s in await backend.client.get_run_steps("run_new")] == [0, 1]


@pytest.mark.anyio
async def test_a_step_or_finish_for_an_unknown_run_is_an_answer_not_an_error(backend: Backend) -> None:
    step = await backend.client.post_step("run_never", step_body(0))
    finish = await backend.client.finish_run("run_never", {"output": "x"})
    assert (step.status, step.http_status) == ("unknown_run", 404)
    assert (finish.status, finish.http_status) == ("unknown_run", 404)
    assert backend.steps_of("run_never") == []


@pytest.mark.anyio
async def test_a_second_finish_of_a_run_is_a_duplicate(backend: Backend) -> None:
    await backend.new_run("run_fin")
    body = {"output": "done", "durationMs": 10, "usage": [], "costUsd": 0.01, "measured": True}
    first = await backend.client.finish_run("run_fin", body)
    second = await backend.client.finish_run("run_fin", {**body, "output": "again"})
    assert (first.status, second.status) == ("finished", "duplicate")
    finished = backend.finish_of("run_fin")
    assert finished is not None
    assert finished["output"] == "done"


@pytest.mark.anyio
async def test_a_service_that_is_down_makes_recording_raise_a_status_error(
    logged: Callable[[], list[dict[str, Any]]],
) -> None:
    async with running_fake_service() as fake, client_for(fake) as service:
        fake.add_run("run_down", [])
        fake.down = True
        with pytest.raises(ServiceError) as caught:
            await service.post_step("run_down", step_body(0))
        assert (caught.value.kind, caught.value.status, caught.value.route) == ("status", 503, "step")
        with pytest.raises(ServiceError) as finish_caught:
            await service.finish_run("run_down", {})
        assert finish_caught.value.status == 503
        assert [e["route"] for e in logged() if e["event"] == "service.request_failed"] == ["step", "finish"]


@pytest.mark.anyio
async def test_recording_without_a_service_url_raises_not_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    async with ServiceClient() as service:
        with pytest.raises(ServiceError) as caught:
            await service.post_step("run_x", step_body(0))
        assert caught.value.kind == "not_configured"


@pytest.mark.anyio
async def test_a_client_made_signed_out_follows_a_later_login_and_logout_at_its_next_request(
    logged: Callable[[], list[dict[str, Any]]],
) -> None:
    from bir.core import credentials

    fake = FakeBaseIn()
    fake.add_scenario(scenario_fixture())
    async with running_fake_service(fake) as svc, ServiceClient() as client:
        assert not client.configured
        with pytest.raises(ServiceError) as refused:
            await client.get_scenario("scn_fleet_direct")
        assert refused.value.kind == "not_configured"

        credentials.save(svc.url, svc.token)
        assert client._sign_in() == (svc.url, svc.token)
        assert (await client.get_scenario("scn_fleet_direct")).id == "scn_fleet_direct"
        assert svc.requests_to("scenario")[-1].headers["authorization"] == f"Bearer {svc.token}"

        credentials.remove()
        assert client._sign_in() == (None, None)
        with pytest.raises(ServiceError):
            await client.get_scenario("scn_fleet_direct")
    changes = [line for line in logged() if line["event"] == "service.sign_in_changed"]
    assert [(c["url"], c["token"]) for c in changes] == [(svc.url, True), (None, False)]


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["environment", "stored"])
async def test_plain_http_to_another_host_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": "run_x", "matched": None})

    if where == "environment":
        monkeypatch.setenv("BIR_AUTH_URL", "http://basein.example.com")
        monkeypatch.setenv("BIR_TOKEN", "tok-secret")
    else:
        # Stored before bir refused plain http.
        path = credentials.credentials_path()
        path.write_text(json.dumps({"version": 1, "url": "http://basein.example.com", "token": "tok", "savedAt": 0}))
    async with ServiceClient(transport=httpx.MockTransport(handler)) as service:
        with pytest.raises(ServiceError) as caught:
            await service.match("run_x", "hello", {})
    assert caught.value.kind == "insecure"
    assert "is not https" in str(caught.value)
    assert seen == []


@pytest.mark.anyio
async def test_a_known_secret_never_leaves_in_a_body(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "plainwordsecret")
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(201, json={"id": "run_x", "matched": None})

    async with ServiceClient("https://service.invalid", "t", transport=httpx.MockTransport(handler)) as service:
        await service.match("run_x", "my key is plainwordsecret", {"cwd": "/plainwordsecret"})
    assert b"plainwordsecret" not in seen[0]
    assert json.loads(seen[0])["input"] == "my key is [REDACTED]"


@pytest.mark.anyio
async def test_an_app_served_in_this_process_is_reached_over_plain_http() -> None:
    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"id": "run_x", "matched": null}'})

    async with ServiceClient("http://local.bir", "local", transport=httpx.ASGITransport(app=app)) as service:
        assert await service.match("run_x", "hello", {}) is None
