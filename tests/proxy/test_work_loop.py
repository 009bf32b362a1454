"""The proxy's work loop and control client against the real control server, with the pace injected."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from bir.hooks.api import StepReport
from bir.hooks.server.control import ControlServer
from bir.proxy.control_client import ControlError, Endpoint, ProxyLink
from bir.proxy.work_loop import Pace, WorkLoop, step_budget_ms

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class _Endpoint:
    url: str
    token: str


class _NoUpstream:
    """The loop's view of the relay; these tests hand it no work."""

    def __init__(self) -> None:
        self.ready = anyio.Event()

    async def request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any:
        raise AssertionError("no work was expected")

    async def control_found(self) -> None:
        self.found = getattr(self, "found", 0) + 1


class _Sleeps:
    """Records the loop's pauses; after ``stop_after`` of them the loop is left parked."""

    def __init__(self, stop_after: int) -> None:
        self.taken: list[float] = []
        self.stop_after = stop_after
        self.enough = anyio.Event()

    async def __call__(self, seconds: float) -> None:
        self.taken.append(seconds)
        if len(self.taken) >= self.stop_after:
            self.enough.set()
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()


@asynccontextmanager
async def _server(replay: bool) -> AsyncIterator[ControlServer]:
    server = ControlServer(replay_enabled=replay)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _loop(find: Any, sleeps: _Sleeps) -> WorkLoop:
    return WorkLoop(
        _NoUpstream(),
        server_name="srv",
        proxy_id="p-1",
        project=Path("."),
        pace=Pace(idle_s=30.0, instant_s=1.0, backoff_first_s=0.25, backoff_max_s=5.0, sleep=sleeps),
        find=find,
    )


async def _run_until(loop: WorkLoop, sleeps: _Sleeps) -> None:
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(loop.run)
            await sleeps.enough.wait()
            group.cancel_scope.cancel()


def test_a_steps_budget_leaves_a_little_time_before_the_control_server_gives_up() -> None:
    assert step_budget_ms(60_000) == 59_000
    assert step_budget_ms(5_000) == 4_500
    assert step_budget_ms(100) == 90


async def test_an_unreachable_control_server_is_retried_with_a_backoff_of_at_most_five_seconds() -> None:
    sleeps = _Sleeps(stop_after=9)
    loop = _loop(lambda project: _Endpoint("http://127.0.0.1:9", "t"), sleeps)
    await _run_until(loop, sleeps)
    assert sleeps.taken == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]
    assert not loop.known


async def test_no_control_server_at_all_leaves_a_plain_relay_that_keeps_looking() -> None:
    looked: list[Path] = []

    def find(project: Path) -> Endpoint | None:
        looked.append(project)
        return None

    sleeps = _Sleeps(stop_after=6)
    loop = _loop(find, sleeps)
    await _run_until(loop, sleeps)
    assert len(looked) == 6
    # Looking for the discovery file is cheap: at least once a second, so a revived server is found soon.
    assert sleeps.taken == [0.25, 0.5, 1.0, 1.0, 1.0, 1.0]
    assert not loop.known


async def test_replay_off_registers_then_polls_slowly() -> None:
    async with _server(replay=False) as server:
        assert server.url is not None
        sleeps = _Sleeps(stop_after=2)
        loop = _loop(lambda project: _Endpoint(server.url or "", server.token), sleeps)
        await _run_until(loop, sleeps)
        assert sleeps.taken == [30.0, 30.0]
        assert loop.polls == 2
        assert "srv" in server.wrapped


async def test_a_control_server_that_comes_back_is_registered_with_again() -> None:
    async with _server(replay=False) as server:
        answers = iter([None, _Endpoint("http://127.0.0.1:9", "t")])

        def find(project: Path) -> Endpoint | None:
            return next(answers, _Endpoint(server.url or "", server.token))

        sleeps = _Sleeps(stop_after=3)
        loop = _loop(find, sleeps)
        await _run_until(loop, sleeps)
        assert sleeps.taken == [0.25, 0.5, 30.0]
        assert "srv" in server.wrapped


async def test_step_reports_reach_the_control_server_once_registered() -> None:
    async with _server(replay=False) as server:
        sleeps = _Sleeps(stop_after=1)
        loop = _loop(lambda project: _Endpoint(server.url or "", server.token), sleeps)
        report = StepReport(
            server_name="srv",
            tool_name="echo",
            arguments={"m": 1},
            result={"content": []},
            call_id="call-9",
            duration_ms=12.5,
        )
        loop.offer_step(report)  # not registered yet: dropped
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(loop.run)
                await sleeps.enough.wait()
                assert loop.known
                loop.offer_step(report)
                while not server.step_reports():  # noqa: ASYNC110 - the report crosses HTTP
                    await anyio.sleep(0.01)
                group.cancel_scope.cancel()
        [received] = server.step_reports()
        seen = received.report
        assert (seen.tool_name, seen.arguments, seen.result, seen.call_id, seen.duration_ms, seen.proxy_id) == (
            "echo",
            {"m": 1},
            {"content": []},
            "call-9",
            12.5,
            "p-1",
        )


async def test_the_client_registers_and_a_wrong_token_is_unreachable() -> None:
    async with _server(replay=True) as server:
        url = server.url or ""
        client = ProxyLink(_Endpoint(url, server.token), server_name="srv", proxy_id="p-2")
        try:
            registration = await client.register()
            assert registration.replay is True
            assert registration.poll_hold_ms == 25_000
            await client.result("no-such-work", result={"content": []})  # ignored by the server, not an error
        finally:
            await client.aclose()
        stranger = ProxyLink(_Endpoint(url, "wrong"), server_name="srv", proxy_id="p-3")
        try:
            with pytest.raises(ControlError, match="401"):
                await stranger.register()
        finally:
            await stranger.aclose()


async def test_a_report_too_large_for_the_server_goes_without_its_result() -> None:
    async with _server(replay=False) as server:
        client = ProxyLink(_Endpoint(server.url or "", server.token), server_name="srv", proxy_id="p-4")
        try:
            huge = {"content": [{"type": "text", "text": "x" * (9 * 1024 * 1024)}]}
            await client.step(
                StepReport(server_name="srv", tool_name="echo", arguments={}, result=huge, duration_ms=1.0)
            )
        finally:
            await client.aclose()
        [received] = server.step_reports()
        seen = received.report
        assert seen.result is None
        assert seen.error is not None
        assert "too large" in seen.error


async def test_a_report_nested_too_deeply_for_the_server_goes_without_its_result() -> None:
    deep: Any = []
    for _ in range(995):
        deep = [deep]
    async with _server(replay=False) as server:
        client = ProxyLink(_Endpoint(server.url or "", server.token), server_name="srv", proxy_id="p-5")
        try:
            await client.step(
                StepReport(server_name="srv", tool_name="echo", arguments={}, result={"content": deep}, duration_ms=1.0)
            )
        finally:
            await client.aclose()
        [received] = server.step_reports()
        assert received.report.result is None
        assert "nested too deeply" in (received.report.error or "")
