"""Where a live session's state lives (spec §9 change 1): sessions by ``session_id``, each with its turn.

A run is a turn (``UserPromptSubmit`` → ``Stop``); its plan, its match and its recording hang off it,
so a second prompt never inherits a stale plan. The table is bounded: idle sessions are dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from bir.core.coverage import StepReach
from bir.core.outcome import PlanEnd
from bir.core.plan import ScenarioReplayPlan
from bir.core.source_run import SourceRun
from bir.core.transcript import UsageMark
from bir.core.types import Matched
from bir.hooks.session.turn import Phase

MAX_SESSIONS: Final = 256
SESSION_IDLE_S: Final = 6 * 3600.0
MAX_PENDING_CALLS: Final = 256
# Tool-use ids a run's hooks saw (a call no hook saw is recorded from the transcript, and never pinned past).
MAX_SEEN_CALLS: Final = 4096


@dataclass
class PendingCall:
    """A tool call seen at ``PreToolUse`` and not yet settled at ``PostToolUse``."""

    tool_use_id: str
    tool_name: str
    tool_input: Any
    started: float


@dataclass
class Pin:
    """A pinned call, from its ``PreToolUse`` until its output threads (or the plan hands over)."""

    tool_use_id: str
    position: int
    tool_name: str
    reach: StepReach
    host_done_at: float | None = None
    threaded: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def touch(self) -> None:
        self.changed.set()


@dataclass
class SteerState:
    """A steer plan's live state, on its run."""

    pins: dict[str, Pin] = field(default_factory=dict)
    in_flight: Pin | None = None
    declined: bool = False
    # tool_use_id → the note its PostToolUse carries (an abandoned plan's "the arguments are yours").
    notes: dict[str, str] = field(default_factory=dict)
    source: SourceRun | None = None
    deciding: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class Run:
    """One turn of one session; ``phase`` moves only through ``bir.hooks.session.turn.advance``."""

    run_id: str
    session_id: str
    prompt: str
    started: float
    mark: UsageMark | None
    transcript_path: str | None
    permission_mode: str | None
    phase: Phase = "matching"
    # Facts about the turn that its phase does not say.
    recording: bool = False
    # A replayed turn the service asked to have recorded too (the local service: a hand-over the model
    # finishes its own way repairs the scenario); and how many of its plan's executed steps went in.
    recording_replay: bool = False
    plan_steps_recorded: int = 0
    prompt_answered: bool = False
    matched: Matched | None = None
    plan: ScenarioReplayPlan | None = None
    end: PlanEnd = "completed"
    derive_cost_usd: float = 0.0
    steps_planned: int = 0
    bound_tool_use_id: str | None = None
    veto_note_for: str | None = None
    last_answer: str | None = None
    sealed_at: float | None = None
    pending: dict[str, PendingCall] = field(default_factory=dict)
    seen_calls: set[str] = field(default_factory=set)
    # A steer plan's pins and notes (§7); None for a direct plan or no plan.
    steer: SteerState | None = None
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    # The recording of a settled call (it may wait for its proxy's report): the seal waits for them.
    recordings: set[asyncio.Task[Any]] = field(default_factory=set)

    def saw(self, tool_use_id: str | None) -> None:
        """A hook of this run saw the call ``tool_use_id``."""
        if tool_use_id is not None and len(self.seen_calls) < MAX_SEEN_CALLS:
            self.seen_calls.add(tool_use_id)

    @property
    def ticket(self) -> str | None:
        return None if self.matched is None else self.matched.execution_ticket

    @property
    def scenario_id(self) -> str | None:
        if self.matched is None:
            return None
        scenario = self.matched.scenario
        return self.matched.scenario_id or (scenario.id if scenario is not None else None)


@dataclass
class Session:
    session_id: str
    last_seen: float
    run: Run | None = None
    pending_note: str | None = None
    # When this server first heard of the session (monotonic).
    started: float = 0.0


class SessionTable:
    """Sessions by id, most recently heard from last; bounded by count and idleness."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, idle_s: float = SESSION_IDLE_S) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._max = max_sessions
        self._idle_s = idle_s

    def touch(self, session_id: str, now: float | None = None) -> Session:
        now = time.monotonic() if now is None else now
        session = self._sessions.pop(session_id, None) or Session(session_id, now, started=now)
        session.last_seen = now
        self._sessions[session_id] = session
        self._prune(now)
        return session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def drop(self, session_id: str) -> Session | None:
        return self._sessions.pop(session_id, None)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def _prune(self, now: float) -> None:
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if len(self._sessions) > self._max or now - oldest.last_seen > self._idle_s:
                del self._sessions[oldest.session_id]
            else:
                break
