"""The wrapped MCP server as a child process: spawn, signal, and a bounded stop.

The child gets the host's environment (the upstream was configured for it) minus bir's own secrets
(``bir.core.config.SECRETS``: the proxy needs none of them, the upstream must never see them) and writes
its stderr straight to ours. Stopping follows MCP's stdio shutdown: close its stdin, wait, then
SIGTERM, wait, then SIGKILL — every step bounded, so a hung server cannot hold the host.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from typing import Final

import anyio
import psutil
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from bir.core import config
from bir.core.log import log_event

CLOSE_GRACE_S: Final = 2.0
TERM_GRACE_S: Final = 2.0
_REAP_S: Final = 2.0
_EXIT_POLL_S: Final = 0.01
_WATCH_S: Final = 0.1


class UpstreamSpawnError(OSError):
    """The upstream command could not be started."""


def exit_code(returncode: int | None) -> int:
    """The shell's convention for a child's status: ``128 + n`` for death by signal ``n``."""
    if returncode is None:
        return 1
    if returncode < 0:
        return 128 + (-returncode)
    return returncode


class Upstream:
    """One running upstream server."""

    def __init__(self, process: Process, argv: Sequence[str]) -> None:
        self._process = process
        self.argv = tuple(argv)

    @classmethod
    async def spawn(cls, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Upstream:
        """Start ``argv`` with pipes on stdin/stdout and our stderr, in ``env`` (default: ours) minus bir's secrets.

        Raises:
            UpstreamSpawnError: the command is missing, not executable, or the list is empty.
        """
        if not argv:
            raise UpstreamSpawnError("no upstream command given")
        try:
            process = await anyio.open_process(
                list(argv),
                stdin=-1,  # subprocess.PIPE
                stdout=-1,
                stderr=None,  # the upstream's stderr is the host's log, as without the proxy
                env=config.without_secrets(os.environ if env is None else env),
            )
        except OSError as exc:
            raise UpstreamSpawnError(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from exc
        log_event("proxy.upstream_started", pid=process.pid, command=list(argv)[:8])
        return cls(process, argv)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def stdin(self) -> ByteSendStream:
        stream = self._process.stdin
        assert stream is not None  # spawned with a pipe
        return stream

    @property
    def stdout(self) -> ByteReceiveStream:
        stream = self._process.stdout
        assert stream is not None  # spawned with a pipe
        return stream

    def send_signal(self, sig: signal.Signals) -> None:
        """Pass a signal on; a child that is already gone is not an error."""
        if self._process.returncode is not None:
            return
        try:
            self._process.send_signal(sig)
        except ProcessLookupError:
            return

    async def wait_exit(self, within: float) -> bool:
        """Whether the child exited within ``within`` seconds.

        Polls the status rather than ``Process.wait()``: on asyncio that also waits for the pipes
        to close, and a grandchild holding them would make an exited server look hung.
        """
        with anyio.move_on_after(within):
            while self._process.returncode is None:  # noqa: ASYNC110 - no event exists for a child's exit
                await anyio.sleep(_EXIT_POLL_S)
        return self._process.returncode is not None

    def _descendants(self) -> list[psutil.Process]:
        try:
            return list(psutil.Process(self.pid).children(recursive=True))
        except psutil.Error:
            return []

    async def close_stdin(self) -> None:
        """Send end-of-file to the upstream (tolerates a pipe already closed or broken)."""
        await _close_quietly(self._process.stdin)

    async def close_stdout(self) -> None:
        """Stop reading the upstream: unsticks a reader whose pipe a surviving grandchild holds open."""
        await _close_quietly(self._process.stdout)

    async def wait_exited(self) -> int:
        """Wait, however long, for the child to exit; its return code."""
        while self._process.returncode is None:  # noqa: ASYNC110 - no event exists for a child's exit
            await anyio.sleep(_WATCH_S)
        return self._process.returncode

    async def stop(self, close_grace: float = CLOSE_GRACE_S, term_grace: float = TERM_GRACE_S) -> int | None:
        """Stop the upstream within about ``close_grace + term_grace + 2`` seconds; its return code.

        Shielded from cancellation: a caller being cancelled must not leave the child running.
        """
        with anyio.CancelScope(shield=True):
            await self.close_stdin()
            if not await self.wait_exit(close_grace):
                log_event("proxy.upstream_terminate", pid=self.pid, why="still running after stdin closed")
                # The whole tree: a launcher (npx, uv run, sh -c) may not pass the signal on.
                tree = self._descendants()
                self.send_signal(signal.SIGTERM)
                _signal_all(tree, signal.SIGTERM)
                if not await self.wait_exit(term_grace):
                    log_event("proxy.upstream_kill", pid=self.pid, why="still running after SIGTERM")
                    tree += self._descendants()
                    self.send_signal(signal.SIGKILL)
                    _signal_all(tree, signal.SIGKILL)
                    await self.wait_exit(_REAP_S)
        return self._process.returncode


def _signal_all(processes: list[psutil.Process], sig: signal.Signals) -> None:
    for process in processes:
        try:
            process.send_signal(sig)  # psutil checks the pid was not reused since it was listed
        except psutil.Error:
            continue


async def _close_quietly(stream: ByteSendStream | ByteReceiveStream | None) -> None:
    if stream is None:
        return
    try:
        await stream.aclose()
    except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return
