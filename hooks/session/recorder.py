"""The per-turn recorder: what a recorded run (a miss) sends the service, through the outbox (spec §2, §12).

The controller calls ``start`` when the match created a run, ``step`` as each tool call settles and
``finish`` once at seal. The recorder makes the wire bodies (redacted, capped) and hands them to the
outbox; it does no HTTP of its own, so no hook waits on the network. A hit creates no run: the
controller never calls ``start`` for it, and ``step``/``finish`` for a run never started do nothing.
Without a configured service nothing is enqueued at all. bir's own calls (``is_housekeeping``) are
never steps and take no index.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from bir.core.housekeeping import is_housekeeping
from bir.core.log import log_event
from bir.core.recording import MAX_OUTPUT_CHARS, finish_body, step_body
from bir.core.transcript import ModelUsage
from bir.hooks.session.outbox import Outbox

# Runs remembered at once; the oldest is forgotten past this (a turn long gone that never sealed).
MAX_RUNS: Final = 1_024


@dataclass
class _Run:
    next_index: int = 0
    finished: bool = False


class Recorder:
    """Records the runs of one control server. ``outbox`` may be None only when ``service_configured`` is false."""

    def __init__(
        self,
        outbox: Outbox | None,
        service_configured: bool,
        *,
        max_output_chars: int = MAX_OUTPUT_CHARS,
        max_runs: int = MAX_RUNS,
    ) -> None:
        self._outbox = outbox if service_configured else None
        self._max_output_chars = max_output_chars
        self._max_runs = max_runs
        self._runs: OrderedDict[str, _Run] = OrderedDict()

    @property
    def sending(self) -> bool:
        """True when recorded runs reach the service (a service is configured)."""
        return self._outbox is not None

    def start(self, run_id: str) -> None:
        """Begin recording ``run_id``: the match missed and the service created that run."""
        if run_id in self._runs:
            return
        self._runs[run_id] = _Run()
        while len(self._runs) > self._max_runs:
            forgotten, _ = self._runs.popitem(last=False)
            log_event("recording.run_forgotten", run_id=forgotten)

    def recording(self, run_id: str) -> bool:
        """True when ``run_id`` was started here and is still remembered."""
        return run_id in self._runs

    def step(
        self,
        run_id: str,
        step_index: int | None,
        tool_name: str,
        tool_input: object,
        *,
        tool_output: object,
        error: str | None = None,
        duration_ms: int | None = None,
    ) -> int | None:
        """Record one settled tool call of ``run_id``; returns its step index, or None when nothing is recorded.

        ``step_index`` None takes the run's next index (0, 1, 2… in settle order); an explicit one moves
        the run's counter past it. ``tool_output`` is the value to send, normally already
        ``serialize_capped(redact(…))``; a string is still capped here, anything else is redacted and
        serialized. ``tool_input`` is redacted and, past the cap, sent as capped text. Housekeeping calls
        and runs never started record nothing. The index is allocated even when no service is configured.
        """
        run = self._runs.get(run_id)
        if run is None or is_housekeeping(tool_name, tool_input):
            return None
        if step_index is None:
            step_index = run.next_index
        run.next_index = max(run.next_index, step_index + 1)
        if self._outbox is None:
            return step_index
        body = step_body(
            step_index,
            tool_name,
            tool_input,
            tool_output=tool_output,
            error=error,
            duration_ms=duration_ms,
            max_chars=self._max_output_chars,
        )
        self._outbox.enqueue_step(run_id, step_index, body)
        return step_index

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
    ) -> bool:
        """Seal ``run_id`` with the turn's last assistant text and usage; returns whether a finish was queued.

        Once per run: a second call, or a call for a run never started, does nothing.
        """
        run = self._runs.get(run_id)
        if run is None or run.finished:
            return False
        run.finished = True
        if self._outbox is None:
            return False
        body = finish_body(
            output,
            duration_ms=duration_ms,
            usage=usage,
            cost_usd=cost_usd,
            measured=measured,
            pricing_version=pricing_version,
            max_chars=self._max_output_chars,
        )
        return self._outbox.enqueue_finish(run_id, body)
