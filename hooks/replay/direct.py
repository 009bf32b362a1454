"""The executor of direct steps: a step's ``tools/call`` through the control server's work queue.

The plan hands each step and its pinned input here (spec §9, Change 3); the step runs on the proxy
that owns its server, and the answer comes back as one of the plan's step results. The control
server may live in another process (``bir-hooks``), so the call goes over its ``/replay/call``
route; a control server started in-process is reached the same way.
"""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Final

import httpx

from bir.core.plan import StepNoAnswer, StepNotSent, StepRan, StepResult
from bir.core.redact import redact
from bir.core.truncate import serialize_capped
from bir.core.types import ScenarioStep, parse_qualified_name
from bir.hooks import api

# The control server gives up on a step at its timeout; the HTTP request waits a little longer so
# that the server's answer, not ours, says what happened.
HTTP_SLACK_S: Final = 5.0
MAX_OUTPUT_CHARS: Final = 4_000_000


def output_text(result: object) -> str:
    """The text a step's ``toolOutputLogic`` reads: what the recorder stored for a wrapped MCP call
    (spec §7.2, ``serializeCapped(redact(report.result))``), so logic written against the recording
    reads the same shape now."""
    return serialize_capped(redact(result), MAX_OUTPUT_CHARS)


@dataclass(frozen=True)
class Route:
    """Where a direct step goes: its server, the upstream's own tool name, and the time it may take."""

    server: str
    tool: str
    timeout_s: float


def route_step(
    step: ScenarioStep,
    *,
    allow: AbstractSet[str] | None,
    step_timeout_s: float,
    deadline: float | None,
    builtin_why: str,
) -> Route | StepNotSent:
    """The rules every direct executor applies before it sends a step: a wrapped MCP tool, a server the
    allowlist admits (None: every server), and time left before ``deadline`` (monotonic)."""
    parsed = parse_qualified_name(step.tool_name)
    if parsed is None:
        return StepNotSent(f"{step.tool_name} is a built-in: {builtin_why}")
    server, tool = parsed
    if allow is not None and server not in allow:
        return StepNotSent(f"{server} is not in BIR_REPLAY_ALLOW_SERVERS")
    timeout_s = step_timeout_s if deadline is None else min(step_timeout_s, deadline - time.monotonic())
    if timeout_s <= 0:
        return StepNotSent("the plan's time budget ran out before it")
    return Route(server, tool, timeout_s)


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
