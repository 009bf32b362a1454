"""What one ``bir replay`` did, as a typed record, and its two renderings: text for a person, JSON for a program.

``run_replay`` (``bir.hooks.replay.command``) builds a ``ReplayReport``; the CLI prints ``render_text`` or
``render_json`` of it. The text is the operator's account: the scenario, its parameters, each step once
(its input on one line, its output as the text the tool answered, both bounded), then what happened in
plain words. The model-facing hand-over note is kept in the JSON (``note``) for programs that want it,
never shown to the operator as the account.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from bir.core.coverage import ReplayMode
from bir.core.handover import Stop
from bir.core.outcome import ExecutionStage, StepStatus
from bir.core.printable import printable
from bir.core.redact import redact, redact_text
from bir.core.tool_text import ERROR_PREFIX, content_parts
from bir.core.truncate import cut

# What a terminal shows of one input line and of one output; the JSON document carries more.
INPUT_CHARS: Final = 300
OUTPUT_CHARS: Final = 800
OUTPUT_LINES: Final = 12
LINE_CHARS: Final = 240
JSON_OUTPUT_CHARS: Final = 20_000

ReplayEnd = Literal["done", "dry", "missing_target", "stopped", "response_failed", "refused", "interrupted"]


@dataclass(frozen=True)
class Blocked:
    """The first step that cannot run here (a built-in, or a server with no proxy) and has no recorded
    output to stand on: a run stops there. ``position`` is 0-based."""

    position: int
    tool_name: str
    why: str
    fix: str


@dataclass(frozen=True)
class StepOutcome:
    """One step the run reached: what it was given, what it answered, and its verdict.

    ``output`` is the exact text the step's ``toolOutputLogic`` read (for an MCP tool, the JSON of its
    ``CallToolResult``); None when the step was not sent.
    """

    position: int
    step_index: int
    tool_name: str
    reasoning: str
    tool_input: dict[str, Any] | None
    output: str | None
    status: StepStatus | None
    stage: ExecutionStage | None
    error: str | None
    duration_ms: int | None


@dataclass(frozen=True)
class ReplayReport:
    """What one ``bir replay`` did. ``exit_code`` is the command's status (the ``EXIT_*`` values)."""

    scenario_id: str | None
    intent: str
    prompt: str
    mode: ReplayMode
    step_count: int
    params: Mapping[str, object] | None
    steps: tuple[StepOutcome, ...]
    outcome: ReplayEnd
    exit_code: int
    missing: tuple[str, ...] = ()
    stop: Stop | None = None
    stop_tool: str | None = None
    note: str | None = None
    partial: bool = False
    response: Mapping[str, Any] | None = None
    response_error: str | None = None
    # Where a run cannot finish here; with ``outcome`` "refused" (nothing ran), why and what to do.
    blocked: Blocked | None = None
    refusal: str | None = None
    refusal_code: str | None = None


# -- the operator's account -----------------------------------------------------------------------------


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _readable_text(text: str) -> str:
    """Text as is; text that is a JSON list shows one item a line, so a list of records reads as rows."""
    value = _loads(text) if text.lstrip()[:1] == "[" else None
    if isinstance(value, list):
        return "\n".join(_compact(item) for item in value)
    return text


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def readable_output(output: str) -> str:
    """A tool's answer as a person reads it: an MCP ``CallToolResult``'s text content as text (a JSON list
    one item a line), anything else as is."""
    found = content_parts(output)
    if found is None:
        return output
    parts, is_error = found
    text = "\n".join(_readable_text(part) for part in parts)
    return ERROR_PREFIX + text if is_error else text


def _one_line(value: object, limit: int) -> str:
    try:
        text = json.dumps(redact(value), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return cut(" ".join(text.split()), limit)


def _block(text: str, indent: str) -> list[str]:
    """``text`` bounded in characters and lines, each line indented."""
    lines = cut(redact_text(text), OUTPUT_CHARS).splitlines() or [""]
    shown = lines[:OUTPUT_LINES]
    if len(lines) > OUTPUT_LINES:
        shown.append(f"… ({len(lines) - OUTPUT_LINES} more lines)")
    return [indent + cut(line, LINE_CHARS) for line in shown]


def _step_lines(step: StepOutcome, count: int) -> list[str]:
    took = f", {step.duration_ms} ms" if step.duration_ms is not None else ""
    status = step.status or "not sent"
    lines = [f"Step {step.position + 1} of {count}: {step.tool_name} ({status}{took})"]
    if step.reasoning.strip():
        lines.append(f"  why:    {cut(' '.join(step.reasoning.split()), INPUT_CHARS)}")
    if step.tool_input is not None:
        lines.append(f"  input:  {_one_line(step.tool_input, INPUT_CHARS)}")
    elif step.status is None and not step.error:
        lines.append("  input:  (computed from an earlier step's output)")
    if step.output is not None:
        lines.append("  output:")
        lines.extend(_block(readable_output(step.output), "    "))
    if step.error:
        lines.append(f"  error:  {cut(' '.join(step.error.split()), INPUT_CHARS)}")
    return lines


_STOPPED_AT: Final[Mapping[str, str]] = {
    "not_sent": "it could not be sent{why}; nothing of it happened",
    "no_answer": "it was sent but did not answer{why}; it may or may not have completed",
    "tool_error": "the tool answered with an error{why}",
    "input_failed": "its toolInputLogic failed{why}, so it was not sent",
    "output_failed": "it ran, but its toolOutputLogic failed{why}",
    "out_of_time": "the time budget ran out before it",
    "cancelled": "the run was cancelled before it",
    "concurrent": "another call was still in flight",
}


def _step_list(positions: list[int]) -> str:
    if not positions:
        return "none"
    return ", ".join(str(p + 1) for p in positions)


def blocked_sentence(blocked: Blocked, count: int, *, fix: bool = True) -> str:
    """Where a run stops, why, and (``fix``) what lets it run: ``step 2 of 3 (Read): Read is a built-in….``"""
    head = f"step {blocked.position + 1} of {count} ({blocked.tool_name}): {blocked.why}."
    return f"{head} {blocked.fix}" if fix else head


def interrupted_sentence(report: ReplayReport) -> str:
    """What an interrupt left: the steps that ran, the one cut short, the ones not run."""
    ran = [s.position for s in report.steps if s.status in ("ok", "recorded")]
    reached = {s.position for s in report.steps}
    stop = report.stop
    cut_short = ""
    if stop is not None and stop.step is not None and stop.kind in ("no_answer", "output_failed"):
        tool = f" ({report.stop_tool})" if report.stop_tool else ""
        cut_short = (
            f" Step {stop.step + 1}{tool} was sent and may or may not have completed."
            if stop.kind == "no_answer"
            else f" Step {stop.step + 1}{tool} ran, but its output was not read."
        )
        reached.add(stop.step)
    not_run = [p for p in range(report.step_count) if p not in reached]
    return (
        f"Interrupted (Ctrl-C). Ran: step {_step_list(ran)}.{cut_short} Not run: step {_step_list(not_run)}.".replace(
            "step none", "none"
        )
    )


def outcome_sentence(report: ReplayReport) -> str:
    """What happened, in the operator's words (not the note the model would read)."""
    ran = sum(1 for s in report.steps if s.status in ("ok", "recorded"))
    count = report.step_count
    if report.outcome == "refused":
        return f"Nothing was run. {report.refusal}"
    if report.outcome == "interrupted":
        return interrupted_sentence(report)
    if report.outcome == "dry":
        head = "Dry run: the parameters and the inputs known now were computed; no step was sent."
        if report.blocked is not None:
            head += f" A real run would stop at {blocked_sentence(report.blocked, count)}"
        return head
    if report.outcome == "missing_target":
        names = ", ".join(report.missing)
        flags = " ".join(f"--param {name}=VALUE" for name in report.missing)
        return f"Stopped before any step: no value for the target {names}. Pass {flags}."
    if report.outcome == "done":
        recorded = sum(1 for s in report.steps if s.status == "recorded")
        extra = f" ({recorded} on recorded outputs)" if recorded else ""
        return f"Done: all {count} steps ran{extra}."
    if report.blocked is not None and report.stop is not None and report.stop.step == report.blocked.position:
        return (
            f"Stopped, as --partial asked, at {blocked_sentence(report.blocked, count, fix=False)} "
            f"{ran} of {count} steps ran before it."
        )
    if report.outcome == "response_failed":
        return f"All {count} steps ran, but responseParamsLogic failed: {report.response_error}."
    stop = report.stop
    if stop is None:
        return f"Stopped after {ran} of {count} steps."
    detail = cut(" ".join(redact_text(stop.detail).split()), INPUT_CHARS)
    if stop.kind == "params_failed" or stop.step is None:
        why = detail or stop.kind.replace("_", " ")
        return f"Stopped before any step: {why}."
    template = _STOPPED_AT.get(stop.kind, "{why}")
    reason = template.format(why=f" ({detail})" if detail else "")
    tool = f" ({report.stop_tool})" if report.stop_tool else ""
    return f"Stopped at step {stop.step + 1} of {count}{tool}: {reason}. {ran} of {count} steps ran before it."


def render_text(report: ReplayReport) -> str:
    """The account a person reads: scenario, parameters, each step once, then the outcome."""
    lines = [f"Scenario {report.scenario_id or '(unnamed)'}: {cut(' '.join(report.intent.split()), 200)}"]
    lines.append(f"Mode: {report.mode} · {report.step_count} steps")
    if report.params is not None:
        shown = ", ".join(f"{name}={_one_line(value, 120)}" for name, value in report.params.items())
        lines.append(f"Parameters: {shown or '(none)'}")
    for step in report.steps:
        lines.append("")
        lines.extend(_step_lines(step, report.step_count))
    lines.append("")
    lines.append(outcome_sentence(report))
    if report.response is not None:
        lines.append("Response model:")
        response: object = redact(dict(report.response))
        rows: list[str] = []
        if isinstance(response, dict):
            rows = [f"{name}: {_compact(value)}" for name, value in response.items()]
        lines.extend(_block("\n".join(rows) or "(empty)", "  "))
    # Outputs and parameters are data: no escape sequence of theirs reaches the terminal.
    return printable("\n".join(lines))


# -- the document for programs ------------------------------------------------------------------------


def _step_doc(step: StepOutcome) -> dict[str, object]:
    return {
        "stepIndex": step.step_index,
        "toolName": step.tool_name,
        "input": step.tool_input,
        "output": None if step.output is None else cut(step.output, JSON_OUTPUT_CHARS),
        # The whole output's length: more than ``output`` holds when it was cut.
        "outputChars": None if step.output is None else len(step.output),
        "status": step.status,
        "stage": step.stage,
        "error": step.error,
        "durationMs": step.duration_ms,
    }


def render_json(report: ReplayReport) -> dict[str, object]:
    """The one JSON document ``--json`` prints (each output bounded; the response model redacted)."""
    stop = report.stop
    doc: dict[str, object] = {
        "scenario": report.scenario_id,
        "prompt": report.prompt,
        "mode": report.mode,
        "params": None if report.params is None else dict(report.params),
        "missing": list(report.missing),
        "steps": [_step_doc(s) for s in report.steps],
        "outcome": report.outcome,
        "summary": outcome_sentence(report),
        "stop": None if stop is None else {"kind": stop.kind, "step": stop.step, "detail": stop.detail},
        "responseModel": None if report.response is None else redact(dict(report.response)),
        "responseError": report.response_error,
        "note": report.note,
        "partial": report.partial,
        "dry": report.outcome == "dry",
        "blocked": None
        if report.blocked is None
        else {
            "step": report.blocked.position,
            "toolName": report.blocked.tool_name,
            "why": report.blocked.why,
            "fix": report.blocked.fix,
        },
        "exitCode": report.exit_code,
    }
    if report.outcome in ("refused", "interrupted"):
        # The one document of a refusal or an interrupt says so first, as every other command's does.
        code = report.refusal_code or ("interrupted" if report.outcome == "interrupted" else "refused")
        doc = {"error": code, "message": outcome_sentence(report), **doc}
    return doc
