"""``bir scenario``'s text for a person: tables and short accounts of the service's answers (spec §16.5).

Pure functions from the service's JSON to text. Every value shown is bounded (a run's prompt, a logic
body, a problem's message), so a large or hostile answer cannot flood a terminal. Colour is applied
only when the caller says the output is a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from bir.core.redact import redact, redact_text
from bir.core.truncate import cut, one_line
from bir.hooks.commands.term import Colour, paint

CELL_CHARS: Final = 60
LOGIC_CHARS: Final = 2_000
MESSAGE_CHARS: Final = 300
# A not-ready scenario's reason ends with what would resolve it: shown longer than a problem's message.
REASON_CHARS: Final = 800
MAX_ROWS: Final = 500
INPUT_CHARS: Final = 300
OUTPUT_CHARS: Final = 600


class Style:
    """ANSI colour when ``enabled`` (``bir.hooks.commands.term.wants_colour``), plain text otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, colour: Colour) -> str:
        return paint(text, colour, self.enabled)


def _cell(value: object, limit: int = CELL_CHARS) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return one_line(text, limit)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    shown = [list(headers), *[list(r) for r in rows[:MAX_ROWS]]]
    widths = [max(len(row[i]) for row in shown) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in shown]
    if len(rows) > MAX_ROWS:
        lines.append(f"… and {len(rows) - MAX_ROWS} more")
    return "\n".join(lines)


def _scenario_cell(entry: object) -> str:
    if not isinstance(entry, Mapping):
        return "-"
    return f"{_cell(entry.get('id'), 40)} ({_cell(entry.get('state'), 20)})"


def render_runs(data: Mapping[str, Any]) -> str:
    """``bir scenario list``: one row per run, its iterations and its scenario's state."""
    runs = [r for r in data.get("runs") or [] if isinstance(r, Mapping)]
    if not runs:
        return "No recorded runs yet."
    rows = []
    for run in runs:
        segments = [s for s in run.get("segments") or [] if isinstance(s, Mapping)]
        scenario = _scenario_cell(run.get("scenario")) if run.get("scenario") else "-"
        if segments:
            scenario += f" + {len(segments)} sub-task" + ("s" if len(segments) > 1 else "")
        rows.append(
            [
                _cell(run.get("id"), 40),
                _cell(run.get("createdAt"), 25),
                _cell(run.get("iterations"), 10),
                scenario,
                _cell(run.get("input"), CELL_CHARS),
            ]
        )
    return table(["run", "created", "iterations", "scenario", "prompt"], rows)


def _block(title: str, body: object, indent: str = "    ") -> list[str]:
    if body is None or (isinstance(body, str) and not body.strip()):
        return [f"  {title}: (none)"]
    text = cut(body if isinstance(body, str) else json.dumps(body, ensure_ascii=False), LOGIC_CHARS)
    return [f"  {title}:", *(indent + line for line in text.splitlines())]


def _mark(step: Mapping[str, Any]) -> str:
    mark = step.get("mark")
    if mark == "by_hand":
        return " [frozen by hand]"
    if mark == "calculation":
        return " [frozen by the calculation]"
    return f" [{_cell(mark, 30)}]" if mark else ""


def step_lines(step: Mapping[str, Any], style: Style) -> list[str]:
    """One step: its index, tool, mark and reasoning, then its two logic bodies."""
    head = f"step {_cell(step.get('stepIndex'), 10)}  {_cell(step.get('toolName'), 80)}{_mark(step)}"
    lines = [style(head, "bold")]
    if step.get("reasoning"):
        lines.append(f"  why: {_cell(step.get('reasoning'), 200)}")
    lines += _block("input logic", step.get("toolInputLogic"))
    lines += _block("output logic", step.get("toolOutputLogic"))
    return lines


def _title(data: Mapping[str, Any], style: Style) -> str:
    revision = _cell(data.get("chainRevision"))
    return style(f"{_cell(data.get('id'), 60)}  ({_cell(data.get('state'), 20)}, revision {revision})", "bold")


def _reason_lines(reason: object) -> list[str]:
    """Why a scenario is not ready (which step, what could not be traced), and what a model pass said of it."""
    if not isinstance(reason, Mapping):
        return []
    lines = []
    if reason.get("message"):
        lines.append(f"not ready: {_cell(reason.get('message'), REASON_CHARS)}")
    if reason.get("modelPass"):
        lines.append(f"model pass: {_cell(reason.get('modelPass'), REASON_CHARS)}")
    return lines


def render_scenario(data: Mapping[str, Any], style: Style) -> str:
    """``bir scenario show``: intent, parameters, steps and logic, and its sub-task scenarios."""
    lines = [_title(data, style), *_reason_lines(data.get("reason")), f"intent: {_cell(data.get('intent'), 300)}"]
    params = data.get("paramsObject")
    if isinstance(params, Mapping) and params:
        rows = [
            [
                _cell(name, 40),
                _cell(spec.get("role"), 10),
                _cell(spec.get("sampleValue"), 40),
                _cell(spec.get("description")),
            ]
            for name, spec in params.items()
            if isinstance(spec, Mapping)
        ]
        lines += [
            "parameters:",
            *("  " + line for line in table(["name", "role", "sample", "description"], rows).splitlines()),
        ]
    lines += _block("params logic", data.get("paramsLogic"))
    for step in data.get("steps") or []:
        if isinstance(step, Mapping):
            lines += ["", *step_lines(step, style)]
    lines += ["", *_block("response logic", data.get("responseParamsLogic"))]
    segments = [s for s in data.get("segments") or [] if isinstance(s, Mapping)]
    if segments:
        lines += ["", "sub-task scenarios:"]
        lines += [f"  {_cell(s.get('id'), 60)}  {_cell(s.get('intent'), 120)}" for s in segments]
    return "\n".join(lines)


def render_step(scenario_id: str, revision: object, step: Mapping[str, Any], style: Style) -> str:
    """``bir scenario show --step n``: the scenario and its revision first (``--revision`` takes it)."""
    return "\n".join([f"scenario: {scenario_id}", f"chainRevision: {_cell(revision)}", *step_lines(step, style)])


def problem_lines(report: Mapping[str, Any], style: Style) -> list[str]:
    """A check report's problems, one line each."""
    problems = [p for p in report.get("problems") or [] if isinstance(p, Mapping)]
    return [
        "  " + style(f"{_cell(p.get('code'), 40)}", "red") + f": {_cell(p.get('message'), MESSAGE_CHARS)}"
        for p in problems[:50]
    ]


def render_edits(data: Mapping[str, Any]) -> str:
    """``bir scenario edits``: the history, newest first, with what each entry changed."""
    edits = [e for e in data.get("edits") or [] if isinstance(e, Mapping)]
    if not edits:
        return f"{_cell(data.get('scenarioId'), 60)} has no edits (revision {_cell(data.get('chainRevision'))})."
    rows = []
    for e in edits:
        kind = "undo of " + _cell(e.get("undoes"), 30) if e.get("kind") == "undo" else _cell(e.get("kind"), 10)
        state = "undone" if e.get("undone") else ""
        if e.get("forced"):
            state = ("forced, " + state).rstrip(", ")
        changes = e.get("changes")
        changed = ", ".join(str(c) for c in changes[:5]) if isinstance(changes, list) else "-"
        rows.append(
            [
                _cell(e.get("id"), 30),
                _cell(e.get("stepIndex"), 6),
                kind,
                _cell(e.get("chainRevision"), 8),
                state or "-",
                one_line(changed, 40),
                _cell(e.get("note"), 80),
            ]
        )
    head = f"{_cell(data.get('scenarioId'), 60)}, revision {_cell(data.get('chainRevision'))}, newest first:"
    return head + "\n" + table(["edit", "step", "kind", "revision", "state", "changed", "note"], rows)


def _forced_line(entry: Mapping[str, Any], style: Style) -> str:
    head = style("  FORCED", "yellow") + f" {_cell(entry.get('id'), 30)} on step {_cell(entry.get('stepIndex'))}: "
    if entry.get("kind") == "undo":
        what = f"undid {_cell(entry.get('undoes'), 30)} although it breaks later steps"
    else:
        what = "saved although the check had problems"
    since = "; since undone" if entry.get("undone") else ""
    return f"{head}{what} (note: {_cell(entry.get('note'), 120)}){since}"


def render_investigation(scenario: Mapping[str, Any], edits: Mapping[str, Any] | None, style: Style) -> str:
    """``bir investigate``: the scenario's state, its marked steps, and every forced save or undo.

    A forced entry stays listed after it is taken back (spec §16.5: investigate "keeps saying so"),
    marked as undone, because what was forced past the check is what an owner investigates.
    """
    lines = [
        _title(scenario, style),
        f"intent: {_cell(scenario.get('intent'), 300)}",
    ]
    steps = [s for s in scenario.get("steps") or [] if isinstance(s, Mapping)]
    lines.append(f"steps: {len(steps)}")
    lines += [f"  step {_cell(s.get('stepIndex'))} {_cell(s.get('toolName'), 80)}{_mark(s)}" for s in steps]
    history = [e for e in (edits or {}).get("edits") or [] if isinstance(e, Mapping)]
    standing = [e for e in history if not e.get("undone") and e.get("kind") == "edit"]
    lines.append(f"hand edits standing: {len(standing)} (of {len(history)} entries)")
    lines += [_forced_line(e, style) for e in history[:MAX_ROWS] if e.get("forced")]
    return "\n".join(lines)


def _value(value: object, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(redact(value), ensure_ascii=False, default=str)
    return one_line(redact_text(text), limit)


def dry_replay_sentence(data: Mapping[str, Any]) -> str:
    """What the service's dry replay found, in a person's words."""
    steps = [s for s in data.get("steps") or [] if isinstance(s, Mapping)]
    missing = [str(m) for m in data.get("missing") or []][:20]
    if missing:
        flags = " ".join(f"--param {_cell(name, 40)}=VALUE" for name in missing)
        return f"Stopped before any step: no value for the target {', '.join(missing)}. Pass {flags}."
    error = data.get("error")
    if data.get("ok") is True and not error:
        skipped = sum(1 for s in steps if s.get("status") == "no_recorded_output")
        extra = f"; {skipped} had no recorded output and were skipped" if skipped else ""
        return f"Dry replay done: {len(steps) - skipped} of {len(steps)} steps ran on the recorded outputs{extra}."
    if isinstance(error, Mapping):
        stage = _cell(error.get("stage"), 20)
        message = _value(error.get("message"), MESSAGE_CHARS)
        if error.get("stepIndex") is not None:
            return f"Stopped at step {_cell(error.get('stepIndex'), 10)} ({stage} logic): {message}."
        return f"Stopped ({stage} logic): {message}."
    return "Stopped: the service did not say why; --json shows its whole answer."


def render_dry_replay(data: Mapping[str, Any], style: Style) -> str:
    """``bir scenario replay --dry``: the service's dry replay, step by step, then what it found."""
    lines = [style(f"Dry replay of {_cell(data.get('scenarioId'), 60)} on the service", "bold")]
    lines.append("(the stored logic over the source run's recorded outputs: no tool ran, nothing was written)")
    params = data.get("params")
    if isinstance(params, Mapping):
        shown = ", ".join(f"{_cell(k, 40)}={_value(v, 120)}" for k, v in list(params.items())[:50])
        derived = " (some derived from the prompt)" if data.get("derived") else ""
        lines.append(f"Parameters: {shown or '(none)'}{derived}")
    for step in [s for s in data.get("steps") or [] if isinstance(s, Mapping)][:MAX_ROWS]:
        status = _cell(step.get("status"), 30)
        head = f"step {_cell(step.get('stepIndex'), 10)}  {_cell(step.get('toolName'), 80)}  {status}"
        lines += ["", style(head, "red" if status == "failed" else "bold")]
        if "input" in step:
            lines.append(f"  input:  {_value(step.get('input'), INPUT_CHARS)}")
        if step.get("output") is not None:
            lines.append(f"  output: {_value(step.get('output'), OUTPUT_CHARS)}")
    lines += ["", dry_replay_sentence(data)]
    model = data.get("responseModel")
    if isinstance(model, Mapping):
        lines.append("Response model:")
        lines += [f"  {_cell(k, 40)}: {_value(v, INPUT_CHARS)}" for k, v in list(model.items())[:50]] or ["  (empty)"]
    cost = data.get("costUsd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        lines.append(f"Cost on the service: ${cost:.4f}")
    return "\n".join(lines)
