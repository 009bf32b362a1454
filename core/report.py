"""The execution report: the body of ``POST /scenarios/:id/executions`` (spec §11.2, §11.2a).

One report per armed match redeems its ticket. The money fields book the run, and ``usage`` (the turn's
tokens per model, as a recording's finish carries them: a service that does not read it ignores it)
says what it spent; the last five say what each step did, for the service's recording page. The
headline (``error*``) is lifted from the first failed step, never assembled on its own, so the page's
card cannot contradict the step list under it.
Every optional field is left out rather than sent as null: an older service ignores what it does not
know, and an absent value is what "none" means on this wire.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final

from bir.core.outcome import OUTCOME_RANK, Outcome, StepLedger, StepVerdict, blame_step
from bir.core.pricing import PRICING_VERSION
from bir.core.transcript import ModelUsage
from bir.core.truncate import cut

# An error is rendered in a web page; the prompt is a sample of what the user asked.
MAX_ERROR_CHARS: Final = 1_000
MAX_PROMPT_CHARS: Final = 4_000
MAX_TOOL_NAME_CHARS: Final = 200
# A scenario has a handful of steps; this bounds the body even for a malformed plan.
MAX_STEPS: Final = 200
# A turn spends on one model, two with a subagent's; this bounds the body whatever the transcript held.
MAX_USAGE_MODELS: Final = 20

# Outcomes the service books as baseline samples: a run of these with no cost and no error is nothing.
_DECLINES: Final = frozenset({"not_steered", "failed"})


def _identity(text: str) -> str:
    return text


def _usd(value: float) -> float:
    # A cost is never negative or infinite on the wire; a watermark clamp already ensures the first.
    if not math.isfinite(value) or value <= 0:
        return 0.0
    return round(value, 8)


def _count(value: int) -> int:
    return max(0, int(value))


def step_to_wire(verdict: StepVerdict) -> dict[str, Any]:
    """One verdict as the wire's camelCase object; fields it does not have are absent."""
    wire: dict[str, Any] = {
        "stepIndex": verdict.step_index,
        "toolName": cut(verdict.tool_name, MAX_TOOL_NAME_CHARS),
        "status": verdict.status,
    }
    if verdict.stage is not None:
        wire["stage"] = verdict.stage
    if verdict.error is not None:
        wire["error"] = cut(verdict.error, MAX_ERROR_CHARS)
    if verdict.duration_ms is not None:
        wire["durationMs"] = _count(verdict.duration_ms)
    return wire


def build_report(
    *,
    ticket: str | None,
    outcome: Outcome,
    derive_cost_usd: float,
    session_cost_usd: float,
    duration_ms: int,
    steps_planned: int,
    steps_pinned: int,
    measured: bool,
    ledger: StepLedger,
    prompt: str | None = None,
    fallback_cost_usd: float = 0.0,
    pricing_version: str = PRICING_VERSION,
    redact: Callable[[str], str] = _identity,
    usage: Sequence[ModelUsage] = (),
) -> dict[str, Any] | None:
    """The report body for one sealed run, or None when it is not worth sending.

    Not worth sending: a decline (``not_steered`` or ``failed``, the baseline outcomes) that cost
    nothing and where no step failed; the service would answer ``202 {recorded: false}``. A decline
    with a failed step is sent, because the error is the news. ``prompt`` is redacted with ``redact``
    and bounded; error messages are bounded to ``MAX_ERROR_CHARS``; ``usage`` (the turn's, per model)
    is sent when there is some, its first ``MAX_USAGE_MODELS`` models.

    Raises:
        ValueError: ``outcome`` is not one of the ladder's outcomes.
    """
    if outcome not in OUTCOME_RANK:
        raise ValueError(f"unknown outcome {outcome!r}")
    costs = (_usd(derive_cost_usd), _usd(session_cost_usd), _usd(fallback_cost_usd))
    blame = blame_step(ledger)
    if outcome in _DECLINES and not any(costs) and blame is None:
        return None
    body: dict[str, Any] = {}
    if ticket is not None:
        body["ticket"] = ticket
    body.update(
        {
            "outcome": outcome,
            "deriveCostUsd": costs[0],
            "sessionCostUsd": costs[1],
            "fallbackCostUsd": costs[2],
            "durationMs": _count(duration_ms),
            "stepsPlanned": _count(steps_planned),
            "stepsPinned": _count(steps_pinned),
            "measured": bool(measured),
            "pricingVersion": pricing_version,
        }
    )
    if usage:
        body["usage"] = [u.to_wire() for u in usage[:MAX_USAGE_MODELS]]
    if prompt is not None:
        body["prompt"] = cut(redact(prompt), MAX_PROMPT_CHARS)
    body["steps"] = [step_to_wire(v) for v in ledger.verdicts()[:MAX_STEPS]]
    if blame is not None:
        # The same verdict the step list shows, in the same bounded form.
        blamed = step_to_wire(blame)
        for field, key in (("error", "error"), ("errorStage", "stage"), ("errorStepIndex", "stepIndex")):
            if key in blamed:
                body[field] = blamed[key]
        body["errorToolName"] = blamed["toolName"]
    return body
