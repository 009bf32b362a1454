"""The control server: loopback HTTP for hooks, proxies and ``bir-scenario``.

`ControlServer` runs in-process (``bir replay --wrap``, tests) with `start` / `stop`; ``bir-hooks``
(``bir.hooks.daemon``) builds one with the live session as its handler. The routes live in
``bir.hooks.server.routes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bir import __version__
from bir.core import config
from bir.core.log import log_event
from bir.hooks import api
from bir.hooks.discovery import Discovery
from bir.hooks.server.hellos import HelloBook
from bir.hooks.server.listener import KEEP_ALIVE_S, LISTEN_BACKLOG, ConnectionBook, protocol_for
from bir.hooks.server.routes import ReceivedStep, SessionHandler, build_app
from bir.hooks.server.work_queue import ProxyWorkQueue

# Newest step reports kept for correlation, by count and by their bodies' total size.
MAX_STEP_REPORTS = 256
MAX_STEP_REPORT_BYTES = 32 * 1024 * 1024
_STEP_HOOK_TIMEOUT_S = 2.0
_START_TIMEOUT_S = 10.0
# Long polls are answered at stop; this bounds whatever else is still running.
_GRACEFUL_SHUTDOWN_S = 3


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


class _Activity:
    """ASGI middleware that knows when the server was last used: a request other than ``/health`` in
    flight (a parked poll is a live proxy) keeps it busy, and one answered marks the time. A request the
    guard refused (401, 403) is not use."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._busy = 0
        self._last = time.monotonic()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == "/health":
            await self._app(scope, receive, send)
            return
        status = 0

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self._busy += 1
        try:
            await self._app(scope, receive, sent)
        finally:
            self._busy -= 1
            if status not in (401, 403):
                self._last = time.monotonic()

    def idle_s(self) -> float:
        """Seconds since the last use; 0 while a request is in flight."""
        return 0.0 if self._busy else time.monotonic() - self._last


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _own_hosts(host: str, port: int) -> frozenset[bytes]:
    """The ``Host`` headers naming this server: its address, or ``localhost``, with its port."""
    shown = f"[{host}]" if ":" in host else host
    names = {shown, "localhost"} | ({"[::1]"} if host == "::1" else set())
    return frozenset(f"{name}:{port}".encode("ascii") for name in names)


class ControlServer:
    """The control server's state and its HTTP listener."""

    def __init__(
        self,
        *,
        handler: SessionHandler | None = None,
        token: str | None = None,
        replay_enabled: bool | None = None,
        queue: ProxyWorkQueue | None = None,
        hellos: HelloBook | None = None,
        wrapped: set[str] | None = None,
        version: str = __version__,
        settings: config.Settings | None = None,
    ) -> None:
        self.settings = settings if settings is not None else config.load()
        self.handler = handler
        self.token = token or secrets.token_urlsafe(32)
        # Without a session handler, BIR_REPLAY=0 is the single switch (§16.2).
        self._replay_default = replay_enabled if replay_enabled is not None else self.settings.replay is not False
        self.queue = queue or ProxyWorkQueue()
        self.hellos = hellos or HelloBook()
        self.wrapped: set[str] = wrapped if wrapped is not None else set()
        self.version = version
        self._background: set[asyncio.Task[api.HookAnswer]] = set()
        self.url: str | None = None
        self._steps: deque[ReceivedStep] = deque()
        self._steps_bytes = 0
        self._started = time.monotonic()
        self._server: _Uvicorn | None = None
        self._task: asyncio.Task[None] | None = None
        self.connections = ConnectionBook()
        # The Host values a request may carry: this server's own address, known once it is bound.
        self.hosts: frozenset[bytes] = frozenset()
        self.app = build_app(self)
        # Wraps ``app`` as it is when the server starts (a test may wrap the app before that).
        self._activity: _Activity | None = None

    @property
    def replay_enabled(self) -> bool:
        """Whether replay is on: the session's switch when a handler is attached, else the server's own."""
        return self.handler.replay_on() if self.handler is not None else self._replay_default

    @replay_enabled.setter
    def replay_enabled(self, on: bool) -> None:
        self._replay_default = on

    def uptime_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def idle_s(self) -> float:
        """Seconds since a hook, a proxy or ``bir-scenario`` last used the server (``/health`` does not
        count); 0 while one is in flight, such as a proxy's parked poll."""
        return 0.0 if self._activity is None else self._activity.idle_s()

    # -- state the routes feed -----------------------------------------------------------------

    async def add_step_report(self, received: ReceivedStep) -> None:
        """Keep a proxy's step report in the bounded ring and pass it to the handler (errors logged)."""
        self._steps.append(received)
        self._steps_bytes += received.size
        while len(self._steps) > MAX_STEP_REPORTS or (self._steps_bytes > MAX_STEP_REPORT_BYTES and self._steps):
            self._steps_bytes -= self._steps.popleft().size
        handler = self.handler
        if handler is None:
            return
        try:
            with anyio.fail_after(_STEP_HOOK_TIMEOUT_S):
                await handler.on_step(received)
        except Exception as exc:  # noqa: BLE001 - a broken handler must not fail the proxy's report
            log_event("control.step_hook_failed", error=f"{type(exc).__name__}: {exc}", tool=received.report.tool_name)

    def step_reports(self) -> list[ReceivedStep]:
        """The newest step reports, oldest first."""
        return list(self._steps)

    def service_health(self) -> dict[str, Any]:
        """``/health``'s ``service`` and ``serviceCoolingMs`` fields; none while no handler is attached."""
        if self.handler is None:
            return {}
        cooling_s = self.handler.service_cooling()
        if cooling_s is None:
            return {"service": "unconfigured"}
        if cooling_s > 0:
            return {"service": "cooling", "service_cooling_ms": int(cooling_s * 1000)}
        return {"service": "ok"}

    async def answer_hook(self, event: str, hook: api.HookInput, deadline_s: float) -> api.HookAnswer:
        """The handler's answer to one hook, or its overdue answer past ``deadline_s`` (§10).

        The work goes on in the background past the deadline; a handler that raises answers ``{}``.
        """
        handler = self.handler
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
        # A deep backlog (the kernel caps it at net.core.somaxconn; uvicorn listens again with it): a local
        # flood of connects must not fill the queue a hook's connect waits in before the server accepts it.
        sock = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
        # create_server leaves the protocol number 0, so asyncio does not set TCP_NODELAY on accepted
        # sockets; without it every long-poll answer waits ~40 ms for a delayed ACK. Linux passes the
        # option on to accepted sockets.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        bound_host, bound_port = sock.getsockname()[:2]
        self.hosts = _own_hosts(bound_host, bound_port)
        self._activity = _Activity(self.app)
        cfg = uvicorn.Config(
            self._activity,
            http=protocol_for(self.connections),
            log_config=None,
            access_log=False,
            lifespan="off",
            ws="none",
            server_header=False,
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
            timeout_keep_alive=KEEP_ALIVE_S,
            # No 503 for everyone once connections pile up: the listener evicts the untrusted ones.
            limit_concurrency=None,
            backlog=LISTEN_BACKLOG,
            # The peer address is the socket's: no header may change what the loopback check sees.
            proxy_headers=False,
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
