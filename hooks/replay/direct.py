"""The executor of direct steps: a step's ``tools/call`` through the control server's work queue.

The plan hands each step and its pinned input here (spec §9, Change 3); the step runs on the proxy
that owns its server, and the answer comes back as one of the plan's step results. The control
server may live in another process (``bir-hooks``), so the call goes over its ``/replay/call``
route; a control server started in-process is reached the same way.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any, Final

import httpx

from bir.core.plan import StepNoAnswer, StepNotSent, StepRan, StepResult
from bir.core.step_route import route_step
from bir.core.tool_output import output_text
from bir.core.types import ScenarioStep
from bir.hooks import api

# The control server gives up on a step at its timeout; the HTTP request waits a little longer so
# that the server's answer, not ours, says what happened.
HTTP_SLACK_S: Final = 5.0


class DirectExecutor:
    """Runs direct steps through a control server at ``url`` with ``token``.

    ``allow`` is ``BIR_REPLAY_ALLOW_SERVERS`` where it applies (None: every server); ``bir replay``
    is not gated by it. ``deadline`` (``time.monotonic()``) clips each step's timeout.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        token: str,
        *,
        step_timeout_s: float,
        allow: AbstractSet[str] | None = None,
        deadline: float | None = None,
    ) -> None:
        self._client = client
        self._url = url.rstrip("/")
        self._headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
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
        server, tool, timeout_s = route.server, route.tool, route.timeout_s
        body = api.ReplayCallRequest(
            server_name=server, tool_name=tool, arguments=tool_input, timeout_ms=max(1, int(timeout_s * 1000))
        )
        try:
            response = await self._client.post(
                f"{self._url}/replay/call",
                content=api.encode(body),
                headers=self._headers,
                timeout=timeout_s + HTTP_SLACK_S,
            )
        except httpx.ConnectError as exc:
            return StepNotSent(f"the control server did not answer: {exc}")
        except httpx.HTTPError as exc:
            return StepNoAnswer(f"the control server stopped answering: {type(exc).__name__}")
        if response.status_code != 200:
            return StepNotSent(f"the control server refused the call ({response.status_code})")
        try:
            answer = api.decode(api.ReplayCallAnswer, response.content)
        except api.BodyError:
            return StepNoAnswer("the control server's answer was not readable")
        if answer.ok:
            return StepRan(output_text(answer.result))
        why = answer.why or "no reason given"
        return StepNoAnswer(why) if answer.sent else StepNotSent(why)
