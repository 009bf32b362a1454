"""The turn's state machine, driven as a table: no V8, no proxy, no HTTP."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bir.core.outcome import PlanEnd
from bir.hooks.session.turn import ENDED, EVENTS, LIVE, PHASES, PLANNED, TRANSITIONS, Event, Phase, advance, retire


@dataclass
class FakePlan:
    closed: int = 0

    def close(self) -> None:
        self.closed += 1


@dataclass
class FakeRun:
    phase: Phase = "matching"
    end: PlanEnd = "completed"
    plan: FakePlan | None = None


# Every transition the turn has, read as the spec tells the story (§4, §6, §7, §11).
EXPECTED: dict[tuple[Phase, Event], Phase] = {
    ("matching", "missed"): "recording",
    ("matching", "declined"): "declined",
    ("matching", "arming"): "arming",
    ("arming", "declined"): "declined",
    ("arming", "armed"): "armed",
    ("armed", "announced"): "announced",
    ("announced", "started"): "running",
    ("arming", "retired"): "retired",
    ("armed", "retired"): "retired",
    ("announced", "retired"): "retired",
    ("running", "retired"): "retired",
    ("matching", "sealed"): "sealed",
    ("recording", "sealed"): "sealed",
    ("declined", "sealed"): "sealed",
    ("arming", "sealed"): "sealed",
    ("armed", "sealed"): "sealed",
    ("announced", "sealed"): "sealed",
    ("running", "sealed"): "sealed",
    ("retired", "sealed"): "sealed",
    ("sealed", "booked"): "booked",
}


def test_the_table_holds_exactly_the_turns_transitions() -> None:
    assert dict(TRANSITIONS) == EXPECTED


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("event", EVENTS)
def test_each_event_moves_a_run_where_the_table_says_and_nowhere_else(phase: Phase, event: Event) -> None:
    run = FakeRun(phase=phase)
    moved = advance(run, event)
    assert moved == ((phase, event) in EXPECTED)
    assert run.phase == EXPECTED.get((phase, event), phase)


def test_a_hit_that_arms_and_runs_passes_every_phase_once_and_is_booked_once() -> None:
    run = FakeRun()
    for event in ("arming", "armed", "announced", "started", "sealed", "booked"):
        assert advance(run, event)
    assert run.phase == "booked"
    assert not advance(run, "booked")
    assert not advance(run, "sealed")


def test_a_decision_is_taken_once_whichever_path_reaches_it_first() -> None:
    run = FakeRun()
    assert advance(run, "declined")
    assert not advance(run, "declined")
    assert not advance(run, "arming")
    assert not advance(run, "armed")


def test_a_miss_never_arms_and_a_late_hit_cannot_decline_it() -> None:
    run = FakeRun()
    assert advance(run, "missed")
    assert not advance(run, "arming")
    assert not advance(run, "declined")
    assert run.phase == "recording"


@pytest.mark.parametrize("phase", sorted(PLANNED))
def test_retiring_a_plan_closes_it_and_books_how_it_ended_once(phase: Phase) -> None:
    plan = FakePlan()
    run = FakeRun(phase=phase, plan=plan)
    assert retire(run, "diverged")
    assert (run.phase, run.end, plan.closed) == ("retired", "diverged", 1)
    assert not retire(run, "completed")
    assert (run.end, plan.closed) == ("diverged", 1)


@pytest.mark.parametrize("phase", [p for p in PHASES if p not in PLANNED])
def test_a_run_with_no_live_plan_cannot_be_retired(phase: Phase) -> None:
    plan = FakePlan()
    run = FakeRun(phase=phase, plan=plan)
    assert not retire(run, "diverged")
    assert (run.phase, run.end, plan.closed) == (phase, "completed", 0)


def test_the_phase_sets_name_what_they_say() -> None:
    assert frozenset({"announced", "running"}) == LIVE
    assert LIVE < PLANNED
    assert frozenset({"sealed", "booked"}) == ENDED
    assert [pair for pair in TRANSITIONS if pair[0] == "booked"] == []
