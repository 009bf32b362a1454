"""A minimal MCP host for a ``bir-proxy`` that ``bir replay --wrap`` starts.

A proxy runs work only once its host has initialized the MCP session with the upstream (the proxy
relays the host's own ``initialize``). With no Claude Code session around, ``bir replay`` is that
host: it spawns the proxy, sends ``initialize`` and ``notifications/initialized``, drains the
proxy's stdout, and stops it within bounds (close stdin, wait, terminate, kill). The proxy runs in a
session of its own, so a terminal's Ctrl-C reaches ``bir replay`` alone, which then stops it in order.

Every failure to start is one sentence (``HostSessionError``): a command that is not there, one that
exits before the handshake, and one that is not an MCP server (it does not answer ``initialize``
within ``INITIALIZE_TIMEOUT_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from bir import __version__
from bir.core import config
from bir.core.exits import EXIT_SPAWN_FAILED
from bir.core.framing import NEED_DATA, LineSplitter, LineTooLong
from bir.core.log import log_event
from bir.core.truncate import one_line

PROTOCOL_VERSION: Final = "2025-06-18"
INITIALIZE_TIMEOUT_S: Final = 30.0
STOP_STEP_S: Final = 2.0


class HostSessionError(RuntimeError):
    """The wrapped server could not be started or did not initialize."""


class ProxyHost:
    """One ``bir-proxy`` subprocess wrapping ``command`` as server ``name``, with this process as its host.

    ``log_path``, when given, receives the proxy's stderr (its JSON log lines, and its upstream's stderr).
    """

    def __init__(
        self, name: str, command: str, *, project: Path, env: Mapping[str, str], log_path: Path | None = None
    ) -> None:
        self.name = name
        self.command = command
        self._project = project
        self._env = dict(env)
        self._log_path = log_path
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._initialized: asyncio.Future[dict[str, object]] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def start(self) -> dict[str, object]:
        """Spawn the proxy and complete the MCP handshake through it; answer the server's ``initialize`` result.

        Raises:
            HostSessionError: the command does not parse, the proxy exits, or the handshake times out.
        """
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
        argv = [
            sys.executable,
            "-m",
            "bir.proxy",
            "--server-name",
            self.name,
            "--project",
            str(self._project),
            "--",
            *upstream,
        ]
        log_fd = self._open_log()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_fd,  # None: ours; else the log file, for the proxy and the upstream it starts
                env=self._env,
                cwd=str(self._project),
                # Its own session: a terminal's Ctrl-C stops bir replay, which then stops the proxy itself.
                start_new_session=True,
            )
        except OSError as exc:
            raise HostSessionError(f"--wrap {self.name}: cannot start bir-proxy: {exc.strerror or exc}") from None
        finally:
            if log_fd is not None:
                os.close(log_fd)  # the child holds its own copy
        loop = asyncio.get_running_loop()
        self._initialized = loop.create_future()
        self._reader = loop.create_task(self._read())
        self._send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "bir-replay", "version": __version__},
                },
            }
        )
        try:
            result = await asyncio.wait_for(asyncio.shield(self._initialized), INITIALIZE_TIMEOUT_S)
        except TimeoutError:
            # Nobody waits for it any more: a late failure must not be left unretrieved on the loop.
            self._initialized.cancel()
            raise HostSessionError(
                f"--wrap {self.name}: `{self.command}` did not answer MCP's initialize within "
                f"{INITIALIZE_TIMEOUT_S:g} s, so it is not a stdio MCP server (or it never finished starting)"
                f"{self._see_log()}"
            ) from None
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    def _see_log(self) -> str:
        return f"; its own messages are in {self._log_path}" if self._log_path is not None else ""

    def _open_log(self) -> int | None:
        """An append-only descriptor on ``log_path`` (0600), or None to leave the proxy our stderr.

        Raises:
            HostSessionError: the log file cannot be opened.
        """
        if self._log_path is None:
            return None
        try:
            self._log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise HostSessionError(f"cannot open the log {self._log_path}: {exc.strerror or exc}") from None

    def _send(self, message: dict[str, object]) -> None:
        assert self._process is not None
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def _read(self) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        splitter = LineSplitter()
        stdout = self._process.stdout
        while True:
            data = await stdout.read(65536)
            splitter.feed(data)
            while True:
                try:
                    line = splitter.next_line()
                except LineTooLong:
                    continue
                if line is NEED_DATA:
                    break
                self._handle(bytes(line))
            if not data:
                break
        if self._initialized is not None and not self._initialized.done():
            # Its stdout closed: give it a moment to exit, so the error can say with what code.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._process.wait(), STOP_STEP_S)
            self._initialized.set_exception(HostSessionError(self._exited_words(self._process.returncode)))

    def _exited_words(self, code: int | None) -> str:
        head = f"--wrap {self.name}: `{self.command}`"
        if code == EXIT_SPAWN_FAILED:
            what = "could not be started (not found, or not executable)"
        elif code is not None and code < 0:
            what = f"was killed by signal {-code} before the MCP handshake"
        else:
            what = f"exited before the MCP handshake (exit code {code}), so it is not a stdio MCP server"
        return f"{head} {what}{self._see_log()}"

    def _refused_words(self, message: Mapping[str, object]) -> str:
        error = message.get("error")
        text = error.get("message") if isinstance(error, dict) else None
        head = f"--wrap {self.name}: `{self.command}`"
        if isinstance(text, str) and text.startswith("upstream exited"):
            why = one_line(text, 120)
            return f"{head} exited before it answered MCP's initialize ({why}), so it is not a stdio MCP server"
        what = f"an error ({one_line(text, 200)})" if isinstance(text, str) else "something that is not an MCP result"
        return f"{head} answered MCP's initialize with {what}, so it is not a stdio MCP server bir can use"

    def _handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("id") == 1 and self._initialized is not None and not self._initialized.done():
            if isinstance(message.get("result"), dict):
                self._initialized.set_result(message["result"])
            else:
                self._initialized.set_exception(HostSessionError(self._refused_words(message)))
        elif "method" in message and "id" in message:
            # A request from the server (ping, roots/list…): a host that has nothing to offer says so.
            reply: dict[str, object] = {"jsonrpc": "2.0", "id": message["id"]}
            if message["method"] == "ping":
                reply["result"] = {}
            else:
                reply["error"] = {"code": -32601, "message": "not supported by bir replay"}
            with contextlib.suppress(Exception):
                self._send(reply)

    async def stop(self) -> None:
        """Close the proxy's stdin, then terminate, then kill: each step bounded."""
        process = self._process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        for escalate in (None, process.terminate, process.kill):
            if escalate is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    escalate()
            try:
                await asyncio.wait_for(process.wait(), STOP_STEP_S)
                break
            except TimeoutError:
                continue
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if process.returncode is None:
            log_event("replay.proxy_not_stopped", server=self.name, pid=process.pid)


def proxy_environment(bir_home: Path) -> dict[str, str]:
    """This process's environment (the upstream needs PATH and the like) minus bir's own secrets, with
    BIR_HOME pointing at the control server's discovery folder."""
    env = config.without_secrets(os.environ)
    env["BIR_HOME"] = str(bir_home)
    return env
