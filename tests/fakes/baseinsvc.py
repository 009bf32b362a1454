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

The scenario routes of ``bir scenario`` (spec §16.5, shapes in the README's "Scenario commands"):
only the owner's token sees a scenario (``other_tokens`` are signed in and get ``404``, never ``403``);
a check never writes; a save with problems is refused (``422 check_failed``) unless forced with a
note, and is then recorded as forced; every save and undo bumps ``chainRevision``; an undo of an edit
that changed output logic is refused (``422 undo_refused``) when ``undo_breaks`` names it, unless
forced; ``--freeze`` marks a step ``by_hand``, which only ``unfreeze``, undoing the freeze or a
recalculation that discards edits removes (a forced save lifts only a ``calculation`` mark);
``calculate --force`` on a plan with hand edits answers ``409 scenario_has_edits`` unless it
discards them. ``sandbox_down`` answers ``503 logic_sandbox_unavailable``.

The dry replay (``POST /scenarios/:id/replay``, spec §16.5) does what BaseIn's ``dryReplay`` does: it
runs the stored logic (``paramsLogic``, each step's input and output logic, ``responseParamsLogic``)
in V8 against the source run's *recorded* outputs, drawn per tool name in order; no tool runs and
nothing is written. Its "one Haiku call" is ``dry_derived`` (scenario id → the values it derives);
values in the request win. A target parameter left without a value stops it before any step.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from py_mini_racer import JSEvalException, MiniRacer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bir.benchmarks.serving import Releaser

PRICING_VERSION = "2026-08-30"
OUTCOMES = frozenset({"steered_full", "diverged", "fell_back", "failed", "not_steered"})
BASELINE_OUTCOMES = frozenset({"not_steered", "failed"})
ROUTES = (
    "match",
    "run",
    "steps",
    "finish",
    "derive",
    "executions",
    "scenario",
    "runs",
    "run_scenario",
    "calculate",
    "recalculate",
    "check",
    "save",
    "edits",
    "revert",
    "dry_replay",
)
# The fields of a step a hand edit may change, as the wire names them.
EDITABLE = {"inputLogic": "toolInputLogic", "outputLogic": "toolOutputLogic"}
MAX_LOGIC_CHARS = 50_000


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
    # Scenario editing (spec §16.5). Tokens that sign in but own nothing: they get 404 on every scenario.
    other_tokens: set[str] = field(default_factory=set)
    run_list: list[dict[str, Any]] = field(default_factory=list)
    # run id → its whole-run scenario id; run id → its sub-task scenario ids.
    run_scenarios: dict[str, str] = field(default_factory=dict)
    run_segments: dict[str, list[str]] = field(default_factory=dict)
    revisions: dict[str, int] = field(default_factory=dict)
    # (scenario id, step index) → the problems the service's check finds in any change of that step.
    check_problems: dict[tuple[str, int], list[dict[str, str]]] = field(default_factory=dict)
    # scenario id → its edits, oldest first (answered newest first).
    edits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Edit ids whose undo would break later steps or the final answer.
    undo_breaks: set[str] = field(default_factory=set)
    sandbox_down: bool = False
    # scenario id → the parameter values the dry replay's model call derives from the prompt.
    dry_derived: dict[str, dict[str, Any]] = field(default_factory=dict)
    calculations: list[dict[str, Any]] = field(default_factory=list)
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
        _, early = await self._owned("scenario", request)
        if early is not None:
            return early
        scenario_id = request.path_params["scenario_id"]
        if scenario_id not in self.scenarios:
            return JSONResponse({"error": "scenario not found"}, status_code=404)
        return JSONResponse(self._serialized(scenario_id))

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

    # --- scenario editing (spec §16.5) ------------------------------------------------------------

    def add_owned_run(
        self,
        run_id: str,
        scenario: dict[str, Any] | None,
        *,
        segments: tuple[dict[str, Any], ...] = (),
        iterations: int = 1,
    ) -> None:
        """A run of the owner's in ``GET /recordings/runs``, with its whole-run scenario and sub-task ones."""
        entry: dict[str, Any] = {
            "id": run_id,
            "input": f"the prompt of {run_id}",
            "createdAt": "2026-11-28T10:00:00Z",
            "iterations": iterations,
            "scenario": None,
            "segments": [],
        }
        if scenario is not None:
            scenario_id = self.add_scenario(scenario)
            self.run_scenarios[run_id] = scenario_id
            entry["scenario"] = {"id": scenario_id, "state": scenario.get("state")}
        for segment in segments:
            self.run_segments.setdefault(run_id, []).append(self.add_scenario(segment))
            entry["segments"].append({"id": segment["id"], "state": segment.get("state")})
        self.run_list.append(entry)

    def _serialized(self, scenario_id: str) -> dict[str, Any]:
        scenario = copy.deepcopy(self.scenarios[scenario_id])
        scenario["chainRevision"] = self.revisions.get(scenario_id, 1)
        return scenario

    def _step(self, scenario_id: str, index: int) -> dict[str, Any] | None:
        for step in self.scenarios[scenario_id].get("steps", []):
            if step.get("stepIndex") == index:
                return step  # type: ignore[no-any-return]
        return None

    def _bump(self, scenario_id: str) -> int:
        self.revisions[scenario_id] = self.revisions.get(scenario_id, 1) + 1
        return self.revisions[scenario_id]

    def _has_hand_edits(self, scenario_id: str) -> bool:
        return any(e["kind"] == "edit" and not e["undone"] for e in self.edits.get(scenario_id, []))

    async def _owned(self, route: str, request: Request) -> tuple[Any, Response | None]:
        """``_enter``, where a signed-in token that is not the owner's sees nothing (404, never 403)."""
        auth = request.headers.get("authorization", "")
        if auth.removeprefix("Bearer ") in self.other_tokens:
            raw = await request.body()
            with self._lock:
                self.requests.append(SeenRequest(route, request.method, request.url.path, dict(request.headers), raw))
            return None, JSONResponse({"error": "not_found"}, status_code=404)
        return await self._enter(route, request)

    async def _runs(self, request: Request) -> Response:
        _, early = await self._owned("runs", request)
        if early is not None:
            return early
        return JSONResponse({"runs": self.run_list})

    async def _run_scenario(self, request: Request) -> Response:
        _, early = await self._owned("run_scenario", request)
        if early is not None:
            return early
        run_id = request.path_params["run_id"]
        scenario_id = self.run_scenarios.get(run_id)
        if scenario_id is None:
            segments = self.run_segments.get(run_id)
            if segments:
                return JSONResponse({"error": "no_whole_run_scenario", "segments": segments}, status_code=404)
            return JSONResponse({"error": "not_found"}, status_code=404)
        return JSONResponse(self._serialized(scenario_id))

    async def _calculate(self, request: Request) -> Response:
        body, early = await self._owned("calculate", request)
        if early is not None:
            return early
        run_id = request.path_params["run_id"]
        if not any(r["id"] == run_id for r in self.run_list):
            return JSONResponse({"error": "not_found"}, status_code=404)
        body = body if isinstance(body, dict) else {}
        scenario_id = self.run_scenarios.get(run_id)
        if scenario_id is not None and not body.get("force"):
            state = self.scenarios[scenario_id].get("state")
            return JSONResponse({"scenarioId": scenario_id, "state": state, "calculated": False})
        if scenario_id is None:
            scenario_id = f"scn_{run_id.removeprefix('run_')}"
            self.run_scenarios[run_id] = scenario_id
            self.add_scenario({"id": scenario_id, "state": "calculating", "intent": "", "steps": []})
        return self._recalculated(scenario_id, bool(body.get("discardEdits")))

    async def _recalculate(self, request: Request) -> Response:
        body, early = await self._owned("recalculate", request)
        if early is not None:
            return early
        scenario_id = request.path_params["scenario_id"]
        if scenario_id not in self.scenarios:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return self._recalculated(scenario_id, isinstance(body, dict) and body.get("discardEdits") is True)

    def _recalculated(self, scenario_id: str, discard_edits: bool) -> Response:
        with self._lock:
            if self._has_hand_edits(scenario_id) and not discard_edits:
                return JSONResponse({"error": "scenario_has_edits", "scenarioId": scenario_id}, status_code=409)
            if discard_edits:
                self.edits.pop(scenario_id, None)
                for step in self.scenarios[scenario_id].get("steps", []):
                    step.pop("mark", None)
            self.scenarios[scenario_id]["state"] = "calculating"
            self.calculations.append({"scenarioId": scenario_id, "discardEdits": discard_edits})
            revision = self._bump(scenario_id)
        return JSONResponse(
            {"scenarioId": scenario_id, "state": "calculating", "chainRevision": revision}, status_code=202
        )

    def _change_of(self, scenario_id: str, body: Any) -> tuple[dict[str, Any] | None, Response | None]:
        """The step after the change a check or save asks for, or the refusal."""
        if self.sandbox_down:
            return None, JSONResponse({"error": "logic_sandbox_unavailable"}, status_code=503)
        if not isinstance(body, dict):
            return None, JSONResponse({"error": "a JSON object is required"}, status_code=400)
        if sum(len(v) for v in body.values() if isinstance(v, str)) > MAX_LOGIC_CHARS:
            return None, JSONResponse({"error": "payload_too_large"}, status_code=413)
        return body, None

    async def _check(self, request: Request) -> Response:
        body, early = await self._owned("check", request)
        if early is not None:
            return early
        return self._checked(request, body, save=False)

    async def _save(self, request: Request) -> Response:
        body, early = await self._owned("save", request)
        if early is not None:
            return early
        return self._checked(request, body, save=True)

    def _checked(self, request: Request, body: Any, *, save: bool) -> Response:
        scenario_id = request.path_params["scenario_id"]
        try:
            index = int(request.path_params["step"])
        except ValueError:
            return JSONResponse({"error": "not_found"}, status_code=404)
        if scenario_id not in self.scenarios or self._step(scenario_id, index) is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        change, refused = self._change_of(scenario_id, body)
        if refused is not None or change is None:
            return refused or JSONResponse({}, status_code=500)
        with self._lock:
            step = self._step(scenario_id, index)
            assert step is not None
            before = copy.deepcopy(step)
            after = copy.deepcopy(step)
            for wire, name in EDITABLE.items():
                if isinstance(change.get(wire), str):
                    after[name] = change[wire]
            if change.get("freeze"):
                after["mark"] = "by_hand"
            forced = save and change.get("force") is True
            if change.get("unfreeze") or (forced and after.get("mark") == "calculation"):
                after.pop("mark", None)
            problems = [] if after == before else list(self.check_problems.get((scenario_id, index), []))
            report = {
                "scenarioId": scenario_id,
                "stepIndex": index,
                "chainRevision": self.revisions.get(scenario_id, 1),
                "ok": not problems,
                "noChange": after == before,
                "problems": problems,
            }
            if not save:
                return JSONResponse(report)
            if after == before:
                return JSONResponse({"error": "nothing_to_change", "report": report}, status_code=400)
            expected = change.get("expectedRevision")
            if expected is not None and expected != self.revisions.get(scenario_id, 1):
                current = self.revisions.get(scenario_id, 1)
                return JSONResponse({"error": "revision_conflict", "chainRevision": current}, status_code=409)
            if forced and not change.get("note"):
                return JSONResponse({"error": "note_required"}, status_code=400)
            if problems and not forced:
                return JSONResponse({"error": "check_failed", "report": report}, status_code=422)
            step.clear()
            step.update(after)
            revision = self._bump(scenario_id)
            edit = self._record(
                scenario_id,
                "edit",
                index,
                before=before,
                after=after,
                note=change.get("note"),
                forced=bool(problems and forced),
            )
            report["chainRevision"] = revision
        return JSONResponse(
            {"saved": True, "forced": edit["forced"], "edit": edit, "chainRevision": revision, "report": report}
        )

    def _record(
        self,
        scenario_id: str,
        kind: str,
        index: int,
        *,
        before: dict[str, Any],
        after: dict[str, Any],
        note: Any,
        forced: bool,
    ) -> dict[str, Any]:
        history = self.edits.setdefault(scenario_id, [])
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        edit = {
            "id": f"sedit_{sum(len(h) for h in self.edits.values())}",
            "kind": kind,
            "stepIndex": index,
            "changes": changed,
            "note": note if isinstance(note, str) else None,
            "forced": forced,
            "undone": False,
            "chainRevision": self.revisions.get(scenario_id, 1),
            "at": f"2026-11-30T12:00:{len(history):02d}Z",
        }
        history.append({**edit, "_before": before, "_after": after})
        return edit

    async def _edits(self, request: Request) -> Response:
        _, early = await self._owned("edits", request)
        if early is not None:
            return early
        scenario_id = request.path_params["scenario_id"]
        if scenario_id not in self.scenarios:
            return JSONResponse({"error": "not_found"}, status_code=404)
        with self._lock:
            shown = [{k: v for k, v in e.items() if not k.startswith("_")} for e in self.edits.get(scenario_id, [])]
        return JSONResponse(
            {"scenarioId": scenario_id, "chainRevision": self.revisions.get(scenario_id, 1), "edits": shown[::-1]}
        )

    async def _revert(self, request: Request) -> Response:
        body, early = await self._owned("revert", request)
        if early is not None:
            return early
        scenario_id = request.path_params["scenario_id"]
        edit_id = request.path_params["edit_id"]
        body = body if isinstance(body, dict) else {}
        if scenario_id not in self.scenarios:
            return JSONResponse({"error": "not_found"}, status_code=404)
        if self.sandbox_down:
            return JSONResponse({"error": "logic_sandbox_unavailable"}, status_code=503)
        with self._lock:
            target = next((e for e in self.edits.get(scenario_id, []) if e["id"] == edit_id), None)
            if target is None:
                return JSONResponse({"error": "not_found"}, status_code=404)
            if target["undone"]:
                return JSONResponse({"error": "already_undone", "edit": edit_id}, status_code=409)
            forced = body.get("force") is True
            if forced and not body.get("note"):
                return JSONResponse({"error": "note_required"}, status_code=400)
            breaks = edit_id in self.undo_breaks and "toolOutputLogic" in target["changes"]
            if breaks and not forced:
                problems = [{"code": "breaks_later_steps", "message": "a later step reads what this edit computes"}]
                return JSONResponse(
                    {"error": "undo_refused", "report": {"ok": False, "problems": problems}}, status_code=422
                )
            step = self._step(scenario_id, target["stepIndex"])
            assert step is not None
            before = copy.deepcopy(step)
            step.clear()
            step.update(copy.deepcopy(target["_before"]))
            target["undone"] = True
            if target["kind"] == "undo":
                undid = next(e for e in self.edits[scenario_id] if e["id"] == target["undoes"])
                undid["undone"] = False
            self._bump(scenario_id)
            entry = self._record(
                scenario_id,
                "undo",
                target["stepIndex"],
                before=before,
                after=copy.deepcopy(step),
                note=body.get("note"),
                forced=forced and breaks,
            )
            self.edits[scenario_id][-1]["undoes"] = edit_id
            entry["undoes"] = edit_id
        return JSONResponse({"undone": edit_id, "edit": entry, "chainRevision": self.revisions[scenario_id]})

    async def _dry_replay(self, request: Request) -> Response:
        body, early = await self._owned("dry_replay", request)
        if early is not None:
            return early
        scenario_id = request.path_params["scenario_id"]
        if scenario_id not in self.scenarios:
            return JSONResponse({"error": "not_found"}, status_code=404)
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str) or not body["prompt"].strip():
            return JSONResponse({"error": "prompt_required"}, status_code=400)
        given = body.get("params", {})
        if not isinstance(given, dict):
            return JSONResponse({"error": "params must be an object"}, status_code=400)
        scenario = self._serialized(scenario_id)
        if scenario.get("state") != "ready":
            return JSONResponse({"error": "scenario_not_ready", "state": scenario.get("state")}, status_code=409)
        if self.sandbox_down:
            return JSONResponse({"error": "logic_sandbox_unavailable"}, status_code=503)
        derived = dict(self.dry_derived.get(scenario_id, {}))
        params = {**derived, **given}
        answer: dict[str, Any] = {
            "scenarioId": scenario_id,
            "prompt": body["prompt"],
            "dry": True,
            "derived": bool(derived),
            "costUsd": 0.0004 if scenario_id in self.dry_derived else 0.0,
        }
        specs = scenario.get("paramsObject") or {}
        missing = [n for n, s in specs.items() if isinstance(s, dict) and s.get("role") == "target" and n not in params]
        if missing:
            error = {"stage": "params", "message": f"no value for target parameter {', '.join(missing)}"}
            return JSONResponse(
                {
                    **answer,
                    "ok": False,
                    "params": params,
                    "missing": missing,
                    "steps": [],
                    "responseModel": None,
                    "error": error,
                }
            )
        return JSONResponse(
            {**answer, "missing": [], **_dry_run(scenario, params, self._recorded_outputs(scenario_id))}
        )

    def _recorded_outputs(self, scenario_id: str) -> dict[str, list[str]]:
        """The source run's outputs by tool name, in order (BaseIn's ``recordedOutputsByTool``)."""
        run_id = next((r for r, s in self.run_scenarios.items() if s == scenario_id), None)
        queues: dict[str, list[str]] = {}
        for step in (self.runs.get(run_id or "") or {}).get("steps", []):
            output = step.get("toolOutput")
            queues.setdefault(str(step.get("toolName")), []).append(
                output if isinstance(output, str) else json.dumps(output)
            )
        return queues

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
                Route("/recordings/runs", self._runs, methods=["GET"]),
                Route("/recordings/runs/{run_id}/scenario", self._run_scenario, methods=["GET"]),
                Route("/recordings/runs/{run_id}/calculate", self._calculate, methods=["POST"]),
                Route("/scenarios/{scenario_id}/recalculate", self._recalculate, methods=["POST"]),
                Route("/scenarios/{scenario_id}/steps/{step}/check", self._check, methods=["POST"]),
                Route("/scenarios/{scenario_id}/steps/{step}", self._save, methods=["PATCH"]),
                Route("/scenarios/{scenario_id}/edits", self._edits, methods=["GET"]),
                Route("/scenarios/{scenario_id}/edits/{edit_id}/revert", self._revert, methods=["POST"]),
                Route("/scenarios/{scenario_id}/replay", self._dry_replay, methods=["POST"]),
            ]
        )


_LOGIC_ARGS = {
    "paramsLogic": "params",
    "toolInputLogic": "params, respParams",
    "toolOutputLogic": "toolOutput, params, respParams",
    "responseParamsLogic": "params, respParams",
}


class _DryStop(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message


def _js(engine: MiniRacer, kind: str, body: Any, *values: Any) -> Any:
    """One logic body on ``values``, as the service's sandbox runs it; a body that is empty answers ``{}``."""
    if not isinstance(body, str) or not body.strip():
        return values[0] if kind == "paramsLogic" else {}
    args = ", ".join(json.dumps(v) for v in values)
    try:
        text = engine.eval(f"JSON.stringify((function ({_LOGIC_ARGS[kind]}) {{\n{body}\n}})({args}))")
    except JSEvalException as exc:
        raise _DryStop(kind, str(exc).splitlines()[0][:300] if str(exc) else "threw") from None
    result = json.loads(text) if isinstance(text, str) else None
    if not isinstance(result, dict):
        raise _DryStop(kind, "did not return a plain object")
    return result


def _dry_run(scenario: dict[str, Any], given: dict[str, Any], recorded: dict[str, list[str]]) -> dict[str, Any]:
    """BaseIn's dry replay: the stored logic over the recorded outputs, stopping at the first failure."""
    engine = MiniRacer()
    try:
        return _dry_steps(engine, scenario, given, recorded)
    finally:
        engine.close()


def _dry_steps(
    engine: MiniRacer, scenario: dict[str, Any], given: dict[str, Any], recorded: dict[str, list[str]]
) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    params: dict[str, Any] = given
    stage_of = {"paramsLogic": "params", "toolInputLogic": "input", "toolOutputLogic": "output"}
    step_index: int | None = None
    try:
        params = _js(engine, "paramsLogic", scenario.get("paramsLogic"), given)
        resp: dict[str, Any] = {}
        for step in scenario.get("steps") or []:
            step_index = step.get("stepIndex")
            entry: dict[str, Any] = {"stepIndex": step_index, "toolName": step.get("toolName")}
            steps.append(entry)
            entry["input"] = _js(engine, "toolInputLogic", step.get("toolInputLogic"), params, resp)
            queue = recorded.get(str(step.get("toolName")), [])
            if not queue:
                entry.update(output=None, status="no_recorded_output")
                continue
            entry["output"] = queue.pop(0)
            resp = {
                **resp,
                **_js(engine, "toolOutputLogic", step.get("toolOutputLogic"), entry["output"], params, resp),
            }
            entry["status"] = "ok"
        step_index = None
        model = _js(engine, "responseParamsLogic", scenario.get("responseParamsLogic"), params, resp)
    except _DryStop as stop:
        if steps and step_index is not None:
            steps[-1]["status"] = "failed"
        error: dict[str, Any] = {
            "stage": stage_of.get(stop.stage, "response"),
            "message": stop.message,
        }
        if step_index is not None:
            error["stepIndex"] = step_index
        return {"ok": False, "params": params, "steps": steps, "responseModel": None, "error": error}
    return {"ok": True, "params": params, "steps": steps, "responseModel": model, "error": None}
