"""A recorded run → a calculated scenario, with no model (issue 18 item 3): pure, no I/O.

First each step is sorted on purpose:

- **housekeeping** (bir's own calls) is never a step;
- a **failed** step (an error, an MCP ``isError``, an interrupted command) is left out;
- a step carrying **content the model wrote** (``Write``/``Edit`` bodies, a commit message, a here-document,
  a long prose argument the prompt does not hold) is left out: it is never replayed blindly;
- an **exploratory** step (a look-up that found nothing and was tried again with the same tool) is left out.

Then every kept step's arguments are traced (``bir.hooks.local.trace``) and the bodies emitted
(``bir.hooks.local.bodies``). The result is a draft: ``selfcheck`` runs it in the evaluator pool over the
recording, and only a draft that reproduces every recorded input there becomes ``ready``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bir.core.housekeeping import is_housekeeping
from bir.hooks.local import bodies
from bir.hooks.local.trace import OutputIndex, Param, Recorded, Tracer, Untraceable, is_mcp, parse_output

# Moves whenever the calculator would calculate a run differently (a stored scenario says which it had).
CALC_VERSION: Final = 1
WRITE_TOOLS: Final = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
LOOKUP_TOOLS: Final = frozenset({"Grep", "Glob", "LS", "Read", "WebSearch", "WebFetch", "ToolSearch"})
SUBAGENT_TOOLS: Final = frozenset({"Agent", "Task"})
_WRITTEN_COMMAND: Final = re.compile(
    r"<<-?\s*['\"]?\w+|\bgit\s+(?:commit|tag\s+-[am])\b|\bgh\s+(?:pr|issue|release)\s+(?:create|comment|edit)\b"
    r"|\b(?:echo|printf|cat)\b[^|;&]*\s>{1,2}\s*\S",
)
_PROSE_MIN_CHARS: Final = 40
_PROSE_MIN_WORDS: Final = 6
_EMPTY_TEXTS: Final = frozenset({"", "[]", "{}", "null", "no files found", "no matches found", "no results"})


@dataclass(frozen=True)
class Excluded:
    step_index: int
    tool_name: str
    why: str

    def wire(self) -> dict[str, Any]:
        return {"stepIndex": self.step_index, "toolName": self.tool_name, "why": self.why}


@dataclass(frozen=True)
class DraftStep:
    step_index: int
    source_index: int
    tool_name: str
    tool_input_logic: str
    tool_output_logic: str | None
    reasoning: str
    recorded_input: Any
    recorded_output: str


@dataclass
class Draft:
    """What the tracer made of a run, before the self-check."""

    prompt: str
    params: list[Param]
    steps: list[DraftStep]
    excluded: list[Excluded]
    failure: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    # Crossings one recording left ambiguous, with the rules that fit each (what a second run settles).
    ambiguous: list[tuple[str, list[Any]]] = field(default_factory=list)

    @property
    def traced(self) -> bool:
        return self.failure is None and bool(self.steps)

    def params_sample(self) -> dict[str, Any]:
        return {p.name: p.sample for p in self.params}


def recorded_steps(rows: Sequence[Mapping[str, Any]]) -> list[Recorded]:
    """The calculator's view of a run's stored step bodies (``toolInput``, ``toolOutput``, ``error``)."""
    out: list[Recorded] = []
    for body in sorted(rows, key=lambda b: int(b.get("stepIndex", 0))):
        output = body.get("toolOutput")
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        error = body.get("error")
        out.append(
            Recorded(
                index=int(body.get("stepIndex", 0)),
                tool=str(body.get("toolName", "")),
                input=body.get("toolInput"),
                output=text,
                error=error if isinstance(error, str) and error else None,
            )
        )
    return out


# --- sorting the steps -----------------------------------------------------------------------------


def _failed(step: Recorded) -> str | None:
    if step.error is not None:
        return f"it failed ({step.error[:200]})"
    value = parse_output(step.tool, step.output)
    if isinstance(value, dict):
        if set(value) == {"error"}:
            return f"it failed ({str(value['error'])[:200]})"
        if is_mcp(step.tool) and value.get("isError") is True:
            return "the tool answered with an error"
        if step.tool == "Bash" and value.get("interrupted") is True:
            return "the command was interrupted"
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _prose(text: str) -> bool:
    words = re.findall(r"[A-Za-z][A-Za-z'’]+", text)
    letters = sum(len(w) for w in words)
    return len(text) >= _PROSE_MIN_CHARS and len(words) >= _PROSE_MIN_WORDS and letters >= 0.6 * len(text)


def model_written(step: Recorded, prompt: str) -> str | None:
    """Why ``step`` carries content the model wrote (a file it wrote, a message, prose the prompt does not
    hold), or None: such a step is never replayed, whoever calculates the scenario."""
    if step.tool in WRITE_TOOLS:
        return f"it carries content the model wrote ({step.tool})"
    if step.tool in ("Bash", "PowerShell") and isinstance(step.input, dict):
        command = step.input.get("command")
        if isinstance(command, str) and _WRITTEN_COMMAND.search(command):
            return "its command carries text the model wrote (a message, a here-document or a file's content)"
        return None
    folded = prompt.lower()
    for text in _strings(step.input):
        if _prose(text) and text.lower() not in folded:
            return "an argument is prose the model wrote, which the prompt does not hold"
    return None


def _empty(step: Recorded) -> bool:
    value = parse_output(step.tool, step.output)
    if isinstance(value, str):
        return value.strip().lower() in _EMPTY_TEXTS
    if value in ([], {}, None):
        return True
    if isinstance(value, dict):
        content = value.get("content")
        if isinstance(content, list) and content and all(isinstance(c, dict) for c in content):
            texts = [str(c.get("text", "")).strip().lower() for c in content]
            return all(t in _EMPTY_TEXTS for t in texts)
        for key in ("file", "stdout", "filenames", "matches", "results"):
            if key in value:
                inner = value[key]
                return inner in ("", [], {}, None) or (isinstance(inner, dict) and not inner.get("content"))
    return False


def sort_steps(
    prompt: str, steps: Sequence[Recorded], drop: Mapping[int, str] | None = None
) -> tuple[list[Recorded], list[Excluded]]:
    """The steps worth replaying, and the others with why each was left out (``drop``: steps other runs of
    the task show to be exploration, by source index)."""
    kept: list[Recorded] = []
    excluded: list[Excluded] = []
    for i, step in enumerate(steps):
        why: str | None
        if is_housekeeping(step.tool, step.input):
            why = "it is bir's own housekeeping"
        elif drop is not None and step.index in drop:
            why = drop[step.index]
        elif step.tool in SUBAGENT_TOOLS:
            why = "it hands the work to a subagent, with a prompt the model wrote"
        else:
            why = _failed(step) or model_written(step, prompt)
        lookup = step.tool in LOOKUP_TOOLS or is_mcp(step.tool)
        if why is None and lookup and _empty(step) and any(later.tool == step.tool for later in steps[i + 1 :]):
            why = "it found nothing and the same tool was tried again (exploration)"
        if why is None:
            kept.append(step)
        else:
            excluded.append(Excluded(step.index, step.tool, why))
    return kept, excluded


# --- the draft -------------------------------------------------------------------------------------


def _reasoning(draft_params: Sequence[Param], input_logic: str, tool: str) -> str:
    used = [p.name for p in draft_params if f"params[{bodies.literal(p.name)}]" in input_logic]
    threaded = "respParams[" in input_logic
    said = []
    if used:
        said.append("from the prompt: " + ", ".join(used))
    if threaded:
        said.append("from earlier steps' outputs")
    return f"{tool}: " + ("; ".join(said) if said else "fixed arguments, as recorded")


def draft_scenario(
    prompt: str,
    steps: Sequence[Recorded],
    *,
    seeds: Sequence[tuple[int, int]] = (),
    choices: Mapping[str, Any] | None = None,
    drop: Mapping[int, str] | None = None,
) -> Draft:
    """Trace a run and emit its bodies; the draft says where tracing stopped and why.

    What other runs of the same task showed can be handed in: ``seeds``, the prompt's spans that differ
    between the runs (parameters); ``choices``, a rule for a list crossing one run leaves ambiguous;
    ``drop``, the steps only this run made (exploration)."""
    kept, excluded = sort_steps(prompt, steps, drop)
    kept_ids = {s.index for s in kept}
    tracer = Tracer(
        prompt, [OutputIndex.of(s, s.index in kept_ids) for s in steps], seeds=tuple(seeds), choices=choices or {}
    )
    exprs = []
    failure: dict[str, Any] | None = None
    for step in kept:
        before = next(i for i, s in enumerate(steps) if s.index == step.index)
        try:
            exprs.append((step, tracer.trace_input(step, before)))
        except Untraceable as exc:
            failure = {
                "stepIndex": step.index,
                "toolName": step.tool,
                "argument": exc.path or "(input)",
                "message": f"step {step.index} ({step.tool}): argument {exc.path or '(input)'}: {exc.message}",
            }
            break
    draft_steps: list[DraftStep] = []
    for position, (step, expr) in enumerate(exprs):
        extractions = [e for e in tracer.extractions if e.producer == position]
        input_logic = bodies.tool_input_logic(expr)
        draft_steps.append(
            DraftStep(
                step_index=position,
                source_index=step.index,
                tool_name=step.tool,
                tool_input_logic=input_logic,
                tool_output_logic=bodies.tool_output_logic(position, step.tool, extractions),
                reasoning=_reasoning(tracer.params, input_logic, step.tool),
                recorded_input=step.input,
                recorded_output=step.output,
            )
        )
    if failure is None and not kept:
        failure = {"message": "no step of this run can be replayed" + (" (every one was left out)" if steps else "")}
    return Draft(prompt, list(tracer.params), draft_steps, excluded, failure, ambiguous=list(tracer.ambiguous))


def intent_of(prompt: str, params: Sequence[Param]) -> str:
    """The prompt with each parameter's spans shown as ``{name}``."""
    spans = sorted(((s, e, p.name) for p in params for s, e in p.spans), reverse=True)
    text = prompt
    for start, end, name in spans:
        text = text[:start] + "{" + name + "}" + text[end:]
    return " ".join(text.split())[:500]


def template_of(prompt: str, params: Sequence[Param]) -> dict[str, Any]:
    """The prompt template the matcher aligns new prompts with: the text and its parameter spans."""
    slots = [
        {"start": s, "end": e, "param": p.name, "kind": p.kind, "case": p.case} for p in params for s, e in p.spans
    ]
    return {"text": prompt, "slots": sorted(slots, key=lambda x: x["start"])}


def serialized(
    scenario_id: str,
    draft: Draft,
    *,
    state: str,
    reason: Mapping[str, Any] | None,
    samples: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The scenario in the service's shape (spec §2, §16.5), plus what a local calculation adds."""
    steps = []
    for step, sample in zip(draft.steps, [*samples, *([{}] * len(draft.steps))], strict=False):
        steps.append(
            {
                "stepIndex": step.step_index,
                "toolName": step.tool_name,
                "toolInputLogic": step.tool_input_logic,
                "toolOutputLogic": step.tool_output_logic,
                "reasoning": step.reasoning,
                "mark": None,
                "sample": dict(sample),
                "sourceStepIndex": step.source_index,
            }
        )
    return {
        "id": scenario_id,
        "state": state,
        "intent": intent_of(draft.prompt, draft.params),
        # Targets only: every parameter here is a span of the prompt, and a value the run used that the
        # prompt did not state cannot be told from a constant in one recording (settings come from a
        # service's scenario or the model pass; derivation gives a setting with no value its sample).
        "paramsObject": {
            p.name: {
                "sampleValue": p.sample,
                "description": f"from the prompt (recorded: {p.sample!r})"[:300],
                "role": "target",
            }
            for p in draft.params
        },
        "paramsLogic": bodies.PARAMS_LOGIC,
        "responseParamsLogic": bodies.RESPONSE_PARAMS_LOGIC,
        "steps": steps,
        "excluded": [e.wire() for e in draft.excluded],
        "reason": None if reason is None else dict(reason),
        "calculation": {"by": "local", "version": CALC_VERSION},
    }
