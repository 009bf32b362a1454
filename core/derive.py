"""Parameter derivation without a dependency (spec §16.3): a local key, the service, or the samples.

Whatever happens, a turn gets a ``Derivation``: a failure or a timeout falls back to the samples
(settings on their recorded ``sampleValue``, targets ``None`` and named in ``missing``) and logs one
``replay.derive_failed`` or ``replay.derive_timeout`` line. Nothing here raises into a turn.
The prompt, the live call and the recent results are redacted before they leave the machine.

With a key, the one Messages call is forced to call one tool (``tool_choice``), whose
``input_schema`` is built from the scenario's ``paramsObject``: the answer is that ``tool_use``
block's ``input``, read with msgspec. A reply that does not call it is no answer (nothing is
searched for in prose); its tokens are still counted.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import anyio
import httpx
import msgspec

from bir.core import config, pricing
from bir.core.log import log_event
from bir.core.service import ServiceClient, ServiceError, send_bounded, status_error
from bir.core.truncate import cut_counted
from bir.core.types import Scenario

ANTHROPIC_MESSAGES_URL = "https://api.anthropic.com/v1/messages"
ANTHROPIC_VERSION = "2023-06-01"

MAX_TOKENS = 1024
# What leaves the machine is bounded after redaction, so a cut never splits a secret the redactor would catch.
MAX_PROMPT_CHARS = 8_000
MAX_LIVE_CALL_CHARS = 4_000
MAX_RECENT_RESULTS_CHARS = 8_000
MAX_FIELD_CHARS = 500
MAX_PARAMS = 100
MAX_REPLY_BYTES = 1024 * 1024
# The tool the derivation call is forced to call; its input is the answer.
ANSWER_TOOL = "record_parameters"
# What the Messages API accepts as a property key of a tool's input_schema.
PROPERTY_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")

Source = Literal["none", "service", "anthropic", "samples"]
PriceFn = Callable[[str, Mapping[str, object]], float]
# BIR_DERIVE_MODEL's default, for a caller that passes no model.
DEFAULT_MODEL: Final = "claude-haiku-4-5-20251001"
RedactFn = Callable[[str], str]


@dataclass(frozen=True)
class Derivation:
    """The parameters a plan runs on, what they cost, and where they came from.

    ``missing`` names the targets left ``None``; ``reason`` says why derivation did not happen or
    fell back (``None`` when it went as asked).
    """

    params: dict[str, object]
    cost_usd: float
    derived: bool
    missing: tuple[str, ...]
    source: Source
    reason: str | None


def resolve_api_key(settings: config.Settings, env: Mapping[str, str] | None = None) -> str | None:
    """The derivation key: ``BIR_DERIVE_API_KEY``, else ``ANTHROPIC_API_KEY`` if ``BIR_USE_ANTHROPIC_API_KEY=1``.

    An API-billed Claude Code puts its own ``ANTHROPIC_API_KEY`` in the recorder's environment (``env``,
    else this process's); it is not spent on derivation unless asked, and ignoring it is logged
    (``derive.api_key_ignored``).
    """
    key = settings.derive_api_key
    if key:
        return key
    anthropic_key = (os.environ if env is None else env).get("ANTHROPIC_API_KEY", "").strip()
    if not anthropic_key:
        return None
    if settings.use_anthropic_api_key:
        return anthropic_key
    log_event("derive.api_key_ignored", why="ANTHROPIC_API_KEY is used only with BIR_USE_ANTHROPIC_API_KEY=1")
    return None


# --- normalisation against the scenario's own schema ---------------------------------------------


def normalise(raw: Mapping[str, object], scenario: Scenario) -> tuple[dict[str, object], tuple[str, ...]]:
    """Keep the scenario's keys only, fill null settings from their samples, and name the null targets."""
    params: dict[str, object] = {}
    missing: list[str] = []
    for name, spec in scenario.params_object.items():
        value = raw.get(name)
        if value is None and spec.role == "setting":
            value = spec.sample_value
        if value is None and spec.role == "target":
            missing.append(name)
        params[name] = value
    return params, tuple(missing)


def samples(scenario: Scenario, reason: str | None) -> Derivation:
    """Settings on their samples, targets ``None`` and missing; nothing spent."""
    params, missing = normalise({}, scenario)
    return Derivation(params, 0.0, False, missing, "samples", reason)


# --- what leaves the machine ----------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return cut_counted(text, limit, lambda n: f"…(+{n} chars)")


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class _Turn:
    prompt: str
    live_call: str | None
    recent_results: str | None


def _redacted_turn(prompt: str, live_call: object, recent_results: object, redact: RedactFn) -> _Turn:
    return _Turn(
        prompt=_clip(redact(prompt), MAX_PROMPT_CHARS),
        live_call=None if live_call is None else _clip(redact(_as_text(live_call)), MAX_LIVE_CALL_CHARS),
        recent_results=None
        if recent_results is None
        else _clip(redact(_as_text(recent_results)), MAX_RECENT_RESULTS_CHARS),
    )


def tool_keys(scenario: Scenario) -> dict[str, str]:
    """The answer tool's property key of each parameter it asks for (at most ``MAX_PARAMS``), key → name.

    A name the Messages API accepts as a property key is its own key; any other (a space, a ``$``,
    past 64 characters) is asked for as ``param_<n>``, since one bad key fails the whole request.
    """
    names = list(scenario.params_object)[:MAX_PARAMS]
    taken = set(scenario.params_object)
    keys: dict[str, str] = {}
    for position, name in enumerate(names):
        key = name
        if PROPERTY_KEY.fullmatch(name) is None:
            key = f"param_{position}"
            while key in taken:
                key += "_"
            taken.add(key)
        keys[key] = name
    return keys


def _json_type(sample: object) -> str | None:
    # Numbers are one type: a recorded 5 does not make 2.5 a wrong answer.
    if isinstance(sample, bool):
        return "boolean"
    if isinstance(sample, int | float):
        return "number"
    for kind, name in ((str, "string"), (list, "array"), (dict, "object")):
        if isinstance(sample, kind):
            return name
    return None


def answer_tool(scenario: Scenario, keys: Mapping[str, str]) -> dict[str, object]:
    """The one tool the derivation call must call: every asked parameter a required, nullable property."""
    properties: dict[str, object] = {}
    for key, name in keys.items():
        spec = scenario.params_object[name]
        rule = (
            "A target: from the request only, null when the request does not name it."
            if spec.role == "target"
            else "A setting: null keeps its recorded value."
        )
        description = _clip(spec.description, MAX_FIELD_CHARS) or "(no description)"
        prop: dict[str, object] = {"description": f"{json.dumps(name)}: {description}. {rule}"}
        kind = _json_type(spec.sample_value)
        if kind is not None:
            prop["type"] = [kind, "null"]
        properties[key] = prop
    return {
        "name": ANSWER_TOOL,
        "description": "Record the parameters of the saved task, as the user's request gives them.",
        "input_schema": {
            "type": "object",
            "properties": properties,
            "required": list(keys),
            "additionalProperties": False,
        },
    }


def extraction_prompt(scenario: Scenario, turn: _Turn, keys: Mapping[str, str]) -> str:
    """The one user message of the derivation call (spec §16.3)."""
    lines = [
        "You fill in the parameters of a saved task from a user's request.",
        "",
        f"Task: {_clip(scenario.intent, MAX_FIELD_CHARS) or '(not described)'}",
        "",
        "Parameters (name, role, description, the value it had when the task was recorded):",
    ]
    for key, name in keys.items():
        spec = scenario.params_object[name]
        sample = _clip(json.dumps(spec.sample_value, ensure_ascii=False, default=str), MAX_FIELD_CHARS)
        description = _clip(spec.description, MAX_FIELD_CHARS) or "(no description)"
        asked = "" if key == name else f" (answer it as {key})"
        lines.append(f"- {json.dumps(name)} ({spec.role}): {description}. Recorded value: {sample}{asked}")
    lines += [
        "",
        "A setting may keep its recorded value: answer null for a setting the request does not mention.",
        "A target is what the task acts on: take it from the request only, and answer null when the request "
        "does not name it. Never copy a target's recorded value.",
        "",
        "The user's request:",
        "<request>",
        turn.prompt,
        "</request>",
    ]
    if turn.live_call is not None:
        lines += ["", "The tool call being made now:", "<live_call>", turn.live_call, "</live_call>"]
    if turn.recent_results is not None:
        lines += ["", "Recent tool results:", "<recent_results>", turn.recent_results, "</recent_results>"]
    listed = ", ".join(json.dumps(key) for key in keys)
    lines += ["", f"Call {ANSWER_TOOL} once; its keys are exactly {listed}."]
    return "\n".join(lines)


# --- what comes back ------------------------------------------------------------------------------


class _Spent(msgspec.Struct):
    """The part of a Messages reply that is read first: its tokens are spent whatever the rest holds."""

    usage: dict[str, Any] = {}


class _Block(msgspec.Struct):
    type: str = ""
    name: str = ""
    input: dict[str, Any] | None = None


class _Message(msgspec.Struct):
    content: list[_Block] = []
    stop_reason: str | None = None


_Shape = TypeVar("_Shape", _Spent, _Message)


def _decode(raw: bytes, shape: type[_Shape]) -> _Shape | None:
    try:
        return msgspec.json.decode(raw, type=shape)
    except msgspec.DecodeError:  # ValidationError is one
        return None


def _tool_answer(message: _Message) -> dict[str, Any] | None:
    """The ``input`` of the forced ``tool_use`` block; ``None`` if the reply did not call the tool."""
    if message.stop_reason != "tool_use":
        return None
    for block in message.content:
        if block.type == "tool_use" and block.name == ANSWER_TOOL and block.input is not None:
            return block.input
    return None


def _cost(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return min(float(value), 1_000.0)
    return 0.0


class _Declined(Exception):
    """A derivation path that produced no parameters; carries the fallback's reason and the spend."""

    def __init__(self, reason: str, *, cost_usd: float = 0.0, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.cost_usd = cost_usd
        self.detail = detail


async def _via_anthropic(
    scenario: Scenario,
    turn: _Turn,
    *,
    api_key: str,
    model: str,
    timeout_s: float,
    http: httpx.AsyncClient,
    url: str,
    price: PriceFn | None,
) -> Derivation:
    keys = tool_keys(scenario)
    request = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "tools": [answer_tool(scenario, keys)],
        # Forced, and once: the reply is one tool_use block whose input is the answer (no prose to search).
        "tool_choice": {"type": "tool", "name": ANSWER_TOOL, "disable_parallel_tool_use": True},
        "messages": [{"role": "user", "content": extraction_prompt(scenario, turn, keys)}],
    }
    headers = {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
    route = "anthropic"
    try:
        status, raw = await send_bounded(
            http,
            "POST",
            url,
            route=route,
            timeout_s=timeout_s,
            headers=headers,
            json_body=request,
            max_bytes=MAX_REPLY_BYTES,
        )
        if status != 200:
            raise status_error(route, status, raw)
    except ServiceError as exc:
        raise _Declined(f"anthropic_{_error_code(exc)}", detail=str(exc)) from None
    spent = _decode(raw, _Spent)
    if spent is None:
        raise _Declined("anthropic_bad_answer", detail="the answer is not a JSON object with a usage")
    # The call was made: its tokens are spent whether or not the reply is usable.
    cost = _cost(_price(model, spent.usage, price))
    message = _decode(raw, _Message)
    answer = _tool_answer(message) if message is not None else None
    if answer is None:
        stop = message.stop_reason if message is not None else None
        detail = f"the reply did not call {ANSWER_TOOL} (stop_reason {stop})"
        raise _Declined("anthropic_no_tool_use", cost_usd=cost, detail=detail)
    named = {keys[key]: value for key, value in answer.items() if key in keys}
    params, missing = normalise(named, scenario)
    return Derivation(params, cost, True, missing, "anthropic", None)


async def _via_service(
    scenario: Scenario, scenario_id: str, turn: _Turn, *, service: ServiceClient, timeout_s: float
) -> Derivation:
    try:
        answer = await service.derive(
            scenario_id, turn.prompt, turn.live_call, turn.recent_results, timeout_s=timeout_s
        )
    except ServiceError as exc:
        raise _Declined(f"service_{_error_code(exc)}", detail=str(exc)) from None
    if answer is None:
        raise _Declined("service_declined")
    raw = answer.get("params")
    if not isinstance(raw, dict):
        raise _Declined("service_bad_answer", detail="the answer has no params object")
    # Re-normalised here so the gate reads a `missing` computed from what will actually run.
    params, missing = normalise(raw, scenario)
    return Derivation(params, _cost(answer.get("costUsd")), answer.get("derived") is True, missing, "service", None)


def _price(model: str, usage: Mapping[str, object], price: PriceFn | None) -> float:
    """The call's cost: ``price`` when given, else the dated table (``core.pricing``, spec §11.3)."""
    if price is not None:
        return price(model, usage)
    if not pricing.is_priced(model) and pricing.usage_tokens(usage) > 0:
        # The table has no row for a BIR_DERIVE_MODEL; its tokens count as nothing, and that is said once here.
        log_event("replay.derive_unpriced", model=model, pricing_version=pricing.PRICING_VERSION)
    return pricing.cost_usd(model, usage)


def _error_code(exc: ServiceError) -> str:
    return f"http_{exc.status}" if exc.kind == "status" and exc.status is not None else exc.kind


async def derive_parameters(
    *,
    prompt: str,
    scenario: Scenario,
    api_key: str | None,
    service: ServiceClient | None,
    timeout_s: float,
    model: str | None = None,
    live_call: object = None,
    recent_results: object = None,
    http: httpx.AsyncClient | None = None,
    redact: RedactFn = lambda text: text,
    price: PriceFn | None = None,
    anthropic_url: str = ANTHROPIC_MESSAGES_URL,
) -> Derivation:
    """Derive a scenario's parameters from the user's prompt (spec §16.3); never raises.

    With ``api_key``, one Messages call to ``anthropic_url`` (``model``: the caller's ``BIR_DERIVE_MODEL``,
    else ``DEFAULT_MODEL``); without one but with a configured ``service``, the service's derive route;
    with neither, the samples. ``timeout_s`` bounds the whole derivation; past it, or on any failure,
    the samples stand in with ``reason`` set. ``live_call`` and ``recent_results`` (text, or anything
    JSON-serialisable) go out as redacted text, as does the prompt. The Messages call is priced by
    ``price``, by default from the dated table of ``core.pricing``.
    """
    if not scenario.params_object:
        return Derivation({}, 0.0, False, (), "none", None)
    usable_service = service if service is not None and service.configured and scenario.id else None
    if not api_key and usable_service is None:
        return samples(scenario, "no_derive_key")
    source: Source = "anthropic" if api_key else "service"
    try:
        turn = _redacted_turn(prompt, live_call, recent_results, redact)
        with anyio.move_on_after(timeout_s):
            if api_key:
                resolved_model = model or DEFAULT_MODEL
                client = http if http is not None else httpx.AsyncClient()
                try:
                    return await _via_anthropic(
                        scenario,
                        turn,
                        api_key=api_key,
                        model=resolved_model,
                        timeout_s=timeout_s,
                        http=client,
                        url=anthropic_url,
                        price=price,
                    )
                finally:
                    if http is None:
                        # Shielded: past the deadline this scope is cancelled, and the client must still close.
                        with anyio.CancelScope(shield=True):
                            await client.aclose()
            if usable_service is not None and scenario.id:
                return await _via_service(scenario, scenario.id, turn, service=usable_service, timeout_s=timeout_s)
    except _Declined as declined:
        if declined.reason.endswith("_timeout"):
            log_event("replay.derive_timeout", scenario_id=scenario.id, source=source, timeout_s=timeout_s)
        else:
            log_event(
                "replay.derive_failed",
                scenario_id=scenario.id,
                source=source,
                reason=declined.reason,
                error=declined.detail,
            )
        fallback = samples(scenario, declined.reason)
        return Derivation(fallback.params, declined.cost_usd, False, fallback.missing, "samples", declined.reason)
    except Exception as exc:  # noqa: BLE001 - a bug here must cost the turn its derivation, never the turn
        log_event(
            "replay.derive_failed", scenario_id=scenario.id, source=source, reason="internal", error=repr(exc)[:300]
        )
        return samples(scenario, f"{source}_internal_error")
    log_event("replay.derive_timeout", scenario_id=scenario.id, source=source, timeout_s=timeout_s)
    return samples(scenario, f"{source}_timeout")


__all__ = [
    "ANSWER_TOOL",
    "ANTHROPIC_MESSAGES_URL",
    "DEFAULT_MODEL",
    "Derivation",
    "answer_tool",
    "derive_parameters",
    "extraction_prompt",
    "normalise",
    "resolve_api_key",
    "samples",
    "tool_keys",
]
