"""What a sealed run books (spec §11): its recording's finish and its execution report, decided purely
from the run's state and the transcript usage since its mark (``book``), and queued once (``settle``).

``settle`` reads the transcript and queues what ``book`` decides; nothing here touches the network.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bir.core.log import log_event
from bir.core.outcome import OutcomeDecision, RunFacts, StepLedger, decide_outcome, steps_pinned
from bir.core.pricing import PRICING_VERSION
from bir.core.redact import redact_text
from bir.core.report import build_report
from bir.core.transcript import ModelUsage, session_cost_usd, usage_since
from bir.core.truncate import cut
from bir.hooks.session.ports import ExecutionReports
from bir.hooks.session.state import Run
from bir.hooks.session.turn import advance

MAX_ANSWER_CHARS: Final = 20_000
# Runs that armed no plan report an empty step list.
_EMPTY_LEDGER: Final = StepLedger()


@dataclass(frozen=True)
class Finish:
    """The recording's ``finish`` of a missed turn."""

    output: str
    duration_ms: int
    usage: Sequence[ModelUsage]
    cost_usd: float
    measured: bool
    pricing_version: str = PRICING_VERSION


@dataclass(frozen=True)
class Report:
    """A matched ticket's execution report; ``body`` None: nothing worth sending (the 202 rule)."""

    ticket: str
    scenario_id: str
    decision: OutcomeDecision
    body: Mapping[str, Any] | None
    session_cost_usd: float


@dataclass(frozen=True)
class Booking:
    finish: Finish | None
    report: Report | None


def book(run: Run, usages: Sequence[ModelUsage], sealed_at: float) -> Booking:
    """What ``run`` books, given the transcript usage since its mark and when it was sealed."""
    cost, priced = session_cost_usd(list(usages))
    has_mark = run.mark is not None and run.mark.measurable
    duration_ms = int((sealed_at - run.started) * 1000)
    finish = None
    if run.recording:
        finish = Finish(
            output=cut(redact_text(run.last_answer or ""), MAX_ANSWER_CHARS),
            duration_ms=duration_ms,
            usage=usages,
            cost_usd=cost,
            measured=has_mark and priced,
        )
    ticket, scenario_id = run.ticket, run.scenario_id
    if ticket is None or scenario_id is None:
        return Booking(finish, None)
    plan = run.plan
    ledger = plan.ledger if plan is not None else _EMPTY_LEDGER
    ok = steps_pinned(ledger)
    decision = decide_outcome(
        RunFacts(
            armed=plan is not None,
            end=run.end,
            steps_planned=run.steps_planned,
            steps_ok=ok,
            steps_recorded=ledger.count("recorded"),
            tool_ran_at_stop=plan is not None and plan.tool_ran_at_stop,
            stopped_at_broken_step=plan is not None and plan.stopped_at_broken_step,
            has_mark=has_mark,
            priced=priced,
        )
    )
    body = build_report(
        ticket=ticket,
        outcome=decision.outcome,
        derive_cost_usd=run.derive_cost_usd,
        session_cost_usd=cost,
        duration_ms=duration_ms,
        steps_planned=run.steps_planned,
        steps_pinned=ok,
        measured=decision.measured,
        ledger=ledger,
        prompt=run.prompt,
        redact=redact_text,
        usage=usages,
    )
    return Booking(finish, Report(ticket, scenario_id, decision, body, cost))


def draft(run: Run, ticket: str, *, armed: bool) -> dict[str, Any]:
    """The floor a matched ticket is booked as if the turn dies before its seal: ``not_steered``."""
    body = build_report(
        ticket=ticket,
        outcome="not_steered",
        derive_cost_usd=0.0,
        session_cost_usd=0.0,
        duration_ms=0,
        steps_planned=run.steps_planned if armed else 0,
        steps_pinned=0,
        measured=False,
        ledger=_EMPTY_LEDGER,
        prompt=run.prompt,
        redact=redact_text,
    )
    # A costless decline is not worth sending (202 rule); the draft still claims the ticket's slot.
    return dict(body) if body is not None else {"ticket": ticket, "outcome": "not_steered"}


def settle(run: Run, *, seal_recording: Callable[[Finish], object], reports: ExecutionReports, now: float) -> None:
    """Book the run once: its recording's finish (handed to ``seal_recording``, which sends the turn's steps
    before it) and its execution report (queued)."""
    if not advance(run, "booked"):
        return
    usages = usage_since(run.transcript_path, run.mark) if run.mark is not None else []
    booking = book(run, usages, run.sealed_at or now)
    finish, report = booking.finish, booking.report
    if finish is not None:
        seal_recording(finish)
    if report is None:
        return
    log_event(
        "replay.reported",
        run_id=run.run_id,
        scenario_id=report.scenario_id,
        outcome=report.decision.outcome,
        measured=report.decision.measured,
        session_cost_usd=report.session_cost_usd,
        sent=report.body is not None,
    )
    reports.finalize_report(report.ticket, report.body, scenario_id=report.scenario_id)
