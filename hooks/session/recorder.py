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
from bir.core.recording import MAX_OUTPUT_CHARS, finish_body, step_body
from bir.core.transcript import ModelUsage
from bir.hooks.session.outbox import Outbox

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
        outbox.enqueue_step(
            run_id,
            step_index,
            self._body(
                step_index, tool_name, tool_input, tool_output=tool_output, error=error, duration_ms=duration_ms
            ),
        )
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
        run.held[key] = (
            self._body(0, tool_name, tool_input, tool_output=tool_output, error=error, duration_ms=duration_ms)
            if self._outbox
            else {}
        )
        return True

    def holds(self, run_id: str, key: str) -> bool:
        """Whether a step of ``run_id`` is held under ``key``."""
        run = self._runs.get(run_id)
        return run is not None and key in run.held

    def flush(self, run_id: str, order: Sequence[str]) -> int:
        """Queue every held step of ``run_id``: those named in ``order`` in that order, and each step ``order``
        does not name right after the named steps that settled before it (a plan's step run through a proxy
        stays where it ran); returns how many. Each takes the run's next index."""
        run = self._runs.get(run_id)
        if run is None:
            return 0
        named = [key for key in dict.fromkeys(order) if key in run.held]
        place = {key: position for position, key in enumerate(named)}
        # A step the order does not name follows every named step that settled before it.
        after: dict[int, list[str]] = {}
        latest = -1
        for key in run.held:
            if key in place:
                latest = max(latest, place[key])
            else:
                after.setdefault(latest, []).append(key)
        keys = list(after.get(-1, ()))
        for position, key in enumerate(named):
            keys += [key, *after.get(position, ())]
        for key in keys:
            body = run.held.pop(key)
            step_index = run.next_index
            run.next_index += 1
            outbox = self._outbox
            if outbox is not None:
                outbox.enqueue_step(run_id, step_index, {**body, "stepIndex": step_index})
        return len(keys)

    def _body(
        self,
        step_index: int,
        tool_name: str,
        tool_input: object,
        *,
        tool_output: object,
        error: str | None,
        duration_ms: int | None,
    ) -> dict[str, Any]:
        return step_body(
            step_index,
            tool_name,
            tool_input,
            tool_output=tool_output,
            error=error,
            duration_ms=duration_ms,
            max_chars=self._max_output_chars,
        )

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
        body = finish_body(
            output,
            duration_ms=duration_ms,
            usage=usage,
            cost_usd=cost_usd,
            measured=measured,
            pricing_version=pricing_version,
            max_chars=self._max_output_chars,
        )
        return outbox.enqueue_finish(run_id, body)
