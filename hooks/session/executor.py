"""The executor of a session's direct steps: the control server's own work queue, no HTTP hop.

A direct plan (§6) runs inside the control server, so each step goes straight to the queue, routed
to a proxy of the plan's session (two sessions never run steps on each other's proxies) and only to
servers ``BIR_REPLAY_ALLOW_SERVERS`` allows (§13.2).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from bir.core.plan import StepNoAnswer, StepNotSent, StepRan, StepResult
from bir.core.step_route import route_step
from bir.core.tool_output import step_output_text
from bir.core.types import ScenarioStep
from bir.hooks.server.work_queue import NotSentError, ProxyWorkQueue, StepTimeoutError, WorkQueueError


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
        route = route_step(
            step,
            allow=self._allow,
            step_timeout_s=self._step_timeout_s,
            deadline=self._deadline,
            builtin_why="only the model can call it",
        )
        if isinstance(route, StepNotSent):
            return route
        try:
            result = await self._queue.call(
                route.server, route.tool, tool_input, route.timeout_s, session_id=self._session_id
            )
        except NotSentError as exc:
            return StepNotSent(str(exc))
        except StepTimeoutError as exc:
            return StepNoAnswer(str(exc)) if exc.taken else StepNotSent(str(exc))
        except WorkQueueError as exc:
            return StepNoAnswer(str(exc))
        return StepRan(step_output_text(step.tool_name, result))
