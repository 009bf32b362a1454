"""What ``run_scenario`` says: the tool's definition and the mapping of control-server answers (spec §6.3).

Pure: no I/O. ``bir.proxy.scenario_server`` turns an HTTP exchange (or its failure) into an
``Answer`` here, logs the raw reason and hands the model the answer's text.

``run_scenario`` never answers with an error: a model sometimes calls it unasked, and a red error
under a tool the user never asked about helps nobody. Only ``BIR_SCENARIO_DEBUG=1`` brings the raw
reasons back, as ``isError`` results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from bir.core.truncate import cut_counted, serialize_capped
from bir.hooks import api

RUN_SCENARIO_NAME: Final = api.RUN_SCENARIO_NAME
RUN_SCENARIO_DESCRIPTION: Final = (
    "Returns the results BaseInstRunner prepared for the current request. Call it only when a "
    'BaseInstRunner note in this turn (text beginning "[BaseInstRunner calculated replay]", in a system '
    "note or a tool result) tells you to; never otherwise."
)
RUN_SCENARIO_INPUT_SCHEMA: Final[dict[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}

NOTHING_TO_RUN: Final = "Nothing to run for this request; continue normally."
ALREADY_RUNNING: Final = (
    "The prepared results for this request are already being produced for an earlier run_scenario call, "
    "and they come back there. Do not call run_scenario again, and do not repeat its steps."
)
NOT_AVAILABLE: Final = "The prepared results are not available for this request. Do the task normally with your tools."

# The control server's words for a second call (spec §16.1); the short code is accepted as well.
_ALREADY_RUNNING_PREFIXES: Final = ("this scenario is already running", "already_running")

# A safety bound: the control server shapes the bundle, this only keeps a broken one out of a session.
MAX_ANSWER_CHARS: Final = 200_000
MAX_REASON_CHARS: Final = 2_000
MAX_RESPONSE_MODEL_CHARS: Final = 20_000
RESPONSE_MODEL_LEAD: Final = "The scenario's response model (values it computed from these results for your answer):"

Kind = Literal["ran", "note", "no_plan", "no_control_server", "off", "already_running", "unavailable"]

# The kinds that are ordinary delivery, and stay plain results even in debug mode.
_DELIVERED: Final[frozenset[Kind]] = frozenset({"ran", "note"})


@dataclass(frozen=True)
class Answer:
    """One ``run_scenario`` outcome: what the model reads and the raw reason behind it."""

    kind: Kind
    text: str
    reason: str

    def render(self, *, debug: bool) -> tuple[str, bool]:
        """The result's text and its ``isError`` flag; only debug mode turns a non-delivery into an error."""
        if debug and self.kind not in _DELIVERED:
            return f"run_scenario {self.kind}: {_bounded(self.reason, MAX_REASON_CHARS)}", True
        return self.text, False


def _bounded(text: str, limit: int) -> str:
    return cut_counted(text, limit, lambda n: f"\n…(cut: {n} more characters)")


def nothing_to_run(reason: str) -> Answer:
    """No plan for this call."""
    return Answer("no_plan", NOTHING_TO_RUN, reason)


def no_control_server(reason: str) -> Answer:
    """No control server is running for this directory: the same words as no plan."""
    return Answer("no_control_server", NOTHING_TO_RUN, reason)


def runner_off() -> Answer:
    """The runner is off: nothing is armed, so there is nothing to run."""
    return Answer("off", NOTHING_TO_RUN, "the runner is off")


def unavailable(reason: str) -> Answer:
    """Anything else: a timeout, an HTTP error, a control server that does not answer or answers nonsense."""
    return Answer("unavailable", NOT_AVAILABLE, reason)


def with_response_model(text: str, model: Mapping[str, Any] | None) -> str:
    """The results, then the response model the scenario computed from them (§6.3), within the answer's cap:
    the model's part is bounded first, so the results keep the room."""
    if not model:
        return _bounded(text, MAX_ANSWER_CHARS)
    shown = serialize_capped(model, MAX_RESPONSE_MODEL_CHARS)
    tail = f"\n\n{RESPONSE_MODEL_LEAD}\n{shown}"
    return _bounded(text, MAX_ANSWER_CHARS - len(tail)) + tail


def answer_from_reply(status: int, body: bytes) -> Answer:
    """Map one ``POST /scenario/run`` reply (spec §16.1) to what the model reads."""
    if status != 200:
        return unavailable(f"/scenario/run answered HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
    try:
        reply = api.decode(api.ScenarioRunAnswer, body)
    except api.BodyError as exc:
        return unavailable(f"/scenario/run answered something that is not its answer: {exc}")
    if reply.ok:
        text = reply.text
        if not text:
            return unavailable("/scenario/run answered ok without a text")
        partial = " (partial)" if reply.partial else ""
        steps = "?" if reply.steps is None else reply.steps
        return Answer("ran", with_response_model(text, reply.response_model), f"ran {steps} steps{partial}")
    why = reply.why
    if not why:
        return unavailable("/scenario/run answered without a reason")
    if why == api.NO_PLAN:
        return nothing_to_run(why)
    if reply.note is True:
        return Answer("note", _bounded(why, MAX_ANSWER_CHARS), "hand-over note")
    if why.startswith(_ALREADY_RUNNING_PREFIXES):
        return Answer("already_running", ALREADY_RUNNING, why)
    return unavailable(why)
