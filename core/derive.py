"""Parameter derivation without a dependency (spec §16.3): a local key, the service, or the samples.

Whatever happens, a turn gets a ``Derivation``: a failure or a timeout falls back to the samples
(settings on their recorded ``sampleValue``, targets ``None`` and named in ``missing``) and logs one
``replay.derive_failed`` or ``replay.derive_timeout`` line. Nothing here raises into a turn.
The prompt, the live call and the recent results are redacted before they leave the machine.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx

from bir.core import config, pricing
from bir.core.log import log_event
from bir.core.service import ServiceClient, ServiceError, decode_json, send_bounded, status_error
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
# The prose scan tries each "{" in turn; these caps keep a hostile reply from costing seconds.
MAX_SCAN_CHARS = 32_000
MAX_SCAN_STARTS = 64

Source = Literal["none", "service", "anthropic", "samples"]
PriceFn = Callable[[str, Mapping[str, object]], float]
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


def resolve_api_key(env: Mapping[str, str] | None = None) -> str | None:
    """The derivation key: ``BIR_DERIVE_API_KEY``, else ``ANTHROPIC_API_KEY`` if ``BIR_USE_ANTHROPIC_API_KEY=1``.

    An API-billed Claude Code puts its own ``ANTHROPIC_API_KEY`` in the recorder's environment; it is
    not spent on derivation unless asked, and ignoring it is logged (``derive.api_key_ignored``).

    Raises:
        ConfigError: ``BIR_USE_ANTHROPIC_API_KEY`` holds something other than a flag.
    """
    key = config.get_str("BIR_DERIVE_API_KEY", env)
    if key:
        return key
    anthropic_key = (os.environ if env is None else env).get("ANTHROPIC_API_KEY", "").strip()
    if not anthropic_key:
        return None
    if config.get_flag("BIR_USE_ANTHROPIC_API_KEY", env):
        return anthropic_key
    log_event("derive.api_key_ignored", why="ANTHROPIC_API_KEY is used only with BIR_USE_ANTHROPIC_API_KEY=1")
    return None


# --- tolerant JSON extraction -------------------------------------------------------------------


def _is_ident(ch: str) -> bool:
    return ch.isalnum() or ch in "_$"


def _undefined_to_null(text: str) -> str:
    """Replace a bare ``undefined`` (outside strings) with ``null``: models write JavaScript, not JSON."""
    if "undefined" not in text:
        return text
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
        elif (
            text.startswith("undefined", i)
            and (i == 0 or not _is_ident(text[i - 1]))
            and (i + 9 >= n or not _is_ident(text[i + 9]))
        ):
            out.append("null")
            i += 9
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _parse_object(candidate: str) -> dict[str, object] | None:
    try:
        # NaN and Infinity are not JSON; a parameter holding one is as good as unknown.
        value = json.loads(_undefined_to_null(candidate.strip()), parse_constant=lambda _name: None)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _balanced_end(text: str, start: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``start``, respecting JSON strings; ``None`` if unclosed."""
    depth, in_string, i, n = 0, False, start, len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _scan_objects(text: str) -> dict[str, object] | None:
    start, tries = text.find("{"), 0
    while start != -1 and tries < MAX_SCAN_STARTS:
        tries += 1
        end = _balanced_end(text, start)
        if end is not None:
            found = _parse_object(text[start : end + 1])
            if found is not None:
                return found
        start = text.find("{", start + 1)
    return None


def _fenced_blocks(text: str) -> list[str]:
    blocks: list[str] = []
    pos = text.find("```")
    while pos != -1:
        close = text.find("```", pos + 3)
        if close == -1:
            break
        body = text[pos + 3 : close]
        # Drop an info string such as "json" on the opening fence's line.
        first_newline = body.find("\n")
        if first_newline != -1 and body[:first_newline].strip().isalpha():
            body = body[first_newline + 1 :]
        blocks.append(body)
        pos = text.find("```", close + 3)
    return blocks


def extract_json_object(text: str) -> dict[str, object] | None:
    """The first JSON object in a model's reply: a fenced block, the bare reply, or one inside prose.

    ``undefined`` reads as ``null``; a reply holding no object gives ``None``.
    """
    text = text[:MAX_SCAN_CHARS]
    for block in _fenced_blocks(text):
        found = _parse_object(block) or _scan_objects(block)
        if found is not None:
            return found
    return _parse_object(text) or _scan_objects(text)


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


def extraction_prompt(scenario: Scenario, turn: _Turn) -> str:
    """The one user message of the derivation call (spec §16.3)."""
    names = list(scenario.params_object)[:MAX_PARAMS]
    lines = [
        "You fill in the parameters of a saved task from a user's request.",
        "",
        f"Task: {_clip(scenario.intent, MAX_FIELD_CHARS) or '(not described)'}",
        "",
        "Parameters (name, role, description, the value it had when the task was recorded):",
    ]
    for name in names:
        spec = scenario.params_object[name]
        sample = _clip(json.dumps(spec.sample_value, ensure_ascii=False, default=str), MAX_FIELD_CHARS)
        description = _clip(spec.description, MAX_FIELD_CHARS) or "(no description)"
        lines.append(f"- {json.dumps(name)} ({spec.role}): {description}. Recorded value: {sample}")
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
    keys = ", ".join(json.dumps(name) for name in names)
    lines += ["", f"Answer with one JSON object whose keys are exactly {keys}, and nothing else."]
    return "\n".join(lines)


def _reply_text(data: object) -> str | None:
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        return None
    parts = [
        block["text"]
        for block in data["content"]
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    ]
    return "".join(parts) if parts else None


def _usage(data: object) -> Mapping[str, Any]:
    usage = data.get("usage") if isinstance(data, dict) else None
    return usage if isinstance(usage, dict) else {}


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
    request = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": extraction_prompt(scenario, turn)}],
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
        data = decode_json(route, raw, status=status)
    except ServiceError as exc:
        raise _Declined(f"anthropic_{_error_code(exc)}", detail=str(exc)) from None
    # The call was made: its tokens are spent whether or not the reply is usable.
    cost = _cost(_price(model, _usage(data), price))
    text = _reply_text(data)
    found = extract_json_object(text) if text is not None else None
    if found is None:
        raise _Declined("anthropic_not_json", cost_usd=cost, detail="the reply holds no JSON object")
    params, missing = normalise(found, scenario)
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

    With ``api_key``, one Messages call to ``anthropic_url`` (``model`` defaults to
    ``BIR_DERIVE_MODEL``); without one but with a configured ``service``, the service's derive route;
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
                resolved_model = model or config.get_str("BIR_DERIVE_MODEL") or "claude-haiku-4-5-20251001"
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
    "ANTHROPIC_MESSAGES_URL",
    "Derivation",
    "derive_parameters",
    "extract_json_object",
    "extraction_prompt",
    "normalise",
    "resolve_api_key",
    "samples",
]
