"""The ordinary tool calls of a turn: a missed turn's calls recorded (spec §7.2, §12), and a call id added
to an ordinary wrapped call where its proxy's report may join the hook (§7.1).

Each settled call is held by the recorder and the turn's steps go out at its seal, in the order the model
made the calls (the transcript's: parallel calls settle in any order). A call no hook saw (made before the
``bir`` server that carries the tool hooks was connected: Claude Code 2.1.197 runs it with no hook) is
recorded then from the transcript, in the same shapes; ``unseen`` tells the plans about such calls, so
none is pinned or diverged past.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Final

from bir.core.housekeeping import is_housekeeping
from bir.core.log import log_event, log_task_failure
from bir.core.tool_output import step_output_text
from bir.core.transcript import TranscriptCall, tool_calls_since
from bir.core.types import parse_qualified_name
from bir.hooks import api
from bir.hooks.session.booking import Finish
from bir.hooks.session.ports import RunRecorder
from bir.hooks.session.proxy_reports import ProxyReports
from bir.hooks.session.state import Run
from bir.hooks.session.steer import PROXY_REPORT_GRACE_S

# At a recorded turn's seal, how long its calls' recordings (each waiting up to 1.5 s for its proxy's
# report) may still take before the steps are sent in the transcript's order.
RECORDING_SETTLE_S: Final = 2.5


class CallRecording:
    """Records and correlates the calls of turns that are not steered."""

    def __init__(
        self,
        *,
        wrapped: set[str],
        proxy_reports: ProxyReports,
        recorder: RunRecorder,
        with_call_id: Callable[[str, Mapping[str, Any]], dict[str, Any]],
        correlation_decision: str = "none",
    ) -> None:
        self._wrapped = wrapped
        # BIR_CORRELATION_DECISION: what an ordinary wrapped call's hook answers when it carries a call id.
        self._correlation_decision = correlation_decision
        self._proxy_reports = proxy_reports
        self._recorder = recorder
        self._with_call_id = with_call_id
        self._sealing: set[asyncio.Task[None]] = set()

    async def record(self, run: Run, tool: str, hook: api.HookInput, failed: bool, duration_ms: float | None) -> None:
        tool_use_id = hook.tool_use_id or ""
        report: api.StepReport | None = None
        parsed = parse_qualified_name(tool)
        if parsed is not None and parsed[0] in self._wrapped:
            report = await self._proxy_reports.wait(tool_use_id, PROXY_REPORT_GRACE_S)
            if report is None:
                log_event("replay.thread_fallback", tool=tool, why="no proxy report — recording the hook's view")
        if report is not None:
            value: object = report.result if report.error is None else {"error": report.error}
            error = report.error
        else:
            value = hook.tool_response if not failed else {"error": hook.error}
            error = hook.error if failed else None
        output = step_output_text(tool, value)
        took = None if duration_ms is None else round(duration_ms)
        # Held until the seal: only the transcript knows the order the model made the calls in.
        self._recorder.hold(
            run.run_id, tool_use_id, tool, _ran(hook.tool_input), tool_output=output, error=error, duration_ms=took
        )

    async def unseen(self, run: Run) -> list[TranscriptCall]:
        """This turn's tool calls that no hook saw, from its transcript (bir's own and the host's
        housekeeping aside): calls made before the `bir` server that carries the tool hooks connected."""
        if run.mark is None or not run.mark.measurable:
            return []
        calls = await asyncio.to_thread(tool_calls_since, run.transcript_path, run.mark)
        unseen = [c for c in calls if c.tool_use_id not in run.seen_calls and not is_housekeeping(c.name, c.input)]
        if unseen:
            log_event(
                "replay.unseen_call",
                run_id=run.run_id,
                session_id=run.session_id,
                tools=[c.name for c in unseen][:20],
                tool_use_ids=[c.tool_use_id for c in unseen][:20],
            )
        return unseen

    def hold_plan_steps(self, run: Run) -> None:
        """A recorded replayed turn holds the steps its plan ran through the proxies (a direct run, a
        divergence's remaining steps) where they ran: before the model's next call. Pinned steps are the
        model's own calls and are recorded as those; recorded stand-ins never ran and never are."""
        plan = run.plan
        if not run.recording_replay or plan is None:
            return
        entries = plan.entries
        for entry in entries[run.plan_steps_recorded :]:
            if not entry.recorded:
                # Held like the model's own calls, under a key no host uses, so the flush keeps it where it ran.
                key = f"bir-plan:{entry.step_index}"
                self._recorder.hold(run.run_id, key, entry.tool_name, dict(entry.input or {}), tool_output=entry.output)
        run.plan_steps_recorded = len(entries)

    def seal_later(self, run: Run, finish: Finish) -> None:
        """``seal`` in the background: a hook never waits for a turn's calls to settle."""
        sealing = asyncio.ensure_future(self.seal(run, finish))
        self._sealing.add(sealing)
        sealing.add_done_callback(self._sealing.discard)
        sealing.add_done_callback(log_task_failure)

    async def sealed(self, timeout_s: float | None = None) -> int:
        """Wait (up to ``timeout_s``) for the turns being sealed now, their steps and finish then queued; how
        many there were."""
        sealing = set(self._sealing)
        if sealing:
            await asyncio.wait(sealing, timeout=timeout_s)
        return len(sealing)

    async def seal(self, run: Run, finish: Finish) -> None:
        """Seal a recorded turn: its steps in the order the model made them (the transcript's, with each
        call no hook saw recorded from it in the same shapes), then its finish."""
        pending = [task for task in run.recordings if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=RECORDING_SETTLE_S)
        calls: list[TranscriptCall] = []
        if run.mark is not None and run.mark.measurable:
            calls = await asyncio.to_thread(tool_calls_since, run.transcript_path, run.mark)
        for call in calls:
            if call.tool_use_id in run.seen_calls or not call.answered or is_housekeeping(call.name, call.input):
                continue
            report = await self._proxy_reports.wait(call.tool_use_id, 0)
            if report is not None:
                value: object = report.result if report.error is None else {"error": report.error}
                error = report.error
            else:
                value = call.output if call.error is None else {"error": call.error}
                error = call.error
            output = step_output_text(call.name, value)
            if self._recorder.hold(
                run.run_id, call.tool_use_id, call.name, _ran(call.input), tool_output=output, error=error
            ):
                log_event("recording.unseen_call", run_id=run.run_id, tool=call.name, tool_use_id=call.tool_use_id)
        self._recorder.flush(run.run_id, [call.tool_use_id for call in calls])
        self._recorder.finish(
            run.run_id,
            finish.output,
            duration_ms=finish.duration_ms,
            usage=finish.usage,
            cost_usd=finish.cost_usd,
            measured=finish.measured,
            pricing_version=finish.pricing_version,
        )

    def correlate(self, run: Run, hook: api.HookInput) -> api.HookAnswer:
        """§7.1: an ordinary wrapped MCP call carries a call id only where answering changes nothing the
        user is asked (``bypassPermissions``) or the operator opted in (``BIR_CORRELATION_DECISION``),
        never in plan mode, and only into a server whose live proxy strips it."""
        tool, tool_use_id = hook.tool_name, hook.tool_use_id
        if tool is None or tool_use_id is None or not isinstance(hook.tool_input, dict):
            return api.EMPTY_HOOK_ANSWER
        mode = hook.permission_mode or run.permission_mode
        decision = "allow" if mode == "bypassPermissions" else self._correlation_decision
        if mode == "plan" or decision not in ("allow", "ask") or api.CALL_ID_KEY in hook.tool_input:
            return api.EMPTY_HOOK_ANSWER
        updated = self._with_call_id(tool, hook.tool_input)
        call_id = updated.get(api.CALL_ID_KEY)
        if not isinstance(call_id, str):
            return api.EMPTY_HOOK_ANSWER
        self._proxy_reports.note_call_id(call_id, tool_use_id)
        return api.HookAnswer(
            hook_specific_output=api.HookSpecificOutput(
                hook_event_name="PreToolUse",
                permission_decision="allow" if decision == "allow" else "ask",
                updated_input=updated,
            )
        )


def _ran(tool_input: object) -> object:
    """A call's input as the tool got it: bir's call id (§7.1) is stripped before the upstream sees it."""
    if isinstance(tool_input, dict) and api.CALL_ID_KEY in tool_input:
        return {k: v for k, v in tool_input.items() if k != api.CALL_ID_KEY}
    return tool_input
