from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bir.hooks.api import ScenarioRunAnswer, ScenarioRunRequest, Work
from bir.hooks.commands.logs import last_lines, project_log
from bir.hooks.discovery import discovery_path, read_discovery
from bir.hooks.server import control as server_module
from bir.hooks.server.control import ControlServer
from bir.hooks.server.routes import MAX_BODY_BYTES, ReceivedStep
from bir.hooks.server.work_queue import ProxyCallError, ProxyWorkQueue
from tests.hooks.stub_session import StubSession

pytestmark = pytest.mark.anyio

TOKEN = "test-token"


@pytest.fixture
async def control() -> AsyncIterator[ControlServer]:
    server = ControlServer(token=TOKEN, replay_enabled=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def client(control: ControlServer) -> AsyncIterator[httpx.AsyncClient]:
    assert control.url is not None
    async with httpx.AsyncClient(
        base_url=control.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30, trust_env=False
    ) as http:
        yield http


async def _post(client: httpx.AsyncClient, path: str, body: object) -> Any:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


class PollWatch:
    """Events for a poll reaching the queue (it parks before anything else runs) and leaving it."""

    def __init__(self, queue: ProxyWorkQueue, monkeypatch: pytest.MonkeyPatch) -> None:
        self.parked = anyio.Event()
        self.left = anyio.Event()
        original = queue.wait_for_work

        async def watched(server_name: str, proxy_id: str, hold_s: float) -> Work | None:
            self.parked.set()
            try:
                return await original(server_name, proxy_id, hold_s)
            finally:
                self.left.set()

        monkeypatch.setattr(queue, "wait_for_work", watched)


async def test_health_answers_with_pid_and_version(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    body = response.json()
    assert response.status_code == 200
    assert body["ok"] is True
    assert body["pid"] == os.getpid()
    assert isinstance(body["uptimeMs"], int)


async def test_a_missing_or_wrong_token_is_refused_even_on_unknown_routes(control: ControlServer) -> None:
    assert control.url is not None
    async with httpx.AsyncClient(base_url=control.url, trust_env=False) as anonymous:
        assert (await anonymous.get("/health")).status_code == 401
        assert (await anonymous.get("/health", headers={"Authorization": "Bearer nope"})).status_code == 401
        assert (await anonymous.post("/no/such/route")).status_code == 401
        assert (await anonymous.post("/proxy/register", json={})).json() == {"error": "missing or wrong bearer token"}


async def test_an_unknown_route_is_404_with_a_json_error(client: httpx.AsyncClient) -> None:
    response = await client.post("/no/such/route", json={})
    assert response.status_code == 404
    assert response.json() == {"error": "not found"}
    assert (await client.get("/proxy/poll")).status_code == 405


async def test_malformed_or_misshapen_bodies_are_400_with_a_short_reason(client: httpx.AsyncClient) -> None:
    bad_json = await client.post("/proxy/register", content=b"{nope", headers={"content-type": "application/json"})
    assert bad_json.status_code == 400
    missing = await client.post("/proxy/register", json={"serverName": "chrome"})
    assert missing.status_code == 400
    assert "proxyId" in missing.json()["error"]
    wrong_type = await client.post("/scenario/hello", json={"pid": "x", "version": "1", "tools": 1, "off": False})
    assert wrong_type.status_code == 400
    assert (await client.post("/proxy/result", json=[1, 2])).status_code == 400
    assert (await client.post("/proxy/poll")).status_code == 400
    assert len(bad_json.text) < 600


async def test_an_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    big = b'{"workId": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = await client.post("/proxy/result", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:
        # No content-length: the cap must hold while streaming too.
        for _ in range(9):
            yield b" " * (1024 * 1024)

    streamed = await client.post("/proxy/result", content=chunks())
    assert streamed.status_code == 413
    assert (await client.get("/health")).status_code == 200


async def test_a_failing_handler_answers_500_and_the_server_keeps_serving(
    control: ControlServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(work_id: str, result: object = None, error: str | None = None) -> bool:
        raise RuntimeError("boom")

    monkeypatch.setattr(control.queue, "complete", explode)
    response = await client.post("/proxy/result", json={"workId": "w1", "result": 1})
    assert response.status_code == 500
    assert response.json() == {"error": "internal error in proxy/result"}
    assert (await client.get("/health")).status_code == 200


async def test_register_answers_the_replay_switch_and_grows_wrapped(
    control: ControlServer, client: httpx.AsyncClient
) -> None:
    answer = await _post(client, "/proxy/register", {"serverName": "chrome", "proxyId": "p1", "pid": 42})
    assert answer == {"replay": True, "pollHoldMs": 25_000}
    assert control.wrapped == {"chrome"}
    assert control.queue.is_served("chrome")


async def test_a_long_poll_receives_work_and_the_posted_result_resolves_the_call(
    control: ControlServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = PollWatch(control.queue, monkeypatch)
    await _post(client, "/proxy/register", {"serverName": "chrome", "proxyId": "p1"})
    polled: list[Any] = []

    async def proxy() -> None:
        polled.append(await _post(client, "/proxy/poll", {"serverName": "chrome", "proxyId": "p1"}))
        work = polled[0]["work"]
        assert await _post(client, "/proxy/result", {"workId": work["workId"], "result": {"echo": work["arguments"]}})

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(proxy)
            await watch.parked.wait()
            result = await control.queue.call("chrome", "navigate_page", {"url": "https://a"}, 10)
    assert result == {"echo": {"url": "https://a"}}
    assert polled[0]["work"]["toolName"] == "navigate_page"
    assert polled[0]["work"]["timeoutMs"] == 10_000


async def test_work_dispatched_between_polls_is_delivered_on_the_next_poll(
    control: ControlServer, client: httpx.AsyncClient
) -> None:
    await _post(client, "/proxy/register", {"serverName": "chrome", "proxyId": "p1"})
    results: list[object] = []

    async def controller() -> None:
        results.append(await control.queue.call("chrome", "click", {"uid": "3"}, 10))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(controller)
            await anyio.wait_all_tasks_blocked()
            assert control.queue.stats()["queued"] == 1
            answer = await _post(client, "/proxy/poll", {"serverName": "chrome", "proxyId": "p1"})
            ok = await _post(client, "/proxy/result", {"workId": answer["work"]["workId"], "result": "clicked"})
            assert ok == {"ok": True}
            again = await _post(client, "/proxy/result", {"workId": answer["work"]["workId"], "result": "again"})
            assert again == {"ok": False}
    assert results == ["clicked"]


async def test_a_poll_with_nothing_to_do_answers_empty(client: httpx.AsyncClient) -> None:
    with anyio.fail_after(10):
        assert await _post(client, "/proxy/poll", {"serverName": "chrome", "proxyId": "p1", "holdMs": 0}) == {}


async def test_a_poll_while_replay_is_off_answers_replay_false(
    control: ControlServer, client: httpx.AsyncClient
) -> None:
    control.replay_enabled = False
    assert await _post(client, "/proxy/poll", {"serverName": "chrome"}) == {"replay": False}
    answer = await _post(client, "/proxy/register", {"serverName": "chrome", "proxyId": "p1"})
    assert answer["replay"] is False


async def test_a_poll_whose_proxy_hung_up_takes_no_work(
    control: ControlServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = PollWatch(control.queue, monkeypatch)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(_post, client, "/proxy/poll", {"serverName": "chrome", "proxyId": "p1"})
            await watch.parked.wait()
            group.cancel_scope.cancel()
        await watch.left.wait()
        assert control.queue.stats()["parked"] == 0
        results: list[object] = []

        async def controller() -> None:
            results.append(await control.queue.call("chrome", "click", {}, 10))

        async with anyio.create_task_group() as group:
            group.start_soon(controller)
            answer = await _post(client, "/proxy/poll", {"serverName": "chrome", "proxyId": "p1"})
            await _post(client, "/proxy/result", {"workId": answer["work"]["workId"], "result": "ran once"})
    assert results == ["ran once"]


async def test_a_proxy_error_is_passed_to_the_caller(
    control: ControlServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = PollWatch(control.queue, monkeypatch)

    async def proxy() -> None:
        answer = await _post(client, "/proxy/poll", {"serverName": "db", "proxyId": "p9"})
        await _post(client, "/proxy/result", {"workId": answer["work"]["workId"], "error": "relation does not exist"})

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(proxy)
            await watch.parked.wait()
            with pytest.raises(ProxyCallError, match="relation does not exist"):
                await control.queue.call("db", "query", {"sql": "select 1"}, 10)


async def test_step_reports_are_kept_in_a_bounded_ring_and_passed_to_the_hook(
    control: ControlServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "MAX_STEP_REPORTS", 3)
    seen: list[ReceivedStep] = []

    async def hook(received: ReceivedStep) -> None:
        seen.append(received)
        if received.report.call_id == "c4":
            raise RuntimeError("a broken hook")

    control.handler = StubSession(steps=hook)
    for i in range(5):
        body = {
            "serverName": "chrome",
            "toolName": "click",
            "arguments": {"i": i},
            "result": {"ok": i},
            "callId": f"c{i}",
            "durationMs": 12,
        }
        assert await _post(client, "/proxy/step", body) == {"ok": True}
    assert [r.report.call_id for r in control.step_reports()] == ["c2", "c3", "c4"]
    assert [r.report.arguments for r in seen] == [{"i": i} for i in range(5)]
    assert seen[0].report.duration_ms == 12


async def test_hello_is_remembered_per_pid_and_makes_the_delivery_tool_live(
    control: ControlServer, client: httpx.AsyncClient
) -> None:
    assert not control.hellos.delivery_tool_live()
    hello = {"pid": os.getpid(), "version": "0.1.0", "tools": 1, "off": False}
    assert await _post(client, "/scenario/hello", hello) == {"ok": True}
    assert control.hellos.seen[os.getpid()].hello.tools == 1
    assert control.hellos.delivery_tool_live()
    await _post(client, "/scenario/hello", {**hello, "off": True})
    assert not control.hellos.delivery_tool_live()


async def test_scenario_run_without_a_runner_answers_no_plan(client: httpx.AsyncClient) -> None:
    assert await _post(client, "/scenario/run", {"toolUseId": "toolu_1"}) == {"ok": False, "why": "no_plan"}


async def test_scenario_run_hands_the_request_to_the_installed_runner(
    control: ControlServer, client: httpx.AsyncClient
) -> None:
    requests: list[ScenarioRunRequest] = []

    async def runner(request: ScenarioRunRequest) -> ScenarioRunAnswer:
        requests.append(request)
        if request.tool_use_id == "toolu_bad":
            raise RuntimeError("the plan blew up")
        return ScenarioRunAnswer(ok=True, text="results", response_model={}, steps=2)

    control.handler = StubSession(runner=runner)
    answer = await _post(client, "/scenario/run", {"toolUseId": "toolu_1", "sessionId": "s1"})
    assert answer == {"ok": True, "text": "results", "responseModel": {}, "steps": 2}
    assert requests[0] == ScenarioRunRequest(tool_use_id="toolu_1", session_id="s1")
    failed = await _post(client, "/scenario/run", {"toolUseId": "toolu_bad"})
    assert failed == {"ok": False, "why": "the scenario could not be run"}


async def test_stop_answers_a_parked_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    server = ControlServer(token=TOKEN, replay_enabled=True)
    watch = PollWatch(server.queue, monkeypatch)
    url = await server.start()
    answers: list[int] = []
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30, trust_env=False
    ) as http:

        async def poll() -> None:
            response = await http.post("/proxy/poll", json={"serverName": "chrome", "proxyId": "p1"})
            answers.append(response.status_code)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(poll)
                await watch.parked.wait()
                await server.stop()
    assert answers == [200]


async def test_the_server_listens_on_loopback_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        await ControlServer().start(host="0.0.0.0")


def test_work_is_a_frozen_record() -> None:
    work = Work(work_id="w", tool_name="click", arguments={}, timeout_ms=1000)
    with pytest.raises(AttributeError):
        work.tool_name = "other"  # type: ignore[misc]


def test_bir_hooks_logs_to_its_projects_file_not_to_the_terminal(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-m", "bir.hooks", "--project", str(project)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while read_discovery(project) is None:
            assert time.monotonic() < deadline, "the server never published itself"
            assert child.poll() is None
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert (out, err) == (b"", b"")
    events = [json.loads(line)["event"] for line in last_lines(project_log(project), 1000)]
    assert events[0] == "control.started"
    assert "control.published" in events
    assert events[-1] == "control.stopped"


def test_bir_hooks_publishes_discovery_serves_and_cleans_up_on_sigterm(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    env = {**os.environ, "BIR_HOME": os.environ["BIR_HOME"]}
    child = subprocess.Popen(
        [sys.executable, "-m", "bir.hooks", "--project", str(project), "--verbose"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stderr is not None
        events: list[str] = []
        for line in child.stderr:
            events.append(json.loads(line)["event"])
            if events[-1] == "control.published":
                break
        assert events[0] == "control.started"
        assert events[-1] == "control.published"
        discovery = read_discovery(project)
        assert discovery is not None
        assert stat.S_IMODE(discovery_path(project).stat().st_mode) == 0o600
        health = httpx.get(
            f"{discovery.url}/health", headers={"Authorization": f"Bearer {discovery.token}"}, trust_env=False
        )
        assert health.json()["pid"] == child.pid
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0
        assert not discovery_path(project).exists()
        rest = [json.loads(line)["event"] for line in child.stderr]
        assert "control.stopped" in rest
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stderr is not None:
            child.stderr.close()


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


async def test_json_nested_too_deeply_answers_a_hook_empty_and_any_other_route_a_bounded_400(
    client: httpx.AsyncClient,
) -> None:
    headers = {"content-type": "application/json"}
    hook = await client.post(
        "/tool/pre", content=b'{"session_id":"s","tool_input":' + _deep(5000) + b"}", headers=headers
    )
    assert (hook.status_code, hook.json()) == (200, {})
    step = b'{"serverName":"fleet","toolName":"t","durationMs":1,"result":' + _deep(5000) + b"}"
    refused = await client.post("/proxy/step", content=step, headers=headers)
    assert refused.status_code == 400
    assert "nested too deeply" in refused.json()["error"]
    assert len(refused.text) < 600
    assert (await client.get("/health")).status_code == 200


async def test_a_replay_call_while_replay_is_off_is_refused_at_once_as_not_sent() -> None:
    server = ControlServer(token=TOKEN, replay_enabled=False)
    url = await server.start()
    try:
        server.queue.register("fleet", "fleet#1")
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as http:
            body = {"serverName": "fleet", "toolName": "list_devices", "arguments": {}, "timeoutMs": 60_000}
            with anyio.fail_after(5):
                answer = (await http.post("/replay/call", json=body)).json()
    finally:
        await server.stop()
    assert answer["ok"] is False
    assert answer["sent"] is False
    assert "replay is off" in answer["why"]


async def test_a_host_that_is_not_the_servers_own_address_is_refused_even_with_the_token(
    client: httpx.AsyncClient,
) -> None:
    refused = await client.get("/health", headers={"Host": "evil.example:80"})
    assert refused.status_code == 403
    assert refused.json() == {"error": "not this server's address"}
    assert (await client.get("/health")).status_code == 200
    port = httpx.URL(str(client.base_url)).port
    assert (await client.get("/health", headers={"Host": f"localhost:{port}"})).status_code == 200


async def test_a_forwarded_for_header_never_changes_the_peer_the_guard_sees(client: httpx.AsyncClient) -> None:
    answer = await client.get("/health", headers={"X-Forwarded-For": "203.0.113.5", "X-Real-IP": "203.0.113.5"})
    assert answer.status_code == 200
