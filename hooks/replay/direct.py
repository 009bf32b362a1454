"""The executor of direct steps: a step's ``tools/call`` through the control server's work queue.

The plan hands each step and its pinned input here (spec §9, Change 3); the step runs on the proxy
that owns its server, and the answer comes back as one of the plan's step results. The control
server may live in another process (``bir-hooks``), so the call goes over its ``/replay/call``
route; a control server started in-process is reached the same way. The control server gives up on
a step at its timeout; the request waits the route's slack longer, so that the server's answer, not
ours, says what happened.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

import httpx

from bir.core.plan import StepNoAnswer, StepNotSent, StepRan, StepResult
from bir.core.step_route import route_step
from bir.core.tool_output import step_output_text
from bir.core.types import ScenarioStep
from bir.hooks import api
from bir.hooks.control_client import ControlClient, ControlError


class DirectExecutor:
    """Runs direct steps through the control server ``control`` talks to.

    ``allow`` is ``BIR_REPLAY_ALLOW_SERVERS`` where it applies (None: every server); ``bir replay``
    is not gated by it. ``deadline`` (``time.monotonic()``) clips each step's timeout.
    """

    def __init__(
        self,
        control: ControlClient,
        *,
        step_timeout_s: float,
        allow: AbstractSet[str] | None = None,
        deadline: float | None = None,
    ) -> None:
        self._control = control
        self._step_timeout_s = step_timeout_s
        self._allow = allow
        self._deadline = deadline

    async def __call__(self, step: ScenarioStep, tool_input: dict[str, Any]) -> StepResult:
        route = route_step(
            step,
            allow=self._allow,
            step_timeout_s=self._step_timeout_s,
            deadline=self._deadline,
            builtin_why="it runs only inside a Claude Code session",
        )
        if isinstance(route, StepNotSent):
            return route
        body = api.ReplayCallRequest(
            server_name=route.server,
            tool_name=route.tool,
            arguments=tool_input,
            timeout_ms=max(1, int(route.timeout_s * 1000)),
        )
        try:
            answer = await self._control.call(
                api.REPLAY_CALL, body, timeout_s=route.timeout_s + api.REPLAY_CALL.timeout_s
            )
        except ControlError as exc:
            if exc.kind == "unreachable" and isinstance(exc.__cause__, httpx.ConnectError):
                return StepNotSent(f"the control server did not answer: {exc.__cause__}")
            if exc.kind == "refused":
                return StepNotSent(f"the control server refused the call ({exc.status})")
            if exc.kind == "unreadable":
                return StepNoAnswer("the control server's answer was not readable")
            return StepNoAnswer(f"the control server stopped answering: {exc}")
        if answer.ok:
            return StepRan(step_output_text(step.tool_name, answer.result))
        why = answer.why or "no reason given"
        return StepNoAnswer(why) if answer.sent else StepNotSent(why)
