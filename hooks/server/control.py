"""The control server (``bir-hooks``): loopback HTTP for hooks, proxies and ``bir-scenario``.

`ControlServer` runs in-process (``bir replay --wrap``, tests) with `start` / `stop`; `main` is the
console script, which publishes the discovery file for the working directory, serves until SIGTERM
or SIGINT, and removes the file on the way out. The routes live in ``bir.hooks.server.routes``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import uvicorn

from bir import __version__
from bir.core import config, installed
from bir.core.log import log_event, log_to_file, logs_dir
from bir.core.paths import pid_alive, project_key, server_lock
from bir.hooks import api
from bir.hooks.discovery import Discovery, read_discovery, remove_discovery, write_discovery
from bir.hooks.server.routes import HookHandler, ReceivedStep, ScenarioRunner, SeenHello, StepHook, build_app
from bir.hooks.server.work_queue import ProxyWorkQueue

# Newest step reports kept for correlation, by count and by their bodies' total size.
MAX_STEP_REPORTS = 256
MAX_STEP_REPORT_BYTES = 32 * 1024 * 1024
MAX_HELLOS = 64
# §6.3: a direct plan is announced only while bir-scenario said hello within this window.
HELLO_FRESH_S = 30 * 60
_STEP_HOOK_TIMEOUT_S = 2.0
_START_TIMEOUT_S = 10.0
# Long polls are answered at stop; this bounds whatever else is still running.
_GRACEFUL_SHUTDOWN_S = 3
_MAX_CONNECTIONS = 512


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handling (the host process owns signals), with a started event."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


class ControlServer:
    """The control server's state and its HTTP listener."""

    def __init__(
        self,
        *,
        token: str | None = None,
        replay_enabled: bool | None = None,
        queue: ProxyWorkQueue | None = None,
        version: str = __version__,
    ) -> None:
        self.token = token or secrets.token_urlsafe(32)
        # BIR_REPLAY=0 is the single switch (§16.2); the project's stored switch is wired in later.
        self.replay_enabled = (
            replay_enabled if replay_enabled is not None else config.get_flag("BIR_REPLAY") is not False
        )
        self.queue = queue or ProxyWorkQueue()
        self.version = version
        self.wrapped: set[str] = set()
        self.scenario_runner: ScenarioRunner | None = None
        self.on_step: StepHook | None = None
        self.hook_handler: HookHandler | None = None
        self.hellos: dict[int, SeenHello] = {}
        self._hello_heard = asyncio.Event()
        # Set by the live controller: seconds the service is still cooling down, or None when unconfigured.
        self.service_cooling: Callable[[], float | None] | None = None
        self._background: set[asyncio.Task[api.HookAnswer]] = set()
        self.url: str | None = None
        self._steps: deque[ReceivedStep] = deque()
        self._steps_bytes = 0
        self._started = time.monotonic()
        self._server: _Uvicorn | None = None
        self._task: asyncio.Task[None] | None = None
        self.app = build_app(self)

    def uptime_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    # -- state the routes feed -----------------------------------------------------------------

    async def add_step_report(self, received: ReceivedStep) -> None:
        """Keep a proxy's step report in the bounded ring and pass it to ``on_step`` (errors logged)."""
        self._steps.append(received)
        self._steps_bytes += received.size
        while len(self._steps) > MAX_STEP_REPORTS or (self._steps_bytes > MAX_STEP_REPORT_BYTES and self._steps):
            self._steps_bytes -= self._steps.popleft().size
        hook = self.on_step
        if hook is None:
            return
        try:
            with anyio.fail_after(_STEP_HOOK_TIMEOUT_S):
                await hook(received)
        except Exception as exc:  # noqa: BLE001 - a broken hook must not fail the proxy's report
            log_event("control.step_hook_failed", error=f"{type(exc).__name__}: {exc}", tool=received.report.tool_name)

    def step_reports(self) -> list[ReceivedStep]:
        """The newest step reports, oldest first."""
        return list(self._steps)

    def note_hello(self, seen: SeenHello) -> None:
        self.hellos.pop(seen.hello.pid, None)
        self.hellos[seen.hello.pid] = seen
        while len(self.hellos) > MAX_HELLOS:
            del self.hellos[next(iter(self.hellos))]
        # Whoever waits for a delivery tool looks again; the next waiter gets a fresh event.
        self._hello_heard.set()
        self._hello_heard = asyncio.Event()

    async def wait_for_delivery_tool(self, within_s: float) -> bool:
        """Whether a delivery tool is live, waiting up to ``within_s`` for a hello that makes it so."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while not self.delivery_tool_live():
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hello_heard.wait(), left)
        return True

    def last_hello(self) -> api.LastHello | None:
        """The newest hello heard, with its age, for ``/health``."""
        if not self.hellos:
            return None
        seen = max(self.hellos.values(), key=lambda s: s.at)
        age_ms = int(max(0.0, time.monotonic() - seen.at) * 1000)
        hello = seen.hello
        return api.LastHello(pid=hello.pid, version=hello.version, tools=hello.tools, off=hello.off, age_ms=age_ms)

    def service_health(self) -> dict[str, Any]:
        """``/health``'s ``service`` and ``serviceCoolingMs`` fields; none while no controller is attached."""
        probe = self.service_cooling
        if probe is None:
            return {}
        cooling_s = probe()
        if cooling_s is None:
            return {"service": "unconfigured"}
        if cooling_s > 0:
            return {"service": "cooling", "service_cooling_ms": int(cooling_s * 1000)}
        return {"service": "ok"}

    def delivery_tool_live(self) -> bool:
        """Whether a live ``bir-scenario`` with a tool, not off, said hello within 30 minutes (§6.3)."""
        now = time.monotonic()
        return any(
            now - seen.at < HELLO_FRESH_S and seen.hello.tools > 0 and not seen.hello.off and pid_alive(seen.hello.pid)
            for seen in self.hellos.values()
        )

    async def answer_hook(self, event: str, hook: api.HookInput, deadline_s: float) -> api.HookAnswer:
        """The controller's answer to one hook, or its overdue answer past ``deadline_s`` (§10).

        The work goes on in the background past the deadline; a controller that raises answers ``{}``.
        """
        handler = self.hook_handler
        if handler is None:
            return api.EMPTY_HOOK_ANSWER
        deadline = time.monotonic() + deadline_s
        task: asyncio.Task[api.HookAnswer] = asyncio.create_task(handler.handle(event, hook, deadline))
        self._background.add(task)
        task.add_done_callback(self._hook_done)
        done, _ = await asyncio.wait({task}, timeout=deadline_s)
        if not done:
            log_event(
                "control.hook_deadline", hook_event=event, session_id=hook.session_id, deadline_ms=deadline_s * 1000
            )
            try:
                return handler.overdue(event, hook)
            except Exception as exc:  # noqa: BLE001 - the host session must never fail because of bir
                log_event("control.hook_failed", hook_event=event, error=f"{type(exc).__name__}: {exc}")
                return api.EMPTY_HOOK_ANSWER
        if task.cancelled() or task.exception() is not None:
            return api.EMPTY_HOOK_ANSWER
        return task.result()

    def _hook_done(self, task: asyncio.Task[api.HookAnswer]) -> None:
        self._background.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log_event("control.hook_failed", error=f"{type(exc).__name__}: {exc}"[:500])

    # -- the listener --------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0 picks a free port) and return the base URL.

        Raises:
            ValueError: ``host`` is not a loopback address.
            RuntimeError: already started, or uvicorn did not come up.
            OSError: the port cannot be bound.
        """
        if not _is_loopback(host):
            raise ValueError(f"the control server listens on loopback only, not {host!r}")
        if self._server is not None:
            raise RuntimeError("the control server is already started")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=128)
        # create_server leaves the protocol number 0, so asyncio does not set TCP_NODELAY on accepted
        # sockets; without it every long-poll answer waits ~40 ms for a delayed ACK. Linux passes the
        # option on to accepted sockets.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        bound_host, bound_port = sock.getsockname()[:2]
        cfg = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,
            lifespan="off",
            ws="none",
            server_header=False,
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
            limit_concurrency=_MAX_CONNECTIONS,
        )
        server = _Uvicorn(cfg)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="bir-control-server")
        ready = asyncio.create_task(server.ready.wait())
        try:
            await asyncio.wait({self._task, ready}, timeout=_START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if not server.ready.is_set():
            await self.stop()
            sock.close()
            raise RuntimeError("the control server did not start")
        self.url = (
            f"http://[{bound_host}]:{bound_port}" if family == socket.AF_INET6 else f"http://{bound_host}:{bound_port}"
        )
        log_event("control.started", url=self.url, pid=os.getpid(), version=self.version, replay=self.replay_enabled)
        return self.url

    async def stop(self) -> None:
        """Answer parked polls, fail waiting calls, and stop listening. Safe to call twice."""
        self.queue.close()
        server, task = self._server, self._task
        self._server, self._task = None, None
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(task, timeout=_GRACEFUL_SHUTDOWN_S + 5)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception as exc:  # noqa: BLE001 - stopping must finish whatever the server died of
            log_event("control.stop_failed", error=f"{type(exc).__name__}: {exc}")
        log_event("control.stopped", url=self.url)

    def discovery(self, project: Path) -> Discovery:
        """What to publish for ``project`` once started.

        Raises:
            RuntimeError: the server is not started.
        """
        if self.url is None:
            raise RuntimeError("the control server is not started")
        return Discovery(
            url=self.url,
            token=self.token,
            pid=os.getpid(),
            version=self.version,
            started_at=int(time.time() * 1000),
            project=str(project),
        )


# -- the console script ---------------------------------------------------------------------------


class _UvicornToEvents(logging.Handler):
    """uvicorn's own log records as JSON lines, so stderr stays one format."""

    def emit(self, record: logging.LogRecord) -> None:
        log_event("control.uvicorn", level=record.levelname.lower(), message=record.getMessage())


def _route_uvicorn_logs() -> None:
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [_UvicornToEvents(level=logging.WARNING)]
        logger.propagate = False


def take_server_lock(project: Path) -> int | None:
    """Take the project's server lock (``<BIR_HOME>/control/<key>.lock``, ``flock``) and return its fd,
    held for the process's life; None when another live process holds it. A dead holder's lock is
    free: the kernel drops it with the process.

    Raises:
        OSError: the lock file cannot be created.
    """
    path = server_lock(config.home(), project)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


async def _serve(project: Path, port: int, *, quiet_if_running: bool = False) -> int:
    lock = take_server_lock(project)
    existing = read_discovery(project)
    if lock is None or (existing is not None and existing.pid != os.getpid()):
        if lock is not None:
            os.close(lock)
        if quiet_if_running:
            return 0
        holder = f" (pid {existing.pid})" if existing is not None else ""
        sys.stderr.write(f"bir-hooks: a control server is already running for {project}{holder}\n")
        return 1
    try:
        return await _serve_locked(project, port)
    finally:
        os.close(lock)


async def _serve_locked(project: Path, port: int) -> int:
    server = ControlServer()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from bir.hooks.session.host import live_controller

    try:
        await server.start(port=port)
        async with live_controller(server, project):
            path = write_discovery(server.discovery(project))
            log_event("control.published", path=str(path), project=str(project), url=server.url)
            await stop.wait()
    finally:
        remove_discovery(project, pid=os.getpid())
        await server.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0


def _revive(argv: Sequence[str]) -> int:
    """``bir-hooks revive --project DIR``: what a hook starts, detached, for an installed project with
    no live server. Exits 0 at once when the project is not installed, is marked down, or already has a
    server; else serves, logging to ``<BIR_HOME>/logs/<key>.log``."""
    parser = argparse.ArgumentParser(prog="bir-hooks revive", description="start the project's server if due")
    parser.add_argument("--project", required=True, help="project directory")
    parser.add_argument("--port", type=int, default=0, help="loopback port (default: any free port)")
    args = parser.parse_args(argv)
    project = Path(args.project).resolve()
    switches = installed.project(project)
    if switches is None or switches.down or read_discovery(project) is not None:
        return 0
    log_to_file(logs_dir(config.home()) / f"{project_key(project)}.log")
    log_event("control.revive", project=str(project), pid=os.getpid())
    _route_uvicorn_logs()
    try:
        return asyncio.run(_serve(project, args.port, quiet_if_running=True))
    except (OSError, RuntimeError, ValueError) as exc:
        log_event("control.revive_failed", project=str(project), error=f"{type(exc).__name__}: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """``bir-hooks [--project DIR] [--port N]``: serve the control server for a project until SIGTERM or
    SIGINT; ``bir-hooks revive --project DIR``: the same, detached, only when an installed project needs it."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["revive"]:
        return _revive(args_list[1:])
    parser = argparse.ArgumentParser(prog="bir-hooks", description="bir's control server for one project.")
    parser.add_argument("--project", default=".", help="project directory (default: the working directory)")
    parser.add_argument("--port", type=int, default=0, help="loopback port (default: any free port)")
    parser.add_argument(
        "--verbose", action="store_true", help="log lines on stderr instead of <BIR_HOME>/logs/<project key>.log"
    )
    args = parser.parse_args(args_list)
    project = Path(args.project).resolve()
    if not args.verbose:
        # A server logs to its project's file (`bir logs` shows it), never to a terminal it shares.
        try:
            log_to_file(logs_dir(config.home()) / f"{project_key(project)}.log")
        except OSError as exc:
            sys.stderr.write(f"bir-hooks: cannot open the log under {logs_dir(config.home())}: {exc}\n")
            return 1
    _route_uvicorn_logs()
    try:
        return asyncio.run(_serve(project, args.port))
    except (OSError, RuntimeError, ValueError) as exc:
        # ConfigError is a ValueError: one line naming the variable, never a traceback.
        sys.stderr.write(f"bir-hooks: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
