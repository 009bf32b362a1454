"""The control server's HTTP surface (spec §16.1, §13.3): the guard, the body models, the routes.

Every route is JSON in and out. The guard answers before any route runs: a peer that is not on
loopback gets 403, a ``Host`` that is not the server's own address 403 (a page in a browser whose
name was made to point at 127.0.0.1 is not a client), a missing or wrong bearer token 401 (also for
unknown paths, so the surface is not probed without the token). A connection whose request passed
is trusted from then on by the listener (``bir.hooks.server.listener``). Then a body past
``MAX_BODY_BYTES`` is 413, a body that is not the route's shape 400, an unknown path 404, and an
exception inside a route 500 with a short message and a ``control.request_failed`` line: nothing a
client sends takes the server down.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bir.core import config
from bir.core.log import log_event
from bir.hooks import api
from bir.hooks.server.hellos import HelloBook, SeenHello
from bir.hooks.server.listener import ConnectionBook
from bir.hooks.server.work_queue import NotSentError, ProxyWorkQueue, StepTimeoutError, WorkQueueError

MAX_BODY_BYTES = 8 * 1024 * 1024
POLL_HOLD_MS = api.POLL_HOLD_MS
_MAX_ERROR_CHARS = api.MAX_ERROR_CHARS

_LOOPBACK = ("127.", "::1", "::ffff:127.")
REPLAY_OFF = "replay is off for this project (`bir replay on` turns it on); nothing was sent"


# -- what the routes hand to the rest of bir -------------------------------------------------


@dataclass(frozen=True)
class ReceivedStep:
    """A proxy's step report as the server received it: when, and how large its body was."""

    report: api.StepReport
    received_at: float
    size: int


class SessionHandler(Protocol):
    """The live session as the server's routes see it (``bir.hooks.session.controller.Controller``).

    Given to the ``ControlServer`` when it is built (``bir.hooks.daemon``); a server without one (``bir
    replay``, tests of the transport) answers every hook ``{}`` and ``/scenario/run`` ``no_plan``."""

    async def handle(self, event: str, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        """Answer one hook event (the hook input as Claude Code sent it) by ``deadline``, the route's
        "answered by" instant on ``time.monotonic()``."""
        ...

    def overdue(self, event: str, hook: api.HookInput) -> api.HookAnswer:
        """What to answer when ``handle`` passed the route's deadline (it goes on in the background)."""
        ...

    async def run_scenario(self, request: api.ScenarioRunRequest) -> api.ScenarioRunAnswer:
        """Run the armed plan of the request's session and answer §16.1's shape."""
        ...

    async def on_step(self, received: ReceivedStep) -> None:
        """A proxy's step report, for recording and threading."""
        ...

    def service_cooling(self) -> float | None:
        """Seconds the service is still cooling down after a failure, or None when none is configured."""
        ...

    def replay_on(self) -> bool:
        """Whether replay is on for the project (the proxies pace their polls by it, §16.2)."""
        ...


class NoSession:
    """A ``SessionHandler`` that answers as no session would: a base for a partial one (a benchmark's
    step listener, a test's stub)."""

    async def handle(self, event: str, hook: api.HookInput, deadline: float) -> api.HookAnswer:
        return api.EMPTY_HOOK_ANSWER

    def overdue(self, event: str, hook: api.HookInput) -> api.HookAnswer:
        return api.EMPTY_HOOK_ANSWER

    async def run_scenario(self, request: api.ScenarioRunRequest) -> api.ScenarioRunAnswer:
        return api.ScenarioRunAnswer(ok=False, why=api.NO_PLAN)

    async def on_step(self, received: ReceivedStep) -> None:
        return None

    def service_cooling(self) -> float | None:
        return None

    def replay_on(self) -> bool:
        return True


class ServerState(Protocol):
    """What the routes read and feed of their server (``bir.hooks.server.control.ControlServer``)."""

    token: str
    hosts: frozenset[bytes]
    connections: ConnectionBook
    version: str
    queue: ProxyWorkQueue
    hellos: HelloBook
    wrapped: set[str]
    handler: SessionHandler | None
    settings: config.Settings

    @property
    def replay_enabled(self) -> bool: ...

    def uptime_ms(self) -> int: ...

    def service_health(self) -> dict[str, Any]: ...

    async def add_step_report(self, received: ReceivedStep) -> None: ...

    async def answer_hook(self, event: str, hook: api.HookInput, deadline_s: float) -> api.HookAnswer: ...


_M = TypeVar("_M")


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_response(data: object, status: int = 200) -> Response:
    """A JSON response of a contract value (or a plain one), encoded with msgspec."""
    return Response(api.encode(data), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return json_response({"error": message[:500]}, status)


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _HttpError(413, f"body larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _HttpError(413, f"body larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def parse_body(request: Request, kind: type[_M]) -> tuple[_M, int]:
    """The request's body decoded as ``kind`` (a contract type of ``bir.hooks.api``), and its size in bytes.

    Raises:
        _HttpError: 413 past the cap, 400 for a body that is not JSON or not the type's shape (naming the field).
    """
    raw = await _read_body(request)
    try:
        return api.decode(kind, raw or b"null"), len(raw)
    except api.BodyError as exc:
        raise _HttpError(400, str(exc)) from None


Handler = Callable[[Request], Awaitable[Response]]


def _guarded(name: str, handler: Handler) -> Handler:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except _HttpError as exc:
            return _error(exc.status, exc.message)
        except Exception as exc:  # noqa: BLE001 - a failing route answers 500, the server keeps serving
            log_event("control.request_failed", route=name, error=f"{type(exc).__name__}: {exc}")
            return _error(500, f"internal error in {name}")

    return endpoint


class Guard:
    """ASGI middleware: loopback peers only, the server's own ``Host``, and the bearer token on every request."""

    def __init__(self, app: ASGIApp, server: ServerState) -> None:
        self._app = app
        self._server = server
        self._expected = f"Bearer {server.token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        client = scope.get("client")
        if client is None or not str(client[0]).startswith(_LOOPBACK):
            await _error(403, "loopback only")(scope, receive, send)
            return
        given = b""
        host = b""
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                given = value
            elif key == b"host":
                host = value.lower()
        if host not in self._server.hosts:
            await _error(403, "not this server's address")(scope, receive, send)
            return
        if not secrets.compare_digest(given, self._expected):
            await _error(401, "missing or wrong bearer token")(scope, receive, send)
            return
        self._server.connections.trust((str(client[0]), int(client[1])))
        await self._app(scope, receive, send)


async def _http_exception(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return _error(status, "not found" if status == 404 else "method not allowed" if status == 405 else "error")


# -- routes -----------------------------------------------------------------------------------


def build_app(server: ServerState) -> Starlette:
    """The Starlette app of ``server``, wrapped in the guard."""

    async def health(request: Request) -> Response:
        served = sorted(name for name in server.wrapped if server.queue.is_served(name))
        return json_response(
            api.Health(
                ok=True,
                pid=os.getpid(),
                version=server.version,
                uptime_ms=server.uptime_ms(),
                served=served,
                left=server.queue.left(),
                replay=server.replay_enabled,
                wrapped=sorted(server.wrapped),
                last_hello=server.hellos.last(),
                **server.service_health(),
            )
        )

    async def proxy_register(request: Request) -> Response:
        body, _ = await parse_body(request, api.RegisterRequest)
        server.wrapped.add(body.server_name)
        server.queue.register(
            body.server_name, body.proxy_id, session_id=body.session_id, pid=body.pid, host_pid=body.host_pid
        )
        log_event(
            "proxy.registered",
            server=body.server_name,
            proxy_id=body.proxy_id,
            pid=body.pid,
            session_id=body.session_id,
            host_pid=body.host_pid,
        )
        return json_response(api.RegisterAnswer(replay=server.replay_enabled, poll_hold_ms=POLL_HOLD_MS))

    async def proxy_unregister(request: Request) -> Response:
        body, _ = await parse_body(request, api.UnregisterRequest)
        return json_response(api.Ok(ok=server.queue.unregister(body.proxy_id, body.server_name)))

    async def proxy_poll(request: Request) -> Response:
        body, _ = await parse_body(request, api.PollRequest)
        # A proxy that outlived a restart of this server polls before it registers again.
        proxy_id = body.proxy_id or f"{body.server_name}#{body.pid or 0}"
        server.wrapped.add(body.server_name)
        server.queue.register(body.server_name, proxy_id, pid=body.pid, host_pid=body.host_pid)
        if not server.replay_enabled:
            return json_response(api.PollAnswer(replay=False))
        hold_ms = POLL_HOLD_MS if body.hold_ms is None else min(body.hold_ms, POLL_HOLD_MS)
        work = None
        async with anyio.create_task_group() as group:

            async def hang_up() -> None:
                # A proxy that went away must not be handed work it will never run.
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(hang_up)
            work = await server.queue.wait_for_work(body.server_name, proxy_id, hold_ms / 1000)
            group.cancel_scope.cancel()
        return json_response(api.PollAnswer(work=work))

    async def proxy_result(request: Request) -> Response:
        body, _ = await parse_body(request, api.ResultRequest)
        error = None if body.error is None else body.error[:_MAX_ERROR_CHARS]
        return json_response(api.Ok(ok=server.queue.complete(body.work_id, body.result, error)))

    async def proxy_step(request: Request) -> Response:
        body, size = await parse_body(request, api.StepReport)
        if body.error is not None and len(body.error) > _MAX_ERROR_CHARS:
            body = msgspec.structs.replace(body, error=body.error[:_MAX_ERROR_CHARS])
        await server.add_step_report(ReceivedStep(body, time.time(), size))
        return json_response(api.Ok(ok=True))

    async def scenario_hello(request: Request) -> Response:
        body, _ = await parse_body(request, api.Hello)
        server.hellos.note(SeenHello(body, time.monotonic()))
        return json_response(api.Ok(ok=True))

    async def scenario_run(request: Request) -> Response:
        body, _ = await parse_body(request, api.ScenarioRunRequest)
        handler = server.handler
        if handler is None:
            return json_response(api.ScenarioRunAnswer(ok=False, why=api.NO_PLAN))
        limit_s = server.settings.scenario_run_timeout_ms / 1000
        answer: api.ScenarioRunAnswer | None = None
        try:
            with anyio.fail_after(limit_s):
                async with anyio.create_task_group() as group:

                    async def hang_up() -> None:
                        # Esc in the host cancels run_scenario, and bir-scenario drops this request:
                        # the run is cancelled with it, so no further step starts (§6.3).
                        while (await request.receive())["type"] != "http.disconnect":
                            pass
                        log_event("scenario.run_cancelled", tool_use_id=body.tool_use_id)
                        group.cancel_scope.cancel()

                    group.start_soon(hang_up)
                    answer = await handler.run_scenario(body)
                    group.cancel_scope.cancel()
            if answer is None:
                return json_response(api.ScenarioRunAnswer(ok=False, why="cancelled"))
            return json_response(answer)
        except Exception as exc:  # noqa: BLE001 - §16.1: a run that threw is an answer, not a crash
            log_event("scenario.run_failed", error=f"{type(exc).__name__}: {exc}", tool_use_id=body.tool_use_id)
            return json_response(api.ScenarioRunAnswer(ok=False, why="the scenario could not be run"))

    async def replay_call(request: Request) -> Response:
        # One step of `bir replay`, run on the proxy that owns its server. `sent` tells the caller
        # whether the call may have run (§8: "may or may not have completed").
        body, _ = await parse_body(request, api.ReplayCallRequest)
        if not server.replay_enabled:
            # The proxies of a project with replay off take no work: the call would wait out its time.
            return json_response(api.ReplayCallAnswer(ok=False, sent=False, why=REPLAY_OFF))
        try:
            result = await server.queue.call(body.server_name, body.tool_name, body.arguments, body.timeout_ms / 1000)
        except NotSentError as exc:
            return json_response(api.ReplayCallAnswer(ok=False, sent=False, why=str(exc)[:_MAX_ERROR_CHARS]))
        except StepTimeoutError as exc:
            return json_response(api.ReplayCallAnswer(ok=False, sent=exc.taken, why=str(exc)[:_MAX_ERROR_CHARS]))
        except WorkQueueError as exc:
            return json_response(api.ReplayCallAnswer(ok=False, sent=True, why=str(exc)[:_MAX_ERROR_CHARS]))
        return json_response(api.ReplayCallAnswer(ok=True, result=result))

    def hook_route(event: str, deadline_ms: int) -> Handler:
        async def answer_hook(request: Request) -> Response:
            raw = await _read_body(request)
            try:
                hook = api.decode(api.HookInput, raw)
            except api.BodyError as exc:
                # A hook prints what we answer: a malformed body gets `{}`, never a 4xx it would print.
                log_event("control.hook_malformed", hook_event=event, error=str(exc))
                return json_response(api.EMPTY_HOOK_ANSWER)
            return json_response(await server.answer_hook(event, hook, deadline_ms / 1000))

        return answer_hook

    handlers: dict[str, Handler] = {
        api.HEALTH.path: health,
        api.REPLAY_CALL.path: replay_call,
        api.PROXY_REGISTER.path: proxy_register,
        api.PROXY_POLL.path: proxy_poll,
        api.PROXY_UNREGISTER.path: proxy_unregister,
        api.PROXY_RESULT.path: proxy_result,
        api.PROXY_STEP.path: proxy_step,
        api.SCENARIO_HELLO.path: scenario_hello,
        api.SCENARIO_RUN.path: scenario_run,
    }
    for event, hook in api.HOOK_ROUTES.items():
        handlers[hook.path] = hook_route(event, hook.answered_by_ms)
    # Every route of the table, and only those (``bir.hooks.api.ROUTES``).
    routes = [
        Route(route.path, _guarded(route.name, handlers[route.path]), methods=[route.method]) for route in api.ROUTES
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_exception})
    app.add_middleware(Guard, server=server)
    return app
