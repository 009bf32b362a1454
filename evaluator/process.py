"""One worker process as the supervisor sees it: spawn, handshake, frames in and out, kill.

Workers are spawned (fork+exec of a fresh interpreter; never a fork of a process with V8 loaded)
with an empty environment, an empty working directory, only their three pipes, and a session of
their own so a terminal's signals do not reach them; the supervisor decides when they end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import Final, Literal

from bir.core.log import log_event
from bir.evaluator.wire import (
    PROTOCOL_VERSION,
    Codec,
    FrameDecoder,
    FrameTooLarge,
    FromWorker,
    Hello,
    ProtocolError,
    Result,
    Shutdown,
    ToWorker,
)

STDERR_TAIL_BYTES: Final = 4096
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")
MAX_STDERR_LINES_LOGGED: Final = 20

State = Literal["starting", "ready", "dead"]

# Fallback reasons already logged by this process: an engine fallback is logged once, not per worker.
_fallbacks_logged: set[tuple[str, str]] = set()


class WorkerEvents:
    """What a worker reports to its pool (the pool implements these)."""

    def on_result(self, worker: WorkerProcess, result: Result) -> None: ...
    def on_retire(self, worker: WorkerProcess, why: str) -> None: ...
    def on_exit(self, worker: WorkerProcess, returncode: int | None) -> None: ...


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, worker: WorkerProcess) -> None:
        self._worker = worker

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        if fd == 1:
            self._worker._feed(raw)
        elif fd == 2:
            self._worker._feed_stderr(raw)

    def connection_lost(self, exc: Exception | None) -> None:
        # Called once the process has exited *and* its pipes are drained, so a frame the worker
        # wrote just before it died (a Blame, a last Result) is handled before its exit.
        self._worker._exited()


class _DirectReader(asyncio.Protocol):
    """The worker's stdout protocol: frames go to the worker as they are read. asyncio's subprocess
    transport would hand each chunk on through ``call_soon``, one more turn of the loop per answer;
    everything else (EOF, the pipe's end, flow control) goes to the protocol it replaced, so the
    process's exit is still seen after its last frame."""

    def __init__(self, worker: WorkerProcess, replaced: asyncio.BaseProtocol) -> None:
        self._worker = worker
        self._replaced = replaced

    def data_received(self, data: bytes) -> None:
        self._worker._feed(data)

    def eof_received(self) -> bool | None:
        if isinstance(self._replaced, asyncio.Protocol):
            return self._replaced.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._replaced.connection_lost(exc)

    def pause_writing(self) -> None:
        self._replaced.pause_writing()

    def resume_writing(self) -> None:
        self._replaced.resume_writing()


class WorkerProcess:
    """A running worker. ``current`` is the job it is working on, if any."""

    def __init__(
        self,
        events: WorkerEvents,
        *,
        engine: str,
        memory_mb: int,
        cwd: str,
        job_budget: int,
        codec: Codec,
        job_limit: int | None = None,
        walls: bool = True,
        surface: str = "auto",
    ) -> None:
        # ``BIR_LOGIC_ENGINE_SURFACE``: ``public`` forces the engine library's public API.
        self._surface = surface
        self._events = events
        self._engine = engine
        self._memory_mb = memory_mb
        self._cwd = cwd
        self._codec = codec
        self._decoder = FrameDecoder()
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._hello: asyncio.Future[Hello] | None = None
        self._stderr_tail = bytearray()
        self._stderr_lines_logged = 0
        self.state: State = "starting"
        self.pid: int | None = None
        self.job_budget = job_budget
        # Past this many jobs it serves nothing until its spare is up (the pool's margin over its budget).
        self.job_limit = job_limit if job_limit is not None else job_budget
        self.held = False
        self.hold_released = False  # its spare failed to start while it was held: it serves on
        self._walls = walls
        self.jobs_done = 0
        self.last_job_at: float | None = None  # time.monotonic() when its last job ended
        self.current: object | None = None  # the pool's job record
        self.kill_reason: str | None = None  # set when the supervisor killed it on purpose
        self.retiring = False
        self.baseline_rss = 0
        self._statm_fd: int | None = None  # /proc/<pid>/statm, open while the worker lives
        self.exited = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self, deadline_s: float) -> Hello:
        """Spawn and wait for the handshake.

        Raises:
            RuntimeError: the worker did not start, or speaks another protocol version.
        """
        loop = asyncio.get_running_loop()
        self._hello = loop.create_future()
        # Retrieved here so that a start abandoned part-way leaves no unretrieved exception behind.
        self._hello.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        command = [
            sys.executable,
            "-I",
            "-B",
            "-m",
            "bir.evaluator.worker",
            "--engine",
            self._engine,
            "--memory-mb",
            str(self._memory_mb),
            "--parent-pid",
            str(os.getpid()),
            "--surface",
            self._surface,
            "--walls",
            "on" if self._walls else "off",
        ]
        transport, _ = await loop.subprocess_exec(
            lambda: _Protocol(self),
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={},
            cwd=self._cwd,
            close_fds=True,
            start_new_session=True,
        )
        self._transport = transport
        self.pid = transport.get_pid()
        stdout = transport.get_pipe_transport(1)
        if isinstance(stdout, asyncio.ReadTransport):
            # Before any job is sent: the worker writes nothing but its Hello until it has one.
            stdout.set_protocol(_DirectReader(self, stdout.get_protocol()))
        stdin = transport.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self._stdin = stdin
        try:
            hello = await asyncio.wait_for(asyncio.shield(self._hello), deadline_s)
        except BaseException:
            self.kill("start")
            raise
        if hello.protocol != PROTOCOL_VERSION:
            self.kill("protocol")
            raise RuntimeError(f"worker speaks protocol {hello.protocol}, the pool {PROTOCOL_VERSION}")
        self.state = "ready"
        self.baseline_rss = self.rss()
        if hello.fallback is not None and (hello.engine, hello.fallback) not in _fallbacks_logged:
            _fallbacks_logged.add((hello.engine, hello.fallback))
            log_event(
                "evaluator.engine_fallback", engine=hello.engine, version=hello.engine_version, why=hello.fallback
            )
        return hello

    def send(self, message: ToWorker) -> bool:
        if self._stdin is None or self._stdin.is_closing() or self.state == "dead":
            return False
        self._stdin.write(self._codec.encode(message))
        return True

    def shutdown(self) -> None:
        """Ask the worker to exit after what it is doing; it also exits on EOF."""
        self.send(Shutdown())
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()

    def kill(self, reason: str) -> None:
        if self.kill_reason is None:
            self.kill_reason = reason
        if self.pid is not None and self.state != "dead":
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def rss(self) -> int:
        """The worker's resident memory in bytes (0 once it is gone). The watchdog asks every few
        milliseconds while a job runs: one pread on a descriptor kept open, psutil where /proc is not."""
        if self.pid is None or self.state == "dead":
            return 0
        try:
            if self._statm_fd is None:
                self._statm_fd = os.open(f"/proc/{self.pid}/statm", os.O_RDONLY | os.O_CLOEXEC)
            return int(os.pread(self._statm_fd, 256, 0).split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            return _rss(self.pid)

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.decode("utf-8", "replace")

    # -- from the protocol -----------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self._decoder.feed(data)
        try:
            while (payload := self._decoder.next_view()) is not None:
                with payload:
                    message = self._codec.decode_from_worker(payload)
                self._dispatch(message)
        except (FrameTooLarge, ProtocolError) as exc:
            log_event("evaluator.protocol_error", pid=self.pid, error=str(exc))
            self.kill("protocol")

    def _dispatch(self, message: FromWorker) -> None:
        if isinstance(message, Result):
            self._events.on_result(self, message)
        elif isinstance(message, Hello):
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(message)
        else:
            self._events.on_retire(self, message.why)

    def _feed_stderr(self, data: bytes) -> None:
        self._stderr_tail += data
        if len(self._stderr_tail) > STDERR_TAIL_BYTES:
            del self._stderr_tail[: len(self._stderr_tail) - STDERR_TAIL_BYTES]
        if self._stderr_lines_logged < MAX_STDERR_LINES_LOGGED:
            for line in data.decode("utf-8", "replace").splitlines():
                if line.strip() and self._stderr_lines_logged < MAX_STDERR_LINES_LOGGED:
                    self._stderr_lines_logged += 1
                    log_event("evaluator.worker_stderr", pid=self.pid, line=line)

    def _exited(self) -> None:
        if self.state == "dead":
            return
        self.state = "dead"
        returncode = self._transport.get_returncode() if self._transport is not None else None
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(
                RuntimeError(f"worker exited with {returncode} before its handshake: {self.stderr_tail[-500:]}")
            )
        if self._transport is not None:
            self._transport.close()
        if self._statm_fd is not None:
            os.close(self._statm_fd)
            self._statm_fd = None
        self._events.on_exit(self, returncode)
        self.exited.set()


def _rss(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except Exception:  # noqa: BLE001 - a process that is gone has no RSS to speak of
        return 0
