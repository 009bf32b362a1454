"""A minimal MCP host for a ``bir-proxy`` that ``bir replay --wrap`` starts, on the MCP SDK's client.

A proxy runs work only once its host has initialized the MCP session with the upstream (the proxy
relays the host's own ``initialize``). With no Claude Code session around, ``bir replay`` is that
host: the SDK's ``stdio_client`` spawns ``bir-proxy --server-name NAME -- CMD`` (in a session of its
own) and its ``ClientSession`` runs the handshake, answers the server's pings and refuses what a host
with nothing to offer cannot do (sampling, roots, elicitation). Stopping is the SDK's, bounded at
each step: stdin closed, a grace period, then the whole process group terminated, then killed.

The proxy is given exactly the environment passed in (the SDK adds only ``HOME``, ``LOGNAME``,
``PATH``, ``SHELL``, ``TERM`` and ``USER`` where that environment lacks them); its stderr, which
carries its own log lines and its upstream's stderr, goes to ``log_path`` when one is given. A line
on its stdout that is not JSON-RPC is logged (``replay.proxy_unreadable``), never dropped unsaid.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final, TextIO

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from bir import __version__
from bir.core import config
from bir.core.home_files import open_private, private_dir
from bir.core.log import log_event
from bir.core.truncate import one_line

INITIALIZE_TIMEOUT_S: Final = 30.0
# The SDK's own stop takes at most about 6.5 s (2 s after stdin closes, 2 after SIGTERM, 2 after SIGKILL).
STOP_TIMEOUT_S: Final = 10.0
MAX_ERROR_CHARS: Final = 300
# Lines on the proxy's stdout that are not JSON-RPC: this many are logged one by one, the rest counted.
UNREADABLE_LOGGED: Final = 3
CLIENT_INFO: Final = types.Implementation(name="bir-replay", version=__version__)


class _SdkRecords(logging.Handler):
    """The SDK's stdio client logs through ``logging``; with no handler configured, Python would print its
    records, tracebacks included, on the terminal of a command that talks in sentences. Here they become
    bounded bir log lines (``replay.mcp_client``), the traceback reduced to its exception's type."""

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ValueError):
            return  # a line that is not JSON-RPC: the session hands it to its ProxyHost, which logs it by server
        log_event(
            "replay.mcp_client",
            level=record.levelname,
            message=one_line(record.getMessage(), MAX_ERROR_CHARS),
            error=type(error).__name__ if error is not None else None,
        )


logging.getLogger("mcp.client.stdio").addHandler(_SdkRecords(logging.WARNING))


class HostSessionError(RuntimeError):
    """The wrapped server could not be started or did not initialize."""


class ProxyHost:
    """One ``bir-proxy`` subprocess wrapping ``command`` as server ``name``, with this process as its host.

    ``log_path``, when given, receives the proxy's stderr (its JSON log lines, and its upstream's stderr).
    ``start`` and ``stop`` may be called from different tasks: the session lives in a task of its own.
    """

    def __init__(
        self, name: str, command: str, *, project: Path, env: Mapping[str, str], log_path: Path | None = None
    ) -> None:
        self.name = name
        self.command = command
        self._project = project
        self._env = dict(env)
        self._log_path = log_path
        self._task: asyncio.Task[None] | None = None
        self._scope = anyio.CancelScope()
        self._unreadable = 0

    async def start(self) -> types.InitializeResult:
        """Spawn the proxy and complete the MCP handshake through it; answer the server's ``initialize`` result.

        Raises:
            HostSessionError: the command does not parse, the proxy cannot start or exits, the server
                refuses ``initialize``, or does not answer it within ``INITIALIZE_TIMEOUT_S``.
        """
        if self._task is not None:
            raise HostSessionError(f"--wrap {self.name}: already started")
        parameters = self._parameters()
        errlog = self._open_log()
        ready: asyncio.Future[types.InitializeResult] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._host(parameters, errlog, ready), name=f"bir-replay host {self.name}")
        # Shielded: a caller cancelled here still calls stop(), and the session task settles `ready` either way.
        return await asyncio.shield(ready)

    def _parameters(self) -> StdioServerParameters:
        try:
            upstream = shlex.split(self.command)
        except ValueError as exc:
            raise HostSessionError(f"--wrap {self.name}: {exc}") from None
        if not upstream:
            raise HostSessionError(f"--wrap {self.name}: the command is empty")
        if shutil.which(upstream[0], path=self._env.get("PATH")) is None:
            raise HostSessionError(
                f"--wrap {self.name}: there is no command {upstream[0]!r} (not on PATH, or not executable); "
                "nothing was started"
            )
        proxy = ["-m", "bir.proxy", "--server-name", self.name, "--project", str(self._project), "--", *upstream]
        return StdioServerParameters(command=sys.executable, args=proxy, env=self._env, cwd=self._project)

    def _open_log(self) -> TextIO | None:
        """``log_path`` opened for appending (0600), or None to leave the proxy our own stderr.

        Raises:
            HostSessionError: the log file cannot be opened.
        """
        if self._log_path is None:
            return None
        try:
            folder = self._log_path.parent
            private_dir(folder.parent, folder.name)
            fd = open_private(self._log_path, "append")
        except OSError as exc:
            raise HostSessionError(f"cannot open the log {self._log_path}: {exc.strerror or exc}") from None
        return os.fdopen(fd, "a", encoding="utf-8")

    async def _host(
        self, parameters: StdioServerParameters, errlog: TextIO | None, ready: asyncio.Future[types.InitializeResult]
    ) -> None:
        """The session's whole life in one task, so the SDK's scopes are left in the task that entered them.

        ``ready`` is settled as soon as the handshake is decided, before the SDK stops a proxy that failed it.
        """
        try:
            with self._scope:
                # With no log, the process's own stderr: what an inherited descriptor would have shown.
                async with (
                    stdio_client(parameters, errlog=errlog or sys.__stderr__ or sys.stderr) as (read, write),
                    ClientSession(read, write, message_handler=self._on_message, client_info=CLIENT_INFO) as session,
                ):
                    try:
                        with anyio.fail_after(INITIALIZE_TIMEOUT_S):
                            _settle(ready, await session.initialize())
                    except Exception as exc:  # noqa: BLE001 - every way the handshake fails is one HostSessionError
                        _settle(ready, self._failure(exc))
                        return
                    await anyio.sleep_forever()
        except Exception as exc:  # noqa: BLE001 - whatever ends the session is reported, never raised into the loop
            failure = self._failure(exc)
            if ready.done():
                log_event("replay.proxy_session_ended", server=self.name, error=str(failure))
            _settle(ready, failure)
        finally:
            _settle(ready, HostSessionError(f"{self.name}: stopped before it initialized"))
            if errlog is not None:
                errlog.close()
            if self._unreadable > UNREADABLE_LOGGED:
                log_event("replay.proxy_unreadable_total", server=self.name, lines=self._unreadable)

    def _failure(self, exc: BaseException) -> HostSessionError:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        head = f"--wrap {self.name}: `{self.command}`"
        if isinstance(exc, TimeoutError):
            return HostSessionError(
                f"{head} did not answer MCP's initialize within {INITIALIZE_TIMEOUT_S:g} s, so it is not a stdio "
                f"MCP server (or it never finished starting){self._see_log()}"
            )
        if isinstance(exc, OSError):
            return HostSessionError(f"--wrap {self.name}: cannot start bir-proxy: {exc.strerror or exc}")
        if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
            return HostSessionError(
                f"{head} exited before the MCP handshake, so it is not a stdio MCP server{self._see_log()}"
            )
        if isinstance(exc, MCPError):
            why = one_line(exc.error.message, MAX_ERROR_CHARS)
            return HostSessionError(
                f"{head} answered MCP's initialize with an error ({why}), so it is not a stdio MCP server bir can use"
            )
        return HostSessionError(f"{self.name}: the MCP session failed: {one_line(repr(exc), MAX_ERROR_CHARS)}")

    def _see_log(self) -> str:
        return f" (its messages are in {self._log_path})" if self._log_path is not None else ""

    async def _on_message(self, message: types.ServerNotification | Exception) -> None:
        if not isinstance(message, Exception):
            return
        self._unreadable += 1
        if self._unreadable <= UNREADABLE_LOGGED:
            log_event("replay.proxy_unreadable", server=self.name, error=one_line(str(message), MAX_ERROR_CHARS))

    async def stop(self) -> None:
        """End the session: the SDK closes the proxy's stdin, then terminates, then kills it, each step bounded."""
        task = self._task
        if task is None:
            return
        self._scope.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
        if not done:
            log_event("replay.proxy_not_stopped", server=self.name, timeout_s=STOP_TIMEOUT_S)
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)


def _settle(ready: asyncio.Future[types.InitializeResult], outcome: types.InitializeResult | Exception) -> None:
    """The handshake's outcome, once: the first one decided wins."""
    if ready.done():
        return
    if isinstance(outcome, Exception):
        ready.set_exception(outcome)
    else:
        ready.set_result(outcome)


def proxy_environment(bir_home: Path) -> dict[str, str]:
    """This process's environment (the upstream needs PATH and the like) minus bir's own secrets, with
    BIR_HOME pointing at the control server's discovery folder."""
    env = config.without_secrets(os.environ)
    env["BIR_HOME"] = str(bir_home)
    return env
