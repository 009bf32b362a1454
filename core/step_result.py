"""What an executor answers for one step, and how a step's output is read as a tool error (spec §9, §11.2a).

An executor (a direct run through the control server's work queue, a test's fake) answers each step it
is handed with exactly one of four results; the plan reads them, and only them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from bir.core.truncate import cut
from bir.core.types import ScenarioStep

MAX_TOOL_ERROR_CHARS: Final = 300


@dataclass(frozen=True)
class StepRan:
    """The call ran and answered ``output``: the exact text ``toolOutputLogic`` reads (for a wrapped MCP
    tool the JSON text of the whole ``CallToolResult``; for a built-in, of the host's ``tool_response``).
    A ``CallToolResult`` with ``isError: true`` is read as a tool error, never threaded."""

    output: str


@dataclass(frozen=True)
class StepNotSent:
    """The call could not be sent (a built-in outside the session, no proxy, a server off the allowlist):
    nothing of it happened. Only this result may be stood in for by a recorded output."""

    reason: str


@dataclass(frozen=True)
class StepNoAnswer:
    """The call was sent and never answered (a timeout, a dropped proxy): it may or may not have completed."""

    reason: str


@dataclass(frozen=True)
class StepToolError:
    """The call was sent and answered with an error (or the host reported it failed)."""

    reason: str


StepResult = StepRan | StepNotSent | StepNoAnswer | StepToolError
ExecuteStep = Callable[[ScenarioStep, dict[str, Any]], Awaitable[StepResult]]


def tool_error_of(output: str) -> str | None:
    """The error text of an MCP ``CallToolResult`` with ``isError: true``, or None for any other output.

    Only a JSON object whose top-level ``isError`` is ``true`` counts; its text content, bounded, is the
    reason (a generic one when it has none).
    """
    if '"isError"' not in output:
        return None
    try:
        value = json.loads(output)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("isError") is not True:
        return None
    content = value.get("content")
    parts = [
        item["text"]
        for item in (content if isinstance(content, list) else [])
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str)
    ]
    message = " ".join(" ".join(parts).split())
    return cut(message or "the tool reported an error", MAX_TOOL_ERROR_CHARS)
