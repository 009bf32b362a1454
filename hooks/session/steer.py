"""Steer mode in a live session (spec §7, §7.1-§7.3) and divergence, tier 1 and 2 (§8).

The model chooses which tool and when; bir swaps in the step's computed arguments when the model
makes the expected call (the pin), threads each real output into the next step from the source that
recorded it, and, when the model goes off-script, runs the not-yet-run ``direct`` steps itself through
the proxies and answers with the bundle in that call's place.

Every pin is an auto-approved call with computed arguments (§13.2), so a pin is kept only for a call
the pin guard accepts, one pin is in flight at a time, and a pinned step that fails hands the task
over: nothing after it is pinned or approved.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from bir.core import config
from bir.core.bundle import MAX_REPLAY_REASON
from bir.core.coverage import reach_of
from bir.core.delivery import deliver
from bir.core.housekeeping import is_housekeeping
from bir.core.log import log_event
from bir.core.outcome import PlanEnd
from bir.core.pin_guard import pin_compatible
from bir.core.plan import TAG, PlanError, PlanStateError, ScenarioReplayPlan
from bir.core.service import ServiceClient
from bir.core.source_run import SourceRun
from bir.core.tool_output import step_output_text
from bir.core.truncate import cut
from bir.core.types import parse_qualified_name
from bir.hooks import api
from bir.hooks.server.work_queue import ProxyWorkQueue
from bir.hooks.session.executor import SessionExecutor
from bir.hooks.session.state import Pin, Run, SteerState
from bir.hooks.session.turn import ENDED, LIVE, advance, retire

RUN_SCENARIO_TOOL: Final = api.RUN_SCENARIO_TOOL
# §7.2: how long a wrapped step's PostToolUse waits for its proxy's report before threading the hook's view.
PROXY_REPORT_GRACE_S: Final = 1.5
# §7: a call arriving beside a pin that has not threaded waits this long after the host reported the
# pinned call finished, or this long while it has not.
THREAD_WAIT_AFTER_DONE_S: Final = 1.75
THREAD_WAIT_RUNNING_S: Final = 0.2
# A PreToolUse answers this long before its route's deadline, so its answer is never the late `{}`.
ANSWER_MARGIN_S: Final = 0.3

OWN_ARGUMENTS_NOTE: Final = (
    f"{TAG} The prepared tool sequence for this request is no longer steered: the arguments of your tool "
    "calls are your own from now on. Continue the task yourself."
)
UNSEEN_NOTE: Final = (
    f"{TAG} An earlier tool call of yours ran before bir could see it, so the prepared tool sequence for this "
    "request is no longer steered: the arguments of your tool calls are your own from now on. Continue the "
    "task yourself, and do not repeat what already ran."
)


async def _none_unseen(run: Run) -> list[Any]:
    return []


def _answer(decision: api.HookSpecificOutput) -> api.HookAnswer:
    return api.HookAnswer(hook_specific_output=decision)


def allow(updated_input: Mapping[str, Any], reason: str) -> api.HookAnswer:
    return _answer(
        api.HookSpecificOutput(
            hook_event_name="PreToolUse",
            permission_decision="allow",
            permission_decision_reason=reason,
            updated_input=dict(updated_input),
        )
    )


def deny(reason: str) -> api.HookAnswer:
    return _answer(
        api.HookSpecificOutput(
            hook_event_name="PreToolUse",
            permission_decision="deny",
            permission_decision_reason=cut(reason, MAX_REPLAY_REASON),
        )
    )


def context(event: str, text: str) -> api.HookAnswer:
    return _answer(api.HookSpecificOutput(hook_event_name=event, additional_context=cut(text, 9_500)))


class SteerDriver:
    """Answers ``PreToolUse`` and ``PostToolUse`` for runs whose plan is a steer plan."""

    def __init__(
        self,
        *,
        queue: ProxyWorkQueue,
        wrapped: set[str],
        service: ServiceClient,
        allow_servers: Callable[[], frozenset[str] | None],
        proxy_report: Callable[[str, float], Awaitable[api.StepReport | None]],
        unseen_calls: Callable[[Run], Awaitable[list[Any]]] = _none_unseen,
        clock: Callable[[], float] = time.monotonic,
        settings: config.Settings,
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.wrapped = wrapped
        self.service = service
        self.allow_servers = allow_servers
        self.proxy_report = proxy_report
        # This turn's calls no hook saw (made before the tool hooks' server connected), from the transcript.
        self.unseen_calls = unseen_calls
        self._clock = clock

    # -- PreToolUse --------------------------------------------------------------------------------

    async def pre(self, run: Run, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        """The answer to a tool call while ``run`` holds a steer plan; ``deadline`` is the route's (monotonic)."""
        plan, state = run.plan, run.steer
        tool, tool_use_id = hook.tool_name, hook.tool_use_id
        if plan is None or state is None or run.phase not in LIVE:
            return api.EMPTY_HOOK_ANSWER
        if tool == RUN_SCENARIO_TOOL or tool is None or is_housekeeping(tool, hook.tool_input):
            return api.EMPTY_HOOK_ANSWER
        if hook.permission_mode == "plan":
            # Plan mode: nothing is pinned or approved (§14).
            return api.EMPTY_HOOK_ANSWER
        # Parallel tool calls reach this concurrently: one decides at a time, so two calls can never be
        # pinned to the same step (the second sees the first's pin in flight). A call beside any pin in
        # flight, the last step's included, waits for it to thread or hands over: otherwise a second call
        # would be approved for the same step, or a divergence would run that step again (§7).
        async with state.deciding:
            pin = state.in_flight
            if pin is not None and not await self._wait_for_thread(pin, deadline):
                return self._concurrent(run, plan, pin)
            if run.phase not in LIVE or plan.stopped or plan.is_done():
                return api.EMPTY_HOOK_ANSWER
            first = not state.pins and plan.current_step_index == 0 and tool_use_id is not None
            if first and tool_use_id is not None and await self.unseen_calls(run):
                # The model already did something no hook saw (maybe a step): nothing is pinned or run past
                # it, and the task is handed back (§7).
                state.notes[tool_use_id] = UNSEEN_NOTE
                self._end(run, plan, "retired")
                return api.EMPTY_HOOK_ANSWER
            advance(run, "started")
            if tool_use_id is not None and tool == plan.expected_tool():
                return await self._pin(run, plan, state, hook, tool_use_id)
            if state.declined and tool_use_id is not None:
                # The model did the declined step its own way and moved on: nothing is run for it (§7).
                state.notes[tool_use_id] = OWN_ARGUMENTS_NOTE
                log_event("replay.pin_abandoned", run_id=run.run_id, scenario_id=plan.scenario_id, tool=tool)
                self._end(run, plan, "retired")
                return api.EMPTY_HOOK_ANSWER
            return await self._diverge(run, plan, hook, deadline)

    async def _wait_for_thread(self, pin: Pin, deadline: float) -> bool:
        """Wait for the in-flight pin to thread (§7); False when it is still beside this call."""
        began = self._clock()
        while not pin.threaded:
            limit = pin.host_done_at + THREAD_WAIT_AFTER_DONE_S if pin.host_done_at else began + THREAD_WAIT_RUNNING_S
            left = min(limit, deadline - ANSWER_MARGIN_S) - self._clock()
            if left <= 0:
                return False
            pin.changed.clear()
            try:
                await asyncio.wait_for(pin.changed.wait(), left)
            except TimeoutError:
                continue
        return True

    def _concurrent(self, run: Run, plan: ScenarioReplayPlan, pin: Pin) -> api.HookAnswer:
        note = plan.hand_over("concurrent", step=pin.position + 1, in_flight=pin.position)
        log_event("replay.concurrent_call", run_id=run.run_id, scenario_id=plan.scenario_id, in_flight=pin.position)
        self._end(run, plan, "concurrent")
        return deny(note)

    async def _pin(
        self, run: Run, plan: ScenarioReplayPlan, state: SteerState, hook: api.HookInput, tool_use_id: str
    ) -> api.HookAnswer:
        tool = hook.tool_name or ""
        position = plan.current_step_index
        # §10: the first pin waits for the derivation at most min(BIR_DERIVE_BUDGET_MS, BIR_HOOK_DERIVE_BUDGET_MS);
        # past it the plan hands over and its note takes the call's place.
        limit_ms = min(self.settings.derive_budget_ms, self.settings.hook_derive_budget_ms)
        limit_s = limit_ms / 1000
        readying = asyncio.ensure_future(plan.ready())
        # Past the wait it goes on in the background; its failure is met again at the plan's next use.
        readying.add_done_callback(_quietly)
        try:
            await asyncio.wait_for(asyncio.shield(readying), limit_s)
        except TimeoutError:
            note = plan.hand_over("params_failed", f"the parameters were not derived within {limit_s:g} s")
            log_event("replay.derive_slow", run_id=run.run_id, scenario_id=plan.scenario_id, within_ms=limit_ms)
            self._end(run, plan, "handed_over")
            return deny(note)
        except (PlanError, PlanStateError):
            pass  # met again, with its note, just below
        try:
            pinned = await plan.tool_input_for_current_step()
        except PlanError as exc:
            # Not a divergence: running the rest would start at this same step and fail again (§8).
            log_event("replay.input_failed", run_id=run.run_id, scenario_id=plan.scenario_id, step=position)
            self._end(run, plan, "handed_over")
            return deny(exc.note or plan.note or OWN_ARGUMENTS_NOTE)
        except PlanStateError:
            return api.EMPTY_HOOK_ANSWER
        model_args = hook.tool_input if isinstance(hook.tool_input, dict) else {}
        verdict = pin_compatible(tool, model_args, pinned)
        if not verdict.ok:
            state.declined = True
            log_event(
                "replay.pin_declined",
                run_id=run.run_id,
                scenario_id=plan.scenario_id,
                step=position,
                why=verdict.reason,
            )
            return api.EMPTY_HOOK_ANSWER
        state.declined = False
        pin = Pin(tool_use_id, position, tool, reach_of(tool, self.wrapped))
        state.pins[tool_use_id] = pin
        state.in_flight = pin
        log_event("replay.pinned", run_id=run.run_id, scenario_id=plan.scenario_id, step=position, tool=tool)
        return allow(self.with_call_id(tool, pinned), "bir: the prepared scenario's arguments for this step")

    def with_call_id(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """§7.1: the pinned arguments, plus a call id where a live proxy of a wrapped server will strip it."""
        parsed = parse_qualified_name(tool)
        if parsed is None or parsed[0] not in self.wrapped or not self.queue.is_served(parsed[0]):
            return dict(arguments)
        return {**arguments, api.CALL_ID_KEY: mint_call_id()}

    # -- divergence (§8) ----------------------------------------------------------------------------

    async def _diverge(
        self, run: Run, plan: ScenarioReplayPlan, hook: api.HookInput, deadline: float
    ) -> api.HookAnswer:
        budget_s = self.settings.pretool_replay_budget_ms / 1000
        until = min(self._clock() + budget_s, deadline - ANSWER_MARGIN_S)
        executor = SessionExecutor(
            self.queue,
            session_id=run.session_id,
            step_timeout_s=self.settings.step_timeout_ms / 1000,
            allow=self.allow_servers(),
            deadline=until,
        )
        state = run.steer
        if state is not None and state.source is None and run.matched is not None:
            # Fetched lazily, once per turn, only when a stand-in is allowed at all (§8.1).
            state.source = SourceRun(self.service if self.service.configured else None, run.matched.run_id)
        log_event("replay.diverged", run_id=run.run_id, scenario_id=plan.scenario_id, tool=hook.tool_name)
        try:
            bundle = await plan.compose_bundle(
                MAX_REPLAY_REASON, executor, deadline=until, recorded=state.source if state else None
            )
        except Exception as exc:  # noqa: BLE001 - tier 2: composition threw; the turn continues as an ordinary one
            log_event("replay.compose_failed", run_id=run.run_id, error=cut(f"{type(exc).__name__}: {exc}", 500))
            self._end(run, plan, "compose_failed")
            return api.EMPTY_HOOK_ANSWER
        stop = bundle.stop
        self._end(run, plan, "out_of_time" if stop is not None and stop.kind == "out_of_time" else "diverged")
        if bundle.steps_run == 0 and bundle.steps_recorded == 0 and not bundle.tool_ran_at_stop:
            if stop is not None and stop.kind == "no_answer":
                # A step was sent and never answered: the note alone takes the call's place.
                return deny(bundle.text)
            return api.EMPTY_HOOK_ANSWER
        delivery = deliver(bundle.text, hook.tool_name, self.settings.home)
        log_event(
            "replay.delivered",
            run_id=run.run_id,
            channel=delivery.channel,
            steps_run=bundle.steps_run,
            steps_recorded=bundle.steps_recorded,
            chars=len(bundle.text),
        )
        if delivery.command is not None:
            given = hook.tool_input if isinstance(hook.tool_input, dict) else {}
            return allow({**given, "command": delivery.command}, "bir: the scenario's results for this request")
        return deny(delivery.reason or bundle.text)

    def overdue(self, run: Run) -> api.HookAnswer:
        """The answer when a ``PreToolUse`` reaches its route's deadline (§14): a divergence's note in the
        call's place, or ``{}`` with a plan still getting ready retired."""
        plan = run.plan
        if plan is None or run.phase in ENDED:
            return api.EMPTY_HOOK_ANSWER
        if plan.note:
            log_event("replay.diverge_overran", run_id=run.run_id, scenario_id=plan.scenario_id)
            return deny(plan.note)
        if run.phase in LIVE:
            log_event("replay.pin_overran", run_id=run.run_id, scenario_id=plan.scenario_id)
            self._end(run, plan, "retired")
        return api.EMPTY_HOOK_ANSWER

    # -- PostToolUse -------------------------------------------------------------------------------

    async def post(self, run: Run, hook: api.HookInput, deadline: float) -> api.HookAnswer | None:
        """Thread a pinned call's output (§7.2), or deliver a note owed to this call; None: not ours."""
        state, plan = run.steer, run.plan
        tool_use_id = hook.tool_use_id
        if state is None or plan is None or tool_use_id is None:
            return None
        event = hook.hook_event_name or "PostToolUse"
        pin = state.pins.pop(tool_use_id, None)
        if pin is None:
            note = state.notes.pop(tool_use_id, None)
            return context(event, note) if note else None
        pin.host_done_at = self._clock()
        pin.touch()
        try:
            note = await self._settle(run, plan, pin, hook, deadline)
        finally:
            pin.threaded = True
            pin.touch()
            if state.in_flight is pin:
                state.in_flight = None
        return context(event, note) if note else api.EMPTY_HOOK_ANSWER

    async def _settle(
        self, run: Run, plan: ScenarioReplayPlan, pin: Pin, hook: api.HookInput, deadline: float
    ) -> str | None:
        """Thread ``pin``'s output; answers the hand-over note when the plan stopped here."""
        if plan.stopped or run.phase not in LIVE:
            return None
        if hook.hook_event_name == "PostToolUseFailure" or hook.error is not None:
            detail = cut(hook.error or "the host reported the call failed", 300)
            note = plan.hand_over("tool_error", detail, step=pin.position)
            log_event("replay.pin_failed", run_id=run.run_id, scenario_id=plan.scenario_id, step=pin.position)
            self._end(run, plan, "handed_over")
            return note
        text: str
        if pin.reach == "direct":
            within = max(0.0, min(PROXY_REPORT_GRACE_S, deadline - ANSWER_MARGIN_S - self._clock()))
            report = await self.proxy_report(pin.tool_use_id, within)
            if report is not None and report.error is not None:
                note = plan.hand_over("tool_error", cut(report.error, 300), step=pin.position)
                self._end(run, plan, "handed_over")
                return note
            if report is not None:
                text = step_output_text(pin.tool_name, report.result)
            else:
                log_event(
                    "replay.thread_fallback",
                    run_id=run.run_id,
                    step=pin.position,
                    why="no proxy report — threading the hook's view, rebuilt into the same shape",
                )
                text = step_output_text(pin.tool_name, hook.tool_response or {})
        else:
            text = step_output_text(pin.tool_name, hook.tool_response or {})
        try:
            await plan.apply_output(text)
        except PlanError as exc:
            self._end(run, plan, "handed_over")
            return exc.note or plan.note
        except PlanStateError:
            return None
        log_event("replay.threaded", run_id=run.run_id, scenario_id=plan.scenario_id, step=pin.position)
        if plan.is_done():
            log_event("replay.plan_done", run_id=run.run_id, scenario_id=plan.scenario_id, steps=plan.step_count)
            self._end(run, plan, "completed")
        return None

    # -- the plan's end ----------------------------------------------------------------------------

    def _end(self, run: Run, plan: ScenarioReplayPlan, end: PlanEnd) -> None:
        """Retire the plan once, booking how it ended."""
        retire(run, end)


def _quietly(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def mint_call_id() -> str:
    return f"bir_{uuid.uuid4().hex}"
