"""A fake BaseIn service that follows service-contract.md, including the server-side rules bir relies on.

Canned answers are set on the object before (or between) requests; every request is recorded.
The server-side rules kept here: a hit creates no run; a ticket is claimed once, and a second report
answers ``200 {duplicate: true}``; an unknown or expired ticket answers ``409``; ``not_steered`` and
``failed`` go to the baseline, the other outcomes to the ledger; a report whose ``pricingVersion``
differs is stored with ``measured: false``; a costless report with no error is not booked (``202``).
Recording: a miss creates the run with the proposed id; steps of a known run are stored by
``stepIndex`` whatever order they arrive in, an unknown run answers ``404``; a run's second finish
answers ``200 {duplicate: true}``. ``down`` makes every route answer ``503``; ``route_latency_s``
slows one route down.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.serving import Releaser

PRICING_VERSION = "2026-08-30"
OUTCOMES = frozenset({"steered_full", "diverged", "fell_back", "failed", "not_steered"})
BASELINE_OUTCOMES = frozenset({"not_steered", "failed"})
ROUTES = ("match", "run", "steps", "finish", "derive", "executions", "scenario")


@dataclass(frozen=True)
class SeenRequest:
    route: str
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Execution:
    id: str
    scenario_id: str
    outcome: str
    measured: bool
    report: dict[str, Any]


@dataclass(frozen=True)
class Canned:
    """A whole answer: its status and its JSON body (or raw bytes, for answers that are not JSON)."""

    status: int
    body: Any = None
    raw: bytes | None = None

    def response(self) -> Response:
        if self.raw is not None:
            return Response(self.raw, status_code=self.status, media_type="application/json")
        return JSONResponse(self.body, status_code=self.status)


@dataclass
class FakeBaseIn:
    token: str = "test-token"
    pricing_version: str = PRICING_VERSION
    latency_s: float = 0.0
    route_latency_s: dict[str, float] = field(default_factory=dict)
    # A route name → the answer it gives instead of its own (e.g. a 500, a body that is not JSON).
    forced: dict[str, Canned] = field(default_factory=dict)
    matches: dict[str, dict[str, Any]] = field(default_factory=dict)
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)
    derive_answers: dict[str, Canned] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    tickets: dict[str, str] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)
    baseline: list[Execution] = field(default_factory=list)
    ledger: list[Execution] = field(default_factory=list)
    not_recorded: list[dict[str, Any]] = field(default_factory=list)
    # run id → step index → the step body as posted (the last post of an index wins).
    recorded_steps: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Every route answers 503 while set: the service is down but still accepting connections.
    down: bool = False
    requests: list[SeenRequest] = field(default_factory=list)
    url: str = ""
    releaser: Releaser = field(default_factory=Releaser)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- set-up ---------------------------------------------------------------------------------

    def add_scenario(self, scenario: dict[str, Any]) -> str:
        scenario_id = str(scenario["id"])
        self.scenarios[scenario_id] = scenario
        return scenario_id

    def add_match(
        self,
        prompt: str,
        scenario: dict[str, Any] | None,
        *,
        run_id: str = "run_source",
        similarity: float = 0.95,
        ticket: str | None = None,
        include_scenario: bool = True,
    ) -> str:
        """Make ``prompt`` a hit; returns its execution ticket."""
        matched: dict[str, Any] = {"runId": run_id, "similarity": similarity}
        ticket = ticket or f"tkt_{len(self.tickets) + 1}"
        if scenario is not None:
            scenario_id = self.add_scenario(scenario)
            matched["scenarioId"] = scenario_id
            matched["executionTicket"] = ticket
            self.tickets[ticket] = scenario_id
            if include_scenario:
                matched["scenario"] = scenario
        self.matches[prompt] = matched
        return ticket

    def add_run(self, run_id: str, steps: list[dict[str, Any]]) -> None:
        self.runs[run_id] = {"run": {"id": run_id}, "steps": steps}

    def open_ticket(self, scenario_id: str, ticket: str) -> None:
        self.tickets[ticket] = scenario_id

    def expire_ticket(self, ticket: str) -> None:
        self.tickets.pop(ticket, None)

    def requests_to(self, route: str) -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.requests if r.route == route]

    def steps_of(self, run_id: str) -> list[dict[str, Any]]:
        """The steps recorded for ``run_id``, ordered by ``stepIndex``."""
        with self._lock:
            steps = self.recorded_steps.get(run_id, {})
            return [steps[i] for i in sorted(steps)]

    def booked_tickets(self) -> list[str]:
        """Every ticket that booked a row (baseline or ledger), in booking order."""
        with self._lock:
            return [row.id for row in (*self.baseline, *self.ledger)]

    # --- the HTTP side ----------------------------------------------------------------------------

    async def _enter(self, route: str, request: Request) -> tuple[Any, Response | None]:
        raw = await request.body()
        body: Any
        try:
            body = await request.json() if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(
                SeenRequest(route, request.method, request.url.path, dict(request.headers.items()), body)
            )
        await self.releaser.wait(self.route_latency_s.get(route, self.latency_s))
        if self.down:
            return body, JSONResponse({"error": "service unavailable"}, status_code=503)
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return body, JSONResponse({"error": "unauthorized"}, status_code=401)
        forced = self.forced.get(route)
        if forced is not None:
            return body, forced.response()
        return body, None

    async def _match(self, request: Request) -> Response:
        body, early = await self._enter("match", request)
        if early is not None:
            return early
        if not isinstance(body, dict) or not isinstance(body.get("input"), str) or not body.get("id"):
            return JSONResponse({"error": "id and input are required"}, status_code=400)
        matched = self.matches.get(body["input"])
        if matched is not None:
            # A hit creates no run: the service keeps its own canonical run (spec §2, §12).
            return JSONResponse({"id": None, "matched": matched}, status_code=200)
        run_id = str(body["id"])
        with self._lock:
            self.runs.setdefault(run_id, {"run": {"id": run_id, "input": body["input"]}, "steps": []})
        return JSONResponse({"id": run_id, "matched": None}, status_code=201)

    async def _run(self, request: Request) -> Response:
        _, early = await self._enter("run", request)
        if early is not None:
            return early
        run = self.runs.get(request.path_params["run_id"])
        if run is None:
            return JSONResponse({"error": "run not found"}, status_code=404)
        return JSONResponse(run)

    async def _steps(self, request: Request) -> Response:
        body, early = await self._enter("steps", request)
        if early is not None:
            return early
        run_id = request.path_params["run_id"]
        if not isinstance(body, dict) or not isinstance(body.get("stepIndex"), int) or not body.get("toolName"):
            return JSONResponse({"error": "stepIndex and toolName are required"}, status_code=400)
        with self._lock:
            run = self.runs.get(run_id)
            if run is None:
                return JSONResponse({"error": "run not found"}, status_code=404)
            steps = self.recorded_steps.setdefault(run_id, {})
            steps[body["stepIndex"]] = body
            run["steps"] = [
                {"stepIndex": i, "toolName": steps[i]["toolName"], "toolOutput": steps[i].get("toolOutput")}
                for i in sorted(steps)
            ]
        return JSONResponse({}, status_code=201)

    async def _finish(self, request: Request) -> Response:
        body, early = await self._enter("finish", request)
        if early is not None:
            return early
        run_id = request.path_params["run_id"]
        if not isinstance(body, dict):
            return JSONResponse({"error": "a JSON object is required"}, status_code=400)
        with self._lock:
            if run_id not in self.runs:
                return JSONResponse({"error": "run not found"}, status_code=404)
            if run_id in self.finished:
                return JSONResponse({"duplicate": True}, status_code=200)
            self.finished[run_id] = body
        return JSONResponse({}, status_code=200)

    async def _scenario(self, request: Request) -> Response:
        _, early = await self._enter("scenario", request)
        if early is not None:
            return early
        scenario = self.scenarios.get(request.path_params["scenario_id"])
        if scenario is None:
            return JSONResponse({"error": "scenario not found"}, status_code=404)
        return JSONResponse(scenario)

    async def _derive(self, request: Request) -> Response:
        body, early = await self._enter("derive", request)
        if early is not None:
            return early
        scenario_id = request.path_params["scenario_id"]
        if scenario_id not in self.scenarios:
            return JSONResponse({"error": "scenario not found"}, status_code=404)
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            return JSONResponse({"error": "prompt is required"}, status_code=400)
        canned = self.derive_answers.get(scenario_id)
        if canned is None:
            return JSONResponse({"error": "derivation unavailable"}, status_code=503)
        return canned.response()

    async def _executions(self, request: Request) -> Response:
        body, early = await self._enter("executions", request)
        if early is not None:
            return early
        scenario_id = request.path_params["scenario_id"]
        if not isinstance(body, dict) or body.get("outcome") not in OUTCOMES:
            return JSONResponse({"error": "outcome is required"}, status_code=400)
        ticket = body.get("ticket")
        with self._lock:
            if not isinstance(ticket, str) or self.tickets.get(ticket) != scenario_id:
                return JSONResponse({"error": "ticket unknown or expired"}, status_code=409)
            if ticket in self.claimed:
                return JSONResponse({"duplicate": True}, status_code=200)
            self.claimed.add(ticket)
            costs = [body.get(k) or 0 for k in ("deriveCostUsd", "sessionCostUsd", "fallbackCostUsd")]
            failed_step = any(isinstance(s, dict) and s.get("status") == "failed" for s in body.get("steps") or [])
            if not any(costs) and not body.get("error") and not failed_step:
                self.not_recorded.append(body)
                return JSONResponse({"recorded": False}, status_code=202)
            measured = body.get("measured") is True and body.get("pricingVersion") == self.pricing_version
            row = Execution(ticket, scenario_id, body["outcome"], measured, body)
            (self.baseline if row.outcome in BASELINE_OUTCOMES else self.ledger).append(row)
        return JSONResponse({"id": ticket}, status_code=201)

    @property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/recordings/runs", self._match, methods=["POST"]),
                Route("/recordings/runs/{run_id}", self._run, methods=["GET"]),
                Route("/recordings/runs/{run_id}/steps", self._steps, methods=["POST"]),
                Route("/recordings/runs/{run_id}/finish", self._finish, methods=["POST"]),
                Route("/scenarios/{scenario_id}", self._scenario, methods=["GET"]),
                Route("/scenarios/{scenario_id}/derive", self._derive, methods=["POST"]),
                Route("/scenarios/{scenario_id}/executions", self._executions, methods=["POST"]),
            ]
        )
