"""A direct plan's run (spec §6.3): ``run_scenario`` reaches ``/scenario/run``, the plan's steps run
through the session's own proxies, and the results come back with the response model."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

from bir.core import config
from bir.core.bundle import MAX_REPLAY_REASON
from bir.core.log import log_event
from bir.core.plan import TAG, PlanError
from bir.hooks import api
from bir.hooks.server.work_queue import ProxyWorkQueue
from bir.hooks.session.executor import SessionExecutor
from bir.hooks.session.state import Run, SessionTable
from bir.hooks.session.turn import LIVE, advance

# A direct run stays under this, so it answers before bir-scenario gives up (§10).
DIRECT_CEILING_S: Final = 270.0
NOT_RUN_NOTE: Final = (
    f"{TAG} The prepared scenario for this request is not being run. Do the task yourself with your tools; "
    "do not call mcp__bir__run_scenario."
)
ALREADY_RUNNING: Final = (
    "this scenario is already running for this turn — its results come back to the earlier run_scenario call"
)


class DirectRunner:
    """Runs the direct plans of a control server's sessions."""

    def __init__(
        self,
        *,
        queue: ProxyWorkQueue,
        sessions: SessionTable,
        allow: Callable[[], frozenset[str] | None],
        clock: Callable[[], float],
        settings: config.Settings,
    ) -> None:
        self._settings = settings
        self._queue = queue
        self._sessions = sessions
        self._allow = allow
        self._clock = clock

    async def run(self, request: api.ScenarioRunRequest) -> api.ScenarioRunAnswer:
        """Run the request's armed direct plan (§6.3, §16.1) and answer its results, or why it did not run."""
        run = self.run_for(request)
        if run is None or run.plan is None:
            return api.ScenarioRunAnswer(ok=False, why=api.NO_PLAN)
        if not advance(run, "started"):
            return api.ScenarioRunAnswer(ok=False, why=ALREADY_RUNNING)
        plan = run.plan
        settings = self._settings
        budget_s = (settings.replay_budget_ms or settings.replay_plan_budget_ms) / 1000
        derive_s = settings.derive_budget_ms / 1000
        if derive_s + budget_s > DIRECT_CEILING_S:
            derive_s = min(derive_s, 60.0)
            budget_s = max(1.0, DIRECT_CEILING_S - derive_s)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(plan.ready(), derive_s)
        except PlanError as exc:
            run.end = "handed_over"
            return api.ScenarioRunAnswer(ok=False, why=exc.note or NOT_RUN_NOTE, note=True)
        executor = SessionExecutor(
            self._queue,
            session_id=run.session_id,
            step_timeout_s=settings.step_timeout_ms / 1000,
            allow=self._allow(),
            deadline=self._clock() + budget_s,
        )
        try:
            bundle = await plan.compose_bundle(MAX_REPLAY_REASON, executor, deadline=self._clock() + budget_s)
        except asyncio.CancelledError:
            run.end = "cancelled"
            session = self._sessions.get(run.session_id)
            if session is not None and plan.note:
                session.pending_note = plan.note
            log_event("replay.run_cancelled", run_id=run.run_id, steps_run=plan.current_step_index)
            raise
        if bundle.stop is None:
            model: dict[str, Any] | None = None
            try:
                model = await plan.response_model()
            except PlanError as exc:
                log_event("replay.response_failed", run_id=run.run_id, error=exc.message)
            run.end = "completed"
            log_event("scenario.answered", run_id=run.run_id, steps=plan.step_count, partial=False)
            # §6.3 / §16.1: the model reads the results and the response model the scenario computed from them.
            return api.ScenarioRunAnswer(
                ok=True, text=bundle.text, response_model=model, steps=bundle.steps_run, partial=False
            )
        run.end = "out_of_time" if bundle.stop.kind == "out_of_time" else "handed_over"
        if bundle.steps_run == 0 and not bundle.tool_ran_at_stop:
            return api.ScenarioRunAnswer(ok=False, why=bundle.text, note=True)
        return api.ScenarioRunAnswer(ok=True, text=bundle.text, steps=bundle.steps_run, partial=True)

    def run_for(self, request: api.ScenarioRunRequest) -> Run | None:
        """The run whose ``run_scenario`` call this is: by the host's tool-use id, else the one waiting."""
        waiting = [
            session.run
            for session in self._sessions
            if session.run is not None
            and session.run.plan is not None
            and session.run.bound_tool_use_id is not None
            and session.run.phase in LIVE
        ]
        if request.tool_use_id is not None:
            return next((run for run in waiting if run.bound_tool_use_id == request.tool_use_id), None)
        if len(waiting) > 1:
            log_event("replay.run_ambiguous", sessions=[run.session_id for run in waiting])
            return None
        return waiting[0] if waiting else None
