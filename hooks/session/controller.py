"""The controller: what bir does at each of Claude Code's hooks, for every session of one project.

It holds one place where a run's state lives (``session_state``): a prompt starts a run and asks the
service for a match (§2); a miss records the turn, a hit runs the gate ladder (§4) and may arm a plan
(``plan.armed``, the directive as ``additionalContext``) or decline it (one ``replay.decision``). A
direct plan (§6) runs when the session's ``run_scenario`` reaches ``/scenario/run``; any other first
call vetoes it (§6.4). ``Stop`` seals the run; its report and its recording's finish go out through the
outbox once the transcript is complete (FACTS.md §5), so no hook ever waits on the network.

Every handler is bounded by its route's deadline (``ControlServer.answer_hook``) and never raises
into a hook: the host session must never fail because of bir.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final

from bir.core import config
from bir.core.coverage import ReplayMode
from bir.core.derive import Derivation, derive_parameters, resolve_api_key
from bir.core.housekeeping import is_housekeeping
from bir.core.log import log_event, log_task_failure
from bir.core.plan import PlanError, PlanStateError, ScenarioReplayPlan
from bir.core.redact import redact_text
from bir.core.service import ServiceClient, ServiceError
from bir.core.tool_kinds import runs_shell, writes_file
from bir.core.transcript import mark_transcript_usage
from bir.core.types import Matched, Scenario, parse_qualified_name
from bir.hooks import api
from bir.hooks.server.routes import ReceivedStep
from bir.hooks.server.work_queue import ProxyWorkQueue
from bir.hooks.session.arming import Armable, DecisionCode, Decline, ladder
from bir.hooks.session.booking import draft, settle
from bir.hooks.session.calls import RECORDING_SETTLE_S, CallRecording
from bir.hooks.session.direct_run import NOT_RUN_NOTE, DirectRunner
from bir.hooks.session.match_gate import MatchGate, ServiceHealth
from bir.hooks.session.ports import ExecutionReports, RunRecorder
from bir.hooks.session.proxy_reports import ProxyReports
from bir.hooks.session.state import PendingCall, Run, Session, SessionTable, SteerState
from bir.hooks.session.steer import RUN_SCENARIO_TOOL, SteerDriver, context
from bir.hooks.session.switches import Switches, SwitchReader
from bir.hooks.session.turn import ENDED, LIVE, advance, retire

# A sealed run's usage is read when the transcript is complete: at SessionEnd, the next prompt, or this long after Stop.
FINALIZE_AFTER_STOP_S: Final = 10.0
# Match and arming together stay under this, inside the prompt route's 7 s deadline (§10).
ARM_BUDGET_S: Final = 6.0
# A steer plan with a shell or file-write step may spend this much of the prompt's budget on its preview (§7).
PREVIEW_BUDGET_S: Final = 1.2
# How long a prompt waits for the proxies bir installed and for bir-scenario's first hello to register
# before the plan's mode is decided (a session's first prompt can beat its MCP servers).
SETTLE_WAIT_S: Final = 2.5

# Why a hit was declined without the prompt waiting on it (§4, §14).
DID_NOT_WAIT: Final[Mapping[DecisionCode, str]] = {
    "replay_off": "replay is off for this project: no prompt waits on the match",
    "service_unhealthy": "the service is cooling down after a failure: the prompt did not wait on the match",
    "match_slow": "the match gate holds prompts off a slow service: the prompt did not wait on the match",
    "match_late": "the match landed after the prompt's budget: it never steers",
}


Evaluator = Any  # the EvaluatorPool (kept abstract: the controller only hands it to the plan)


def _housekeeping(tool_name: str | None, tool_input: object = None) -> bool:
    """Host housekeeping and bir's own tools: never a step, never a divergence."""
    return tool_name is None or is_housekeeping(tool_name, tool_input)


class Controller:
    """Answers the seven hooks and ``/scenario/run`` for one project's control server."""

    def __init__(
        self,
        *,
        queue: ProxyWorkQueue,
        wrapped: set[str],
        pool: Evaluator,
        service: ServiceClient,
        recorder: RunRecorder,
        reports: ExecutionReports,
        switches: SwitchReader,
        delivery_live: Callable[[], bool],
        wait_for_delivery: Callable[[float], Awaitable[bool]] | None = None,
        expected_wrapped: Callable[[], frozenset[str]] = frozenset,
        wrap_approved: Callable[[], Awaitable[list[str]]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        settings: config.Settings | None = None,
    ) -> None:
        self.settings = settings if settings is not None else config.load()
        self.queue = queue
        self.wrapped = wrapped
        self.pool = pool
        self.service = service
        self.recorder = recorder
        self.reports = reports
        self._read_switches = switches
        self._replay_on = False
        self.delivery_live = delivery_live
        self.wait_for_delivery = wait_for_delivery or _no_wait
        self.expected_wrapped = expected_wrapped
        # Wraps the .mcp.json servers approved in Claude Code since the install (``bir.hooks.wiring``).
        self.wrap_approved = wrap_approved
        self._wrapping = asyncio.Lock()
        # server name → when a SessionStart wrapped it: sessions begun by then run it unwrapped to their end.
        self._wrapped_late: dict[str, float] = {}
        self.sessions = SessionTable()
        self.health = ServiceHealth()
        self.gate = MatchGate()
        self._clock = clock
        self.reports_of_proxies = ProxyReports(queue.bind)
        self._tasks: set[asyncio.Task[Any]] = set()
        # Recorded turns being sealed (their steps, then their finish): a shutdown waits for them.
        self.direct = DirectRunner(
            queue=queue,
            sessions=self.sessions,
            allow=lambda: self.switches().allow,
            clock=clock,
            settings=self.settings,
        )
        self.steer = SteerDriver(
            queue=queue,
            wrapped=wrapped,
            service=service,
            allow_servers=lambda: self.switches().allow,
            proxy_report=self.reports_of_proxies.wait,
            unseen_calls=lambda run: self.calls.unseen(run),  # noqa: PLW0108 - self.calls is built below
            clock=clock,
            settings=self.settings,
        )
        self.calls = CallRecording(
            wrapped=wrapped,
            proxy_reports=self.reports_of_proxies,
            recorder=recorder,
            with_call_id=self.steer.with_call_id,
            correlation_decision=self.settings.correlation_decision,
        )

    def switches(self) -> Switches:
        """The project's switches now; the replay switch is kept for ``replay_on``."""
        read = self._read_switches()
        self._replay_on = read.replay
        return read

    def replay_on(self) -> bool:
        """Replay as the switches said when last read (at each hook): the proxies pace their polls by it."""
        return self._replay_on

    def service_cooling(self) -> float | None:
        """Seconds the service still cools down after a failure; None when no service is configured."""
        return self.health.remaining(self._clock()) if self.service.configured else None

    # -- the hook routes ------------------------------------------------------------------------

    async def handle(self, event: str, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        self.queue.note_session(hook.session_id, hook.bir_host_pid)
        session = self.sessions.touch(hook.session_id, self._clock())
        handler = {
            "SessionStart": self._on_start,
            "UserPromptSubmit": self._on_prompt,
            "PreToolUse": self._on_pre,
            "PostToolUse": self._on_post,
            "PostToolUseFailure": self._on_post,
            "Stop": self._on_stop,
            "SessionEnd": self._on_end,
        }.get(event)
        if handler is None:
            return api.EMPTY_HOOK_ANSWER
        return await handler(session, hook, deadline)

    def overdue(self, event: str, hook: api.HookInput) -> api.HookAnswer:
        session = self.sessions.get(hook.session_id)
        run = session.run if session is not None else None
        if event == "UserPromptSubmit" and run is not None:
            # The prompt is answered without the directive: whatever arms later is retired unannounced.
            run.prompt_answered = True
        if event == "PreToolUse" and run is not None and run.plan is not None and run.plan.mode == "steer":
            return self.steer.overdue(run)
        return api.EMPTY_HOOK_ANSWER

    async def _on_start(self, session: Session, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        log_event("session.started", session_id=session.session_id, source=hook.source, host_pid=hook.bir_host_pid)
        wrapped = await self._wrap_approved()
        if not wrapped:
            return api.EMPTY_HOOK_ANSWER
        names = ", ".join(wrapped)
        # For the user, never the model: this session's servers already started unwrapped.
        return api.HookAnswer(
            system_message=f"bir: {names} {'was' if len(wrapped) == 1 else 'were'} approved in Claude Code since "
            f"bir was installed here; from the next session on {'it runs' if len(wrapped) == 1 else 'they run'} "
            "behind bir-proxy, so scenarios calling its tools can run direct."
        )

    async def _wrap_approved(self) -> list[str]:
        """Servers approved since the install, wrapped now for the next session; once each (the store then
        knows them). Never raises: a failure is logged and the session goes on."""
        if self.wrap_approved is None:
            return []
        async with self._wrapping:
            try:
                wrapped = await self.wrap_approved()
            except Exception as exc:  # noqa: BLE001 - the host session must never fail because of bir
                log_event("session.wrap_failed", error=f"{type(exc).__name__}: {exc}"[:500])
                return []
        if wrapped:
            log_event("session.wrapped_approved", servers=wrapped)
            now = self._clock()
            self._wrapped_late.update(dict.fromkeys(wrapped, now))
        return wrapped

    async def _on_prompt(self, session: Session, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        switches = self.switches()
        if switches.off:
            return api.EMPTY_HOOK_ANSWER
        previous = session.run
        if previous is not None:
            self._seal(previous)
            self._finalize(previous)
        now = self._clock()
        run = Run(
            run_id=f"run_{uuid.uuid4().hex}",
            session_id=session.session_id,
            prompt=hook.prompt or "",
            started=now,
            mark=mark_transcript_usage(hook.transcript_path),
            transcript_path=hook.transcript_path,
            permission_mode=hook.permission_mode,
        )
        session.run = run
        note, session.pending_note = session.pending_note, None
        if not self.service.configured:
            return context("UserPromptSubmit", note) if note else api.EMPTY_HOOK_ANSWER
        matching = self._spawn(run, self._match(run, hook))
        now = self._clock()
        # Replay off is exactly v1: no prompt waits on the match, which only decides whether the turn is
        # recorded (§14); a hit is declined when it lands, as while the service cools down or is slow.
        hold: DecisionCode | None = (
            "replay_off"
            if not switches.replay
            else "service_unhealthy"
            if self.health.cooling(now)
            else "match_slow"
            if self.gate.held(now)
            else None
        )
        answer = api.EMPTY_HOOK_ANSWER
        if hold is not None:
            self._spawn(run, self._decide_later(run, matching, hold))
        else:
            answer = await self._arm_from_match(run, matching, hook)
        if note:
            extra = answer.hook_specific_output.additional_context if answer.hook_specific_output else None
            return context("UserPromptSubmit", note + ("\n\n" + extra if extra else ""))
        return answer

    async def _match(self, run: Run, hook: api.HookInput) -> Matched | None:
        metadata = {"cwd": hook.cwd, "sessionId": run.session_id, "promptId": hook.prompt_id}
        began = self._clock()
        try:
            answer = await self.service.match(run.run_id, run.prompt, metadata)
        except ServiceError as exc:
            self.health.failed(self._clock())
            self.gate.slow(self._clock())
            log_event("replay.match_failed", run_id=run.run_id, error=str(exc))
            return None
        self.health.answered()
        took_ms = (self._clock() - began) * 1000
        if took_ms > self.settings.match_slow_ms:
            hold = self.gate.slow(self._clock())
            log_event("replay.match_gate", held_s=hold, took_ms=round(took_ms))
        elif self.gate.fast():
            log_event("replay.match_gate", held_s=0, took_ms=round(took_ms))
        if answer is None:
            if advance(run, "missed"):
                run.recording = True
                self.recorder.start(run.run_id)
            return None
        run.matched = answer.matched
        # A hit that names this turn's run asks for the replayed turn to be recorded too (the local service's
        # extension of §12); the BaseIn service names none, and a replayed turn records nothing.
        record = answer.id is not None and answer.id == run.run_id
        if record:
            run.recording = run.recording_replay = True
            self.recorder.start(run.run_id)
        log_event(
            "run.matched",
            run_id=run.run_id,
            scenario_id=run.scenario_id,
            similarity=answer.matched.similarity if answer.matched else None,
            why="similar prompt — recording the replayed turn as the service asked"
            if record
            else "similar prompt — the service kept its own run; not recording this one",
        )
        return answer.matched

    async def _decide_later(self, run: Run, matching: asyncio.Task[Matched | None], code: DecisionCode) -> None:
        matched = await matching
        if matched is not None:
            self._decline(run, matched, Decline(code, DID_NOT_WAIT[code]))

    async def _arm_from_match(
        self, run: Run, matching: asyncio.Task[Matched | None], hook: api.HookInput
    ) -> api.HookAnswer:
        budget_s = self.settings.match_budget_ms / 1000
        began = self._clock()
        try:
            matched = await asyncio.wait_for(asyncio.shield(matching), budget_s)
        except TimeoutError:
            self._log_decision(run, "match_timeout", "the match did not answer within BIR_MATCH_BUDGET_MS")
            # A match that lands after the prompt's budget never steers; its ticket books the baseline.
            self._spawn(run, self._decide_later(run, matching, "match_late"))
            return api.EMPTY_HOOK_ANSWER
        if matched is None:
            return api.EMPTY_HOOK_ANSWER
        left_s = ARM_BUDGET_S - (self._clock() - began)
        try:
            text = await asyncio.wait_for(self._arm(run, matched), max(0.05, left_s))
        except TimeoutError:
            self._decline(run, matched, Decline("arm_timeout", "the plan was not ready inside the prompt's budget"))
            return api.EMPTY_HOOK_ANSWER
        if text is None:
            return api.EMPTY_HOOK_ANSWER
        if run.prompt_answered:
            # The route already answered without the directive (its deadline passed).
            self._retire(run, "arm_unannounced")
            return api.EMPTY_HOOK_ANSWER
        advance(run, "announced")
        return context("UserPromptSubmit", text)

    async def _arm(self, run: Run, matched: Matched) -> str | None:
        switches = self.switches()
        key = resolve_api_key(self.settings)

        def decide() -> Armable | Decline:
            return ladder(
                matched,
                replay_on=switches.replay,
                min_similarity=self.settings.min_steer_similarity,
                wrapped=self.wrapped,
                delivery_live=self.delivery_live(),
                permission_mode=run.permission_mode,
            )

        # A session's first prompt can come while its MCP servers are still starting (Claude Code starts
        # them beside the first hooks, and a revived control server after them): the proxies bir installed
        # and bir-scenario's hello are given a moment to land, so the mode is decided on what will be there.
        began = self._clock()
        unregistered = self._unregistered(matched, self.sessions.get(run.session_id))
        if unregistered:
            log_event("replay.proxy_wait", run_id=run.run_id, servers=sorted(unregistered))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(self.queue.wait_served(name) for name in unregistered)), SETTLE_WAIT_S
                )
        verdict = decide()
        waiting_for_hello = isinstance(verdict, Decline) and verdict.code == "no_delivery_tool"
        if waiting_for_hello:
            left_s = max(0.0, SETTLE_WAIT_S - (self._clock() - began))
            log_event("replay.hello_wait", run_id=run.run_id, within_ms=int(left_s * 1000))
            if await self.wait_for_delivery(left_s):
                verdict = decide()
        if isinstance(verdict, Decline):
            self._decline(run, matched, verdict)
            return None
        if not advance(run, "arming"):
            return None
        plan = self._plan(run, verdict, key)
        run.plan = plan
        if verdict.mode == "steer":
            run.steer = SteerState()
        run.steps_planned = plan.step_count
        if verdict.scenario.targets:
            try:
                await asyncio.wait_for(plan.ready(), self.settings.hook_derive_budget_ms / 1000)
            except (PlanError, PlanStateError, TimeoutError) as exc:
                reason = exc.message if isinstance(exc, PlanError) else "the parameters were not derived in time"
                self._decline(run, matched, Decline("missing_target", reason))
                return None
        if verdict.mode == "steer" and any(runs_shell(s.tool_name) or writes_file(s.tool_name) for s in plan.steps):
            # §7: only a plan with a shell or file-write step waits for its arguments, so the directive
            # can show them (the pin guard then matches the model's call to what was shown).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(plan.preview_arguments(), PREVIEW_BUDGET_S)
            stop = plan.stop
            if stop is not None and stop.kind == "params_failed":
                # Found at arm time (a value the injection guard refuses, a missing target): declined (§13.2).
                self._decline(run, matched, Decline("missing_target", stop.detail or "the parameters failed"))
                return None
        if not advance(run, "armed"):
            return None
        self._draft(run, matched, armed=True)
        log_event(
            "plan.armed",
            run_id=run.run_id,
            session_id=run.session_id,
            scenario_id=plan.scenario_id,
            mode=plan.mode,
            steps=plan.step_count,
            tools=[step.tool_name for step in plan.steps],
            similarity=matched.similarity,
        )
        return plan.steering_directive()

    def _unregistered(self, matched: Matched, session: Session | None) -> set[str]:
        """The servers of the scenario's MCP steps that bir installed behind a proxy and whose proxy has not
        registered yet (one wrapped at a SessionStart since this session began will not, in this session)."""
        scenario = matched.scenario
        if scenario is None:
            return set()
        began = session.started if session is not None else 0.0
        expected = {n for n in self.expected_wrapped() if self._wrapped_late.get(n, float("-inf")) < began}
        servers = {parsed[0] for step in scenario.steps if (parsed := parse_qualified_name(step.tool_name))}
        return {name for name in servers if name in expected and name not in self.wrapped}

    def _plan(self, run: Run, armable: Armable, key: str | None) -> ScenarioReplayPlan:
        scenario: Scenario = armable.scenario
        mode: ReplayMode = armable.mode
        budget_s = max(self.settings.service_timeout_ms, self.settings.derive_budget_ms) / 1000

        async def derive() -> Mapping[str, object]:
            derivation: Derivation = await derive_parameters(
                prompt=run.prompt,
                scenario=scenario,
                api_key=key,
                service=self.service if not self.health.cooling(self._clock()) else None,
                timeout_s=budget_s,
                model=self.settings.derive_model,
                redact=redact_text,
            )
            run.derive_cost_usd = derivation.cost_usd
            log_event(
                "replay.derived",
                run_id=run.run_id,
                source=derivation.source,
                derived=derivation.derived,
                missing=list(derivation.missing),
                reason=derivation.reason,
                cost_usd=derivation.cost_usd,
            )
            return derivation.params

        return ScenarioReplayPlan(
            scenario, mode, derive(), self.pool, recorded_fallback=self.settings.replay_recorded_outputs
        )

    # -- tool calls -------------------------------------------------------------------------------

    async def _on_pre(self, session: Session, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        if self.switches().off:
            return api.EMPTY_HOOK_ANSWER
        run = session.run
        tool, tool_use_id = hook.tool_name, hook.tool_use_id
        if tool_use_id is not None:
            self.reports_of_proxies.note_call(tool_use_id, session.session_id)
        if run is not None:
            run.saw(tool_use_id)
        if run is None or run.phase in ENDED:
            return api.EMPTY_HOOK_ANSWER
        self.calls.hold_plan_steps(run)
        if tool_use_id is not None and tool is not None and len(run.pending) < 256:
            run.pending[tool_use_id] = PendingCall(tool_use_id, tool, hook.tool_input, self._clock())
        plan = run.plan
        if plan is not None and plan.mode == "steer":
            return await self.steer.pre(run, hook, deadline)
        if plan is None:
            return self.calls.correlate(run, hook)
        if plan.mode != "direct" or run.phase not in LIVE:
            return api.EMPTY_HOOK_ANSWER
        if tool == RUN_SCENARIO_TOOL and run.bound_tool_use_id is None and await self.calls.unseen(run):
            # A call no hook saw came first (made before the `bir` server was connected): §6.4's veto.
            if self._retire(run, "vetoed"):
                run.veto_note_for = tool_use_id
            return api.EMPTY_HOOK_ANSWER
        if tool == RUN_SCENARIO_TOOL:
            if run.bound_tool_use_id is None and run.permission_mode != "plan":
                run.bound_tool_use_id = tool_use_id
                log_event("replay.run_bound", run_id=run.run_id, session_id=run.session_id, tool_use_id=tool_use_id)
                return api.HookAnswer(
                    hook_specific_output=api.HookSpecificOutput(
                        hook_event_name="PreToolUse",
                        permission_decision="allow",
                        permission_decision_reason="bir: the prepared scenario for this request",
                    )
                )
            return api.EMPTY_HOOK_ANSWER
        if _housekeeping(tool, hook.tool_input):
            return api.EMPTY_HOOK_ANSWER
        if run.phase == "announced" and self._retire(run, "vetoed"):
            # §6.4: a direct plan never diverges; any other first call (or a run_scenario that never
            # reached us) retires it without running anything, and the call runs as written.
            run.veto_note_for = tool_use_id
        return api.EMPTY_HOOK_ANSWER

    async def _on_post(self, session: Session, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        run = session.run
        tool, tool_use_id = hook.tool_name, hook.tool_use_id
        if run is None or tool_use_id is None:
            return api.EMPTY_HOOK_ANSWER
        call = run.pending.pop(tool_use_id, None)
        run.saw(tool_use_id)
        self.calls.hold_plan_steps(run)
        failed = hook.hook_event_name == "PostToolUseFailure" or hook.error is not None
        if run.recording and not _housekeeping(tool, hook.tool_input) and tool is not None:
            duration = hook.duration_ms if hook.duration_ms is not None else None
            if duration is None and call is not None:
                duration = (self._clock() - call.started) * 1000
            recording = self._spawn(run, self.calls.record(run, tool, hook, failed, duration))
            run.recordings.add(recording)
            recording.add_done_callback(run.recordings.discard)
        event = hook.hook_event_name or "PostToolUse"
        plan = run.plan
        if (
            plan is not None
            and plan.mode == "direct"
            and tool == RUN_SCENARIO_TOOL
            and tool_use_id == run.bound_tool_use_id
            and run.phase == "announced"
        ):
            # Refused, denied or failed on the way: never override it by running the same steps another way.
            self._retire(run, "vetoed")
            return context(event, NOT_RUN_NOTE)
        if run.veto_note_for is not None and tool_use_id == run.veto_note_for:
            run.veto_note_for = None
            return context(event, NOT_RUN_NOTE)
        steered = await self.steer.post(run, hook, deadline)
        if steered is not None and steered != api.EMPTY_HOOK_ANSWER:
            return steered
        if session.pending_note:
            note, session.pending_note = session.pending_note, None
            return context(event, note)
        return api.EMPTY_HOOK_ANSWER

    # -- proxies ----------------------------------------------------------------------------------

    async def on_step(self, received: ReceivedStep) -> None:
        """A proxy's report: kept for its hook, and binding the proxy to its call's session (FACTS.md §4)."""
        self.reports_of_proxies.add(received.report)

    # -- run_scenario (§6.3) ----------------------------------------------------------------------

    # -- run_scenario (§6.3) ----------------------------------------------------------------------

    async def run_scenario(self, request: api.ScenarioRunRequest) -> api.ScenarioRunAnswer:
        return await self.direct.run(request)

    # -- sealing and reporting --------------------------------------------------------------------

    async def _on_stop(self, session: Session, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        run = session.run
        if run is not None:
            if hook.last_assistant_message:
                run.last_answer = hook.last_assistant_message
            self._seal(run)
            self._spawn_detached(self._finalize_later(run))
        return api.EMPTY_HOOK_ANSWER

    async def _on_end(self, session: Session, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        run = session.run
        if run is not None:
            self._seal(run)
            self._finalize(run)
        self.queue.end_session(session.session_id)
        self.sessions.drop(session.session_id)
        return api.EMPTY_HOOK_ANSWER

    def _seal(self, run: Run) -> None:
        if run.phase in ENDED:
            return
        self.calls.hold_plan_steps(run)
        plan = run.plan
        if plan is not None and plan.mode == "direct" and run.phase in ("arming", "armed", "announced"):
            # §6.4: a direct plan whose run_scenario never came books not_steered.
            self._retire(run, "vetoed")
        elif plan is not None and plan.mode == "steer":
            # The turn ended with the plan still armed: whatever threaded is work done, the rest was the model's.
            retire(run, "retired")
        advance(run, "sealed")
        run.sealed_at = self._clock()

    async def _finalize_later(self, run: Run) -> None:
        await asyncio.sleep(FINALIZE_AFTER_STOP_S)
        self._finalize(run)

    def _finalize(self, run: Run) -> None:
        settle(
            run,
            seal_recording=lambda finish: self.calls.seal_later(run, finish),
            reports=self.reports,
            now=self._clock(),
        )

    # -- decisions ----------------------------------------------------------------------------------

    def _log_decision(self, run: Run, code: DecisionCode, why: str) -> None:
        log_event(
            "replay.decision",
            code=code,
            why=why,
            run_id=run.run_id,
            session_id=run.session_id,
            scenario_id=run.scenario_id,
        )

    def _decline(self, run: Run, matched: Matched, decline: Decline) -> None:
        """The turn's one decision, a refusal: logged once, the plan (if one was being made) dropped."""
        if not advance(run, "declined"):
            return
        if run.plan is not None:
            run.plan.close()
            run.plan, run.steer = None, None
        self._log_decision(run, decline.code, decline.why)
        self._draft(run, matched, armed=False)

    def _retire(self, run: Run, code: DecisionCode) -> bool:
        """Retire an armed plan before it ran (``vetoed``, ``arm_unannounced``), logged once."""
        plan = run.plan
        if plan is None or not retire(run, "retired"):
            return False
        event = "replay.vetoed" if code == "vetoed" else "replay.decision"
        log_event(event, code=code, run_id=run.run_id, session_id=run.session_id, scenario_id=plan.scenario_id)
        return True

    def _draft(self, run: Run, matched: Matched, *, armed: bool) -> None:
        ticket, scenario_id = matched.execution_ticket, run.scenario_id
        if ticket is not None and scenario_id is not None:
            self.reports.draft_report(ticket, scenario_id, draft(run, ticket, armed=armed))

    # -- tasks --------------------------------------------------------------------------------------

    def _spawn(self, run: Run, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        run.tasks.add(task)
        task.add_done_callback(run.tasks.discard)
        task.add_done_callback(log_task_failure)
        return task

    def _spawn_detached(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(log_task_failure)

    async def close(self) -> None:
        """Finalize every open run (a shutdown books what it knows) and stop background work."""
        for session in self.sessions:
            if session.run is not None:
                self._seal(session.run)
                self._finalize(session.run)
        await self.calls.sealed(RECORDING_SETTLE_S + 1.0)
        for task in list(self._tasks):
            task.cancel()


async def _no_wait(within_s: float) -> bool:
    return False
