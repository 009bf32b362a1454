"""The ordinary tool calls of a turn: a missed turn's calls recorded as they settle (spec §7.2, §12), and
a call id added to an ordinary wrapped call where its proxy's report may join the hook (§7.1)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bir.core import config
from bir.core.log import log_event
from bir.core.tool_output import step_output_text
from bir.core.types import parse_qualified_name
from bir.hooks import api
from bir.hooks.session.ports import RunRecorder
from bir.hooks.session.proxy_reports import ProxyReports
from bir.hooks.session.state import Run
from bir.hooks.session.steer import PROXY_REPORT_GRACE_S


class CallRecording:
    """Records and correlates the calls of turns that are not steered."""

    def __init__(
        self,
        *,
        wrapped: set[str],
        proxy_reports: ProxyReports,
        recorder: RunRecorder,
        with_call_id: Callable[[str, Mapping[str, Any]], dict[str, Any]],
    ) -> None:
        self._wrapped = wrapped
        self._proxy_reports = proxy_reports
        self._recorder = recorder
        self._with_call_id = with_call_id

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
        tool_input = hook.tool_input
        if isinstance(tool_input, dict) and api.CALL_ID_KEY in tool_input:
            # The call id is bir's, stripped before the upstream saw the call: the recording holds what ran.
            tool_input = {k: v for k, v in tool_input.items() if k != api.CALL_ID_KEY}
        self._recorder.step(run.run_id, None, tool, tool_input, tool_output=output, error=error, duration_ms=took)

    def correlate(self, run: Run, hook: api.HookInput) -> api.HookAnswer:
        """§7.1: an ordinary wrapped MCP call carries a call id only where answering changes nothing the
        user is asked (``bypassPermissions``) or the operator opted in (``BIR_CORRELATION_DECISION``),
        never in plan mode, and only into a server whose live proxy strips it."""
        tool, tool_use_id = hook.tool_name, hook.tool_use_id
        if tool is None or tool_use_id is None or not isinstance(hook.tool_input, dict):
            return api.EMPTY_HOOK_ANSWER
        mode = hook.permission_mode or run.permission_mode
        choice = config.get_str("BIR_CORRELATION_DECISION") or "none"
        decision = "allow" if mode == "bypassPermissions" else choice
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
