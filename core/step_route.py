"""Where a direct step goes, by the rules every direct executor applies before it sends one (§9, §13.2).

Shared by ``bir replay``'s executor (over the control server's ``/replay/call``) and a session's (its
own work queue).
"""

from __future__ import annotations

import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from bir.core.step_result import StepNotSent
from bir.core.types import ScenarioStep, parse_qualified_name


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
