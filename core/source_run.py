"""Recorded outputs from the scenario's source run (spec §8.1).

The queue semantics are BaseIn's dry replay's (``recordedOutputsByTool``): one FIFO queue of output
texts per tool name, drawn in step order, so a scenario behaves the same here as under
``bir scenario replay --dry``. The source run is fetched lazily, once per turn, and a failure to fetch
it simply means there are no recorded outputs.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable

import anyio

from bir.core.log import log_event
from bir.core.service import ServiceClient, ServiceError
from bir.core.types import RecordedStep

# The spec skips the lookup when less than this remains of the caller's deadline (§8.1).
MIN_LOOKUP_S = 0.25


def recorded_text(value: object) -> str:
    """A recorded output (redacted and capped when it was recorded) as the text a logic body's
    ``toolOutput`` receives (compact, as ``JSON.stringify``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


class RecordedOutputs:
    """Per-tool FIFO queues of recorded output texts."""

    def __init__(self, steps: Iterable[RecordedStep] = ()) -> None:
        ordered = sorted(
            enumerate(steps),
            # Steps without an index keep the service's order, after the indexed ones.
            key=lambda pair: (pair[1].step_index is None, pair[1].step_index or 0, pair[0]),
        )
        self._queues: dict[str, deque[str]] = {}
        for _, step in ordered:
            if step.tool_output is None:
                continue
            self._queues.setdefault(step.tool_name, deque()).append(recorded_text(step.tool_output))

    def take(self, tool_name: str) -> str | None:
        """The next recorded output of ``tool_name``, or ``None`` when none is left."""
        queue = self._queues.get(tool_name)
        return queue.popleft() if queue else None

    def remaining(self, tool_name: str) -> int:
        """How many outputs of ``tool_name`` are still queued."""
        queue = self._queues.get(tool_name)
        return len(queue) if queue else 0

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._queues.values())


class SourceRun:
    """The lazily fetched recorded outputs of one turn's source run. ``outputs()`` never raises."""

    def __init__(self, service: ServiceClient | None, run_id: str | None) -> None:
        self._service = service
        self._run_id = run_id
        self._outputs: RecordedOutputs | None = None
        self._lock = anyio.Lock()

    @property
    def fetched(self) -> bool:
        return self._outputs is not None

    async def outputs(self, *, time_left_s: float | None = None) -> RecordedOutputs:
        """The turn's recorded outputs: fetched on the first call, the same queues after.

        ``time_left_s`` is what remains of the caller's deadline: the fetch is bounded by it, and
        skipped (without being remembered, so a later call with time may still fetch) when less than
        ``MIN_LOOKUP_S`` remains.
        """
        async with self._lock:
            if self._outputs is not None:
                return self._outputs
            if self._service is None or not self._run_id or not self._service.configured:
                self._outputs = RecordedOutputs()
                return self._outputs
            if time_left_s is not None and time_left_s < MIN_LOOKUP_S:
                log_event("replay.source_run_skipped", run_id=self._run_id, time_left_s=round(time_left_s, 3))
                return RecordedOutputs()
            self._outputs = await fetch_recorded_outputs(self._service, self._run_id, time_left_s=time_left_s)
            return self._outputs


async def fetch_recorded_outputs(
    service: ServiceClient, run_id: str, *, time_left_s: float | None = None
) -> RecordedOutputs:
    """One fetch of a run's recorded outputs, bounded by ``time_left_s``; a failure gives empty queues."""
    timeout_s = service.timeout_s if time_left_s is None else min(service.timeout_s, time_left_s)
    try:
        steps = await service.get_run_steps(run_id, timeout_s=timeout_s)
    except ServiceError as exc:
        log_event("replay.source_run_failed", run_id=run_id, kind=exc.kind, error=str(exc))
        return RecordedOutputs()
    except Exception as exc:  # noqa: BLE001 - recorded outputs are optional; their absence is the fallback
        log_event("replay.source_run_failed", run_id=run_id, kind="internal", error=repr(exc)[:300])
        return RecordedOutputs()
    outputs = RecordedOutputs(steps)
    log_event("replay.source_run_fetched", run_id=run_id, outputs=len(outputs))
    return outputs
