"""The four logic entry points the plan calls (spec §9, logic-contract.md).

Each runs one of a scenario's JavaScript bodies in the sandboxed evaluator with the contract's
arguments, in the contract's order, and answers the body's plain-object result. The evaluator already
refuses anything but a plain object, copies every argument (a body that mutates ``params`` changes
nothing here) and bounds time and memory; this module only decides what a *missing* body means.

A missing body is ``None`` or a string of nothing but whitespace. BaseIn skips a body it does not have,
so a missing body means "nothing to compute", never an error:

- ``paramsLogic``: the derived parameters, unchanged;
- ``toolInputLogic``: ``{}`` (the step's tool takes no arguments);
- ``toolOutputLogic``: ``{}`` (nothing is merged into ``respParams``);
- ``responseParamsLogic``: ``respParams`` as it stands.

(A blank body handed to ``new Function`` would return ``undefined`` and be refused as "not a plain
object"; treating it as missing is the kinder reading of a scenario with a field present but empty.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from bir.core.errors import LogicError
from bir.core.types import LogicKind, Scenario, ScenarioStep

# Each body's parameters, in the contract's order (logic-contract.md; the evaluator's realm compiles
# every body as ``function (<these>) { <body> }``, and a test holds the two to the same names).
PARAMETERS: Final[Mapping[LogicKind, str]] = {
    "paramsLogic": "params",
    "toolInputLogic": "params, respParams",
    "toolOutputLogic": "toolOutput, params, respParams",
    "responseParamsLogic": "params, respParams",
}
_BODY_LINE: Final = re.compile(r"\(line (\d+) of the body\)")


class Evaluator(Protocol):
    """What the entry points need of ``bir.evaluator.EvaluatorPool``."""

    def evaluate(self, kind: str, body: str, *args: object) -> Awaitable[dict[str, Any]]: ...


def _present(body: str | None) -> str | None:
    """The body, or None when it is missing (absent or blank)."""
    return body if body is not None and body.strip() else None


async def _run(pool: Evaluator, kind: LogicKind, body: str, *args: object) -> dict[str, Any]:
    try:
        return await pool.evaluate(kind, body, *args)
    except LogicError as exc:
        if not exc.kind:
            exc.kind = kind
        raise
    except TypeError as exc:
        # Our arguments are JSON by construction (derivation, earlier results); if one is not, the body
        # cannot be run, and the plan must hand over like for any other logic failure.
        raise LogicError("threw", f"{kind} could not be given its arguments: {exc}", kind) from None


async def eval_params_logic(pool: Evaluator, scenario: Scenario, params: Mapping[str, object]) -> dict[str, Any]:
    """The parameters every later body reads: ``paramsLogic(params)``, or ``params`` when there is none.

    Raises:
        LogicError: the body threw, did not compile, returned something other than a plain object,
            overran its time or memory, or the evaluator could not run it.
    """
    body = _present(scenario.params_logic)
    if body is None:
        return dict(params)
    return await _run(pool, "paramsLogic", body, dict(params))


async def eval_tool_input_logic(
    pool: Evaluator, step: ScenarioStep, params: Mapping[str, object], resp_params: Mapping[str, object]
) -> dict[str, Any]:
    """The step's tool arguments: ``toolInputLogic(params, respParams)``, or ``{}`` when there is none.

    Raises:
        LogicError: as for :func:`eval_params_logic`.
    """
    body = _present(step.tool_input_logic)
    if body is None:
        return {}
    return await _run(pool, "toolInputLogic", body, dict(params), dict(resp_params))


async def eval_tool_output_logic(
    pool: Evaluator,
    step: ScenarioStep,
    tool_output: str,
    params: Mapping[str, object],
    resp_params: Mapping[str, object],
) -> dict[str, Any]:
    """The keys the step's output adds to ``respParams``: ``toolOutputLogic(toolOutput, params, respParams)``,
    or ``{}`` when there is none. The caller merges them (``{...respParams, ...result}``).

    Raises:
        LogicError: as for :func:`eval_params_logic`.
    """
    body = _present(step.tool_output_logic)
    if body is None:
        return {}
    return await _run(pool, "toolOutputLogic", body, str(tool_output), dict(params), dict(resp_params))


async def eval_response_params_logic(
    pool: Evaluator, scenario: Scenario, params: Mapping[str, object], resp_params: Mapping[str, object]
) -> dict[str, Any]:
    """The response model handed to the model with the results: ``responseParamsLogic(params, respParams)``,
    or ``respParams`` when there is none.

    Raises:
        LogicError: as for :func:`eval_params_logic`.
    """
    body = _present(scenario.response_params_logic)
    if body is None:
        return dict(resp_params)
    return await _run(pool, "responseParamsLogic", body, dict(params), dict(resp_params))


def merge_resp_params(resp_params: Mapping[str, object], derived: Mapping[str, object]) -> dict[str, Any]:
    """``{...respParams, ...derived}``: a step's output keys replace earlier ones of the same name."""
    return {**resp_params, **derived}


@dataclass(frozen=True)
class CompileFailure:
    """A body of a scenario that does not compile: which one (``label``: ``step 2 toolOutputLogic``), why."""

    label: str
    kind: LogicKind
    step_index: int | None
    message: str


def _function_source(kind: LogicKind, body: str) -> str:
    return f"function ({PARAMETERS[kind]}) {{\n{body}\n}}"


def _probe(kind: LogicKind, body: str) -> str:
    """A ``paramsLogic`` body that compiles ``body`` as the evaluator would (inside a function of the same
    parameters) and never calls it. It answers whether the engine shows a function's source at all and,
    if so, whether the function's source is exactly what was meant: a body that closes its function
    early compiles inside the probe, but is then a different function than the one written."""
    return (
        f"const probe = {_function_source(kind, body)};\n"
        "const sample = function (a) {\nreturn 1;\n};\n"
        f'return {{ shows: String(sample) === "function (a) {{\\nreturn 1;\\n}}", '
        f"same: String(probe) === {json.dumps(_function_source(kind, body))} }};"
    )


def _located(message: str, kind: LogicKind) -> str:
    """The engine's message about the probe as one about the body: its kind, and the body's own line."""
    message = message.replace("paramsLogic did not compile", f"{kind} does not compile", 1)
    return _BODY_LINE.sub(lambda m: f"(line {max(1, int(m.group(1)) - 1)} of the body)", message)


async def compile_failure(pool: Evaluator, kind: LogicKind, body: str) -> str | None:
    """Why ``body`` does not compile as a ``kind`` body, or None when it does; none of it runs.

    Raises:
        LogicError: the evaluator could not check it (crashed, overloaded, closed).
    """
    try:
        answer = await pool.evaluate("paramsLogic", _probe(kind, body), {})
    except LogicError as exc:
        if exc.reason == "compile":
            return _located(exc.message, kind)
        if exc.reason in ("crashed", "overloaded", "closed"):
            raise
        # The probe never calls the body: a body that ran anyway got out of its function.
        return f"{kind} is not a function body: part of it runs outside its function ({exc.reason})"
    if answer.get("shows") is True and answer.get("same") is not True:
        return f"{kind} is not a function body: it closes its function early"
    return None


def bodies_of(scenario: Scenario) -> list[tuple[str, LogicKind, int | None, str]]:
    """Every body of ``scenario`` that is present, in the order a replay runs them: (label, kind, step, body)."""
    found: list[tuple[str, LogicKind, int | None, str]] = []
    body = _present(scenario.params_logic)
    if body is not None:
        found.append(("paramsLogic", "paramsLogic", None, body))
    for step in scenario.steps:
        for kind, text in (("toolInputLogic", step.tool_input_logic), ("toolOutputLogic", step.tool_output_logic)):
            body = _present(text)
            if body is not None:
                found.append((f"step {step.step_index} {kind}", kind, step.step_index, body))  # type: ignore[arg-type]
    body = _present(scenario.response_params_logic)
    if body is not None:
        found.append(("responseParamsLogic", "responseParamsLogic", None, body))
    return found


async def compile_check(pool: Evaluator, scenario: Scenario) -> list[CompileFailure]:
    """Every body of ``scenario`` that does not compile, checked in the pool before any of them runs.

    Raises:
        LogicError: the evaluator could not check them.
    """
    failures: list[CompileFailure] = []
    for label, kind, step_index, body in bodies_of(scenario):
        why = await compile_failure(pool, kind, body)
        if why is not None:
            failures.append(CompileFailure(label, kind, step_index, why))
    return failures
