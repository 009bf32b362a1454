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

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from bir.core.errors import LogicError
from bir.core.types import LogicKind, Scenario, ScenarioStep


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
