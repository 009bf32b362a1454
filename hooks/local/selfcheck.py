"""The dry replay of a scenario over recorded outputs, in the real evaluator pool; and the self-check built on it.

``dry_run`` runs ``paramsLogic``, then each step's input logic and (on the step's recorded output) its
output logic, then ``responseParamsLogic`` — the same entry points a live plan calls
(``bir.core.logic``), in the same sandbox. It stops at the first body that fails. It serves the local
``POST /scenarios/:id/replay`` and the self-check.

``check`` is the gate to ``ready``: the dry replay with the recorded prompt's values must succeed and
give every step exactly the input that was recorded (the same JSON types: ``1`` is not ``true``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bir.core.errors import LogicError
from bir.core.logic import (
    Evaluator,
    eval_params_logic,
    eval_response_params_logic,
    eval_tool_input_logic,
    eval_tool_output_logic,
    merge_resp_params,
)
from bir.core.truncate import one_line
from bir.core.types import PayloadError, parse_scenario
from bir.hooks.local.calculate import Draft, serialized

MAX_MESSAGE_CHARS = 500


@dataclass
class DryRun:
    """What a dry replay did: every step it reached, the samples each step saw, and where it stopped."""

    ok: bool
    params: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    response_model: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "params": self.params,
            "steps": self.steps,
            "responseModel": self.response_model,
            "error": self.error,
        }


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values, types included (``True`` is not ``1``, ``1`` is ``1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _message(exc: LogicError) -> str:
    return one_line(str(exc), MAX_MESSAGE_CHARS)


async def dry_run(
    pool: Evaluator, scenario: Mapping[str, Any], params: Mapping[str, Any], outputs: Sequence[str | None]
) -> DryRun:
    """The scenario's logic over ``outputs`` (one per step, in step order; None: no recorded output).

    Raises:
        PayloadError: the scenario cannot be read.
    """
    model = parse_scenario(dict(scenario))
    run = DryRun(ok=False, params=dict(params))
    try:
        run.params = await eval_params_logic(pool, model, params)
    except LogicError as exc:
        run.error = {"stage": "params", "message": _message(exc)}
        return run
    resp: dict[str, Any] = {}
    for position, step in enumerate(model.steps):
        entry: dict[str, Any] = {"stepIndex": step.step_index, "toolName": step.tool_name}
        run.steps.append(entry)
        run.samples.append({"params": dict(run.params), "respParams": dict(resp)})
        try:
            entry["input"] = await eval_tool_input_logic(pool, step, run.params, resp)
        except LogicError as exc:
            entry["status"] = "failed"
            run.error = {"stage": "input", "stepIndex": step.step_index, "message": _message(exc)}
            return run
        output = outputs[position] if position < len(outputs) else None
        if output is None:
            entry.update(output=None, status="no_recorded_output")
            continue
        entry["output"] = output
        run.samples[-1]["toolOutput"] = output
        try:
            resp = merge_resp_params(resp, await eval_tool_output_logic(pool, step, output, run.params, resp))
        except LogicError as exc:
            entry["status"] = "failed"
            run.error = {"stage": "output", "stepIndex": step.step_index, "message": _message(exc)}
            return run
        entry["status"] = "ok"
    try:
        run.response_model = await eval_response_params_logic(pool, model, run.params, resp)
    except LogicError as exc:
        run.error = {"stage": "response", "message": _message(exc)}
        return run
    run.ok = True
    return run


@dataclass(frozen=True)
class Verdict:
    """A calculation's outcome: ``ready`` with its serialized scenario, or not, with the reason."""

    state: str
    reason: dict[str, Any] | None
    scenario: dict[str, Any]


def mismatch(recorded: Sequence[Any], run: DryRun, tools: Sequence[str]) -> dict[str, Any] | None:
    """The first step whose rebuilt input is not the recorded one, as a reason; None when all agree."""
    if not run.ok:
        error = run.error or {}
        at = error.get("stepIndex")
        where = f"step {at} ({tools[at]})" if isinstance(at, int) and at < len(tools) else error.get("stage", "?")
        return {**error, "message": f"the self-check stopped at {where}: {error.get('message', '')}"}
    for position, (want, entry) in enumerate(zip(recorded, run.steps, strict=False)):
        if not same_json(entry.get("input"), want):
            return {
                "stepIndex": position,
                "toolName": tools[position],
                "message": f"the self-check rebuilt step {position} ({tools[position]}) with other arguments than "
                "were recorded",
            }
    return None


async def check(pool: Evaluator, scenario_id: str, draft: Draft) -> Verdict:
    """Self-check a draft in ``pool`` and give it its state."""
    if not draft.traced:
        reason = draft.failure or {"message": "no step of this run can be replayed"}
        return Verdict(
            "not_ready", reason, serialized(scenario_id, draft, state="not_ready", reason=reason, samples=[])
        )
    provisional = serialized(scenario_id, draft, state="ready", reason=None, samples=[])
    try:
        run = await dry_run(pool, provisional, draft.params_sample(), [s.recorded_output for s in draft.steps])
    except PayloadError as exc:
        reason = {"message": f"the calculated scenario cannot be read: {exc}"}
        return Verdict(
            "not_ready", reason, serialized(scenario_id, draft, state="not_ready", reason=reason, samples=[])
        )
    found = mismatch([s.recorded_input for s in draft.steps], run, [s.tool_name for s in draft.steps])
    state = "ready" if found is None else "not_ready"
    return Verdict(state, found, serialized(scenario_id, draft, state=state, reason=found, samples=run.samples))
