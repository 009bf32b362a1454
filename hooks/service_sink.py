"""Sends a turn's recording and its execution report to the service in the background.

The controller never awaits these: each call queues one request on the server's loop. A ticket is
reported once per process (Stop racing SessionEnd, a retry), and the service books a ticket once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from typing import Any, Final

from bir.core.log import log_event
from bir.core.service import ServiceClient, ServiceError

MAX_TICKETS: Final = 10_000


class ServiceSink:
    """``RunRecorder`` and ``ExecutionReports`` over one ``ServiceClient``."""

    def __init__(self, service: ServiceClient) -> None:
        self._service = service
        self._started: OrderedDict[str, int] = OrderedDict()
        self._drafts: dict[str, tuple[str, Mapping[str, Any]]] = {}
        self._settled: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._chains: dict[str, asyncio.Task[None]] = {}

    # -- recording (service-contract.md) ----------------------------------------------------------

    def start(self, run_id: str) -> None:
        self._started[run_id] = 0
        while len(self._started) > MAX_TICKETS:
            self._started.popitem(last=False)

    def step(
        self,
        run_id: str,
        *,
        tool_name: str,
        tool_input: object,
        tool_output: str,
        error: str | None = None,
        duration_ms: float | None = None,
    ) -> None:
        if run_id not in self._started:
            return
        index = self._started[run_id]
        self._started[run_id] = index + 1
        body: dict[str, Any] = {
            "stepIndex": index,
            "toolName": tool_name,
            "toolInput": tool_input,
            "toolOutput": tool_output,
        }
        if error is not None:
            body["error"] = error
        if duration_ms is not None:
            body["durationMs"] = round(duration_ms)
        self._chain(run_id, self._send_step(run_id, body))

    def finish(self, run_id: str, body: Mapping[str, Any]) -> None:
        if self._started.pop(run_id, None) is None:
            return
        self._chain(run_id, self._send_finish(run_id, dict(body)))

    async def _send_step(self, run_id: str, body: dict[str, Any]) -> None:
        try:
            await self._service.post_step(run_id, body)
        except ServiceError as exc:
            log_event("recording.step_failed", run_id=run_id, error=str(exc))

    async def _send_finish(self, run_id: str, body: dict[str, Any]) -> None:
        try:
            await self._service.finish_run(run_id, body)
            log_event("recording.finished", run_id=run_id)
        except ServiceError as exc:
            log_event("recording.finish_failed", run_id=run_id, error=str(exc))

    # -- execution reports (§11.2) ----------------------------------------------------------------

    def draft(self, ticket: str, scenario_id: str, body: Mapping[str, Any]) -> None:
        if ticket not in self._settled:
            self._drafts.setdefault(ticket, (scenario_id, body))

    def finalize(self, ticket: str, scenario_id: str, body: Mapping[str, Any] | None) -> None:
        if ticket in self._settled:
            return
        self._settled[ticket] = None
        while len(self._settled) > MAX_TICKETS:
            self._settled.popitem(last=False)
        self._drafts.pop(ticket, None)
        if body is None:
            log_event("service.report_skipped", ticket=ticket, why="a costless, errorless decline is not sent")
            return
        self._spawn(self._report(scenario_id, dict(body)))

    async def _report(self, scenario_id: str, body: dict[str, Any]) -> None:
        try:
            await self._service.report_execution(scenario_id, body)
        except ServiceError as exc:
            log_event("service.report_failed", scenario_id=scenario_id, error=str(exc))

    # -- tasks ------------------------------------------------------------------------------------

    def _chain(self, run_id: str, work: Coroutine[Any, Any, None]) -> None:
        # A run's requests go in order (its steps before its finish); runs are independent.
        before = self._chains.get(run_id)

        async def after() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            await work

        task = self._spawn(after())
        self._chains[run_id] = task
        task.add_done_callback(lambda t: self._chains.pop(run_id, None) if self._chains.get(run_id) is t else None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def flush(self, timeout_s: float) -> None:
        """Wait for what is under way (shutdown, tests), at most ``timeout_s``."""
        for draft_ticket, (scenario_id, body) in list(self._drafts.items()):
            self.finalize(draft_ticket, scenario_id, body)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)
