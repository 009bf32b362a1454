"""The turn as one state machine (spec §4, §6, §7, §11): its phases, the events that move it, one table.

A run is one turn of one session. It starts ``matching``; a miss makes it ``recording``; a hit is either
``declined`` (one ``replay.decision`` line) or goes ``arming`` → ``armed`` (one ``plan.armed`` line) →
``announced`` (the directive is out) → ``running`` (``run_scenario`` began, or the first pin); a plan
that ends early is ``retired``; ``Stop`` (or the next prompt, or ``SessionEnd``) ``seals`` the run, and
the seal is ``booked`` once. Pure, the way h11 writes its transitions: ``advance`` moves a run along
``TRANSITIONS`` or refuses, so every end (a decision, a retirement, a seal, a booking) happens once,
whichever hook reaches it first. The controller and the steer driver act on its answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, Protocol, get_args

from bir.core.outcome import PlanEnd

Phase = Literal[
    "matching", "recording", "declined", "arming", "armed", "announced", "running", "retired", "sealed", "booked"
]
Event = Literal["missed", "declined", "arming", "armed", "announced", "started", "retired", "sealed", "booked"]

PHASES: Final[tuple[Phase, ...]] = get_args(Phase)
EVENTS: Final[tuple[Event, ...]] = get_args(Event)
# Where a plan is live: the model may be calling its steps.
LIVE: Final[frozenset[Phase]] = frozenset({"announced", "running"})
# Where a plan exists and has not ended.
PLANNED: Final[frozenset[Phase]] = frozenset({"arming", "armed", "announced", "running"})
ENDED: Final[frozenset[Phase]] = frozenset({"sealed", "booked"})

# (phase, event) -> the next phase. A pair that is not here is refused and changes nothing.
TRANSITIONS: Final[Mapping[tuple[Phase, Event], Phase]] = {
    ("matching", "missed"): "recording",
    ("matching", "declined"): "declined",
    ("matching", "arming"): "arming",
    ("arming", "declined"): "declined",
    ("arming", "armed"): "armed",
    ("armed", "announced"): "announced",
    ("announced", "started"): "running",
    **{(phase, "retired"): "retired" for phase in PLANNED},
    **{(phase, "sealed"): "sealed" for phase in PHASES if phase not in ENDED},
    ("sealed", "booked"): "booked",
}


class _Plan(Protocol):
    def close(self) -> None: ...


class Turn(Protocol):
    """What the machine reads and writes of a run (``bir.hooks.session.state.Run``)."""

    phase: Phase
    end: PlanEnd

    @property
    def plan(self) -> _Plan | None: ...


def can(phase: Phase, event: Event) -> bool:
    """Whether ``event`` moves a run in ``phase``."""
    return (phase, event) in TRANSITIONS


def advance(run: Turn, event: Event) -> bool:
    """Move ``run`` by ``event``; False (and nothing changed) where the table has no such transition."""
    target = TRANSITIONS.get((run.phase, event))
    if target is None:
        return False
    run.phase = target
    return True


def retire(run: Turn, end: PlanEnd) -> bool:
    """End ``run``'s plan once, booking ``end`` as how it ended; False when it had ended already."""
    if not advance(run, "retired"):
        return False
    run.end = end
    if run.plan is not None:
        run.plan.close()
    return True
