"""The control server's HTTP surface (spec §16.1, §13.3): the guard, the body models, the routes.

Every route is JSON in and out. The guard answers before any route runs: a peer that is not on
loopback gets 403, a missing or wrong bearer token 401 (also for unknown paths, so the surface is
not probed without the token). Then a body past ``MAX_BODY_BYTES`` is 413, a body that is not the
route's shape 400, an unknown path 404, and an exception inside a route 500 with a short message and
a ``control.request_failed`` line: nothing a client sends takes the server down.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bir.core import config
from bir.core.log import log_event
from bir.hooks.work_queue import NotSentError, StepTimeoutError, WorkQueueError

if TYPE_CHECKING:
    from bir.hooks.server import ControlServer

MAX_BODY_BYTES = 8 * 1024 * 1024
# §16.1: a poll is held at most 25 s, then answered empty.
POLL_HOLD_MS = 25_000
_MAX_NAME = 256
_MAX_ERROR_CHARS = 8_000

_LOOPBACK = ("127.", "::1", "::ffff:127.")


# -- bodies -----------------------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class RegisterBody(_Body):
    server_name: str = Field(min_length=1, max_length=_MAX_NAME)
    proxy_id: str = Field(min_length=1, max_length=_MAX_NAME)
    pid: int | None = Field(default=None, ge=0)
    session_id: str | None = Field(default=None, max_length=_MAX_NAME)
    started_at: float | None = None


class PollBody(_Body):
    server_name: str = Field(min_length=1, max_length=_MAX_NAME)
    proxy_id: str | None = Field(default=None, min_length=1, max_length=_MAX_NAME)
    started_at: float | None = None
    pid: int | None = Field(default=None, ge=0)
    hold_ms: int | None = Field(default=None, ge=0)


class ResultBody(_Body):
    work_id: str = Field(min_length=1, max_length=_MAX_NAME)
    result: Any = None
    error: str | None = None


class StepBody(_Body):
    server_name: str = Field(min_length=1, max_length=_MAX_NAME)
    tool_name: str = Field(min_length=1, max_length=_MAX_NAME)
    arguments: Any = None
    result: Any = None
    error: str | None = None
    call_id: str | None = Field(default=None, max_length=_MAX_NAME)
    duration_ms: float = Field(default=0.0, ge=0)
    proxy_id: str | None = Field(default=None, max_length=_MAX_NAME)
    session_id: str | None = Field(default=None, max_length=_MAX_NAME)


class HelloBody(_Body):
    pid: int = Field(ge=0)
    version: str = Field(max_length=_MAX_NAME)
    tools: int = Field(ge=0)
    off: bool


class CallBody(_Body):
    """``bir replay``'s request to run one direct step through the work queue."""

    server_name: str = Field(min_length=1, max_length=_MAX_NAME)
    tool_name: str = Field(min_length=1, max_length=_MAX_NAME)
    arguments: Any = None
    timeout_ms: int = Field(ge=1, le=600_000)


class RunBody(_Body):
    tool_use_id: str | None = Field(default=None, max_length=_MAX_NAME)
    session_id: str | None = Field(default=None, max_length=_MAX_NAME)


# -- what the routes hand to the rest of bir -------------------------------------------------


@dataclass(frozen=True)
class StepReport:
    """A proxy's report of one relayed ``tools/call``. ``result`` None: sent, outcome unknown."""

    server_name: str
    tool_name: str
    arguments: object
    result: object
    error: str | None
    call_id: str | None
    duration_ms: float
    proxy_id: str | None
    session_id: str | None
    received_at: float
    size: int


@dataclass(frozen=True)
class Hello:
    """The last ``/scenario/hello`` of one ``bir-scenario`` process; ``at`` is monotonic seconds."""

    pid: int
    version: str
    tools: int
    off: bool
    at: float


@dataclass(frozen=True)
class ScenarioRunRequest:
    tool_use_id: str | None
    session_id: str | None


# Installed by later code: runs the armed plan and returns §16.1's answer (`{ok: true, text, ...}`).
ScenarioRunner = Callable[[ScenarioRunRequest], Awaitable[Mapping[str, object]]]
StepHook = Callable[[StepReport], Awaitable[None]]

_M = TypeVar("_M", bound=_Body)


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_response(data: object, status: int = 200) -> Response:
    """A JSON response encoded with msgspec (faster than json, and exact about what it can encode)."""
    return Response(msgspec.json.encode(data), status_code=status, media_type="application/json")


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


def _describe(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "body"
    return f"{where}: {first.get('msg', 'invalid')}"[:300]


async def parse_body(request: Request, model: type[_M]) -> tuple[_M, int]:
    """The request's body validated as ``model``, and its size in bytes.

    Raises:
        _HttpError: 413 past the cap, 400 for a body that is not JSON or not the model's shape.
    """
    raw = await _read_body(request)
    try:
        return model.model_validate_json(raw or b"null"), len(raw)
    except ValidationError as exc:
        raise _HttpError(400, _describe(exc)) from None


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
    """ASGI middleware: loopback peers only, and the bearer token on every request."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        client = scope.get("client")
        if client is None or not str(client[0]).startswith(_LOOPBACK):
            await _error(403, "loopback only")(scope, receive, send)
            return
        given = b""
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                given = value
                break
        if not secrets.compare_digest(given, self._expected):
            await _error(401, "missing or wrong bearer token")(scope, receive, send)
            return
        await self._app(scope, receive, send)


async def _http_exception(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return _error(status, "not found" if status == 404 else "method not allowed" if status == 405 else "error")


# -- routes -----------------------------------------------------------------------------------


def build_app(server: ControlServer) -> Starlette:
    """The Starlette app of ``server``, wrapped in the guard."""

    async def health(request: Request) -> Response:
        served = sorted(name for name in server.wrapped if server.queue.is_served(name))
        return json_response(
            {
                "ok": True,
                "pid": os.getpid(),
                "version": server.version,
                "uptimeMs": server.uptime_ms(),
                "served": served,
            }
        )

    async def proxy_register(request: Request) -> Response:
        body, _ = await parse_body(request, RegisterBody)
        server.wrapped.add(body.server_name)
        server.queue.register(body.server_name, body.proxy_id, session_id=body.session_id, pid=body.pid)
        log_event(
            "proxy.registered",
            server=body.server_name,
            proxy_id=body.proxy_id,
            pid=body.pid,
            session_id=body.session_id,
        )
        return json_response({"replay": server.replay_enabled, "pollHoldMs": POLL_HOLD_MS})

    async def proxy_poll(request: Request) -> Response:
        body, _ = await parse_body(request, PollBody)
        # A proxy that outlived a restart of this server polls before it registers again.
        proxy_id = body.proxy_id or f"{body.server_name}#{body.pid or 0}"
        server.wrapped.add(body.server_name)
        server.queue.register(body.server_name, proxy_id, pid=body.pid)
        if not server.replay_enabled:
            return json_response({"replay": False})
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
        if work is None:
            return json_response({})
        return json_response(
            {
                "work": {
                    "workId": work.work_id,
                    "toolName": work.tool_name,
                    "arguments": work.arguments,
                    "timeoutMs": work.timeout_ms,
                }
            }
        )

    async def proxy_result(request: Request) -> Response:
        body, _ = await parse_body(request, ResultBody)
        error = None if body.error is None else body.error[:_MAX_ERROR_CHARS]
        return json_response({"ok": server.queue.complete(body.work_id, body.result, error)})

    async def proxy_step(request: Request) -> Response:
        body, size = await parse_body(request, StepBody)
        report = StepReport(
            server_name=body.server_name,
            tool_name=body.tool_name,
            arguments=body.arguments,
            result=body.result,
            error=None if body.error is None else body.error[:_MAX_ERROR_CHARS],
            call_id=body.call_id,
            duration_ms=body.duration_ms,
            proxy_id=body.proxy_id,
            session_id=body.session_id,
            received_at=time.time(),
            size=size,
        )
        await server.add_step_report(report)
        return json_response({"ok": True})

    async def scenario_hello(request: Request) -> Response:
        body, _ = await parse_body(request, HelloBody)
        server.note_hello(Hello(body.pid, body.version, body.tools, body.off, time.monotonic()))
        return json_response({"ok": True})

    async def scenario_run(request: Request) -> Response:
        body, _ = await parse_body(request, RunBody)
        runner = server.scenario_runner
        if runner is None:
            return json_response({"ok": False, "why": "no_plan"})
        limit_s = config.require_int("BIR_SCENARIO_RUN_TIMEOUT_MS") / 1000
        answer: Mapping[str, object] | None = None
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
                    answer = await runner(ScenarioRunRequest(body.tool_use_id, body.session_id))
                    group.cancel_scope.cancel()
            if answer is None:
                return json_response({"ok": False, "why": "cancelled"})
            return json_response(dict(answer))
        except Exception as exc:  # noqa: BLE001 - §16.1: a run that threw is an answer, not a crash
            log_event("scenario.run_failed", error=f"{type(exc).__name__}: {exc}", tool_use_id=body.tool_use_id)
            return json_response({"ok": False, "why": "the scenario could not be run"})

    async def replay_call(request: Request) -> Response:
        # One step of `bir replay`, run on the proxy that owns its server. `sent` tells the caller
        # whether the call may have run (§8: "may or may not have completed").
        body, _ = await parse_body(request, CallBody)
        try:
            result = await server.queue.call(body.server_name, body.tool_name, body.arguments, body.timeout_ms / 1000)
        except NotSentError as exc:
            return json_response({"ok": False, "sent": False, "why": str(exc)[:_MAX_ERROR_CHARS]})
        except StepTimeoutError as exc:
            return json_response({"ok": False, "sent": exc.taken, "why": str(exc)[:_MAX_ERROR_CHARS]})
        except WorkQueueError as exc:
            return json_response({"ok": False, "sent": True, "why": str(exc)[:_MAX_ERROR_CHARS]})
        return json_response({"ok": True, "result": result})

    routes = [
        Route("/health", _guarded("health", health), methods=["GET"]),
        Route("/replay/call", _guarded("replay/call", replay_call), methods=["POST"]),
        Route("/proxy/register", _guarded("proxy/register", proxy_register), methods=["POST"]),
        Route("/proxy/poll", _guarded("proxy/poll", proxy_poll), methods=["POST"]),
        Route("/proxy/result", _guarded("proxy/result", proxy_result), methods=["POST"]),
        Route("/proxy/step", _guarded("proxy/step", proxy_step), methods=["POST"]),
        Route("/scenario/hello", _guarded("scenario/hello", scenario_hello), methods=["POST"]),
        Route("/scenario/run", _guarded("scenario/run", scenario_run), methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_exception})
    app.add_middleware(Guard, token=server.token)
    return app
