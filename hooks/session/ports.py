"""What the live session needs of its sinks: the recorder of missed turns and the execution reports.

Protocols, so the controller can be driven with the real outbox or a stand-in (a benchmark's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from bir.core.transcript import ModelUsage


class RunRecorder(Protocol):
    """Records a missed turn's steps and its finish (``bir.hooks.session.recorder.Recorder``; never blocks)."""

    def start(self, run_id: str) -> None: ...

    def hold(
        self,
        run_id: str,
        key: str,
        tool_name: str,
        tool_input: object,
        *,
        tool_output: object,
        error: str | None = None,
        duration_ms: int | None = None,
    ) -> bool: ...

    def flush(self, run_id: str, order: Sequence[str]) -> int: ...

    def finish(
        self,
        run_id: str,
        output: str | None,
        *,
        duration_ms: int,
        usage: Sequence[ModelUsage],
        cost_usd: float,
        measured: bool,
        pricing_version: str,
    ) -> bool: ...


class ExecutionReports(Protocol):
    """Execution reports, one per matched ticket, settled exactly once (``bir.hooks.session.outbox.Outbox``)."""

    def draft_report(self, ticket: str, scenario_id: str, body: Mapping[str, Any]) -> bool: ...

    def finalize_report(
        self, ticket: str, body: Mapping[str, Any] | None, *, scenario_id: str | None = None
    ) -> bool: ...
