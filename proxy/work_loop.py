"""The proxy's side of direct execution (spec §16.2): register, long-poll, run work, report.

The loop never stops on its own and never blocks the relay: it runs beside it, and every failure
of the control server only slows it down. Its pace:

* a held poll that came back empty re-polls at once;
* ``{replay: false}``, or an answer that came back at once, waits ``idle_s`` (30 s) first;
* a control server that cannot be reached is retried with a backoff of at most 5 s, through
  discovery again (it may have restarted elsewhere), and registered again when it answers; with no
  discovery file at all it looks again at least once a second (a file read).

Each work item runs upstream as a ``bir:`` request with a budget a little under the control
server's own (``timeoutMs - min(1000, timeoutMs / 10)``), so the cancellation reaches the upstream
before the control server gives up on the step. The loop also carries the relay's step reports
to ``/proxy/step`` through a small bounded queue; what does not fit, or finds no server, is dropped.

When it ends (the host closed the session: ``leave``; or the proxy is exiting) it unregisters, so the
control server stops counting it as live at once instead of a minute after its last poll.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from bir.core.log import log_event
from bir.hooks.api import StepReport, Work
from bir.proxy.control_client import (
    DEFAULT_POLL_HOLD_MS,
    ControlError,
    Endpoint,
    ProxyLink,
    discover,
)
from bir.proxy.relay import HostGone, RequestTimedOut

STEP_QUEUE: Final = 64
_MAX_ERROR_CHARS: Final = 2000
# Saying goodbye is worth a moment, never a wait: a server that does not answer learns it from the silence.
GOODBYE_S: Final = 1.0


@dataclass(frozen=True)
class Pace:
    """How fast the loop goes. Tests shrink these; production keeps the spec's numbers."""

    idle_s: float = 30.0
    instant_s: float = 1.0
    backoff_first_s: float = 0.25
    backoff_max_s: float = 5.0
    no_server_s: float = 1.0
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep


class Requester(Protocol):
    """What the loop needs of the relay."""

    @property
    def ready(self) -> anyio.Event: ...

    async def request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any: ...

    async def control_found(self) -> None: ...


def step_budget_ms(timeout_ms: int) -> float:
    """The upstream budget of a step the control server gives ``timeout_ms``."""
    return timeout_ms - min(1000.0, timeout_ms / 10)


class WorkLoop:
    """Registers with the project's control server and serves its work for one upstream."""

    def __init__(
        self,
        requester: Requester,
        *,
        server_name: str,
        proxy_id: str,
        project: Path,
        pace: Pace | None = None,
        find: Callable[[Path], Endpoint | None] = discover,
        make_client: Callable[..., ProxyLink] = ProxyLink,
    ) -> None:
        self._requester = requester
        self.server_name = server_name
        self.proxy_id = proxy_id
        self._project = project
        self._pace = pace or Pace()
        self._find = find
        self._make_client = make_client
        self._client: ProxyLink | None = None
        self._registered = False
        self._hold_ms = DEFAULT_POLL_HOLD_MS
        self._steps_in: MemoryObjectSendStream[StepReport]
        self._steps_out: MemoryObjectReceiveStream[StepReport]
        self._steps_in, self._steps_out = anyio.create_memory_object_stream[StepReport](STEP_QUEUE)
        self.polls = 0
        self.works = 0
        self._scope: anyio.CancelScope | None = None
        self._leaving = False
        self._gone = anyio.Event()

    @property
    def known(self) -> bool:
        """Whether a control server is registered with, so call ids may be injected (spec §7.1)."""
        return self._registered and self._client is not None

    def offer_step(self, report: StepReport) -> None:
        """Queue one step report without waiting; dropped when no server is known or the queue is full."""
        if not self.known:
            return
        try:
            self._steps_in.send_nowait(report)
        except anyio.WouldBlock:
            log_event("proxy.step_dropped", tool=report.tool_name, why="queue full")

    async def run(self) -> None:
        """Serve until cancelled or ``leave``; unregister on the way out. Never raises for the control
        server's sake."""
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._report_steps)
                try:
                    with anyio.CancelScope() as self._scope:
                        if not self._leaving:
                            await self._serve()
                finally:
                    group.cancel_scope.cancel()
                    self._steps_in.close()
                    self._steps_out.close()
                    with anyio.CancelScope(shield=True):
                        await self._goodbye()
                        await self._drop_client()
        finally:
            self._gone.set()

    async def leave(self) -> None:
        """The host closed the session: serve no more, and tell the control server before this returns
        (bounded by ``GOODBYE_S``)."""
        self._leaving = True
        if self._scope is None:
            return
        self._scope.cancel()
        with anyio.move_on_after(GOODBYE_S + 1.0):
            await self._gone.wait()

    async def _goodbye(self) -> None:
        client = self._client
        if client is None or not self._registered:
            return
        self._registered = False
        with anyio.move_on_after(GOODBYE_S):
            try:
                await client.unregister()
                log_event("proxy.unregistered", server=self.server_name)
            except ControlError as exc:
                log_event("proxy.unregister_failed", server=self.server_name, error=str(exc))

    async def _serve(self) -> None:
        backoff = self._pace.backoff_first_s
        while True:
            client = await self._connect()
            if client is None:
                # No discovery file yet: looking again is a file read, so it stays frequent. A server a hook
                # revives after this proxy started is then found within a second, before the first prompt's
                # plan is decided (that prompt waits a moment for the installed proxies).
                await self._pace.sleep(min(backoff, self._pace.no_server_s))
                backoff = min(backoff * 2, self._pace.backoff_max_s)
                continue
            try:
                if not self._registered:
                    registration = await client.register()
                    self._hold_ms = registration.poll_hold_ms
                    self._registered = True
                    log_event("proxy.registered", server=self.server_name, url=client.url, replay=registration.replay)
                    with contextlib.suppress(HostGone):
                        await self._requester.control_found()
                started = time.monotonic()
                self.polls += 1
                answer = await client.poll(self._hold_ms)
            except ControlError as exc:
                if self._registered:
                    log_event("proxy.control_unreachable", server=self.server_name, error=str(exc))
                await self._drop_client()
                await self._pace.sleep(backoff)
                backoff = min(backoff * 2, self._pace.backoff_max_s)
                continue
            backoff = self._pace.backoff_first_s
            if answer.work is not None:
                await self._run_work(client, answer.work)
                continue
            if answer.replay is False or time.monotonic() - started < self._pace.instant_s:
                await self._pace.sleep(self._pace.idle_s)

    async def _connect(self) -> ProxyLink | None:
        if self._client is not None:
            return self._client
        endpoint = self._find(self._project)
        if endpoint is None:
            return None
        self._client = self._make_client(endpoint, server_name=self.server_name, proxy_id=self.proxy_id)
        self._registered = False
        return self._client

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        self._registered = False
        if client is not None:
            await client.aclose()

    async def _run_work(self, client: ProxyLink, work: Work) -> None:
        self.works += 1
        budget_ms = step_budget_ms(work.timeout_ms)
        result: Any = None
        error: str | None = None
        started = time.monotonic()
        try:
            result = await self._call(work, budget_ms / 1000)
        except Exception as exc:  # noqa: BLE001 - every failure is the step's error text, never ours
            error = _error_text(work, budget_ms, exc)
        log_event(
            "proxy.work_done",
            server=self.server_name,
            tool=work.tool_name,
            work_id=work.work_id,
            ok=error is None,
            duration_ms=round((time.monotonic() - started) * 1000),
        )
        try:
            await client.result(work.work_id, result=result, error=error)
        except ControlError as exc:
            log_event("proxy.result_lost", work_id=work.work_id, error=str(exc))
            await self._drop_client()

    async def _call(self, work: Work, budget_s: float) -> Any:
        started = time.monotonic()
        with anyio.move_on_after(budget_s):
            await self._requester.ready.wait()
        if not self._requester.ready.is_set():
            raise _NotReady("the upstream session is not initialized yet; nothing was sent")
        left = budget_s - (time.monotonic() - started)
        arguments = work.arguments if work.arguments is not None else {}
        return await self._requester.request(
            "tools/call", {"name": work.tool_name, "arguments": arguments}, max(0.0, left)
        )

    async def _report_steps(self) -> None:
        async for report in self._steps_out:
            client = self._client
            if client is None or not self._registered:
                continue
            try:
                await client.step(report)
            except ControlError as exc:
                log_event("proxy.step_dropped", tool=report.tool_name, why=str(exc))


class _NotReady(Exception):
    pass


def _error_text(work: Work, budget_ms: float, exc: Exception) -> str:
    if isinstance(exc, RequestTimedOut):
        text = (
            f"{work.tool_name} did not answer within {math.floor(budget_ms)} ms; "
            "it was cancelled upstream and may or may not have completed"
        )
    else:
        text = str(exc) or type(exc).__name__
    return text[:_MAX_ERROR_CHARS]
