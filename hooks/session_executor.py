"""The executor of a session's direct steps: the control server's own work queue, no HTTP hop.

A direct plan (§6) runs inside the control server, so each step goes straight to the queue, routed
to a proxy of the plan's session (two sessions never run steps on each other's proxies) and only to
servers ``BIR_REPLAY_ALLOW_SERVERS`` allows (§13.2).
"""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet
from typing import Any

from bir.core.plan import StepNoAnswer, StepNotSent, StepRan, StepResult
from bir.core.types import ScenarioStep, parse_qualified_name
from bir.hooks.direct import output_text
from bir.hooks.work_queue import NotSentError, ProxyWorkQueue, StepTimeoutError, WorkQueueError


class SessionExecutor:
    """Runs one plan's direct steps for ``session_id``; ``deadline`` (monotonic) clips each step's timeout."""

    def __init__(
        self,
        queue: ProxyWorkQueue,
        *,
        session_id: str | None,
        step_timeout_s: float,
        allow: AbstractSet[str] | None,
        deadline: float | None = None,
    ) -> None:
        self._queue = queue
        self._session_id = session_id
        self._step_timeout_s = step_timeout_s
        self._allow = allow
        self._deadline = deadline

    async def __call__(self, step: ScenarioStep, tool_input: dict[str, Any]) -> StepResult:
        parsed = parse_qualified_name(step.tool_name)
        if parsed is None:
            return StepNotSent(f"{step.tool_name} is a built-in: only the model can call it")
        server, tool = parsed
        if self._allow is not None and server not in self._allow:
            return StepNotSent(f"{server} is not in BIR_REPLAY_ALLOW_SERVERS")
        timeout_s = self._step_timeout_s
        if self._deadline is not None:
            timeout_s = min(timeout_s, self._deadline - time.monotonic())
        if timeout_s <= 0:
            return StepNotSent("the plan's time budget ran out before it")
        try:
            result = await self._queue.call(server, tool, tool_input, timeout_s, session_id=self._session_id)
        except NotSentError as exc:
            return StepNotSent(str(exc))
        except StepTimeoutError as exc:
            return StepNoAnswer(str(exc)) if exc.taken else StepNotSent(str(exc))
        except WorkQueueError as exc:
            return StepNoAnswer(str(exc))
        return StepRan(output_text(result))
