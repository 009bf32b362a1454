"""The service's payloads as typed models, validated at the boundary (spec §2, service-contract.md).

Field names are snake_case here and camelCase on the wire. Unknown fields are tolerated (an older
or newer service may send more); a payload that cannot be read raises ``PayloadError`` whose message
names the field, so a caller can decline with a reason instead of crashing a turn.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

ParamRole = Literal["setting", "target"]
LogicKind = Literal["paramsLogic", "toolInputLogic", "toolOutputLogic", "responseParamsLogic"]


class PayloadError(ValueError):
    """A service payload that cannot be read. The message names the field that failed."""


class _Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True, str_strip_whitespace=False
    )


class ParamSpec(_Wire):
    """One ``paramsObject`` entry: a setting falls back to its sample, a target is never guessed."""

    sample_value: Any = None
    description: str = ""
    role: ParamRole = "setting"

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, value: object) -> object:
        # An older service sends no role; anything unknown is treated as the cautious reading.
        if value is None:
            return "setting"
        if isinstance(value, str) and value not in ("setting", "target"):
            return "target"
        return value

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, value: object) -> object:
        return "" if value is None else value


class ScenarioStep(_Wire):
    step_index: int
    tool_name: str = Field(min_length=1)
    tool_input_logic: str = "return {};"
    tool_output_logic: str | None = None
    reasoning: str = ""
    # Optional: no payload sends it today (spec §8.1); preferred when present.
    recorded_output: str | None = None

    @field_validator("reasoning", "tool_input_logic", mode="before")
    @classmethod
    def _none_to_default(cls, value: object, info: Any) -> object:
        if value is None:
            return "" if info.field_name == "reasoning" else "return {};"
        return value


class Scenario(_Wire):
    id: str | None = None
    state: str | None = None
    intent: str = ""
    params_object: dict[str, ParamSpec] = Field(default_factory=dict)
    params_logic: str | None = None
    response_params_logic: str | None = None
    steps: tuple[ScenarioStep, ...] = ()

    @field_validator("params_object", mode="before")
    @classmethod
    def _params_object(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("intent", mode="before")
    @classmethod
    def _intent(cls, value: object) -> object:
        return "" if value is None else value

    @field_validator("steps", mode="after")
    @classmethod
    def _ordered(cls, steps: tuple[ScenarioStep, ...]) -> tuple[ScenarioStep, ...]:
        return tuple(sorted(steps, key=lambda s: s.step_index))

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(name for name, spec in self.params_object.items() if spec.role == "target")

    @property
    def settings(self) -> tuple[str, ...]:
        return tuple(name for name, spec in self.params_object.items() if spec.role == "setting")


class Matched(_Wire):
    run_id: str
    scenario_id: str | None = None
    similarity: float = 0.0
    execution_ticket: str | None = None
    scenario: Scenario | None = None


class MatchAnswer(_Wire):
    """The service's answer to ``POST /recordings/runs``."""

    id: str | None = None
    matched: Matched | None = None


class RecordedStep(_Wire):
    """One step of ``GET /recordings/runs/:runId``; both spellings of the spec are accepted."""

    step_index: int | None = None
    tool_name: str = Field(validation_alias=AliasChoices("toolName", "tool_name"))
    tool_output: Any = Field(default=None, validation_alias=AliasChoices("toolOutput", "tool_output"))


# pydantic's words for the shapes a payload most often gets wrong, in the operator's.
_PLAIN: Final = (
    ("Input should be a valid dictionary", "expected a JSON object"),
    ("Input should be a valid list", "expected a JSON list"),
    ("Input should be a valid string", "expected text"),
    ("Input should be a valid integer", "expected a whole number"),
    ("Field required", "missing"),
)


def _plain(message: str) -> str:
    for prefix, plain in _PLAIN:
        if message.startswith(prefix):
            return plain
    return message


def _describe(exc: ValidationError) -> str:
    parts: list[str] = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = _plain(str(err.get("msg", "invalid")))
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _load(data: object) -> object:
    if isinstance(data, str | bytes | bytearray):
        try:
            return json.loads(data)
        except ValueError as exc:
            raise PayloadError(f"not JSON ({exc})") from None
    return data


def parse_scenario(data: object) -> Scenario:
    """Read a serialized scenario (a mapping or JSON text).

    Raises:
        PayloadError: the scenario cannot be read; the message names the field.
    """
    try:
        return Scenario.model_validate(_load(data))
    except ValidationError as exc:
        raise PayloadError(f"scenario: {_describe(exc)}") from None


def parse_match(data: object) -> MatchAnswer:
    """Read the answer to ``POST /recordings/runs``.

    Raises:
        PayloadError: the answer cannot be read; the message names the field.
    """
    try:
        return MatchAnswer.model_validate(_load(data))
    except ValidationError as exc:
        raise PayloadError(f"match: {_describe(exc)}") from None


def parse_recorded_steps(data: object) -> tuple[RecordedStep, ...]:
    """Read the ``steps`` of ``GET /recordings/runs/:runId``.

    Raises:
        PayloadError: the answer cannot be read; the message names the field.
    """
    loaded = _load(data)
    steps = loaded.get("steps") if isinstance(loaded, dict) else None
    if not isinstance(steps, list):
        raise PayloadError("run: steps: expected a list")
    out: list[RecordedStep] = []
    for i, raw in enumerate(steps):
        try:
            out.append(RecordedStep.model_validate(raw))
        except ValidationError as exc:
            raise PayloadError(f"run: steps.{i}: {_describe(exc)}") from None
    return tuple(out)


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
