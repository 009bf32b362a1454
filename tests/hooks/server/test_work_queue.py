from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from bir.hooks.api import Work
from bir.hooks.server.work_queue import (
    NoProxyError,
    NoSessionProxyError,
    NotSentError,
    ProxyCallError,
    ProxyExitedError,
    ProxyGoneError,
    ProxyWorkQueue,
    QueueFullError,
    StepTimeoutError,
    WorkQueueError,
)

pytestmark = pytest.mark.anyio


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _serve_one(queue: ProxyWorkQueue, server: str, proxy_id: str, result: object) -> Work:
    work = await queue.wait_for_work(server, proxy_id, 30)
    assert work is not None
    assert queue.complete(work.work_id, result)
    return work


async def test_a_parked_poll_receives_the_work_and_its_result_resolves_the_call() -> None:
    queue = ProxyWorkQueue()
    got: list[Work] = []

    async def proxy() -> None:
        got.append(await _serve_one(queue, "chrome", "p1", {"content": [{"type": "text", "text": "ok"}]}))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(proxy)
            await anyio.wait_all_tasks_blocked()
            result = await queue.call("chrome", "navigate_page", {"url": "https://a"}, 5)
    assert result == {"content": [{"type": "text", "text": "ok"}]}
    assert got[0].tool_name == "navigate_page"
    assert got[0].arguments == {"url": "https://a"}
    assert got[0].timeout_ms == 5000


async def test_work_sent_while_the_proxy_is_between_polls_is_held_for_its_next_poll() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "p1")
    results: list[object] = []

    async def controller() -> None:
        results.append(await queue.call("chrome", "click", {"uid": "1"}, 10))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(controller)
            await anyio.wait_all_tasks_blocked()
            assert queue.stats()["queued"] == 1
            await _serve_one(queue, "chrome", "p1", "clicked")
    assert results == ["clicked"]


async def test_a_server_nobody_polled_fails_fast() -> None:
    queue = ProxyWorkQueue()
    with anyio.fail_after(5), pytest.raises(NoProxyError):
        await queue.call("never-seen", "tool", {}, 60)
    assert queue.stats()["calls"] == 0


async def test_a_server_silent_for_a_minute_fails_fast_but_one_seen_recently_holds_the_work() -> None:
    clock = FakeClock()
    queue = ProxyWorkQueue(clock=clock)
    queue.register("db", "p1")
    clock.now += 59
    assert queue.is_served("db")
    clock.now += 2
    assert not queue.is_served("db")
    with anyio.fail_after(5), pytest.raises(NoProxyError):
        await queue.call("db", "query", {}, 60)


async def test_a_call_nobody_takes_times_out_and_its_work_is_withdrawn() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "p1")
    with anyio.fail_after(10), pytest.raises(StepTimeoutError) as caught:
        await queue.call("chrome", "click", {}, 0.05)
    assert caught.value.taken is False
    assert await queue.wait_for_work("chrome", "p1", 0) is None
    assert queue.stats()["queued"] == 0
    assert queue.stats()["calls"] == 0


async def test_a_result_that_arrives_after_the_timeout_is_ignored() -> None:
    queue = ProxyWorkQueue()
    taken: list[Work] = []

    async def slow_proxy() -> None:
        work = await queue.wait_for_work("chrome", "p1", 30)
        assert work is not None
        taken.append(work)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(slow_proxy)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(StepTimeoutError) as caught:
                await queue.call("chrome", "click", {}, 0.05)
    assert caught.value.taken is True
    assert queue.complete(taken[0].work_id, "too late") is False


async def test_a_result_is_accepted_exactly_once() -> None:
    queue = ProxyWorkQueue()
    completions: list[bool] = []

    async def proxy() -> None:
        work = await queue.wait_for_work("chrome", "p1", 30)
        assert work is not None
        completions.append(queue.complete(work.work_id, "first"))
        completions.append(queue.complete(work.work_id, "second"))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(proxy)
            await anyio.wait_all_tasks_blocked()
            result = await queue.call("chrome", "click", {}, 5)
    assert result == "first"
    assert completions == [True, False]
    assert queue.complete("no-such-work", "x") is False


async def test_a_proxy_error_and_a_missing_result_both_fail_the_call() -> None:
    queue = ProxyWorkQueue()

    async def proxy(result: object, error: str | None) -> None:
        work = await queue.wait_for_work("chrome", "p1", 30)
        assert work is not None
        queue.complete(work.work_id, result, error)

    with anyio.fail_after(10):
        for result, error, message in ((None, "upstream exploded", "upstream exploded"), (None, None, "no result")):
            async with anyio.create_task_group() as group:
                group.start_soon(proxy, result, error)
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(ProxyCallError, match=message):
                    await queue.call("chrome", "click", {}, 5)


async def test_with_two_live_sessions_a_session_without_its_own_proxy_gets_none() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "mine-elsewhere", session_id="session-a")
    queue.register("chrome", "unbound")
    with anyio.fail_after(5), pytest.raises(NoSessionProxyError):
        await queue.call("chrome", "click", {}, 5, session_id="session-b")
    assert queue.stats()["queued"] == 0


async def test_a_session_is_routed_to_its_own_proxy_not_the_newest() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "a-proxy", session_id="session-a")
    queue.register("chrome", "b-proxy", session_id="session-b")
    served: list[str] = []

    async def proxy(proxy_id: str) -> None:
        work = await queue.wait_for_work("chrome", proxy_id, 30)
        if work is not None:
            served.append(proxy_id)
            queue.complete(work.work_id, proxy_id)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(proxy, "a-proxy")
            group.start_soon(proxy, "b-proxy")
            await anyio.wait_all_tasks_blocked()
            assert await queue.call("chrome", "click", {}, 5, session_id="session-a") == "a-proxy"
            group.cancel_scope.cancel()
    assert served == ["a-proxy"]


async def test_a_lone_session_uses_an_unbound_proxy_and_binds_it() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "unbound")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(_serve_one, queue, "chrome", "unbound", "done")
            await anyio.wait_all_tasks_blocked()
            assert await queue.call("chrome", "click", {}, 5, session_id="session-a") == "done"
        # Now the proxy is session-a's: a second live session cannot borrow it.
        with pytest.raises(NoSessionProxyError):
            await queue.call("chrome", "click", {}, 5, session_id="session-b")


async def test_without_a_session_the_newest_proxy_gets_the_work() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "old", session_id="session-a")
    queue.register("chrome", "new")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(_serve_one, queue, "chrome", "new", "from-new")
            await anyio.wait_all_tasks_blocked()
            assert await queue.call("chrome", "click", {}, 5) == "from-new"


async def test_a_bound_proxy_is_preferred_after_bind() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "p1")
    queue.register("chrome", "p2")
    assert queue.bind("p1", "session-a")
    assert not queue.bind("nobody", "session-a")
    queue.note_session("session-b")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(_serve_one, queue, "chrome", "p1", "from-p1")
            await anyio.wait_all_tasks_blocked()
            assert await queue.call("chrome", "click", {}, 5, session_id="session-a") == "from-p1"


async def test_an_ended_session_no_longer_blocks_another() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "p1", session_id="session-a")
    queue.end_session("session-a")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(_serve_one, queue, "chrome", "p1", "ok")
            await anyio.wait_all_tasks_blocked()
            assert await queue.call("chrome", "click", {}, 5, session_id="session-b") == "ok"


async def test_a_cancelled_caller_withdraws_its_work_and_nothing_is_left_behind() -> None:
    queue = ProxyWorkQueue()
    queue.register("chrome", "p1")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(queue.call, "chrome", "click", {}, 30)
            await anyio.wait_all_tasks_blocked()
            assert queue.stats()["calls"] == 1
            group.cancel_scope.cancel()
    assert await queue.wait_for_work("chrome", "p1", 0) is None
    assert queue.stats() == {"proxies": 1, "queued": 0, "calls": 0, "sessions": 0, "parked": 0}


async def test_many_calls_leave_no_state_behind() -> None:
    queue = ProxyWorkQueue()

    async def proxy() -> None:
        while True:
            work = await queue.wait_for_work("chrome", "p1", 30)
            if work is not None:
                queue.complete(work.work_id, work.arguments)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(proxy)
            await anyio.wait_all_tasks_blocked()
            for i in range(200):
                assert await queue.call("chrome", "echo", {"i": i}, 5) == {"i": i}
            group.cancel_scope.cancel()
    stats = queue.stats()
    assert (stats["queued"], stats["calls"], stats["parked"]) == (0, 0, 0)


async def test_a_full_server_queue_refuses_more_work() -> None:
    queue = ProxyWorkQueue(max_queued_per_server=2)
    queue.register("chrome", "p1")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(queue.call, "chrome", "a", {}, 30)
            group.start_soon(queue.call, "chrome", "b", {}, 30)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(QueueFullError):
                await queue.call("chrome", "c", {}, 30)
            group.cancel_scope.cancel()


async def test_a_qualified_tool_name_reaches_the_proxy_as_its_local_name() -> None:
    queue = ProxyWorkQueue()
    got: list[Work] = []

    async def proxy() -> None:
        got.append(await _serve_one(queue, "chrome", "p1", "ok"))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(proxy)
            await anyio.wait_all_tasks_blocked()
            await queue.call("chrome", "mcp__chrome__navigate_page", {}, 5)
    assert got[0].tool_name == "navigate_page"


async def test_a_second_poll_from_the_same_proxy_answers_the_first_empty() -> None:
    queue = ProxyWorkQueue()
    first: list[Work | None] = []

    async def poll() -> None:
        first.append(await queue.wait_for_work("chrome", "p1", 30))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(poll)
            await anyio.wait_all_tasks_blocked()
            assert await queue.wait_for_work("chrome", "p1", 0) is None
    assert first == [None]


async def test_close_answers_parked_polls_and_fails_waiting_calls() -> None:
    queue = ProxyWorkQueue()
    queue.register("db", "p2")
    polls: list[Work | None] = []
    failures: list[BaseException] = []

    async def poll() -> None:
        polls.append(await queue.wait_for_work("chrome", "p1", 30))

    async def caller() -> None:
        try:
            await queue.call("db", "query", {}, 30)
        except NoProxyError as exc:
            failures.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(poll)
            group.start_soon(caller)
            await anyio.wait_all_tasks_blocked()
            queue.close()
    assert polls == [None]
    assert len(failures) == 1


async def _exited_pid() -> int:
    process = await anyio.open_process(["true"])
    await process.wait()
    return process.pid


async def test_a_proxy_whose_process_is_gone_is_not_given_work() -> None:
    queue = ProxyWorkQueue()
    queue.register("fleet", "p-dead", pid=await _exited_pid())
    with pytest.raises(NoProxyError):
        await queue.call("fleet", "get_device", {}, 5)


async def _failure_when_the_proxy_exits(*, taken: bool) -> WorkQueueError:
    """Dispatch a call to a proxy process, let it take the call or not, kill the process: the call's error."""
    queue = ProxyWorkQueue()
    outcome: list[WorkQueueError] = []
    async with await anyio.open_process(["sleep", "30"]) as process:
        queue.register("fleet", "p1", pid=process.pid)

        async def call() -> None:
            try:
                await queue.call("fleet", "get_device", {}, 30)
            except WorkQueueError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(call)
            if taken:
                assert await queue.wait_for_work("fleet", "p1", 5) is not None
            else:
                await anyio.lowlevel.checkpoint()
            process.kill()
            await process.wait()
    assert queue.stats()["calls"] == 0
    assert queue.stats()["queued"] == 0
    assert len(outcome) == 1
    return outcome[0]


async def test_a_call_whose_proxy_exits_before_taking_it_fails_as_not_sent() -> None:
    error = await _failure_when_the_proxy_exits(taken=False)
    assert isinstance(error, ProxyExitedError)
    assert isinstance(error, NotSentError)


async def test_a_call_whose_proxy_exits_after_taking_it_may_or_may_not_have_run() -> None:
    error = await _failure_when_the_proxy_exits(taken=True)
    assert isinstance(error, ProxyGoneError)
    assert "may or may not have run" in str(error)


async def test_a_proxy_whose_process_is_gone_is_not_served() -> None:
    queue = ProxyWorkQueue()
    queue.register("fleet", "p-dead", pid=await _exited_pid())
    assert not queue.is_served("fleet")


async def test_a_proxy_that_unregisters_is_gone_at_once_and_its_server_is_listed_as_left() -> None:
    queue = ProxyWorkQueue()
    queue.register("fleet", "p1", pid=None)
    assert queue.is_served("fleet")
    outcome: list[WorkQueueError] = []

    async def call() -> None:
        try:
            await queue.call("fleet", "get_device", {}, 30)
        except WorkQueueError as exc:
            outcome.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await anyio.wait_all_tasks_blocked()
            assert queue.stats()["queued"] == 1
            assert not queue.unregister("p1", "chrome")  # not its server: nothing happens
            assert queue.unregister("p1", "fleet")
    assert not queue.is_served("fleet")
    assert queue.left() == ["fleet"]
    assert [type(e) for e in outcome] == [ProxyExitedError]  # queued, never taken: nothing ran
    assert queue.stats() == {"proxies": 0, "queued": 0, "calls": 0, "sessions": 0, "parked": 0}
    assert not queue.unregister("p1", "fleet")
    # A proxy of a new session for it: the server is no longer one that was left.
    queue.register("fleet", "p2")
    assert queue.left() == []


async def _serve_as(queue: ProxyWorkQueue, proxy_id: str, served: list[str]) -> None:
    work = await queue.wait_for_work("fleet", proxy_id, 30)
    if work is not None:
        served.append(proxy_id)
        queue.complete(work.work_id, proxy_id)


async def test_two_live_sessions_each_get_the_proxy_their_host_started_before_any_call() -> None:
    queue = ProxyWorkQueue()
    async with await anyio.open_process(["sleep", "30"]) as host_a, await anyio.open_process(["sleep", "30"]) as host_b:
        # Proxies first (Claude Code starts its MCP servers beside the first hooks), then each session's hook.
        queue.register("fleet", "a-proxy", pid=None, host_pid=host_a.pid)
        queue.register("fleet", "b-proxy", pid=None, host_pid=host_b.pid)
        queue.note_session("session-a", host_pid=host_a.pid)
        # The other order: a session heard from before its proxy registered.
        queue.note_session("session-c", host_pid=host_b.pid)
        queue.register("fleet", "c-proxy", host_pid=host_b.pid)
        served: list[str] = []
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                for proxy_id in ("a-proxy", "b-proxy", "c-proxy"):
                    group.start_soon(_serve_as, queue, proxy_id, served)
                await anyio.wait_all_tasks_blocked()
                assert await queue.call("fleet", "list_devices", {}, 5, session_id="session-c") == "c-proxy"
                assert await queue.call("fleet", "list_devices", {}, 5, session_id="session-a") == "a-proxy"
                group.cancel_scope.cancel()
        host_a.kill()
        host_b.kill()
    assert served == ["c-proxy", "a-proxy"]


async def test_a_later_session_of_the_same_host_takes_its_proxies_over() -> None:
    queue = ProxyWorkQueue()
    async with await anyio.open_process(["sleep", "30"]) as host:
        queue.register("fleet", "p1", host_pid=host.pid)
        queue.note_session("before-clear", host_pid=host.pid)
        queue.note_session("after-clear", host_pid=host.pid)
        served: list[str] = []
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(_serve_as, queue, "p1", served)
                await anyio.wait_all_tasks_blocked()
                assert await queue.call("fleet", "list_devices", {}, 5, session_id="after-clear") == "p1"
        host.kill()


async def test_a_session_whose_host_died_stops_counting_at_once_and_its_proxies_with_it() -> None:
    queue = ProxyWorkQueue()
    async with await anyio.open_process(["sleep", "30"]) as host:
        queue.register("fleet", "dead-session-proxy", host_pid=host.pid)
        queue.note_session("dead", host_pid=host.pid)
        # The dead session's proxy still polls (orphaned), and a second session's proxy has no host yet.
        queue.register("fleet", "unbound")
        host.kill()
        await host.wait()
    served: list[str] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(_serve_as, queue, "unbound", served)
            await anyio.wait_all_tasks_blocked()
            # No SessionEnd came; the dead host is enough for the other session to take the unbound proxy.
            assert await queue.call("fleet", "list_devices", {}, 5, session_id="alive") == "unbound"
    assert queue.host_of("dead") is None
    assert served == ["unbound"]


async def test_a_proxy_whose_host_died_is_not_served_though_it_polled_just_now() -> None:
    queue = ProxyWorkQueue()
    async with await anyio.open_process(["sleep", "30"]) as host:
        queue.register("fleet", "orphan", host_pid=host.pid)
        assert queue.is_served("fleet")
        host.kill()
        await host.wait()
    assert not queue.is_served("fleet")
    with pytest.raises(NoProxyError):
        await queue.call("fleet", "list_devices", {}, 5)


async def test_an_unbound_proxy_of_another_host_is_never_lent_to_a_session() -> None:
    queue = ProxyWorkQueue()
    async with await anyio.open_process(["sleep", "30"]) as other, await anyio.open_process(["sleep", "30"]) as mine:
        queue.register("fleet", "other-proxy", host_pid=other.pid)
        queue.note_session("mine", host_pid=mine.pid)
        with anyio.fail_after(5), pytest.raises(NoSessionProxyError):
            await queue.call("fleet", "list_devices", {}, 5, session_id="mine")
        other.kill()
        mine.kill()
    assert queue.stats()["queued"] == 0
