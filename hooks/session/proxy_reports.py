"""Joining a proxy's ``/proxy/step`` report to the hook of the same call (spec §7.1, §7.2, FACTS.md §4).

A wrapped MCP call is seen twice: by its hooks (``PreToolUse``/``PostToolUse``, with the host's
``tool_use_id``) and by its proxy, which reports the call's whole result with the host's
``_meta["claudecode/toolUseId"]`` and, where a hook injected one, the ``__bir_call_id__``. The first
report of a tool-use id also tells which session a proxy serves, so two sessions never run steps on
each other's proxies. Everything here is bounded: the oldest entries go first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final, TypeVar

import msgspec

from bir.hooks import api

MAX_KEPT: Final = 512
_V = TypeVar("_V")


class ProxyReports:
    """The recent proxy reports by tool-use id, and who is waiting for one."""

    def __init__(self, bind: Callable[[str, str], object], max_kept: int = MAX_KEPT) -> None:
        self._bind = bind
        self._max = max_kept
        self._reports: dict[str, api.StepReport] = {}
        self._calls: dict[str, tuple[str, asyncio.Event]] = {}
        self._call_ids: dict[str, str] = {}

    def note_call(self, tool_use_id: str, session_id: str) -> None:
        """A hook saw ``tool_use_id`` in ``session_id``: its report will bind the proxy to that session."""
        if tool_use_id in self._calls:
            if session_id and not self._calls[tool_use_id][0]:
                self._calls[tool_use_id] = (session_id, self._calls[tool_use_id][1])
            return
        self._calls[tool_use_id] = (session_id, asyncio.Event())
        _trim(self._calls, self._max)

    def note_call_id(self, call_id: str, tool_use_id: str) -> None:
        """A hook injected ``call_id`` into the call ``tool_use_id`` (§7.1)."""
        self._call_ids[call_id] = tool_use_id
        _trim(self._call_ids, self._max)

    def add(self, report: api.StepReport) -> None:
        """A proxy's report: kept for its hook, and binding its proxy to the call's session."""
        if report.tool_use_id is None and report.call_id is not None and report.call_id in self._call_ids:
            report = msgspec.structs.replace(report, tool_use_id=self._call_ids[report.call_id])
        if report.tool_use_id is None:
            return
        self._reports[report.tool_use_id] = report
        _trim(self._reports, self._max)
        self.note_call(report.tool_use_id, "")
        session_id, arrived = self._calls[report.tool_use_id]
        if session_id and report.proxy_id:
            self._bind(report.proxy_id, session_id)
        arrived.set()

    async def wait(self, tool_use_id: str, within_s: float) -> api.StepReport | None:
        """The report of ``tool_use_id``, waiting up to ``within_s`` for it; None if none came."""
        found = self._reports.get(tool_use_id)
        if found is not None:
            return found
        self.note_call(tool_use_id, "")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._calls[tool_use_id][1].wait(), max(0.0, within_s))
        return self._reports.get(tool_use_id)


def _trim(table: dict[str, _V], limit: int) -> None:
    while len(table) > limit:
        del table[next(iter(table))]
