"""The optional model pass (issue 19 item 4): one small model call for what deterministic inference cannot
see, only with ``BIR_DERIVE_API_KEY`` (or ``ANTHROPIC_API_KEY`` with ``BIR_USE_ANTHROPIC_API_KEY=1``).

Two calls, each forced tool use with a typed answer (``tool_choice`` names the one tool; the
``tool_use`` block's ``input`` is read with msgspec), logged (``local.model_call``) and counted in the
store (``bir stats``), and capped in cost per run: every call the pass makes for one run (a confirmation
at its match, a calculation at its finish) is counted against ``BIR_LOCAL_MODEL_MAX_USD`` together, at
its answer's real usage (``model_spend``), and a call whose estimate would pass what is left is not made
(its output tokens are what the rest leaves after the estimated input):

- **calculate** a run the inference left not ready: the model names and describes the parameters (their
  text in the prompt), keeps or prunes each step (exploration, content it wrote), and writes each kept
  step's ``toolInputLogic`` and ``toolOutputLogic`` — a transformation ("Virginia" → ``us-east-1``), a row
  rule the prompt's wording decides, a loop. Its bodies go through the same self-check as the
  calculator's (every recorded input rebuilt exactly in the sandbox) and one more: changing a parameter
  must change some step's input, so a model that pinned the recorded values as constants is caught. A
  model mistake can never make ready a scenario that disagrees with its recording.
- **confirm** at match time, for a prompt slot alignment could not match: the nearest ready scenario by
  embedding (same action words only) and the prompt go to the model, which answers whether it is the same
  task and with which values; a value must fit its slot's shape.

What leaves the machine is redacted (the recorder's redaction) and bounded.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import httpx
import msgspec
from anyio import to_thread

from bir.core import config
from bir.core.derive import ANTHROPIC_MESSAGES_URL, ANTHROPIC_VERSION
from bir.core.log import log_event
from bir.core.pricing import cost_usd, price_of
from bir.core.redact import redact_text
from bir.core.service import ServiceError, decode_json, send_bounded, status_error
from bir.core.truncate import cut_counted
from bir.hooks.local import bodies, match, selfcheck, slots
from bir.hooks.local import words as lexicon
from bir.hooks.local.calculate import CALC_VERSION, model_written, recorded_steps
from bir.hooks.local.store import ScenarioRow

if TYPE_CHECKING:
    from bir.hooks.local.ports import Service as LocalService

MAX_PROMPT_CHARS: Final = 4_000
MAX_STEP_CHARS: Final = 3_000
MAX_STEPS: Final = 20
MAX_REPLY_BYTES: Final = 512 * 1024
CALCULATE_TIMEOUT_S: Final = 30.0
CONFIRM_TIMEOUT_S: Final = 1.2
# The nearest scenario is worth a confirmation only this close (the new prompt against the masked template,
# whose parameters read as their names: a paraphrase of the same task scores 0.55-0.7 on the corpus).
CONFIRM_MIN_COSINE: Final = 0.5
# The input estimate errs high: JSON and code run nearer three characters a token than four, and a forced
# tool adds the API's tool-use system prompt (235-340 tokens on the models the pricing page lists).
CHARS_PER_TOKEN: Final = 3
TOOL_PROMPT_TOKENS: Final = 400
# A call left fewer output tokens than this could not write an answer: it is not made.
MIN_OUTPUT_TOKENS: Final = 64
CALCULATE_TOOL: Final = "propose_calculation"
CONFIRM_TOOL: Final = "same_task"


# ``LocalService(model=FROM_ENV)``: the model ``model_of`` finds in the environment, if any.
FROM_ENV: Final = object()


class Model(msgspec.Struct, frozen=True):
    """Where and how the pass calls the model."""

    api_key: str
    model: str
    url: str = ANTHROPIC_MESSAGES_URL
    max_usd: float = 0.02


def model_of(settings: config.Settings, *, url: str | None = None) -> Model | None:
    """The model the pass may call, or None when no key is configured (then nothing is ever sent)."""
    from bir.core.derive import resolve_api_key

    key = resolve_api_key(settings)
    if not key:
        return None
    return Model(
        api_key=key,
        model=settings.derive_model,
        url=url or ANTHROPIC_MESSAGES_URL,
        max_usd=settings.local_model_max_usd,
    )


# --- the typed answers -----------------------------------------------------------------------------


class ParamAnswer(msgspec.Struct, frozen=True, rename="camel"):
    name: str
    prompt_text: str
    value: Any = None
    description: str = ""
    role: str = "target"


class StepAnswer(msgspec.Struct, frozen=True, rename="camel"):
    step_index: int
    keep: bool = True
    why: str = ""
    model_written: bool = False
    input_logic: str = ""
    output_logic: str | None = None


class CalculationAnswer(msgspec.Struct, frozen=True, rename="camel"):
    intent: str = ""
    params: list[ParamAnswer] = msgspec.field(default_factory=list)
    steps: list[StepAnswer] = msgspec.field(default_factory=list)


class ConfirmAnswer(msgspec.Struct, frozen=True, rename="camel"):
    same_task: bool
    values: dict[str, Any] = msgspec.field(default_factory=dict)
    why: str = ""


_CALCULATE_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "intent": {"type": "string", "description": "the task in a sentence, the parameters as {name}"},
        "params": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "an identifier"},
                    "promptText": {"type": "string", "description": "the exact text of the prompt it is"},
                    "value": {"description": "its value as the calls use it before any transformation"},
                    "description": {"type": "string"},
                    "role": {"type": "string", "enum": ["target", "setting"]},
                },
                "required": ["name", "promptText", "value", "role"],
            },
        },
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "stepIndex": {"type": "integer"},
                    "keep": {
                        "type": "boolean",
                        "description": "false for exploration, failures, model-written content",
                    },
                    "why": {"type": "string"},
                    "modelWritten": {"type": "boolean"},
                    "inputLogic": {
                        "type": "string",
                        "description": "a JavaScript function body returning the step's input object from params "
                        "and respParams",
                    },
                    "outputLogic": {
                        "type": ["string", "null"],
                        "description": "a JavaScript function body reading toolOutput (the recorded text) and "
                        "returning the values later steps read, as an object; null when none",
                    },
                },
                "required": ["stepIndex", "keep", "inputLogic"],
            },
        },
    },
    "required": ["intent", "params", "steps"],
}

_CONFIRM_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "sameTask": {"type": "boolean", "description": "true only if the request asks for the saved task itself"},
        "values": {"type": "object", "description": "each parameter's value in the request, by name"},
        "why": {"type": "string"},
    },
    "required": ["sameTask", "values"],
}


# --- one call --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Called:
    """One model call: what it answered (the tool's input), what it cost, why it gave nothing."""

    answer: dict[str, Any] | None
    cost_usd: float
    problem: str | None = None
    made: bool = True
    # Sent, but what it cost is not known (no answer came, or one without usage): counted at its estimate.
    cost_unknown: bool = False


def input_tokens(request: Mapping[str, Any]) -> int:
    """The input tokens ``request`` is estimated at, erring high."""
    return -(-len(json.dumps(request, ensure_ascii=False)) // CHARS_PER_TOKEN) + TOOL_PROMPT_TOKENS


def _max_tokens(model: Model, tokens_in: int, ceiling: int, spent_usd: float) -> int | None:
    """The output tokens the run's cap leaves after what it spent and this call's input; None: not even
    the input is covered. Uncapped (``max_usd`` 0, or a model with no price): ``ceiling``."""
    price = price_of(model.model)
    if price is None or model.max_usd <= 0:
        return ceiling
    left = model.max_usd - spent_usd - tokens_in * price.input_per_mtok / 1_000_000
    if left <= 0:
        return None
    return max(0, min(ceiling, int(left / (price.output_per_mtok / 1_000_000))))


def _estimate_usd(model: Model, tokens_in: int, tokens_out: int) -> float:
    price = price_of(model.model)
    if price is None:
        return 0.0
    return (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / 1_000_000


async def call_tool(
    service: LocalService,
    model: Model,
    *,
    run_id: str,
    tool: str,
    description: str,
    schema: Mapping[str, Any],
    prompt: str,
    max_tokens: int,
    timeout_s: float,
) -> Called:
    """One forced tool-use call for ``run_id``, within what its cost cap has left, counted in the store
    before it is made (at its estimate) and settled at its real cost; never raises but for the store.

    Raises:
        StoreError: the store cannot count it (then no call is made).
    """
    store = service.store
    request: dict[str, Any] = {
        "model": model.model,
        "max_tokens": max_tokens,
        "tools": [{"name": tool, "description": description, "input_schema": dict(schema)}],
        "tool_choice": {"type": "tool", "name": tool, "disable_parallel_tool_use": True},
        "messages": [{"role": "user", "content": prompt}],
    }
    tokens_in = input_tokens(request)
    spent = await to_thread.run_sync(lambda: store.model_spent(run_id))
    budget = _max_tokens(model, tokens_in, max_tokens, spent)
    if budget is None or budget < MIN_OUTPUT_TOKENS:
        why = f"what is left of this run's cost cap (BIR_LOCAL_MODEL_MAX_USD, ${spent:.4f} spent) does not cover it"
        return Called(None, 0.0, why, made=False)
    request["max_tokens"] = budget
    estimate = _estimate_usd(model, tokens_in, budget)
    held = await to_thread.run_sync(lambda: store.reserve_model_call(run_id, estimate))
    # Cancelled meanwhile (a match's bound), the call stays counted at its estimate.
    called = await _send(model, tool, request, timeout_s)
    if called.cost_unknown:
        called = dataclasses.replace(called, cost_usd=held / 1_000_000)
    await to_thread.run_sync(lambda: store.settle_model_call(run_id, held, called.cost_usd))
    return called


async def _send(model: Model, tool: str, request: Mapping[str, Any], timeout_s: float) -> Called:
    """The request sent and its answer read; never raises."""
    headers = {"x-api-key": model.api_key, "anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
    try:
        async with httpx.AsyncClient(trust_env=False) as http:
            status, raw = await send_bounded(
                http,
                "POST",
                model.url,
                route="model_pass",
                timeout_s=timeout_s,
                headers=headers,
                json_body=dict(request),
                max_bytes=MAX_REPLY_BYTES,
            )
    except ServiceError as exc:
        # A timeout or a lost connection: the API may have done the work all the same.
        return Called(None, 0.0, str(exc)[:300], cost_unknown=True)
    if status != 200:
        # Refused (a 4xx, an overload): the API bills no tokens for it.
        return Called(None, 0.0, str(status_error("model_pass", status, raw))[:300])
    try:
        data = decode_json("model_pass", raw, status=status)
    except ServiceError as exc:
        return Called(None, 0.0, str(exc)[:300], cost_unknown=True)
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return Called(None, 0.0, "the reply carried no usage", cost_unknown=True)
    # The call was made: its tokens are spent whether or not the answer is usable.
    cost = cost_usd(model.model, usage)
    content = data.get("content") if isinstance(data, dict) else None
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == tool:
            found = block.get("input")
            if isinstance(found, dict):
                return Called(found, cost)
    return Called(None, cost, "the reply did not call the tool")


def _logged(purpose: str, called: Called, **fields: Any) -> None:
    log_event(
        "local.model_call",
        purpose=purpose,
        made=called.made,
        cost_usd=round(called.cost_usd, 6),
        problem=called.problem,
        **fields,
    )


# --- calculate -------------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return cut_counted(redact_text(text), limit)


def calculation_prompt(prompt: str, steps: Sequence[Any], reason: Mapping[str, Any] | None) -> str:
    """The one user message of the calculation call."""
    lines = [
        "A user asked an agent for something, and the agent made the tool calls below. Turn them into a",
        "replayable scenario: which parts of the request are parameters (give each one's exact text in the",
        "request), which calls to keep (leave out exploration, failed calls and content the agent wrote), and",
        "for each kept call a JavaScript function body `inputLogic` that returns its input object from",
        "`params` (the parameters by name, as text from the request) and `respParams` (what earlier steps'",
        "`outputLogic` returned), and, where a later call reads this call's output, an `outputLogic` body that",
        "reads `toolOutput` (the output text below, as a string; JSON.parse it) and returns an object.",
        "Bodies are plain JavaScript with no I/O. For the recorded request they must rebuild every recorded",
        "input exactly; with another request's values they must do the same task.",
        "",
        f"The deterministic calculator stopped here: {json.dumps((reason or {}).get('message', ''))[:600]}",
        "",
        "<request>",
        _clip(prompt, MAX_PROMPT_CHARS),
        "</request>",
    ]
    for step in steps[:MAX_STEPS]:
        lines += [
            f'<call stepIndex="{step.index}" tool={json.dumps(step.tool)}>',
            "input: " + _clip(json.dumps(step.input, ensure_ascii=False, default=str), MAX_STEP_CHARS),
            "output: " + _clip(step.output, MAX_STEP_CHARS),
            "</call>",
        ]
    return "\n".join(lines)


def _scenario(scenario_id: str, answer: CalculationAnswer, steps: Sequence[Any], prompt: str) -> dict[str, Any]:
    by_index = {s.index: s for s in steps}
    kept = [s for s in answer.steps if s.keep and not s.model_written and s.step_index in by_index]
    out_steps = []
    for position, step in enumerate(kept):
        out_steps.append(
            {
                "stepIndex": position,
                "toolName": by_index[step.step_index].tool,
                "toolInputLogic": step.input_logic,
                "toolOutputLogic": step.output_logic or None,
                "reasoning": cut_counted(step.why or "written by the model pass", 300),
                "mark": None,
                "sample": {},
                "sourceStepIndex": step.step_index,
            }
        )
    excluded = [
        {
            "stepIndex": s.step_index,
            "toolName": by_index[s.step_index].tool,
            "why": cut_counted(s.why or "left out", 300),
        }
        for s in answer.steps
        if (not s.keep or s.model_written) and s.step_index in by_index
    ]
    return {
        "id": scenario_id,
        "state": "not_ready",
        "intent": cut_counted(answer.intent or prompt, 500),
        "paramsObject": {
            p.name: {"sampleValue": p.value, "description": cut_counted(p.description, 300), "role": p.role}
            for p in answer.params
        },
        "paramsLogic": bodies.PARAMS_LOGIC,
        "responseParamsLogic": bodies.RESPONSE_PARAMS_LOGIC,
        "steps": out_steps,
        "excluded": excluded,
        "reason": None,
        "calculation": {"by": "local+model", "version": CALC_VERSION},
    }


def _template(prompt: str, answer: CalculationAnswer) -> dict[str, Any] | None:
    """The prompt's slots where the model said its parameters are; None when one is not in the prompt."""
    found = []
    for p in answer.params:
        at = prompt.find(p.prompt_text) if p.prompt_text else -1
        if at < 0:
            return None
        kind = "number" if isinstance(p.value, int | float) and not isinstance(p.value, bool) else "string"
        found.append({"start": at, "end": at + len(p.prompt_text), "param": p.name, "kind": kind, "case": "same"})
    samples = {p.name: p.value for p in answer.params}
    return {"text": prompt, "slots": sorted(found, key=lambda s: s["start"]), "samples": samples}


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    return f"{value}x" if isinstance(value, str) else "x"


async def check(
    pool: Any, scenario: dict[str, Any], steps: Sequence[Any], prompt: str
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The self-check of a model-written scenario: the samples its dry run saw, or why it fails — it keeps
    no step the calculator leaves out as content the model wrote, it must rebuild every recorded input,
    and every parameter must move some input when it changes.

    Raises:
        LogicError: the sandbox could not run it at all.
    """
    by_index = {s.index: s for s in steps}
    for step in scenario["steps"]:
        written = model_written(by_index[step["sourceStepIndex"]], prompt)
        if written is not None:
            return None, f"it keeps step {step['sourceStepIndex']} ({step['toolName']}), which it may not: {written}"
    outputs = [by_index[s["sourceStepIndex"]].output for s in scenario["steps"]]
    wanted = [by_index[s["sourceStepIndex"]].input for s in scenario["steps"]]
    params = match.samples_of(scenario)
    run = await selfcheck.dry_run(pool, scenario, params, outputs)
    tools = [s["toolName"] for s in scenario["steps"]]
    problem = selfcheck.mismatch(wanted, run, tools)
    if problem is not None:
        return None, str(problem.get("message"))
    for name, value in params.items():
        moved = await selfcheck.dry_run(pool, scenario, {**params, name: _changed(value)}, outputs)
        same = all(
            selfcheck.same_json(a.get("input"), b.get("input")) for a, b in zip(moved.steps, run.steps, strict=False)
        )
        if moved.ok and same:
            return None, f"parameter {name} changes no step's input: the recorded value is pinned somewhere"
    return run.samples, None


async def calculate(service: LocalService, model: Model, scenario: ScenarioRow) -> ScenarioRow:
    """One model call for a not-ready scenario; the scenario as it is after (ready only if the model's
    bodies pass the self-check)."""
    store = service.store
    run = await to_thread.run_sync(lambda: store.run(scenario.run_id or ""))
    if run is None:
        return scenario
    rows = await to_thread.run_sync(lambda: store.steps(run.id))
    steps = recorded_steps([s.body for s in rows])
    called = await call_tool(
        service,
        model,
        run_id=run.id,
        tool=CALCULATE_TOOL,
        description="Record the replayable scenario of the recorded calls.",
        schema=_CALCULATE_SCHEMA,
        prompt=calculation_prompt(run.input, steps, scenario.reason),
        max_tokens=4_096,
        timeout_s=CALCULATE_TIMEOUT_S,
    )
    _logged("calculate", called, scenario_id=scenario.id, run_id=run.id)
    if called.answer is None:
        return await _refused(service, scenario, f"the model gave no calculation: {called.problem}", called)
    try:
        answer = msgspec.convert(called.answer, CalculationAnswer)
    except msgspec.ValidationError as exc:
        return await _refused(service, scenario, f"the model's answer is not the tool's shape: {exc}", called)
    body = _scenario(scenario.id, answer, steps, run.input)
    template = _template(run.input, answer)
    if template is None or not body["steps"]:
        why = "the model's parameters are not in the prompt, or it kept no step"
        return await _refused(service, scenario, why, called)
    try:
        samples, problem = await check(await service.pool(), body, steps, run.input)
    except Exception as exc:  # noqa: BLE001 - a body the sandbox cannot even read is a failed check
        samples, problem = None, f"the model's bodies could not be run: {exc}"[:300]
    if problem is not None or samples is None:
        return await _refused(service, scenario, f"the model's calculation failed its self-check: {problem}", called)
    for step, sample in zip(body["steps"], samples, strict=False):
        step["sample"] = sample
    body["state"] = "ready"
    body["calculation"]["modelCostUsd"] = round(called.cost_usd, 6)
    # Embedded as the calculator's ready scenarios are, so the embedding rule and a confirmation find it.
    vector: bytes | None = None
    if service.embedder.ready:
        masked = match.masked_template(template, match.samples_of(body))
        embedded = await to_thread.run_sync(lambda: service.embedder.embed(masked))
        vector = None if embedded is None else embedded.tobytes()
    row = await to_thread.run_sync(
        lambda: store.put_scenario(
            scenario.id,
            project=scenario.project,
            run_id=scenario.run_id,
            state="ready",
            reason=None,
            body=body,
            template=template,
            normalized=slots.normalized(run.input),
            embedding=vector,
            calc_version=CALC_VERSION,
            bump_revision=True,
            now=service.clock(),
        )
    )
    log_event("local.model_calculated", scenario_id=scenario.id, steps=len(body["steps"]), params=len(answer.params))
    return row


async def _refused(service: LocalService, scenario: ScenarioRow, why: str, called: Called) -> ScenarioRow:
    reason = {**(scenario.reason or {}), "modelPass": cut_counted(why, 500), "modelCostUsd": round(called.cost_usd, 6)}
    log_event("local.model_refused", scenario_id=scenario.id, why=cut_counted(why, 300))
    await to_thread.run_sync(lambda: service.store.set_reason(scenario.id, reason))
    found = await to_thread.run_sync(lambda: service.store.scenario(scenario.id))
    return found or scenario


# --- confirm at match time -------------------------------------------------------------------------


def nearest(service: LocalService, prompt: str, project: str | None) -> tuple[float, match.Candidate] | None:
    """The ready scenario nearest ``prompt`` by raw embedding whose action words agree with it."""
    import numpy as np

    if not service.embedder.ready:
        return None
    asked = service.embedder.embed(prompt)
    if asked is None:
        return None
    verbs = {lexicon.verb_class(w) for w in lexicon.words(prompt)} - {None}
    best: tuple[float, match.Candidate] | None = None
    for cand in list(service.index.by_id.values()):
        if cand.vector is None or (project is not None and cand.project != project):
            continue
        theirs = {lexicon.verb_class(w) for w in lexicon.words(cand.raw_template["text"])} - {None}
        if verbs != theirs:
            continue
        score = float(np.asarray(asked) @ cand.vector)
        if best is None or score > best[0]:
            best = (score, cand)
    return best if best is not None and best[0] >= CONFIRM_MIN_COSINE else None


def confirm_prompt(prompt: str, cand: match.Candidate, intent: str, specs: Mapping[str, Any]) -> str:
    lines = [
        "Does the request ask for exactly the saved task (the same action on the same kind of thing, perhaps",
        "with other values)? If so, give each parameter's value as the request states it.",
        "",
        f"Saved task: {json.dumps(intent)}",
        f"Its recorded request: {json.dumps(_clip(cand.raw_template['text'], MAX_PROMPT_CHARS))}",
        "Parameters (name: description; recorded value):",
    ]
    for name, spec in specs.items():
        if isinstance(spec, dict):
            lines.append(f"- {name}: {spec.get('description', '')}; {json.dumps(spec.get('sampleValue'))}")
    lines += ["", "<request>", _clip(prompt, MAX_PROMPT_CHARS), "</request>"]
    return "\n".join(lines)


async def confirm(
    service: LocalService, model: Model, prompt: str, project: str | None, *, run_id: str
) -> match.Hit | None:
    """One model call for ``run_id``'s prompt, which the cascade missed; a hit when the model says it is the
    nearest scenario's task and every value is the request's own and fits its slot."""
    found = await to_thread.run_sync(lambda: nearest(service, prompt, project))
    if found is None:
        return None
    score, cand = found
    row = await to_thread.run_sync(lambda: service.store.scenario(cand.scenario_id))
    if row is None:
        return None
    specs = row.body.get("paramsObject") or {}
    called = await call_tool(
        service,
        model,
        run_id=run_id,
        tool=CONFIRM_TOOL,
        description="Say whether the request is the saved task, and its values.",
        schema=_CONFIRM_SCHEMA,
        prompt=confirm_prompt(prompt, cand, str(row.body.get("intent", "")), specs),
        max_tokens=512,
        timeout_s=CONFIRM_TIMEOUT_S,
    )
    _logged("confirm", called, scenario_id=cand.scenario_id, run_id=run_id, cosine=round(score, 4))
    if called.answer is None:
        return None
    try:
        answer = msgspec.convert(called.answer, ConfirmAnswer)
    except msgspec.ValidationError:
        return None
    if not answer.same_task:
        return None
    tpl = cand.template
    values: dict[str, Any] = {}
    for slot in tpl.slots:
        given = answer.values.get(slot.param)
        if given is None or str(given).casefold() not in prompt.casefold():
            # A value the request does not hold is the model's guess: no match on a guess.
            return None
        coerced = slots.coerce(slot, str(given), tpl.samples.get(slot.param))
        if isinstance(coerced, slots.Refused):
            return None
        values[slot.param] = coerced
    return match.Hit("model", cand.scenario_id, cand.run_id, values, 1.0)
