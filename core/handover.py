"""The hand-over note: what the model is told when a scenario stops before finishing (spec §8).

The same note serves every place a plan hands the task back: a divergence's bundle, a direct run's
answer, a note in place of a call. It says which steps ran (so they are not repeated), what may be
assumed about the step it stopped at (so a call that may have happened is checked before it is run
again, and one that certainly happened is not), then the rest of the plan and the parameters derived
for this request. It never exceeds ``MAX_NOTE_CHARS``: the lists are cut, never the opening.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from bir.core.truncate import one_line
from bir.core.types import ScenarioStep

MAX_NOTE_CHARS: Final = 4_000
# The reason shown for a stop (a logic error, a timeout): long enough to act on, short beside the lists.
MAX_DETAIL_CHARS: Final = 600
MAX_LINE_CHARS: Final = 240

OPENING: Final = (
    "[BaseInstRunner calculated replay] The calculated scenario for this request stopped before finishing. "
    "Continue the task yourself from here, calling tools as needed."
)

# Why the plan stopped, at ``Stop.step``:
#   "not_sent"       the call could not be sent (no proxy, a built-in, off the allowlist): nothing happened
#   "no_answer"      the call was sent and never answered: it may or may not have completed
#   "tool_error"     the call answered with an error (or the host reported it failed)
#   "input_failed"   the step's toolInputLogic threw: the call was never made
#   "output_failed"  the tool ran, then its toolOutputLogic threw: its effects are real, do not repeat it
#   "params_failed"  the scenario's parameters could not be computed (paramsLogic threw, a target is missing)
#   "out_of_time"    the time budget ran out before the step
#   "cancelled"      the run was cancelled before the step
#   "concurrent"     another call ran beside a pin still in flight (``Stop.in_flight``)
StopKind = Literal[
    "not_sent",
    "no_answer",
    "tool_error",
    "input_failed",
    "output_failed",
    "params_failed",
    "out_of_time",
    "cancelled",
    "concurrent",
]


@dataclass(frozen=True)
class Stop:
    """Where and why a plan stopped.

    ``step`` is the 0-based position (in the plan's steps) of the step it stopped at, or None when it
    stopped before any particular step. ``detail`` is the reason in a few words (a logic error, "no
    answer in 60 s"); it is bounded in the note. For ``concurrent``, ``in_flight`` is the position of
    the pinned step that was started and has not reported back, and ``step`` the one after it.
    """

    kind: StopKind
    step: int | None = None
    detail: str = ""
    in_flight: int | None = None


def _identity(text: str) -> str:
    return text


def _span(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}–{last}"


def _ran_sentence(count: int, above: int, below: int, nothing_known: bool) -> str:
    ran = above + below
    if ran <= 0:
        if nothing_known:
            return "No step of the scenario is known to have finished; the task is yours."
        return "No step of the scenario ran; the whole task is yours."
    lead = f"Step 1 of {count} ran" if ran == 1 else f"Steps 1–{ran} of {count} ran"
    if above > 0 and below > 0:
        where = f": {_span(1, above)} as the tool calls above, {_span(above + 1, ran)} in the results below"
    elif above > 0:
        where = " as the tool calls above" if ran > 1 else " as the tool call above"
    else:
        where = "; their results are below" if ran > 1 else "; its result is below"
    return f"{lead} under the scenario{where}. Do not repeat {'them' if ran > 1 else 'it'}."


def _name(steps: Sequence[ScenarioStep], position: int) -> str:
    tool = one_line(steps[position].tool_name, 120) if 0 <= position < len(steps) else "unknown tool"
    return f"Step {position + 1} of {len(steps)} ({tool})"


def _stop_sentences(steps: Sequence[ScenarioStep], stop: Stop, redact: Callable[[str], str]) -> list[str]:
    # A logic error can quote the values it was computing on, so the reason is redacted like the rest.
    detail = one_line(redact(stop.detail), MAX_DETAIL_CHARS) if stop.detail else ""
    why = f" ({detail})" if detail else ""
    if stop.kind == "params_failed":
        return [f"The scenario could not compute its parameters for this request{why}, so none of its steps ran."]
    if stop.kind == "concurrent":
        out: list[str] = []
        if stop.in_flight is not None:
            out.append(f"{_name(steps, stop.in_flight)} was started and has not reported back.")
        if stop.step is not None:
            out.append(
                f"{_name(steps, stop.step)} was not run by the scenario: another of its calls was still in "
                "flight, and a scenario runs one call at a time."
            )
        return out
    if stop.step is None:
        generic = {
            "out_of_time": "The scenario's time budget ran out before its next step.",
            "cancelled": "The scenario run was cancelled before its next step.",
        }
        return [generic[stop.kind]] if stop.kind in generic else []
    name = _name(steps, stop.step)
    texts: dict[StopKind, str] = {
        "not_sent": f"{name} did not run: {detail or 'it could not be sent'}. Nothing of it happened; do it yourself.",
        "input_failed": (
            f"{name} did not run: the scenario could not compute its input{why}. "
            "Nothing of it happened; do it yourself."
        ),
        "no_answer": (
            f"{name} was sent but did not answer{why}. It may or may not have completed: "
            "check whether its work happened before you run it again."
        ),
        "tool_error": (
            f"{name} was sent and answered with an error{why}, so the scenario stops there. "
            "Check what it did before you run it again."
        ),
        "output_failed": (
            f"{name} ran — its result is real and its side effects are in place — but the scenario could not "
            f"read its output{why}, so it stops there. Do not run it again."
        ),
        "out_of_time": f"{name} did not run: the scenario's time budget ran out before it.",
        "cancelled": f"{name} did not run: the scenario run was cancelled before it.",
    }
    return [texts[stop.kind]]


def _remaining(steps: Sequence[ScenarioStep], stop: Stop, ran: int) -> list[str]:
    # The stopped step is named above; the list is what comes after it (or after what ran).
    marks = [p for p in (stop.step, stop.in_flight) if p is not None]
    start = max(marks) + 1 if marks else ran
    lines = []
    for position in range(max(0, start), len(steps)):
        step = steps[position]
        reason = f" — {step.reasoning}" if step.reasoning.strip() else ""
        lines.append(one_line(f"{position + 1}. {step.tool_name}{reason}", MAX_LINE_CHARS))
    return lines


def _params(params: Mapping[str, object] | None, redact: Callable[[str], str]) -> list[str]:
    lines = []
    for name, value in (params or {}).items():
        try:
            shown = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            shown = repr(value)
        lines.append(one_line(redact(f"- {name}: {shown}"), MAX_LINE_CHARS))
    return lines


def _fit_lists(head: str, sections: list[tuple[str, list[str], str]], limit: int) -> str:
    """Append each titled list line by line while the note stays within ``limit``."""
    text = head
    for title, lines, unit in sections:
        if not lines:
            continue
        block = "\n\n" + title
        if len(text) + len(block) + 1 > limit:
            break
        text += block
        for i, line in enumerate(lines):
            more = len(lines) - i - 1
            # Keep room for the line that says how many were left out.
            reserve = len(f"\n… and {more} more {unit}") if more else 0
            if len(text) + 1 + len(line) + reserve > limit:
                text += f"\n… and {len(lines) - i} more {unit}"
                break
            text += "\n" + line
    return text


def handover_note(
    steps: Sequence[ScenarioStep],
    stop: Stop,
    *,
    ran_above: int = 0,
    ran_below: int = 0,
    params: Mapping[str, object] | None = None,
    redact: Callable[[str], str] = _identity,
) -> str:
    """The note handing the task back to the model, within ``MAX_NOTE_CHARS``.

    ``steps`` is the plan's steps in order. ``ran_above`` counts the steps that ran as pinned tool calls
    (visible above in the transcript), ``ran_below`` those run now whose results follow the note; together
    they are steps 1..k. ``params`` are the parameters derived for this request (redacted here).
    """
    count = len(steps)
    above, below = max(0, ran_above), max(0, ran_below)
    nothing_known = stop.kind == "no_answer" or (stop.kind == "concurrent" and stop.in_flight is not None)
    sentences = [_ran_sentence(count, above, below, nothing_known), *_stop_sentences(steps, stop, redact)]
    head = OPENING + "\n\n" + "\n".join(sentences)
    sections = [
        ("The rest of the plan:", _remaining(steps, stop, above + below), "steps"),
        ("Parameters derived for this request:", _params(params, redact), "parameters"),
    ]
    note = _fit_lists(head, sections, MAX_NOTE_CHARS)
    # The opening is far shorter than the cap, so a cut here only ever shortens the stop's reason.
    return note if len(note) <= MAX_NOTE_CHARS else note[: MAX_NOTE_CHARS - 1] + "…"
