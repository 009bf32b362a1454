"""The service's payloads as frozen msgspec Structs, read at the boundary (spec §2, service-contract.md).

Attribute names are snake_case here and camelCase on the wire (``rename="camel"``; write one back with
``msgspec.to_builtins``, change one with ``msgspec.structs.replace``). Unknown fields are ignored (an
older or newer service may send more). The reading is as lenient as the service has always needed: a
null where a field has a default is that default, a missing or null ``role`` is a setting and an
unknown one a target, a number sent as text is a number, and steps are in index order however they
came (or were built). A payload that cannot be read raises ``PayloadError`` whose message names the
field, so a caller can decline with a reason instead of crashing a turn.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, TypeVar, get_args

import msgspec

from bir.core.truncate import one_line

ParamRole = Literal["setting", "target"]
LogicKind = Literal["paramsLogic", "toolInputLogic", "toolOutputLogic", "responseParamsLogic"]

ROLES: Final = frozenset(get_args(ParamRole))
# A payload's error names a field the service chose; it goes into log lines and notes, so it is held short.
MAX_ERROR_CHARS: Final = 500


class PayloadError(ValueError):
    """A service payload that cannot be read. The message names the field that failed."""


class _Wire(msgspec.Struct, frozen=True, rename="camel"):
    """camelCase on the wire. Each shape sets ``kw_only`` itself: msgspec applies it to its own fields only."""


class ParamSpec(_Wire, frozen=True, kw_only=True):
    """One ``paramsObject`` entry: a setting falls back to its sample, a target is never guessed."""

    sample_value: Any = None
    description: str = ""
    role: ParamRole = "setting"


class ScenarioStep(_Wire, frozen=True, kw_only=True):
    step_index: int
    tool_name: Annotated[str, msgspec.Meta(min_length=1)]
    tool_input_logic: str = "return {};"
    tool_output_logic: str | None = None
    reasoning: str = ""
    # Optional: no payload sends it today (spec §8.1); preferred when present.
    recorded_output: str | None = None


class Scenario(_Wire, frozen=True, kw_only=True):
    id: str | None = None
    state: str | None = None
    intent: str = ""
    params_object: dict[str, ParamSpec] = {}
    params_logic: str | None = None
    response_params_logic: str | None = None
    steps: tuple[ScenarioStep, ...] = ()

    def __post_init__(self) -> None:
        # Read, built or replaced: a plan walks the steps in index order.
        msgspec.structs.force_setattr(self, "steps", tuple(sorted(self.steps, key=lambda s: s.step_index)))

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(name for name, spec in self.params_object.items() if spec.role == "target")

    @property
    def settings(self) -> tuple[str, ...]:
        return tuple(name for name, spec in self.params_object.items() if spec.role == "setting")


class Matched(_Wire, frozen=True, kw_only=True):
    run_id: str
    scenario_id: str | None = None
    similarity: float = 0.0
    execution_ticket: str | None = None
    scenario: Scenario | None = None


class MatchAnswer(_Wire, frozen=True, kw_only=True):
    """The service's answer to ``POST /recordings/runs``."""

    id: str | None = None
    matched: Matched | None = None


class RecordedStep(_Wire, frozen=True, kw_only=True):
    """One step of ``GET /recordings/runs/:runId``; both spellings of the spec are accepted."""

    step_index: int | None = None
    tool_name: str
    tool_output: Any = None


# --- reading: the lenient steps before the typed one ----------------------------------------------

_Shape = TypeVar("_Shape", bound=msgspec.Struct)
Path = tuple[str, ...]

# msgspec's error text: "<what> - at `$.steps[0].toolName`", or "Object missing required field `x`".
_AT: Final = re.compile(r"(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)
_MISSING: Final = re.compile(r"Object missing required field `(?P<field>[^`]*)`")
_SNAKE_SPELLINGS: Final = {"step_index": "stepIndex", "tool_name": "toolName", "tool_output": "toolOutput"}


def _where(exc: msgspec.ValidationError, at: Path) -> str:
    """``field.path: what went wrong`` from a msgspec error, under the path already walked."""
    found = _AT.fullmatch(str(exc))
    what, path = (found["what"], found["path"] or "") if found is not None else (str(exc), "")
    parts = [*at, *(p for p in re.split(r"[.\[\]]+", path) if p)]
    missing = _MISSING.fullmatch(what)
    if missing is not None:
        parts.append(missing["field"])
        what = "a required field is missing"
    else:
        what = _plain(what)
    return one_line(f"{'.'.join(parts)}: {what}" if parts else what, MAX_ERROR_CHARS)


# msgspec's words for the shapes a payload most often gets wrong, in the operator's.
_PLAIN: Final = (
    ("Expected `object`", "expected a JSON object"),
    ("Expected `array`", "expected a JSON list"),
    ("Expected `str`", "expected text"),
    ("Expected `int`", "expected a whole number"),
)


def _plain(message: str) -> str:
    for prefix, plain in _PLAIN:
        if message.startswith(prefix):
            return plain
    return message


def _read(shape: type[_Shape], data: object, at: Path) -> _Shape:
    try:
        # Lax: a number the service sent as text ("3") reads as the number, as it always has.
        return msgspec.convert(data, shape, strict=False)
    except msgspec.ValidationError as exc:
        raise PayloadError(_where(exc, at)) from None


def _null_is_default(raw: dict[str, Any], *fields: str) -> dict[str, Any]:
    return {key: value for key, value in raw.items() if value is not None or key not in fields}


def _param(raw: object, at: Path) -> ParamSpec:
    if isinstance(raw, dict):
        raw = _null_is_default(raw, "description", "role")
        role = raw.get("role")
        if isinstance(role, str) and role not in ROLES:
            # An unknown role (a newer service's) is read the cautious way: a target is never guessed.
            raw["role"] = "target"
    return _read(ParamSpec, raw, at)


def _scenario(raw: object, at: Path) -> Scenario:
    if isinstance(raw, dict):
        raw = _null_is_default(raw, "intent", "paramsObject")
        params = raw.get("paramsObject")
        if isinstance(params, dict):
            # One by one, so that an error names the parameter (msgspec's own path elides dict keys).
            raw["paramsObject"] = {
                name: _param(spec, (*at, "paramsObject", str(name))) for name, spec in params.items()
            }
        steps = raw.get("steps")
        if isinstance(steps, list):
            raw["steps"] = [
                _null_is_default(step, "reasoning", "toolInputLogic") if isinstance(step, dict) else step
                for step in steps
            ]
    return _read(Scenario, raw, at)


def _match(raw: object) -> MatchAnswer:
    if isinstance(raw, dict) and isinstance(raw.get("matched"), dict):
        matched = dict(raw["matched"])
        if matched.get("scenario") is not None:
            matched["scenario"] = _scenario(matched["scenario"], ("matched", "scenario"))
        raw = {**raw, "matched": matched}
    return _read(MatchAnswer, raw, ())


def _recorded_step(raw: object, at: Path) -> RecordedStep:
    if isinstance(raw, dict):
        raw = dict(raw)
        for snake, camel in _SNAKE_SPELLINGS.items():
            if snake in raw and camel not in raw:
                raw[camel] = raw.pop(snake)
    return _read(RecordedStep, raw, at)


def _load(data: object) -> object:
    if isinstance(data, str | bytes | bytearray):
        try:
            return msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise PayloadError(one_line(f"not JSON ({exc})", MAX_ERROR_CHARS)) from None
    return data


def parse_scenario(data: object) -> Scenario:
    """Read a serialized scenario (a mapping or JSON text).

    Raises:
        PayloadError: the scenario cannot be read; the message names the field.
    """
    try:
        return _scenario(_load(data), ())
    except PayloadError as exc:
        raise PayloadError(f"scenario: {exc}") from None


def parse_match(data: object) -> MatchAnswer:
    """Read the answer to ``POST /recordings/runs``.

    Raises:
        PayloadError: the answer cannot be read; the message names the field.
    """
    try:
        return _match(_load(data))
    except PayloadError as exc:
        raise PayloadError(f"match: {exc}") from None


def parse_recorded_steps(data: object) -> tuple[RecordedStep, ...]:
    """Read the ``steps`` of ``GET /recordings/runs/:runId``.

    Raises:
        PayloadError: the answer cannot be read; the message names the field.
    """
    loaded = _load(data)
    steps = loaded.get("steps") if isinstance(loaded, dict) else None
    if not isinstance(steps, list):
        raise PayloadError("run: steps: expected a list")
    try:
        return tuple(_recorded_step(raw, ("steps", str(i))) for i, raw in enumerate(steps))
    except PayloadError as exc:
        raise PayloadError(f"run: {exc}") from None


def parse_qualified_name(tool_name: str) -> tuple[str, str] | None:
    """``mcp__<server>__<tool>`` → ``(server, tool)``; anything else → None.

    Server names may contain ``_`` and ``-`` (even a single ``_``), so the split is at the first
    ``__`` after the prefix; a tool name may itself contain ``__``... but Claude Code never writes a
    server key with ``__`` in it, which is what makes the first separator the right one.
    """
    if not tool_name.startswith("mcp__"):
        return None
    rest = tool_name[len("mcp__") :]
    sep = rest.find("__")
    if sep <= 0:
        return None
    server, tool = rest[:sep], rest[sep + 2 :]
    if not tool:
        return None
    return server, tool
