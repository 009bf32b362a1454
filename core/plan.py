"""``ScenarioReplayPlan``: one armed scenario's state for one run (spec §9, §8, §6.4, §7, §11.2a).

The plan holds what flows between steps: ``params`` (derivation, then ``paramsLogic`` once, inside
``ready()``) and ``respParams`` (``{}``, then each step's ``toolOutputLogic`` merged in). A steer plan is
driven one hook at a time (``tool_input_for_current_step`` at ``PreToolUse``, ``apply_output`` at
``PostToolUse``); a direct plan, or a divergence, runs every remaining step through an executor in
``compose_bundle``.

A step that produced no result ends the plan there: every later step reading ``respParams`` would
compute on a result that does not exist. The plan then holds a ``Stop`` and the hand-over note that
says which steps ran and what may be assumed about the one it stopped at. Every step the run reached
gets a verdict in ``ledger``, keyed by step index, and a logic failure is booked on its step *before*
the typed ``PlanError`` leaves the plan, because after that nothing knows which step it belonged to.

Where the plan is in its run is one explicit value, ``state`` (a ``PlanState``: arming, ready,
steering, composing, stopped, done). The plan is driven by one caller at a time (the controller
serialises its hooks); a call while ``compose_bundle`` runs is refused with ``PlanStateError``. It runs
on asyncio, like the evaluator. The directive text lives in ``bir.core.directive`` and what an executor
answers in ``bir.core.step_result``; both are re-exported here for the modules that import them from here.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn

from bir.core.bundle import BundleEntry, assemble_bundle
from bir.core.coverage import ReplayMode
from bir.core.directive import (
    MAX_DIRECTIVE_CHARS,
    TAG,
    reads_resp_params,
    shown_arguments,
    steering_directive,
)
from bir.core.errors import LogicError
from bir.core.handover import Stop, StopKind, handover_note
from bir.core.log import log_event
from bir.core.logic import (
    Evaluator,
    eval_params_logic,
    eval_response_params_logic,
    eval_tool_input_logic,
    eval_tool_output_logic,
    merge_resp_params,
)
from bir.core.outcome import ExecutionStage, StepLedger, StepStatus, StepVerdict
from bir.core.redact import redact_text
from bir.core.safety import SafetyVerdict, check_derived_values, check_output_values, hides_names
from bir.core.source_run import RecordedOutputs, SourceRun
from bir.core.step_guard import check_recorded_shape, command_keys
from bir.core.step_result import (
    MAX_TOOL_ERROR_CHARS,
    ExecuteStep,
    StepNoAnswer,
    StepNotSent,
    StepRan,
    StepResult,
    StepToolError,
    tool_error_of,
)
from bir.core.truncate import cut, one_line
from bir.core.types import Scenario, ScenarioStep

# What other modules import from here, though it lives in its own module now.
__all__ = [
    "MAX_DIRECTIVE_CHARS",
    "TAG",
    "BundleResult",
    "ExecuteStep",
    "PlanError",
    "PlanState",
    "PlanStateError",
    "RecordedSource",
    "ScenarioReplayPlan",
    "StepNoAnswer",
    "StepNotSent",
    "StepRan",
    "StepResult",
    "StepToolError",
    "reads_resp_params",
    "tool_error_of",
]

# A verdict's error is rendered on the service's web page: the message only, bounded and redacted.
MAX_VERDICT_ERROR_CHARS: Final = 1_000

# ``PlanError.reason`` when the injection guard refused a derived value, or a step's input.
UNSAFE_VALUE: Final = "unsafe_value"
# A body that reads parameters or earlier outputs: its input may differ from the recorded one.
_READS_VALUES: Final = re.compile(r"\b(?:params|respParams|arguments)\b")

RecordedSource = RecordedOutputs | SourceRun


class PlanState(enum.Enum):
    """Where a plan is in its run. Every other fact (the cursor, the stop, the parameters) is data."""

    ARMING = "arming"  # waiting for derivation and paramsLogic
    READY = "ready"  # parameters computed; no step has run yet
    STEERING = "steering"  # some steps ran (pinned one hook at a time, or composed); more remain
    COMPOSING = "composing"  # compose_bundle is running the remaining steps; no other caller may drive it
    STOPPED = "stopped"  # handed over: ``stop`` and ``note`` say where and why
    DONE = "done"  # every step ran


# -- errors -------------------------------------------------------------------------------------------


class PlanStateError(RuntimeError):
    """The plan was asked for something its state does not allow (a step after the last one, a second
    caller while a bundle is being composed, a response model before every step ran)."""


class PlanError(Exception):
    """The plan stopped: a logic body failed, a target had no value, or a pinned step's tool failed.

    ``stage`` is where (``params``, ``input``, ``output``, ``call``, ``response``); ``position`` the step's
    0-based place in the plan and ``step_index`` the scenario's own index (None for a failure that
    belongs to no one step); ``reason`` the evaluator's reason for a logic failure. ``note`` is the
    hand-over note the model is to read in the step's place (None only for ``response``, which fails
    after every step ran and hands nothing over).
    """

    def __init__(
        self,
        stage: ExecutionStage,
        message: str,
        *,
        note: str | None,
        stop: Stop | None,
        position: int | None = None,
        step_index: int | None = None,
        tool_name: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.stage: ExecutionStage = stage
        self.message = message
        self.note = note
        self.stop = stop
        self.position = position
        self.step_index = step_index
        self.tool_name = tool_name
        self.reason = reason

    @property
    def refused_as_unsafe(self) -> bool:
        """True when the injection guard refused a derived value (a controller declines as ``missing_target``)."""
        return self.reason == UNSAFE_VALUE

    def __repr__(self) -> str:
        return f"PlanError(stage={self.stage!r}, position={self.position!r}, message={self.message[:80]!r})"


@dataclass(frozen=True)
class BundleResult:
    """What ``compose_bundle`` produced.

    ``text`` is the bundle (the hand-over note, if any, then each result), never longer than the cap.
    ``partial`` is true when the plan stopped before all of its steps ran. ``steps_run`` counts steps
    whose tool ran in this composition, including one whose output logic then failed (``tool_ran_at_stop``);
    ``steps_recorded`` counts recorded stand-ins. ``ledger`` is the plan's verdicts so far.
    """

    text: str
    partial: bool
    note: str | None
    stop: Stop | None
    steps_run: int
    steps_recorded: int
    tool_ran_at_stop: bool
    ledger: StepLedger


_VERDICT_OF_STOP: Final[Mapping[StopKind, tuple[StepStatus, ExecutionStage]]] = {
    "not_sent": ("skipped", "send"),
    "no_answer": ("skipped", "call"),
    "tool_error": ("skipped", "call"),
    "input_failed": ("failed", "input"),
    "output_failed": ("failed", "output"),
    "params_failed": ("failed", "params"),
}

BROKEN_STOPS: Final = frozenset({"no_answer", "tool_error", "input_failed", "output_failed", "params_failed"})

_Phase = Literal["between", "input", "execute", "recorded", "output"]


def _reason(text: str) -> str:
    """An executor's reason as the note quotes it: one line, bounded, without a closing full stop."""
    return one_line(text, MAX_TOOL_ERROR_CHARS).rstrip(" .")


def _ms_since(start: float | None) -> int | None:
    return None if start is None else max(0, round((time.monotonic() - start) * 1000))


class ScenarioReplayPlan:
    """One armed scenario, for one run.

    ``params`` is an awaitable of the parameters derived for this request (a derivation task, usually);
    it is awaited, shielded, by the first ``ready()``, so a caller that gives up waiting does not cancel
    the derivation for the next. ``recorded_fallback`` lets a step that could not be sent stand on its
    recorded output (None reads ``BIR_REPLAY_RECORDED_OUTPUTS``). ``on_step`` hears each verdict as it
    is booked.
    """

    def __init__(
        self,
        scenario: Scenario,
        mode: ReplayMode,
        params: Awaitable[Mapping[str, object]],
        pool: Evaluator,
        *,
        recorded_fallback: bool = False,
        on_step: Callable[[StepVerdict], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.scenario_id = scenario.id
        self.mode: ReplayMode = mode
        self.steps: tuple[ScenarioStep, ...] = scenario.steps
        self.step_count = len(self.steps)
        self.ledger = StepLedger()
        self._pool = pool
        self._source = params
        self._derivation: asyncio.Future[Mapping[str, object]] | None = None
        self._ready_lock = asyncio.Lock()
        self._recorded_fallback = recorded_fallback
        self._on_step = on_step
        self._derived: dict[str, Any] | None = None
        self._params: dict[str, Any] | None = None
        self._resp: dict[str, Any] = {}
        self._response: dict[str, Any] | None = None
        self._cursor = 0
        self._ran_above = 0
        self._ran_below = 0
        self._inputs: dict[int, dict[str, Any]] = {}
        self._guarded: set[int] = set()
        self._sample_params: asyncio.Future[dict[str, Any] | None] | None = None
        self._started: dict[int, float] = {}
        self._drawn: dict[str, int] = {}
        self._entries: list[BundleEntry] = []
        self._stop: Stop | None = None
        self._note: str | None = None
        self._error: PlanError | None = None
        self._state = PlanState.ARMING
        self._tool_ran_at_stop = False

    # -- state --------------------------------------------------------------------------------------

    @property
    def current_step_index(self) -> int:
        """The 0-based position of the step the plan expects next (``step_count`` when done)."""
        return self._cursor

    @property
    def derived_params(self) -> dict[str, Any] | None:
        """The parameters derived for this request, before ``paramsLogic``; None until they land."""
        return None if self._derived is None else dict(self._derived)

    @property
    def params(self) -> dict[str, Any] | None:
        """The parameters every body reads (after ``paramsLogic``); None until ``ready()`` succeeded."""
        return None if self._params is None else dict(self._params)

    @property
    def resp_params(self) -> dict[str, Any]:
        return dict(self._resp)

    @property
    def entries(self) -> tuple[BundleEntry, ...]:
        """The steps run through an executor so far (a direct run, a divergence's remaining steps), in order."""
        return tuple(self._entries)

    @property
    def stop(self) -> Stop | None:
        """Where and why the plan stopped, or None while it has not."""
        return self._stop

    @property
    def note(self) -> str | None:
        """The hand-over note, once the plan has stopped."""
        return self._note

    @property
    def state(self) -> PlanState:
        return self._state

    @property
    def tool_ran_at_stop(self) -> bool:
        """True when the step the plan stopped at ran its tool (its output logic failed afterwards)."""
        return self._tool_ran_at_stop

    @property
    def stopped_at_broken_step(self) -> bool:
        """True when the plan stopped at a step that broke (§11.1): a logic failure, a tool error, a call sent
        and never answered. A step that could not be sent, time and cancellation are not breakage."""
        return self._stop is not None and self._stop.kind in BROKEN_STOPS

    @property
    def stopped(self) -> bool:
        return self._state is PlanState.STOPPED

    def expected_tool(self) -> str | None:
        """The tool of the step the plan expects next; None when it is done or stopped."""
        if self.stopped or self._cursor >= self.step_count:
            return None
        return self.steps[self._cursor].tool_name

    def is_done(self) -> bool:
        """True when every step has run (a stopped plan is not done: see ``stopped``)."""
        return self._cursor >= self.step_count

    def close(self) -> None:
        """Release a derivation coroutine that was never awaited (the plan was retired before ``ready()``)."""
        if self._derivation is None and inspect.iscoroutine(self._source):
            self._source.close()

    # -- the steering directive (§6.4, §7) ----------------------------------------------------------

    async def preview_arguments(self) -> None:
        """Compute, ahead of the pins, the input of every step whose input reads no earlier output, so the
        steer directive can show it; the pin then runs with exactly what was shown.

        Waits for ``ready()``: bound it with the prompt's budget. Never raises a plan failure: a step whose
        input cannot be computed now simply shows none, and meets the same failure at its pin.
        """
        if self.mode == "direct":
            return
        try:
            await self.ready()
        except (PlanError, PlanStateError):
            return
        for position in range(self._cursor, self.step_count):
            step = self.steps[position]
            if position in self._inputs or reads_resp_params(step):
                continue
            try:
                tool_input = await eval_tool_input_logic(self._pool, step, self._ready_params(), {})
            except LogicError:
                continue
            # An input the guard refuses is not shown; its pin meets the refusal and hands over.
            if (await self._guard(position, tool_input)).ok:
                self._inputs[position] = tool_input
                self._guarded.add(position)

    def steering_directive(self) -> str:
        """The text that arms the plan: ``run_scenario`` once for a direct plan (§6.4), the ordered tool
        list with the arguments known now for a steer plan (§7). Redacted, and within ``MAX_DIRECTIVE_CHARS``.
        """
        shown = {} if self.mode == "direct" else shown_arguments(self.scenario, self._derived, self._inputs)
        return steering_directive(self.scenario, self.mode, shown)

    # -- readiness ----------------------------------------------------------------------------------

    async def ready(self) -> None:
        """Wait for derivation, then apply ``paramsLogic`` once.

        Raises:
            PlanError: stage ``params``: derivation failed or answered no object, a target has no value,
                a derived value fails the injection guard (``refused_as_unsafe``), or ``paramsLogic`` failed.
                The plan is then stopped, the verdict booked on its first step.
            PlanError: the same error again, after a logic failure stopped the plan.
            PlanStateError: the plan was stopped by ``hand_over`` before its parameters were ready.
        """
        if self._is_ready():
            return
        self._raise_if_stopped()
        async with self._ready_lock:
            if self._is_ready():
                return
            self._raise_if_stopped()
            derived = await self._await_derivation()
            if not isinstance(derived, Mapping):
                self._fail_params("the parameter derivation answered no parameters", None)
            missing = [name for name in self.scenario.targets if derived.get(name) is None]
            if missing:
                names = ", ".join(repr(cut(name, 60)) for name in missing[:5])
                self._derived = dict(derived)
                self._fail_params(f"no value was found for the target parameter {names}", None)
            self._derived = dict(derived)
            # The injection guard (§13.2 mitigation 6) where the values are used: before any body reads them.
            safety = check_derived_values(self.scenario, self._derived)
            if not safety.ok:
                self._fail_params(f"a derived value was refused as unsafe ({safety.reason})", UNSAFE_VALUE)
            try:
                self._params = await eval_params_logic(self._pool, self.scenario, self._derived)
            except LogicError as exc:
                self._fail_params(exc.message, exc.reason)
            self._enter(self._state_of_steps())

    def _is_ready(self) -> bool:
        return self._params is not None

    async def _await_derivation(self) -> object:
        if self._derivation is None:
            self._derivation = asyncio.ensure_future(self._source)
        derivation = self._derivation
        try:
            return await asyncio.shield(derivation)
        except asyncio.CancelledError:
            if derivation.cancelled():
                self._fail_params("the parameter derivation was cancelled", None)
            raise
        except Exception as exc:  # noqa: BLE001 - any derivation failure hands over; it never crashes a turn
            self._fail_params(f"the parameter derivation failed: {cut(str(exc) or repr(exc), 300)}", None)

    def _fail_params(self, message: str, reason: str | None) -> NoReturn:
        verdict = self._verdict(0, "failed", "params", message) if self.step_count else None
        self._halt(Stop("params_failed", None, message), verdict)
        raise self._make_error("params", message, None, reason)

    # -- steer mode: one hook at a time -------------------------------------------------------------

    async def tool_input_for_current_step(self) -> dict[str, Any]:
        """The pinned input of the current step: ``toolInputLogic(params, respParams)``.

        Raises:
            PlanError: stage ``params`` (see ``ready``) or ``input``: the step's input logic failed; the
                step is booked ``failed`` and the plan stopped with the note in the call's place.
            PlanStateError: every step has run, the plan has stopped (its note is ``note``), or a bundle is
                being composed.
        """
        self._raise_if_stopped()
        position = self._current()
        await self.ready()
        return dict(await self._input_at(position))

    async def apply_output(self, text: str) -> dict[str, Any]:
        """Thread the current step's real output into ``respParams`` and advance; answers ``respParams``.

        Raises:
            PlanError: stage ``call``: the output is an MCP tool error (the plan stops rather than threading
                on it); stage ``output``: the step's output logic failed after its tool ran; stage
                ``params`` (see ``ready``).
            PlanStateError: every step has run, the plan has stopped (its note is ``note``), or a bundle is
                being composed.
        """
        self._raise_if_stopped()
        position = self._current()
        await self.ready()
        error = tool_error_of(text)
        if error is not None:
            self._halt(Stop("tool_error", position, error), self._verdict(position, "skipped", "call", error))
            raise self._make_error("call", error, position, None)
        try:
            derived = await self._output_logic(position, text)
        except LogicError as exc:
            verdict = self._verdict(position, "failed", "output", exc.message)
            self._tool_ran_at_stop = True
            self._halt(Stop("output_failed", position, exc.message), verdict)
            raise self._make_error("output", exc.message, position, exc.reason) from None
        self._resp = merge_resp_params(self._resp, derived)
        self._record(self._verdict(position, "ok"))
        self._cursor += 1
        self._ran_above += 1
        self._enter(self._state_of_steps())
        return dict(self._resp)

    def hand_over(
        self, kind: StopKind, detail: str = "", *, step: int | None = None, in_flight: int | None = None
    ) -> str:
        """Stop the plan for a reason the controller saw (a pinned call that failed or never reported, a
        concurrent call, a cancelled run, a spent budget) and answer the hand-over note.

        ``step`` defaults to the current step. A stop that says something about the step itself (not
        sent, no answer, a tool error) books its verdict; time, cancellation and concurrency book none.
        A plan already stopped keeps its first stop and answers its note.
        """
        if self._note is not None:
            return self._note
        if kind == "params_failed":
            verdict = self._verdict(0, "failed", "params", detail or None) if self.step_count else None
            return self._halt(Stop(kind, None, detail), verdict)
        position = self._cursor if step is None else step
        at = position if 0 <= position < self.step_count else None
        mapped = _VERDICT_OF_STOP.get(kind)
        verdict = self._verdict(at, mapped[0], mapped[1], detail or None) if mapped and at is not None else None
        if kind == "output_failed" and at is not None:
            self._tool_ran_at_stop = True
        return self._halt(Stop(kind, at, detail, in_flight), verdict)

    # -- the response model -------------------------------------------------------------------------

    async def response_model(self) -> dict[str, Any]:
        """``responseParamsLogic(params, respParams)`` over every step's output, computed once.

        Raises:
            PlanError: stage ``response``: the logic failed (booked ``failed`` on the last step); no note.
            PlanError: stage ``params`` (see ``ready``).
            PlanStateError: the plan has not run every step.
        """
        if self._response is not None:
            return dict(self._response)
        await self.ready()
        if not self.is_done():
            raise PlanStateError("the response model is computed only after every step has run")
        try:
            self._response = await eval_response_params_logic(
                self._pool, self.scenario, self._ready_params(), self._resp
            )
        except LogicError as exc:
            last = self.step_count - 1
            if last >= 0:
                previous = self.ledger.get(self.steps[last].step_index)
                duration = previous.duration_ms if previous is not None else None
                self._record(self._verdict(last, "failed", "response", exc.message, duration_ms=duration))
            raise PlanError(
                "response",
                exc.message,
                note=None,
                stop=None,
                position=last if last >= 0 else None,
                step_index=self.steps[last].step_index if last >= 0 else None,
                tool_name=self.steps[last].tool_name if last >= 0 else None,
                reason=exc.reason,
            ) from None
        return dict(self._response)

    # -- direct mode and divergence: the remaining steps through an executor ------------------------

    async def compose_bundle(
        self,
        max_chars: int,
        execute: ExecuteStep,
        *,
        deadline: float | None = None,
        recorded: RecordedSource | None = None,
    ) -> BundleResult:
        """Run every remaining step through ``execute`` and lay the results out within ``max_chars``.

        ``deadline`` is a ``time.monotonic()`` instant: no step starts after it (the plan stops "out of
        time"). ``recorded`` supplies recorded outputs for a step that could not be sent, used only when
        the plan allows stand-ins. A step with no result ends the bundle there, behind the hand-over note.
        Logic failures do not raise here: the bundle is the hand-over. If the caller is cancelled, no
        further step starts and the plan stops with the note that says so; the cancellation propagates.

        Raises:
            PlanStateError: another call is composing this plan's bundle.
        """
        if self._state is PlanState.COMPOSING:
            raise PlanStateError("this plan's bundle is already being composed")
        self._state = PlanState.COMPOSING
        run_before, recorded_before = self._count_entries()
        try:
            if self._stop is None and not self.is_done():
                await self._run_remaining(execute, deadline, recorded)
        finally:
            if self._state is PlanState.COMPOSING:
                self._state = self._state_of_steps()
        run_after, recorded_after = self._count_entries()
        text = assemble_bundle(self._note, self._entries, max_chars, partial=self._stop is not None, redact=redact_text)
        return BundleResult(
            text=text,
            partial=self._stop is not None,
            note=self._note,
            stop=self._stop,
            steps_run=run_after - run_before,
            steps_recorded=recorded_after - recorded_before,
            tool_ran_at_stop=self._tool_ran_at_stop,
            ledger=self.ledger,
        )

    def _count_entries(self) -> tuple[int, int]:
        recorded = sum(1 for e in self._entries if e.recorded)
        return len(self._entries) - recorded, recorded

    async def _run_remaining(
        self, execute: ExecuteStep, deadline: float | None, recorded: RecordedSource | None
    ) -> None:
        phase: _Phase = "between"
        position = self._cursor
        live = True
        try:
            try:
                await self.ready()
            except PlanError:
                return
            while self._cursor < self.step_count:
                position, live = self._cursor, True
                phase = "between"
                if deadline is not None and time.monotonic() >= deadline:
                    self._halt(Stop("out_of_time", position), None)
                    return
                phase = "input"
                try:
                    tool_input = await self._input_at(position)
                except PlanError:
                    return
                phase = "execute"
                result = await self._execute(execute, position, tool_input)
                if isinstance(result, StepRan):
                    error = tool_error_of(result.output)
                    if error is not None:
                        result = StepToolError(error)
                if isinstance(result, StepNotSent):
                    phase = "recorded"
                    stand_in = await self._stand_in(position, recorded, deadline)
                    if stand_in is None:
                        reason = _reason(result.reason)
                        verdict = self._verdict(position, "skipped", "send", reason or None)
                        self._halt(Stop("not_sent", position, reason), verdict)
                        return
                    live, output = False, stand_in
                elif isinstance(result, StepNoAnswer | StepToolError):
                    kind: StopKind = "no_answer" if isinstance(result, StepNoAnswer) else "tool_error"
                    reason = _reason(result.reason)
                    self._halt(Stop(kind, position, reason), self._verdict(position, "skipped", "call", reason or None))
                    return
                else:
                    output = result.output
                phase = "output"
                if not await self._thread(position, output, live, tool_input):
                    return
        except asyncio.CancelledError:
            self._cancelled(phase, position, live)
            raise

    async def _execute(self, execute: ExecuteStep, position: int, tool_input: dict[str, Any]) -> StepResult:
        step = self.steps[position]
        try:
            result: object = await execute(step, dict(tool_input))
        except Exception as exc:  # noqa: BLE001 - an executor's failure is a step with no answer, not a crash
            log_event("replay.execute_failed", scenario_id=self.scenario_id, step=position, error=repr(exc)[:300])
            return StepNoAnswer(f"the executor failed: {cut(str(exc) or type(exc).__name__, 200)}")
        if not isinstance(result, StepRan | StepNotSent | StepNoAnswer | StepToolError):
            return StepNoAnswer(f"the executor answered {type(result).__name__}, not a step result")
        return result

    async def _thread(self, position: int, output: str, live: bool, tool_input: dict[str, Any]) -> bool:
        """Run the step's output logic on ``output`` and book the step; False when the plan stopped there."""
        step = self.steps[position]
        entry = BundleEntry(position, self.step_count, step.tool_name, tool_input, output, recorded=not live)
        try:
            derived = await self._output_logic(position, output)
        except LogicError as exc:
            verdict = self._verdict(position, "failed", "output", exc.message)
            if live:
                # The tool ran: its result is real and goes in the bundle, so the model does not run it again.
                self._tool_ran_at_stop = True
                self._entries.append(entry)
                self._halt(Stop("output_failed", position, exc.message), verdict)
            else:
                detail = f"it could not be sent, and its recorded output could not be read ({exc.message})"
                self._halt(Stop("not_sent", position, detail), verdict)
            return False
        self._resp = merge_resp_params(self._resp, derived)
        self._entries.append(entry)
        self._record(self._verdict(position, "ok" if live else "recorded"))
        self._cursor += 1
        self._ran_below += 1
        self._enter(self._state_of_steps())
        return True

    def _cancelled(self, phase: _Phase, position: int, live: bool) -> None:
        if self._stop is not None:
            return
        if position >= self.step_count:
            return
        if phase == "execute":
            detail = "the scenario run was cancelled while the call was in flight"
            self._halt(Stop("no_answer", position, detail), self._verdict(position, "skipped", "call", detail))
        elif phase == "output" and live:
            # The tool ran and its effects are real; only reading its output was cut short.
            self._tool_ran_at_stop = True
            detail = "the scenario run was cancelled before its output was read"
            self._halt(Stop("output_failed", position, detail), self._verdict(position, "ok"))
        else:
            self._halt(Stop("cancelled", position), None)

    # -- internals ----------------------------------------------------------------------------------

    def _state_of_steps(self) -> PlanState:
        """The state the plan's data calls for, outside a composition and a stop."""
        if self._stop is not None:
            return PlanState.STOPPED
        if self._params is None:
            return PlanState.ARMING
        if self._cursor >= self.step_count:
            return PlanState.DONE
        return PlanState.READY if self._cursor == 0 else PlanState.STEERING

    def _enter(self, state: PlanState) -> None:
        """Move to ``state``, unless a composition is running (it settles when it ends) or the plan stopped."""
        if self._state not in (PlanState.COMPOSING, PlanState.STOPPED):
            self._state = state

    def _ready_params(self) -> dict[str, Any]:
        if self._params is None:
            raise PlanStateError("the plan's parameters are not ready")
        return self._params

    def _current(self) -> int:
        if self._state is PlanState.COMPOSING:
            raise PlanStateError("this plan's bundle is being composed")
        if self._cursor >= self.step_count:
            raise PlanStateError("every step of the plan has run")
        return self._cursor

    def _raise_if_stopped(self) -> None:
        if self._error is not None:
            raise self._error
        if self._stop is not None:
            raise PlanStateError(f"the plan has stopped ({self._stop.kind}); its hand-over note is in plan.note")

    async def _input_at(self, position: int) -> dict[str, Any]:
        """The step's input, computed once and guarded once before it is pinned or run.

        Raises:
            PlanError: stage ``input``: the input logic failed, or the guard refused the input
                (``refused_as_unsafe``); the step is booked ``failed`` and the plan stopped.
        """
        self._started.setdefault(position, time.monotonic())
        tool_input = self._inputs.get(position)
        if tool_input is None:
            try:
                tool_input = await eval_tool_input_logic(
                    self._pool, self.steps[position], self._ready_params(), self._resp
                )
            except LogicError as exc:
                verdict = self._verdict(position, "failed", "input", exc.message)
                self._halt(Stop("input_failed", position, exc.message), verdict)
                raise self._make_error("input", exc.message, position, exc.reason) from None
            self._inputs[position] = tool_input
        if position not in self._guarded:
            safety = await self._guard(position, tool_input)
            if not safety.ok:
                message = f"its input was refused as unsafe ({safety.reason})"
                log_event("replay.input_refused", scenario_id=self.scenario_id, step=position, why=safety.reason)
                self._halt(Stop("input_failed", position, message), self._verdict(position, "failed", "input", message))
                raise self._make_error("input", message, position, UNSAFE_VALUE)
            self._guarded.add(position)
        return tool_input

    async def _guard(self, position: int, tool_input: Mapping[str, Any]) -> SafetyVerdict:
        """The injection guard on the values the step read from earlier outputs, then its shell commands
        against the recorded ones (issue 16: every value in an approved call is checked)."""
        step = self.steps[position]
        values = check_output_values(step, self._resp)
        if not values.ok or not command_keys(step.tool_name, tool_input):
            return values
        recorded: Mapping[str, Any] | None = tool_input
        logic = step.tool_input_logic or ""
        if _READS_VALUES.search(logic) or hides_names(logic):
            recorded = await self._recorded_input(step)
        return check_recorded_shape(step.tool_name, tool_input, recorded)

    async def _recorded_input(self, step: ScenarioStep) -> dict[str, Any] | None:
        """The step's input from the scenario's recorded sample values and no earlier outputs; None when
        its logic cannot compute it so."""
        if self._sample_params is None:
            self._sample_params = asyncio.ensure_future(self._compute_sample_params())
        sample = await asyncio.shield(self._sample_params)
        if sample is None:
            return None
        try:
            return await eval_tool_input_logic(self._pool, step, sample, {})
        except LogicError:
            return None

    async def _compute_sample_params(self) -> dict[str, Any] | None:
        samples = {name: spec.sample_value for name, spec in self.scenario.params_object.items()}
        try:
            return await eval_params_logic(self._pool, self.scenario, samples)
        except LogicError:
            return None

    async def _output_logic(self, position: int, output: str) -> dict[str, Any]:
        return await eval_tool_output_logic(self._pool, self.steps[position], output, self._ready_params(), self._resp)

    async def _stand_in(self, position: int, recorded: RecordedSource | None, deadline: float | None) -> str | None:
        if not self._recorded_fallback:
            return None
        step = self.steps[position]
        if step.recorded_output is not None:
            return step.recorded_output
        if recorded is None:
            return None
        if isinstance(recorded, SourceRun):
            left = None if deadline is None else deadline - time.monotonic()
            outputs = await recorded.outputs(time_left_s=left)
        else:
            outputs = recorded
        # The queues are drawn in step order, one output per step of the tool (BaseIn's dry replay), so
        # the outputs of earlier steps of the same tool that ran live are passed over first.
        tool = step.tool_name
        wanted = sum(1 for earlier in self.steps[:position] if earlier.tool_name == tool)
        drawn = self._drawn.get(tool, 0)
        while drawn < wanted and outputs.take(tool) is not None:
            drawn += 1
        text = outputs.take(tool)
        self._drawn[tool] = max(drawn, wanted) + (1 if text is not None else 0)
        return text

    def _verdict(
        self,
        position: int,
        status: StepStatus,
        stage: ExecutionStage | None = None,
        error: str | None = None,
        *,
        duration_ms: int | None = None,
    ) -> StepVerdict:
        step = self.steps[position]
        shown = cut(redact_text(error), MAX_VERDICT_ERROR_CHARS) if error else None
        duration = duration_ms if duration_ms is not None else _ms_since(self._started.get(position))
        return StepVerdict(step.step_index, step.tool_name, status, stage, shown, duration)

    def _record(self, verdict: StepVerdict) -> None:
        self.ledger.record(verdict)
        log_event(
            "replay.step",
            scenario_id=self.scenario_id,
            step_index=verdict.step_index,
            tool=verdict.tool_name,
            status=verdict.status,
            stage=verdict.stage,
            error=verdict.error,
            duration_ms=verdict.duration_ms,
        )
        if self._on_step is not None:
            try:
                self._on_step(verdict)
            except Exception as exc:  # noqa: BLE001 - a listener's bug must not change what the plan did
                log_event("replay.on_step_failed", error=repr(exc)[:300])

    def _halt(self, stop: Stop, verdict: StepVerdict | None) -> str:
        if verdict is not None:
            self._record(verdict)
        self._stop = stop
        self._state = PlanState.STOPPED
        self._note = handover_note(
            self.steps,
            stop,
            ran_above=self._ran_above,
            ran_below=self._ran_below,
            params=self._derived,
            redact=redact_text,
        )
        log_event(
            "replay.handed_over",
            scenario_id=self.scenario_id,
            kind=stop.kind,
            step=stop.step,
            detail=cut(redact_text(stop.detail), 300),
            ran_above=self._ran_above,
            ran_below=self._ran_below,
        )
        return self._note

    def _make_error(self, stage: ExecutionStage, message: str, position: int | None, reason: str | None) -> PlanError:
        step = self.steps[position] if position is not None else None
        self._error = PlanError(
            stage,
            message,
            note=self._note,
            stop=self._stop,
            position=position,
            step_index=step.step_index if step is not None else None,
            tool_name=step.tool_name if step is not None else None,
            reason=reason,
        )
        return self._error
