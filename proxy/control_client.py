"""A proxy's link to its control server (spec §16.1): register, poll, result, step.

The requests go through the control plane's one client (``bir.hooks.control_client``); every failure
to reach the server or to read its answer is its one error type, ``ControlError``: the work loop backs
off and registers again, and nothing here ever reaches the host session. Answers are read leniently
(unknown fields ignored, missing ones defaulted), as the server may be an older or newer ``bir``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec

from bir.core.framing import deeper_than
from bir.core.host import host_pid
from bir.hooks import api
from bir.hooks.control_client import ControlClient, ControlError, Endpoint

# How much longer than its hold a long poll may take before it counts as lost.
POLL_SLACK_S: Final = 5.0
DEFAULT_POLL_HOLD_MS: Final = 25_000
MAX_POLL_HOLD_MS: Final = 60_000
# The control server refuses bodies past 8 MiB; a step report stays under that.
MAX_REPORT_BYTES: Final = 7 * 1024 * 1024
# The server's decoder stops near 1,000 levels; a report stays well within it.
MAX_REPORT_DEPTH: Final = 500

__all__ = ["ControlError", "Endpoint", "ProxyLink", "Registration", "discover", "project_dir"]


def discover(project_dir: str | os.PathLike[str]) -> Endpoint | None:
    """The project's live control server, or None (none running, or discovery not installed)."""
    try:
        from bir.hooks.discovery import read_discovery
    except ImportError:
        return None
    try:
        return read_discovery(project_dir)
    except Exception:  # noqa: BLE001 - a broken discovery file means "no control server", never a crash
        return None


@dataclass(frozen=True)
class Registration:
    replay: bool
    poll_hold_ms: int


class ProxyLink:
    """One proxy's view of one control server."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        server_name: str,
        proxy_id: str,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._client = ControlClient(endpoint, http=http)
        self.url = self._client.url
        self.server_name = server_name
        self.proxy_id = proxy_id
        self._started_at = int(time.time() * 1000)
        # The Claude Code process that started this proxy: its session's hooks name the same one.
        self._host_pid = host_pid()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def register(self) -> Registration:
        """``POST /proxy/register``.

        Raises:
            ControlError: no answer, a non-2xx answer, or an unreadable one.
        """
        body = api.RegisterRequest(
            server_name=self.server_name,
            proxy_id=self.proxy_id,
            pid=os.getpid(),
            started_at=self._started_at,
            host_pid=self._host_pid,
        )
        answer = await self._client.call(api.PROXY_REGISTER, body)
        hold = max(0, min(answer.poll_hold_ms, MAX_POLL_HOLD_MS))
        return Registration(replay=answer.replay, poll_hold_ms=hold)

    async def unregister(self) -> None:
        """``POST /proxy/unregister``: this proxy is gone (its host closed the session).

        Raises:
            ControlError: the server did not take it (an older one answers 404).
        """
        body = api.UnregisterRequest(server_name=self.server_name, proxy_id=self.proxy_id)
        await self._client.call(api.PROXY_UNREGISTER, body)

    async def poll(self, hold_ms: int) -> api.PollAnswer:
        """``POST /proxy/poll``, held by the server up to ``hold_ms``.

        Raises:
            ControlError: no answer within the hold plus slack, or an unusable one.
        """
        body = api.PollRequest(
            server_name=self.server_name,
            proxy_id=self.proxy_id,
            pid=os.getpid(),
            started_at=self._started_at,
            hold_ms=hold_ms,
            host_pid=self._host_pid,
        )
        return await self._client.call(api.PROXY_POLL, body, timeout_s=hold_ms / 1000 + POLL_SLACK_S)

    async def result(self, work_id: str, result: Any = None, error: str | None = None) -> None:
        """``POST /proxy/result``: exactly one of ``result`` and ``error`` is meant to be set.

        Raises:
            ControlError: the server did not take it.
        """
        body = (
            api.ResultRequest(work_id=work_id, error=error)
            if error is not None
            else api.ResultRequest(work_id=work_id, result=result)
        )
        await self._client.call(api.PROXY_RESULT, _fit(body))

    async def step(self, report: api.StepReport) -> None:
        """``POST /proxy/step``: one relayed call, for correlation and threading (spec §7.2).

        Raises:
            ControlError: the server did not take it.
        """
        body = msgspec.structs.replace(
            report,
            server_name=self.server_name,
            proxy_id=self.proxy_id,
            duration_ms=max(0.0, report.duration_ms),
            result=None if report.error is not None else report.result,
        )
        await self._client.call(api.PROXY_STEP, _fit(body))


def _fit(body: api.ResultRequest | api.StepReport) -> bytes:
    """Serialise ``body``; past the server's limits, drop its result (and arguments) and say so instead."""
    arguments = body.arguments if isinstance(body, api.StepReport) else None
    if deeper_than(body.result, MAX_REPORT_DEPTH) or deeper_than(arguments, MAX_REPORT_DEPTH):
        error = f"the result was nested too deeply to report (more than {MAX_REPORT_DEPTH} levels)"
        if isinstance(body, api.StepReport):
            return api.encode(msgspec.structs.replace(body, result=None, arguments=None, error=error))
        return api.encode(msgspec.structs.replace(body, result=None, error=error))
    encoded = api.encode(body)
    if len(encoded) <= MAX_REPORT_BYTES:
        return encoded
    # No result then means "outcome unknown", never a success (spec §16.2).
    error = f"the result was too large to report ({len(encoded)} bytes)"
    if isinstance(body, api.StepReport):
        return api.encode(msgspec.structs.replace(body, result=None, arguments=None, error=error))
    return api.encode(msgspec.structs.replace(body, result=None, error=error))


def project_dir(explicit: str | None) -> Path:
    """The project whose control server this proxy looks for: ``--project``, else Claude Code's
    ``CLAUDE_PROJECT_DIR``, else the working directory."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("CLAUDE_PROJECT_DIR")
    return Path(env) if env else Path.cwd()
