"""The outcome ladder, step verdicts and the rule that turns a run's facts into its outcome (spec §11.1, §11.2a).

The outcome is what the service books a run as: ``not_steered`` and ``failed`` are baseline samples, the
three others are ledger rows a saving is computed from. Booking is upgrade-only (``upgrade``) so that a
turn that dies mid-flight keeps the best thing that is already true, and the floor, ``not_steered``, is
the safe answer when nothing is known.

A step's verdict is what the service's recording page draws for it. ``failed`` is the only status that
means the scenario itself is broken (its own logic threw); ``skipped`` is the environment (the call could
not be sent, timed out or was refused); ``recorded`` is a pass whose values came from the source run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

Outcome = Literal["not_steered", "failed", "fell_back", "diverged", "steered_full"]

OUTCOME_RANK: Final[Mapping[Outcome, int]] = MappingProxyType(
    {"not_steered": 0, "failed": 1, "fell_back": 2, "diverged": 3, "steered_full": 4}
)

StepStatus = Literal["ok", "recorded", "skipped", "failed"]

# Where in a step a verdict was decided, for ``failed`` and ``skipped``:
#   "params"   the scenario's paramsLogic threw, or a target it needs has no value (booked on the first step)
#   "input"    the step's toolInputLogic threw                                         -> failed
#   "send"     the call could not be sent: a built-in outside the session, no proxy,
#              a server off the allowlist, only another session's proxy                -> skipped
#   "call"     the call was sent and timed out, was refused, or answered a tool error  -> skipped
#   "output"   the tool ran but the step's toolOutputLogic threw                        -> failed
#   "response" responseParamsLogic threw after the last step (booked on the last step) -> failed
ExecutionStage = Literal["params", "input", "send", "call", "output", "response"]

# How a plan's life ended, as the controller saw it:
#   "completed"       every planned step was run (live or recorded)
#   "retired"         retired without handing anything over: a gate declined after arming, a direct plan
#                     vetoed (§6.4), a steer plan abandoned after a declined pin (§7)
#   "handed_over"     a step stopped the plan and the model was handed the rest (a pinned step failed, a
#                     logic body threw, a step could not be sent or did not answer)
#   "diverged"        a steer plan's model went off-script and the bundle answered in that call's place
#   "out_of_time"     the plan's (or the PreToolUse's) replay budget ran out before a step
#   "cancelled"       the caller cancelled a direct run (Esc, bir-scenario's own timeout)
#   "concurrent"      a call ran beside a pin still in flight, so the plan handed over (§7)
#   "compose_failed"  composing the bundle itself threw (Tier 2, §8)
PlanEnd = Literal[
    "completed", "retired", "handed_over", "diverged", "out_of_time", "cancelled", "concurrent", "compose_failed"
]


def upgrade(current: Outcome, proposed: Outcome) -> Outcome:
    """The higher of two outcomes on the ladder: a booking never goes down."""
    return proposed if OUTCOME_RANK[proposed] > OUTCOME_RANK[current] else current


@dataclass(frozen=True)
class StepVerdict:
    """What one step did in this run. ``step_index`` is the scenario's own index, not a list position."""

    step_index: int
    tool_name: str
    status: StepStatus
    stage: ExecutionStage | None = None
    error: str | None = None
    duration_ms: int | None = None


class StepLedger:
    """The verdicts of one run, keyed by step index.

    A second word on a step replaces the first: in steer mode a step is recorded at ``PreToolUse`` (an
    input-logic throw) and again at ``PostToolUse`` (the pass or the output-logic throw). A step the run
    never reached has no entry at all, so the page shows it as "not run" rather than as a failure.
    """

    def __init__(self, verdicts: tuple[StepVerdict, ...] = ()) -> None:
        self._by_index: dict[int, StepVerdict] = {}
        for verdict in verdicts:
            self.record(verdict)

    def record(self, verdict: StepVerdict) -> None:
        """Book ``verdict`` for its step, replacing any earlier verdict on the same step."""
        self._by_index[verdict.step_index] = verdict

    def get(self, step_index: int) -> StepVerdict | None:
        return self._by_index.get(step_index)

    def verdicts(self) -> tuple[StepVerdict, ...]:
        """Every verdict, in step-index order."""
        return tuple(self._by_index[i] for i in sorted(self._by_index))

    def count(self, status: StepStatus) -> int:
        return sum(1 for v in self._by_index.values() if v.status == status)

    def __iter__(self) -> Iterator[StepVerdict]:
        return iter(self.verdicts())

    def __len__(self) -> int:
        return len(self._by_index)


def blame_step(ledger: StepLedger) -> StepVerdict | None:
    """The first ``failed`` step in index order: the one the report's ``error*`` headline is lifted from."""
    return next((v for v in ledger if v.status == "failed"), None)


def steps_pinned(ledger: StepLedger) -> int:
    """Steps that did their work under the plan. A recorded stand-in is never work done, so it is not counted."""
    return ledger.count("ok")


@dataclass(frozen=True)
class RunFacts:
    """What the controller knows about a run when it seals it.

    ``steps_ok`` counts steps that did real work under the plan: pins that threaded and steps executed
    now with a real result. Recorded stand-ins are counted apart in ``steps_recorded``. ``tool_ran_at_stop``
    is true when the step the plan stopped at did run its tool (its output logic failed afterwards): its
    side effects are in place, which is work done even though the step's verdict is ``failed``.
    ``stopped_at_broken_step`` is true when the plan stopped at a step that broke: a logic failure, a
    tool error, a call sent and never answered.
    """

    armed: bool
    end: PlanEnd = "completed"
    steps_planned: int = 0
    steps_ok: int = 0
    steps_recorded: int = 0
    tool_ran_at_stop: bool = False
    stopped_at_broken_step: bool = False
    has_mark: bool = True
    priced: bool = True


@dataclass(frozen=True)
class OutcomeDecision:
    outcome: Outcome
    measured: bool


def decide_outcome(facts: RunFacts) -> OutcomeDecision:
    """Decide the outcome a run is booked as, and whether its cost is a measurement.

    The rules, in order (spec §11.1 and §14):

    - Never armed → ``not_steered``.
    - ``retired``: nothing did its work → ``not_steered``; some steps did → ``fell_back``.
    - ``compose_failed`` → ``failed`` (Tier 2 abort: the turn continues as an ordinary one).
    - ``completed``: every planned step did its work → ``steered_full``; some were recorded stand-ins →
      ``diverged`` at best (``failed`` when every step was a stand-in); a plan of no steps → ``not_steered``.
    - ``diverged``: something ran under the plan and the plan did not stop at a broken step → ``diverged``,
      otherwise ``failed``.
    - ``out_of_time``: some steps did their work → ``diverged``, none → ``failed``.
    - ``cancelled``, ``concurrent``, ``handed_over``: some work done (a step ``ok``, or the stopped step's
      tool ran before its output logic failed) → ``fell_back``, none → ``failed``. Never ``diverged``.

    ``measured`` is false when the run had no usage mark, when a model's price is unknown, and for a
    cancelled run, whose cost says nothing about what the task costs. (The service also stores a report
    whose pricing version differs from its own as unmeasured; that half is its to enforce.)
    """
    measured = facts.has_mark and facts.priced and facts.end != "cancelled"
    work = facts.steps_ok > 0
    outcome: Outcome
    if not facts.armed:
        outcome = "not_steered"
    elif facts.end == "retired":
        outcome = "fell_back" if work else "not_steered"
    elif facts.end == "compose_failed":
        outcome = "failed"
    elif facts.end == "completed":
        if facts.steps_planned <= 0:
            outcome = "not_steered"
        elif facts.steps_ok >= facts.steps_planned and facts.steps_recorded == 0:
            outcome = "steered_full"
        else:
            outcome = "diverged" if work else "failed"
    elif facts.end == "diverged":
        outcome = "diverged" if work and not facts.stopped_at_broken_step else "failed"
    elif facts.end == "out_of_time":
        outcome = "diverged" if work else "failed"
    else:
        outcome = "fell_back" if work or facts.tool_ran_at_stop else "failed"
    return OutcomeDecision(outcome=outcome, measured=measured)
