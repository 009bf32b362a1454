"""Tool coverage decides the replay mode (spec §5).

A step is ``direct`` when its tool is an MCP tool on a server this control server wraps (a proxy can
run it on a connection already open) and ``live`` otherwise: a built-in, an MCP server the user did
not wrap, or a dynamic server that can never be wrapped. Only a plan whose every step is direct runs
without the session; anything else is steered, and an empty plan is not replayed at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Literal

from bir.core.types import ScenarioStep, parse_qualified_name

StepReach = Literal["direct", "live"]
ReplayMode = Literal["direct", "steer", "none"]


def reach_of(tool_name: str, wrapped: AbstractSet[str]) -> StepReach:
    """Where a step with this tool can run: ``direct`` through a proxy, or ``live`` in the session."""
    mcp = parse_qualified_name(tool_name)
    return "direct" if mcp is not None and mcp[0] in wrapped else "live"


def mode_for(steps: Sequence[ScenarioStep] | Sequence[str], wrapped: AbstractSet[str]) -> ReplayMode:
    """The mode a plan with these steps (or tool names) arms in, given the wrapped server keys."""
    if not steps:
        return "none"
    names = (step if isinstance(step, str) else step.tool_name for step in steps)
    return "direct" if all(reach_of(name, wrapped) == "direct" for name in names) else "steer"


def servers_of(steps: Sequence[ScenarioStep] | Sequence[str]) -> frozenset[str]:
    """The MCP servers the steps call, by key (``mcp__fleet__get_device`` → ``fleet``)."""
    names = (step if isinstance(step, str) else step.tool_name for step in steps)
    return frozenset(parsed[0] for parsed in map(parse_qualified_name, names) if parsed is not None)


def scenario_mode(steps: Sequence[ScenarioStep] | Sequence[str]) -> ReplayMode:
    """The mode the scenario itself calls for: the one a session arms it in with every server it names
    wrapped. ``bir replay`` shows this one whatever runs the steps here (which servers are reachable is
    its own question), so the mode a person reads never depends on ``--wrap``."""
    return mode_for(steps, servers_of(steps))
