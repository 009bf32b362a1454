"""The per-turn recorder: what a recorded run (a miss) sends the service, through the outbox (spec §2, §12).

The controller calls ``start`` when the match created a run, ``hold`` as each tool call settles, and at
seal ``flush`` (the held steps in the order the model made the calls, which only the transcript knows
once every call is in it: a call made before the ``bir`` server that carries the tool hooks connected is
seen by no hook, and is held from the transcript then) and ``finish``. The recorder makes the wire bodies
(redacted, capped) when a step is held, so what waits is bounded, and hands them to the outbox; it does no
HTTP of its own, so no hook waits on the network. A hit creates no run: the controller never calls
``start`` for it, and ``hold``/``step``/``finish`` for a run never started do nothing. Without a configured
service nothing is enqueued at all. bir's own calls (``is_housekeeping``) are never steps and take no index.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bir.core.housekeeping import is_housekeeping
from bir.core.log import log_event
from bir.core.redact import redact, redact_text
from bir.core.transcript import ModelUsage
from bir.core.truncate import DEFAULT_MAX_CHARS, cut_counted, serialize_capped
from bir.hooks.session.outbox import Outbox

MAX_OUTPUT_CHARS: Final = DEFAULT_MAX_CHARS
MAX_ERROR_CHARS: Final = 1_000
MAX_TOOL_NAME_CHARS: Final = 200
# Runs remembered at once; the oldest is forgotten past this (a turn long gone that never sealed).
MAX_RUNS: Final = 1_024
# Steps a run holds until its seal; past this a step is queued at once (in settle order).
MAX_HELD_STEPS: Final = 256


@dataclass
class _Run:
    next_index: int = 0
    finished: bool = False
    # call key (the host's tool_use_id) → the step's body, without its index: made when held, sent at flush.
    held: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)


def _count(value: int | None) -> int | None:
    return None if value is None else max(0, int(value))


def usage_to_wire(usage: Sequence[ModelUsage]) -> list[dict[str, Any]]:
    """Per-model usage as the finish body's camelCase objects."""
    return [u.to_wire() for u in usage]


class Recorder:
    """Records the runs of one control server. ``outbox`` may be None only when ``service_configured`` is false.

    ``service_configured`` may be a callable, asked at each use: a control server's service client
    follows ``bir login`` and ``bir logout`` while it runs, and so does what it records.
    """

    def __init__(
        self,
        outbox: Outbox | None,
        service_configured: bool | Callable[[], bool],
        *,
        max_output_chars: int = MAX_OUTPUT_CHARS,
        max_runs: int = MAX_RUNS,
    ) -> None:
        self._given_outbox = outbox
        self._configured = service_configured
        self._max_output_chars = max_output_chars
        self._max_runs = max_runs
        self._runs: OrderedDict[str, _Run] = OrderedDict()

    @property
    def _outbox(self) -> Outbox | None:
        configured = self._configured() if callable(self._configured) else self._configured
        return self._given_outbox if configured else None

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
        outbox = self._outbox
        if outbox is None:
            return step_index
        body = self._body(tool_name, tool_input, tool_output, error, duration_ms)
        outbox.enqueue_step(run_id, step_index, {"stepIndex": step_index, **body})
        return step_index

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
    ) -> bool:
        """Keep one settled call of ``run_id`` (``key``: the host's tool-use id) until ``flush`` orders it;
        True when it will be recorded. A key held already, housekeeping, a run never started or finished
        hold nothing; past ``MAX_HELD_STEPS`` the step is queued at once."""
        run = self._runs.get(run_id)
        if run is None or run.finished or key in run.held or is_housekeeping(tool_name, tool_input):
            return False
        if len(run.held) >= MAX_HELD_STEPS:
            return self.step(run_id, None, tool_name, tool_input, tool_output=tool_output, error=error) is not None
        # Without a service nothing is sent: only the order (the indexes) is kept.
        run.held[key] = self._body(tool_name, tool_input, tool_output, error, duration_ms) if self._outbox else {}
        return True

    def holds(self, run_id: str, key: str) -> bool:
        """Whether a step of ``run_id`` is held under ``key``."""
        run = self._runs.get(run_id)
        return run is not None and key in run.held

    def flush(self, run_id: str, order: Sequence[str]) -> int:
        """Queue every held step of ``run_id``: those named in ``order`` in that order, then the rest as they
        settled; returns how many. Each takes the run's next index."""
        run = self._runs.get(run_id)
        if run is None:
            return 0
        first = [key for key in dict.fromkeys(order) if key in run.held]
        keys = first + [key for key in run.held if key not in set(first)]
        for key in keys:
            body = run.held.pop(key)
            step_index = run.next_index
            run.next_index += 1
            outbox = self._outbox
            if outbox is not None:
                outbox.enqueue_step(run_id, step_index, {"stepIndex": step_index, **body})
        return len(keys)

    def _body(
        self, tool_name: str, tool_input: object, tool_output: object, error: str | None, duration_ms: int | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "toolName": cut_counted(tool_name, MAX_TOOL_NAME_CHARS),
            "toolInput": self._input(tool_input),
            "toolOutput": self._output(tool_output),
        }
        if error is not None:
            body["error"] = cut_counted(redact_text(error), MAX_ERROR_CHARS)
        if duration_ms is not None:
            body["durationMs"] = _count(duration_ms)
        return body

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
        # A step still held goes first, as it settled: the finish is the run's last word.
        self.flush(run_id, ())
        run.finished = True
        outbox = self._outbox
        if outbox is None:
            return False
        body: dict[str, Any] = {
            "output": cut_counted(redact_text(output or ""), self._max_output_chars),
            "durationMs": _count(duration_ms),
            "usage": usage_to_wire(usage),
            "costUsd": cost_usd if cost_usd > 0 and cost_usd != float("inf") else 0.0,
            "measured": bool(measured),
            "pricingVersion": pricing_version,
        }
        return outbox.enqueue_finish(run_id, body)

    def _input(self, tool_input: object) -> object:
        cleaned = redact(tool_input)
        text = serialize_capped(cleaned, self._max_output_chars)
        # A value within the cap goes as it is (the arguments that ran); past it, the capped text does.
        return cleaned if len(text) < self._max_output_chars else text

    def _output(self, tool_output: object) -> str:
        if isinstance(tool_output, str):
            return cut_counted(tool_output, self._max_output_chars)
        return serialize_capped(redact(tool_output), self._max_output_chars)
