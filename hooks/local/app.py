"""The local service's routes: service-contract.md and the §16.5 scenario routes, as a Starlette app.

The shapes and the server-side rules are the fake service's (``tests/fakes/baseinsvc.py``), which is
what bir's client and its tests were written against; the work is ``runtime.LocalService``'s. The app
is reached in process through ``httpx.ASGITransport``, so no port is opened. There is one user on this
machine: every caller owns every scenario, and the bearer token is not checked.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bir.core.log import log_event
from bir.hooks.local.runtime import Answer, LocalService

# The largest request body read: the outbox's own item cap is smaller.
MAX_BODY_BYTES = 32 * 1024 * 1024


async def _body(request: Request) -> tuple[Any, Response | None]:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        return None, JSONResponse({"error": "payload_too_large"}, status_code=413)
    if not raw:
        return None, None
    try:
        return json.loads(raw), None
    except ValueError:
        return None, JSONResponse({"error": "the body is not JSON"}, status_code=400)


def build_app(service: LocalService) -> Starlette:
    """The routes over ``service``."""

    def route(handler: Callable[[Request, Any], Awaitable[Answer]], *, reads_body: bool = True) -> Any:
        async def endpoint(request: Request) -> Response:
            body: Any = None
            if reads_body:
                body, refused = await _body(request)
                if refused is not None:
                    return refused
            try:
                status, answer = await handler(request, body)
            except Exception as exc:  # noqa: BLE001 - a bug answers 500 with a line in the log, never a stack to the client
                log_event("local.route_failed", path=request.url.path, error=f"{type(exc).__name__}: {exc}"[:500])
                return JSONResponse({"error": "internal"}, status_code=500)
            return JSONResponse(answer, status_code=status)

        return endpoint

    p = "path_params"
    routes = [
        Route("/recordings/runs", route(lambda r, b: service.match_run(b)), methods=["POST"]),
        Route("/recordings/runs", route(lambda r, b: service.list_runs(), reads_body=False), methods=["GET"]),
        Route(
            "/recordings/runs/{run_id}",
            route(lambda r, b: service.get_run(getattr(r, p)["run_id"]), reads_body=False),
            methods=["GET"],
        ),
        Route(
            "/recordings/runs/{run_id}/steps",
            route(lambda r, b: service.post_step(getattr(r, p)["run_id"], b)),
            methods=["POST"],
        ),
        Route(
            "/recordings/runs/{run_id}/finish",
            route(lambda r, b: service.finish(getattr(r, p)["run_id"], b)),
            methods=["POST"],
        ),
        Route(
            "/recordings/runs/{run_id}/scenario",
            route(lambda r, b: service.run_scenario(getattr(r, p)["run_id"]), reads_body=False),
            methods=["GET"],
        ),
        Route(
            "/recordings/runs/{run_id}/calculate",
            route(lambda r, b: service.calculate(getattr(r, p)["run_id"], b)),
            methods=["POST"],
        ),
        Route(
            "/scenarios/{sid}",
            route(lambda r, b: service.get_scenario(getattr(r, p)["sid"]), reads_body=False),
            methods=["GET"],
        ),
        Route("/scenarios/{sid}/derive", route(lambda r, b: service.derive(getattr(r, p)["sid"], b)), methods=["POST"]),
        Route(
            "/scenarios/{sid}/executions",
            route(lambda r, b: service.execution(getattr(r, p)["sid"], b)),
            methods=["POST"],
        ),
        Route(
            "/scenarios/{sid}/recalculate",
            route(lambda r, b: service.recalculate(getattr(r, p)["sid"], b)),
            methods=["POST"],
        ),
        Route(
            "/scenarios/{sid}/steps/{step}/check",
            route(lambda r, b: service.check_step(getattr(r, p)["sid"], getattr(r, p)["step"], b, save=False)),
            methods=["POST"],
        ),
        Route(
            "/scenarios/{sid}/steps/{step}",
            route(lambda r, b: service.check_step(getattr(r, p)["sid"], getattr(r, p)["step"], b, save=True)),
            methods=["PATCH"],
        ),
        Route(
            "/scenarios/{sid}/edits",
            route(lambda r, b: service.list_edits(getattr(r, p)["sid"]), reads_body=False),
            methods=["GET"],
        ),
        Route(
            "/scenarios/{sid}/edits/{eid}/revert",
            route(lambda r, b: service.revert(getattr(r, p)["sid"], getattr(r, p)["eid"], b)),
            methods=["POST"],
        ),
        Route(
            "/scenarios/{sid}/replay", route(lambda r, b: service.dry_replay(getattr(r, p)["sid"], b)), methods=["POST"]
        ),
    ]
    return Starlette(routes=routes)
