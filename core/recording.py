"""The canonical shapes of a recorded run (spec §2, §7.2, §12): one step's body and the finish's body,
redacted and capped the same way whoever records them — the live recorder (``bir.hooks.session``) as a
turn's calls settle, or ``bir learn`` reading a past turn from its transcript (``bir.hooks.local``).

A step's input is the redacted arguments as they ran, or, past the cap, the capped text of them (the
calculator then refuses to rebuild it); its output is text: ``serializeCapped(redact(output))``, a string
only capped. The finish carries the turn's last assistant text, its usage per model and its cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from bir.core.redact import redact, redact_text
from bir.core.transcript import ModelUsage
from bir.core.truncate import DEFAULT_MAX_CHARS, cut_counted, serialize_capped

MAX_OUTPUT_CHARS: Final = DEFAULT_MAX_CHARS
MAX_ERROR_CHARS: Final = 1_000
MAX_TOOL_NAME_CHARS: Final = 200


def _count(value: int | None) -> int | None:
    return None if value is None else max(0, int(value))


def recorded_input(tool_input: object, max_chars: int = MAX_OUTPUT_CHARS) -> object:
    """The arguments as recorded: redacted, and past the cap the capped text of them."""
    cleaned = redact(tool_input)
    text = serialize_capped(cleaned, max_chars)
    # A value within the cap goes as it is (the arguments that ran); past it, the capped text does.
    return cleaned if len(text) < max_chars else text


def recorded_output(tool_output: object, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """The output as recorded: a string only capped (it is already the canonical text), else redacted and
    serialized within the cap."""
    if isinstance(tool_output, str):
        return cut_counted(tool_output, max_chars)
    return serialize_capped(redact(tool_output), max_chars)


def step_body(
    step_index: int,
    tool_name: str,
    tool_input: object,
    *,
    tool_output: object,
    error: str | None = None,
    duration_ms: int | None = None,
    max_chars: int = MAX_OUTPUT_CHARS,
) -> dict[str, Any]:
    """``POST /recordings/runs/:id/steps``'s body for one settled call."""
    body: dict[str, Any] = {
        "stepIndex": step_index,
        "toolName": cut_counted(tool_name, MAX_TOOL_NAME_CHARS),
        "toolInput": recorded_input(tool_input, max_chars),
        "toolOutput": recorded_output(tool_output, max_chars),
    }
    if error is not None:
        body["error"] = cut_counted(redact_text(error), MAX_ERROR_CHARS)
    if duration_ms is not None:
        body["durationMs"] = _count(duration_ms)
    return body


def usage_to_wire(usage: Sequence[ModelUsage]) -> list[dict[str, Any]]:
    """Per-model usage as the finish body's camelCase objects."""
    return [u.to_wire() for u in usage]


def finish_body(
    output: str | None,
    *,
    duration_ms: int,
    usage: Sequence[ModelUsage],
    cost_usd: float,
    measured: bool,
    pricing_version: str,
    max_chars: int = MAX_OUTPUT_CHARS,
) -> dict[str, Any]:
    """``POST /recordings/runs/:id/finish``'s body: the turn's last assistant text, its usage and cost."""
    return {
        "output": cut_counted(redact_text(output or ""), max_chars),
        "durationMs": _count(duration_ms),
        "usage": usage_to_wire(usage),
        "costUsd": cost_usd if cost_usd > 0 and cost_usd != float("inf") else 0.0,
        "measured": bool(measured),
        "pricingVersion": pricing_version,
    }
