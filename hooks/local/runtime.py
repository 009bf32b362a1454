"""The local service's long-lived side: the store, the matcher's index, the model, the pool and the
calculations that run after a run finishes. ``app`` puts HTTP in front of it; every method here answers
``(status, body)`` exactly as the service's route would.

Disk and CPU work (SQLite, alignment, the embedding, the calculation's tracing) runs in worker threads,
so the control server's event loop never waits on them; the self-check runs in the evaluator pool.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
from anyio import to_thread

from bir.core import config
from bir.core.errors import LogicError
from bir.core.log import log_event
from bir.core.truncate import cut_counted
from bir.hooks.local import booking, edits, match, model_pass, selfcheck, sharpen
from bir.hooks.local.calculate import CALC_VERSION, draft_scenario, recorded_steps, template_of
from bir.hooks.local.embed import Embedder, numpy_module
from bir.hooks.local.embed import shared as shared_embedder
from bir.hooks.local.slots import normalized
from bir.hooks.local.store import ScenarioRow, Store, StoreError

T = TypeVar("T")
Answer = tuple[int, Any]
# A prompt that comes before the model loaded waits this long for it (inside BIR_MATCH_BUDGET_MS) before the
# embedding tier is skipped; the slot tier never waits.
MODEL_WAIT_S: Final = 0.5
MAX_INPUT_CHARS: Final = 20_000
LATE_STEP_SETTLE_S: Final = 0.5
# A replayed turn booked as one of these handed over, and the model finished it: its recording repairs.
REPAIR_OUTCOMES: Final = frozenset({"diverged", "fell_back", "failed"})
# The sandbox's own failures (not a body's): nothing could be checked.
_SANDBOX_DOWN: Final = frozenset({"closed", "overloaded", "crashed"})


class SandboxDown(Exception):
    """The evaluator pool could not run the check at all."""


def _store_error(exc: StoreError) -> Answer:
    return 503, {"error": "store_unavailable", "message": str(exc)[:500]}


class LocalService:
    """See the module's docstring. Use as ``async with LocalService(...) as service``."""

    def __init__(
        self,
        store: Store,
        *,
        project: str | None = None,
        pool: Any | None = None,
        embedder: Embedder | None = None,
        scope: str | None = None,
        min_similarity: float | None = None,
        max_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
        load_model: bool = True,
        min_runs: int | None = None,
        model: model_pass.Model | object | None = model_pass.FROM_ENV,
        settings: config.Settings | None = None,
    ) -> None:
        settings = settings if settings is not None else config.load()
        self.store = store
        self._load_model = load_model
        self.project = project
        self._pool = pool
        self._own_pool: Any | None = None
        self._pool_lock = anyio.Lock()
        self.embedder = embedder if embedder is not None else shared_embedder()
        self.scope = scope or settings.local_match_scope
        self.min_similarity = min_similarity if min_similarity is not None else settings.local_embed_min_similarity
        self.max_bytes = max_bytes if max_bytes is not None else settings.local_store_mb * 1024 * 1024
        self._clock = clock
        # Runs a scenario must rest on before the matcher replays it (issue 19 item 2).
        self.min_runs = min_runs if min_runs is not None else settings.local_min_runs
        # The optional model pass (issue 19 item 4): only with a key.
        self.model: model_pass.Model | None = (
            model_pass.model_of(settings)
            if model is model_pass.FROM_ENV
            else model
            if isinstance(model, model_pass.Model)
            else None
        )
        self._repairing: set[str] = set()
        self.index = match.MatchIndex()
        self._index_lock = threading.Lock()
        self._seen: tuple[int, int] = (-1, -1)
        self._tg: anyio.abc.TaskGroup | None = None
        self._busy = 0
        self._late: set[str] = set()
        self._idle = anyio.Event()
        self._idle.set()

    # --- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> LocalService:
        self._stack = contextlib.AsyncExitStack()
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        if self._load_model:
            self.embedder.start()
            self._tg.start_soon(self._embed_templates_when_loaded)
        # The index is built before the first prompt needs it: a prompt that comes sooner waits on its lock.
        self._tg.start_soon(self._thread, self.warm)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._stack.aclose()
        self._tg = None
        if self._own_pool is not None:
            await self._own_pool.close()
            self._own_pool = None

    @property
    def busy(self) -> int:
        """Calculations running now."""
        return self._busy

    async def idle(self, timeout_s: float = 30.0) -> bool:
        """Wait until no calculation is running (for tests and the CLI); True when idle in time."""
        with anyio.move_on_after(timeout_s):
            while self._busy:
                await self._idle.wait()
        return self._busy == 0

    async def pool(self) -> Any:
        if self._pool is not None:
            return self._pool
        async with self._pool_lock:
            if self._own_pool is None:
                from bir.evaluator import EvaluatorPool

                pool = EvaluatorPool(workers=1, warm_spares=False)
                await pool.start()
                self._own_pool = pool
            return self._own_pool

    async def _thread(self, fn: Callable[[], T]) -> T:
        return await to_thread.run_sync(fn)

    def clock(self) -> float:
        return self._clock()

    def _project_of(self, metadata: Mapping[str, Any] | None) -> str:
        if self.project is not None:
            return self.project
        cwd = (metadata or {}).get("cwd")
        return str(cwd) if isinstance(cwd, str) else ""

    # --- the index --------------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Bring the index up to the store (called under the index lock, in a thread)."""
        changed, generation = self.store.counters()
        if (changed, generation) == self._seen:
            return
        if generation != self._seen[1]:
            self.index = match.MatchIndex()
            since = -1
        else:
            since = self._seen[0]
        for row in self.store.index_rows_since(since):
            self._index_row(row)
        self._seen = (changed, generation)

    def _index_row(self, row: tuple[str, str, str | None, str, Any, bytes | None, float]) -> None:
        scenario_id, project, run_id, state, template, embedding, created_at = row
        if state != "ready" or not isinstance(template, dict) or support_of(template) < self.min_runs:
            self.index.remove(scenario_id)
            return
        samples = template.get("samples")
        if not isinstance(samples, dict):
            # A scenario stored before its template carried the samples: read them from its body.
            stored = self.store.scenario(scenario_id)
            samples = match.samples_of(stored.body) if stored is not None else {}
        vector = None
        if embedding is not None:
            # Through the embedding module, whichever thread imports numpy first: it sets one BLAS thread.
            vector = numpy_module().frombuffer(embedding, dtype="float32")
        self.index.put(
            match.candidate_of(
                scenario_id,
                run_id=run_id,
                project=project,
                created_at=created_at,
                template=template,
                samples=samples,
                vector=vector,
            )
        )

    def warm(self) -> None:
        """Build the index now (blocking: the service does it in a thread at start)."""
        with self._index_lock:
            self._refresh()

    def find(
        self, prompt: str, project: str | None, *, wait_for_model: float = MODEL_WAIT_S, explain: bool = False
    ) -> match.Hit | match.Miss:
        """The cascade for ``prompt`` (blocking: call it in a thread)."""
        with self._index_lock:
            self._refresh()
            scope = None if self.scope == "user" else project

            def embed(text: str) -> Any | None:
                if not self._load_model:
                    return None
                if not self.embedder.ready and not self.embedder.wait(wait_for_model):
                    return None
                return self.embedder.embed(text)

            return self.index.match(
                prompt, project=scope, embed=embed, min_similarity=self.min_similarity, explain=explain
            )

    async def _embed_templates_when_loaded(self) -> None:
        ready = await to_thread.run_sync(self.embedder.wait, 600.0, abandon_on_cancel=True)
        if ready:
            await self._thread(self._embed_missing)

    def _embed_missing(self) -> None:
        with self._index_lock:
            self._refresh()
            missing = [c for c in self.index.by_id.values() if c.vector is None]
        for cand in missing:
            vector = self.embedder.embed(cand.masked_text)
            if vector is None:
                return
            try:
                self.store.set_embedding(cand.scenario_id, vector.tobytes())
            except StoreError as exc:
                log_event("local.embedding_not_stored", scenario_id=cand.scenario_id, error=str(exc)[:300])
                return

    # --- recording ----------------------------------------------------------------------------------

    async def match_run(self, body: object) -> Answer:
        if not isinstance(body, dict) or not isinstance(body.get("input"), str) or not body.get("id"):
            return 400, {"error": "id and input are required"}
        run_id = str(body["id"])[:200]
        prompt = body["input"][:MAX_INPUT_CHARS]
        given = body.get("metadata")
        metadata: dict[str, Any] = given if isinstance(given, dict) else {}
        project = self._project_of(metadata)
        try:
            found = await self._thread(lambda: self.find(prompt, project))
            if isinstance(found, match.Miss) and self.model is not None:
                found = await self._confirm(prompt, project, run_id) or found
            if isinstance(found, match.Hit):
                hit = found
                return 200, await self._thread(
                    lambda: self._hit(hit, prompt, project, run_id=run_id, body=body, metadata=metadata)
                )
            await self._thread(
                lambda: self.store.create_run(
                    run_id,
                    project=project,
                    input=prompt,
                    framework=str(body.get("framework") or ""),
                    metadata=metadata,
                    now=self._clock(),
                )
            )
        except StoreError as exc:
            log_event("local.store_failed", route="match", error=str(exc)[:300])
            return _store_error(exc)
        return 201, {"id": run_id, "matched": None}

    async def _confirm(self, prompt: str, project: str, run_id: str) -> match.Hit | None:
        """A paraphrase the cascade missed, confirmed (or not) by one model call within its bound."""
        assert self.model is not None
        model = self.model
        scope = None if self.scope == "user" else project
        with anyio.move_on_after(model_pass.CONFIRM_TIMEOUT_S + 0.3):
            return await model_pass.confirm(self, model, prompt, scope, run_id=run_id)
        return None

    def _hit(
        self,
        hit: match.Hit,
        prompt: str,
        project: str,
        *,
        run_id: str,
        body: Mapping[str, Any],
        metadata: Mapping[str, Any],
    ) -> dict[str, Any]:
        row = self.store.scenario(hit.scenario_id)
        if row is None:
            raise StoreError(f"scenario {hit.scenario_id} vanished while it matched")
        ticket = f"tkt_{secrets.token_hex(12)}"
        # The replayed turn is recorded too (this service's extension of §12): a turn the model finishes its
        # own way after a hand-over repairs the scenario; one the replay did whole is dropped when booked.
        self.store.create_run(
            run_id,
            project=project,
            input=prompt,
            framework=str(body.get("framework") or ""),
            metadata={**metadata, "ticket": ticket, "scenarioId": row.id},
            origin="replay",
            now=self._clock(),
        )
        self.store.issue_ticket(
            ticket,
            scenario_id=row.id,
            run_id=row.run_id,
            project=project,
            prompt=prompt,
            rule=hit.rule,
            similarity=hit.similarity,
            params=hit.values,
            now=self._clock(),
        )
        log_event("local.matched", scenario_id=row.id, rule=hit.rule, similarity=hit.similarity)
        return {
            "id": run_id,
            "matched": {
                "runId": row.run_id,
                "scenarioId": row.id,
                "similarity": hit.similarity,
                "executionTicket": ticket,
                "scenario": self._serialized(row),
                "rule": hit.rule,
                "params": hit.values,
            },
        }

    @staticmethod
    def _serialized(row: ScenarioRow) -> dict[str, Any]:
        # The reason is the row's, not the body's: a model pass that declined adds its note to the row only.
        return {**row.body, "id": row.id, "state": row.state, "reason": row.reason, "chainRevision": row.chain_revision}

    async def post_step(self, run_id: str, body: object) -> Answer:
        if not isinstance(body, dict) or not isinstance(body.get("stepIndex"), int) or not body.get("toolName"):
            return 400, {"error": "stepIndex and toolName are required"}
        try:
            status = await self._thread(
                lambda: self.store.add_step(run_id, int(body["stepIndex"]), str(body["toolName"]), body)
            )
        except StoreError as exc:
            log_event("local.store_failed", route="steps", error=str(exc)[:300])
            return _store_error(exc)
        if status == "unknown_run":
            return 404, {"error": "run not found"}
        if status == "finished":
            # A step that settled after its turn's finish (its proxy report came late): calculate again.
            self._recalculate_soon(run_id)
        return 201, {}

    def _recalculate_soon(self, run_id: str) -> None:
        if run_id in self._late:
            return
        self._late.add(run_id)

        async def later() -> None:
            # Late steps come in a burst; one calculation after it settles takes them all.
            await anyio.sleep(LATE_STEP_SETTLE_S)
            self._late.discard(run_id)
            await self._settle_finished(run_id)

        self._background(later())

    async def finish(self, run_id: str, body: object) -> Answer:
        if not isinstance(body, dict):
            return 400, {"error": "a JSON object is required"}
        try:
            status = await self._thread(lambda: self.store.finish_run(run_id, body, now=self._clock()))
        except StoreError as exc:
            log_event("local.store_failed", route="finish", error=str(exc)[:300])
            return _store_error(exc)
        if status == "unknown_run":
            return 404, {"error": "run not found"}
        if status == "duplicate":
            return 200, {"duplicate": True}
        self._background(self._after_finish(run_id))
        return 200, {}

    def _background(self, work: Any) -> None:
        if self._tg is None:
            work.close()
            return
        self._busy += 1
        self._idle = anyio.Event()

        async def run() -> None:
            try:
                await work
            except Exception as exc:  # noqa: BLE001 - a failed calculation must not end the service
                log_event("local.calculation_failed", error=f"{type(exc).__name__}: {exc}"[:300])
            finally:
                self._busy -= 1
                if self._busy == 0:
                    self._idle.set()

        self._tg.start_soon(run)

    async def _settle_finished(self, run_id: str) -> None:
        run = await self._thread(lambda: self.store.run(run_id))
        if run is not None and run.origin == "replay":
            await self._after_replay(run_id)
        else:
            await self.settle_run(run_id)

    async def _after_finish(self, run_id: str) -> None:
        await self._settle_finished(run_id)
        pruned = await self._thread(lambda: self.store.prune(self.max_bytes))
        if pruned:
            log_event("local.pruned", runs=len(pruned), max_bytes=self.max_bytes)

    async def settle_run(self, run_id: str, *, repairs: str | None = None) -> sharpen.Settled:
        """Calculate a finished run, with the runs of the task it repeats (``sharpen``); a scenario the
        inference leaves not ready gets the model pass when a key is configured."""
        settled = await sharpen.settle_run(self, run_id, repairs=repairs)
        scenario = settled.scenario
        if scenario is not None and scenario.state != "ready" and self.model is not None:
            scenario = await model_pass.calculate(self, self.model, scenario)
            return sharpen.Settled(scenario, joined=settled.joined)
        return settled

    async def _after_replay(self, run_id: str) -> None:
        """A replayed turn's recording, once both its finish and its report are in: a hand-over the model
        finished its own way repairs the scenario, a declined or vetoed plan's turn is one more run of the
        task if it agrees, and a replay that did the task whole recorded nothing new."""
        if run_id in self._repairing:
            return
        # Its finish and its report each call this: the first to find both in does the work, once.
        self._repairing.add(run_id)
        try:
            run = await self._thread(lambda: self.store.run(run_id))
            if run is None or run.finish is None or await self._thread(lambda: self.store.rests_in_a_scenario(run_id)):
                return
            ticket = str(run.metadata.get("ticket") or "")
            scenario_id = str(run.metadata.get("scenarioId") or "")
            booked = await self._thread(lambda: self.store.execution(ticket))
            if booked is None:
                return
            outcome = booked["outcome"]
            if outcome in REPAIR_OUTCOMES:
                settled = await self.settle_run(run_id, repairs=scenario_id)
                log_event(
                    "local.repaired", run_id=run_id, scenario_id=scenario_id, outcome=outcome, joined=settled.joined
                )
                return
            if outcome == "not_steered":
                scenario = await self._thread(lambda: self.store.scenario(scenario_id))
                joined = await sharpen.join_if_agrees(self, scenario_id, run_id) if scenario is not None else None
                if joined is not None:
                    return
            await self._thread(lambda: self.store.delete_run(run_id))
        finally:
            self._repairing.discard(run_id)

    async def get_run(self, run_id: str) -> Answer:
        try:
            run = await self._thread(lambda: self.store.run(run_id))
            steps = await self._thread(lambda: self.store.steps(run_id)) if run is not None else []
        except StoreError as exc:
            return _store_error(exc)
        if run is None:
            return 404, {"error": "run not found"}
        return 200, {
            "run": {"id": run.id, "input": run.input, "createdAt": run.created_at, "finished": run.finish is not None},
            "steps": [
                {"stepIndex": s.step_index, "toolName": s.tool_name, "toolOutput": s.body.get("toolOutput")}
                for s in steps
            ],
        }

    # --- calculation --------------------------------------------------------------------------------

    async def calculate_run(self, run_id: str, *, discard_edits: bool = False) -> ScenarioRow | None:
        """Calculate (or recalculate) the scenario of ``run_id``; its id is ``scn_<run id's tail>``."""
        run = await self._thread(lambda: self.store.run(run_id))
        if run is None:
            return None
        steps = await self._thread(lambda: self.store.steps(run_id))
        recorded = recorded_steps([s.body for s in steps])
        draft = await self._thread(lambda: draft_scenario(run.input, recorded))
        scenario_id = f"scn_{run_id.removeprefix('run_')}"
        try:
            verdict = await selfcheck.check(await self.pool(), scenario_id, draft)
        except LogicError as exc:
            verdict = selfcheck.Verdict(
                "not_ready",
                {"message": f"the sandbox could not run the self-check: {exc}"},
                {"id": scenario_id, "state": "not_ready", "steps": []},
            )
        template = {**template_of(run.input, draft.params), "samples": draft.params_sample()}
        vector = None
        if verdict.state == "ready" and self.embedder.ready:
            text = match.masked_template(template, draft.params_sample())
            embedded = await self._thread(lambda: self.embedder.embed(text))
            vector = None if embedded is None else embedded.tobytes()
        if discard_edits:
            await self._thread(lambda: self.store.clear_edits(scenario_id))
        row = await self._thread(
            lambda: self.store.put_scenario(
                scenario_id,
                project=run.project,
                run_id=run_id,
                state=verdict.state,
                reason=verdict.reason,
                body=verdict.scenario,
                template=template,
                normalized=normalized(run.input),
                embedding=vector,
                calc_version=CALC_VERSION,
                bump_revision=True,
                now=self._clock(),
            )
        )
        log_event(
            "local.calculated",
            run_id=run_id,
            scenario_id=scenario_id,
            state=verdict.state,
            steps=len(draft.steps),
            excluded=len(draft.excluded),
            reason=None if verdict.reason is None else cut_counted(str(verdict.reason.get("message")), 300),
        )
        return row

    # --- scenarios ----------------------------------------------------------------------------------

    async def get_scenario(self, scenario_id: str) -> Answer:
        try:
            row = await self._thread(lambda: self.store.scenario(scenario_id))
        except StoreError as exc:
            return _store_error(exc)
        if row is None:
            return 404, {"error": "scenario not found"}
        return 200, self._serialized(row)

    async def list_runs(self) -> Answer:
        try:
            runs = await self._thread(lambda: self.store.runs(None if self.scope == "user" else self.project))
            scenarios: dict[str, ScenarioRow | None] = {}
            for run in runs:
                scenarios[run.id] = await self._thread(functools.partial(self.store.scenario_of_run, run.id))
        except StoreError as exc:
            return _store_error(exc)
        out = []
        for run in runs:
            row = scenarios.get(run.id)
            out.append(
                {
                    "id": run.id,
                    "input": run.input,
                    "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(run.created_at)),
                    "iterations": 1,
                    "scenario": None if row is None else {"id": row.id, "state": row.state},
                    "segments": [],
                }
            )
        return 200, {"runs": out}

    async def run_scenario(self, run_id: str) -> Answer:
        try:
            row = await self._thread(lambda: self.store.scenario_of_run(run_id))
        except StoreError as exc:
            return _store_error(exc)
        if row is None:
            return 404, {"error": "not_found"}
        return 200, self._serialized(row)

    def has_hand_edits(self, scenario_id: str) -> bool:
        return self._has_hand_edits(scenario_id)

    def _has_hand_edits(self, scenario_id: str) -> bool:
        return any(e.kind == "edit" and not e.entry.get("undone") for e in self.store.edits(scenario_id))

    async def calculate(self, run_id: str, body: object) -> Answer:
        body = body if isinstance(body, dict) else {}
        run = await self._thread(lambda: self.store.run(run_id))
        if run is None:
            return 404, {"error": "not_found"}
        existing = await self._thread(lambda: self.store.scenario_of_run(run_id))
        if existing is not None and not body.get("force"):
            return 200, {"scenarioId": existing.id, "state": existing.state, "calculated": False}
        if existing is not None:
            return await self.recalculate(existing.id, {"discardEdits": body.get("discardEdits") is True})
        row = await self.calculate_run(run_id)
        assert row is not None
        return 202, {
            "scenarioId": row.id,
            "state": row.state,
            "chainRevision": row.chain_revision,
            "reason": row.reason,
        }

    async def recalculate(self, scenario_id: str, body: object) -> Answer:
        discard = isinstance(body, dict) and body.get("discardEdits") is True
        row = await self._thread(lambda: self.store.scenario(scenario_id))
        if row is None or row.run_id is None:
            return 404, {"error": "not_found"}
        if not discard and await self._thread(lambda: self._has_hand_edits(scenario_id)):
            return 409, {"error": "scenario_has_edits", "scenarioId": scenario_id}
        if discard:
            await self._thread(lambda: self.store.clear_edits(scenario_id))
        # A scenario resting on several runs is calculated from all of them again, not from its source alone.
        new = await sharpen.recalculate(self, scenario_id) or await self.calculate_run(row.run_id)
        assert new is not None
        return 202, {
            "scenarioId": new.id,
            "state": new.state,
            "chainRevision": new.chain_revision,
            "reason": new.reason,
        }

    # --- derivation and booking -----------------------------------------------------------------------

    async def derive(self, scenario_id: str, body: object) -> Answer:
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            return 400, {"error": "prompt is required"}
        prompt = body["prompt"][:MAX_INPUT_CHARS]
        row = await self._thread(lambda: self.store.scenario(scenario_id))
        if row is None:
            return 404, {"error": "scenario not found"}
        ticket = await self._thread(lambda: self.store.latest_ticket(scenario_id, prompt))
        values: dict[str, Any] | None = dict(ticket.params) if ticket is not None else None
        if values is None and row.template is not None:
            values = await self._thread(
                lambda: match.derive_values(row.template or {}, match.samples_of(row.body), prompt)
            )
        params, missing = derived_params(row.body, values or {})
        return 200, {"params": params, "derived": values is not None, "missing": missing, "costUsd": 0.0}

    async def execution(self, scenario_id: str, body: object) -> Answer:
        if not isinstance(body, dict) or body.get("outcome") not in booking.OUTCOMES:
            return 400, {"error": "outcome is required"}
        ticket = body.get("ticket")
        if not isinstance(ticket, str):
            return 409, {"error": "ticket unknown or expired"}
        decision = booking.decide(body)
        try:
            status = await self._thread(
                lambda: self.store.book(
                    ticket,
                    scenario_id,
                    outcome=str(body["outcome"]),
                    ledger=decision.ledger,
                    measured=decision.measured,
                    report=body,
                    now=self._clock(),
                )
            )
        except StoreError as exc:
            log_event("local.store_failed", route="executions", error=str(exc)[:300])
            return _store_error(exc)
        if status == "ticket_unknown":
            return 409, {"error": "ticket unknown or expired"}
        if status == "duplicate":
            return 200, {"duplicate": True}
        replayed = await self._thread(lambda: self.store.run_of_ticket(ticket))
        if replayed is not None:
            self._background(self._after_replay(replayed))
        if decision.ledger == "none":
            return 202, {"recorded": False}
        return 201, {"id": ticket}

    # --- checks, edits and the dry replay ------------------------------------------------------------

    async def _recorded_inputs(self, row: ScenarioRow) -> list[Any]:
        steps = await self._thread(lambda: self.store.steps(row.run_id or ""))
        by_index = {s.step_index: s.body.get("toolInput") for s in steps}
        return [by_index.get(s.get("sourceStepIndex", s.get("stepIndex"))) for s in row.body.get("steps") or []]

    async def _problems(self, row: ScenarioRow, scenario: Mapping[str, Any]) -> list[dict[str, str]]:
        """What is wrong with ``scenario`` against the recording of ``row``'s run: [] when it reproduces it.

        Raises:
            SandboxDown: the pool could not run it.
        """
        steps = scenario.get("steps") or []
        outputs = [(s.get("sample") or {}).get("toolOutput") for s in steps]
        params = match.samples_of(scenario)
        try:
            run = await selfcheck.dry_run(await self.pool(), scenario, params, outputs)
        except LogicError as exc:
            raise SandboxDown(str(exc)) from None
        if not run.ok and run.error and any(word in str(run.error.get("message")) for word in ("pool is closed",)):
            raise SandboxDown(str(run.error))
        recorded = await self._recorded_inputs(row)
        reason = selfcheck.mismatch(recorded, run, [str(s.get("toolName")) for s in steps])
        if reason is None:
            return []
        code = "logic_failed" if not run.ok else "input_mismatch"
        return [{"code": code, "message": str(reason.get("message"))[:500]}]

    async def check_step(self, scenario_id: str, step: str, body: object, *, save: bool) -> Answer:
        try:
            index = int(step)
        except ValueError:
            return 404, {"error": "not_found"}
        row = await self._thread(lambda: self.store.scenario(scenario_id))
        if row is None or edits.find_step(row.body, index) is None:
            return 404, {"error": "not_found"}
        change = edits.validate(body)
        if isinstance(change, edits.Refusal):
            return change.status, change.body
        before = edits.find_step(row.body, index) or {}
        after = edits.changed(before, change, save=save)
        no_change = edits.same_step(before, after)
        try:
            problems = [] if no_change else await self._problems(row, edits.with_step(row.body, index, after))
        except SandboxDown:
            return 503, {"error": "logic_sandbox_unavailable"}
        report = {
            "scenarioId": scenario_id,
            "stepIndex": index,
            "chainRevision": row.chain_revision,
            "ok": not problems,
            "noChange": no_change,
            "problems": problems,
        }
        if not save:
            return 200, report
        if no_change:
            return 400, {"error": "nothing_to_change", "report": report}
        expected = change.get("expectedRevision")
        if expected is not None and expected != row.chain_revision:
            return 409, {"error": "revision_conflict", "chainRevision": row.chain_revision}
        forced = change.get("force") is True
        if forced and not change.get("note"):
            return 400, {"error": "note_required"}
        if problems and not forced:
            return 422, {"error": "check_failed", "report": report}
        revision = await self._thread(
            lambda: self.store.update_scenario_body(scenario_id, edits.with_step(row.body, index, after))
        )
        entry = edits.entry(
            "edit", index, before, after, note=change.get("note"), forced=bool(problems and forced), revision=revision
        )
        saved = await self._thread(
            lambda: self.store.add_edit(
                scenario_id, kind="edit", step_index=index, entry=entry, before=before, after=after
            )
        )
        report["chainRevision"] = revision
        return 200, {
            "saved": True,
            "forced": saved.entry["forced"],
            "edit": saved.entry,
            "chainRevision": revision,
            "report": report,
        }

    async def list_edits(self, scenario_id: str) -> Answer:
        row = await self._thread(lambda: self.store.scenario(scenario_id))
        if row is None:
            return 404, {"error": "not_found"}
        history = await self._thread(lambda: self.store.edits(scenario_id))
        return 200, {
            "scenarioId": scenario_id,
            "chainRevision": row.chain_revision,
            "edits": [e.entry for e in reversed(history)],
        }

    async def revert(self, scenario_id: str, edit_id: str, body: object) -> Answer:
        body = body if isinstance(body, dict) else {}
        row = await self._thread(lambda: self.store.scenario(scenario_id))
        if row is None:
            return 404, {"error": "not_found"}
        history = await self._thread(lambda: self.store.edits(scenario_id))
        target = next((e for e in history if e.id == edit_id), None)
        if target is not None and target.kind == "calculation":
            # It has no one step to put back: the calculation is redone from the runs, never half undone.
            return 409, {"error": "calculation_edit", "edit": edit_id, "message": "recalculate instead"}
        if target is None or target.before is None or target.step_index is None:
            return 404, {"error": "not_found"}
        if target.entry.get("undone"):
            return 409, {"error": "already_undone", "edit": edit_id}
        forced = body.get("force") is True
        if forced and not body.get("note"):
            return 400, {"error": "note_required"}
        index = target.step_index
        current = edits.find_step(row.body, index) or {}
        restored = {**target.before, "sample": current.get("sample", target.before.get("sample"))}
        reverted = edits.with_step(row.body, index, restored)
        breaks = False
        if "toolOutputLogic" in target.entry.get("changes", []):
            try:
                problems = await self._problems(row, reverted)
            except SandboxDown:
                return 503, {"error": "logic_sandbox_unavailable"}
            breaks = bool(problems)
            if breaks and not forced:
                return 422, {"error": "undo_refused", "report": {"ok": False, "problems": problems}}
        revision = await self._thread(lambda: self.store.update_scenario_body(scenario_id, reverted))
        undone_entry = {**target.entry, "undone": True}
        await self._thread(lambda: self.store.update_edit(edit_id, undone_entry))
        if target.kind == "undo" and isinstance(target.entry.get("undoes"), str):
            previous = next((e for e in history if e.id == target.entry["undoes"]), None)
            if previous is not None:
                await self._thread(lambda: self.store.update_edit(previous.id, {**previous.entry, "undone": False}))
        entry = edits.entry(
            "undo", index, current, restored, note=body.get("note"), forced=forced and breaks, revision=revision
        )
        entry["undoes"] = edit_id
        saved = await self._thread(
            lambda: self.store.add_edit(
                scenario_id, kind="undo", step_index=index, entry=entry, before=current, after=restored
            )
        )
        return 200, {"undone": edit_id, "edit": saved.entry, "chainRevision": revision}

    async def dry_replay(self, scenario_id: str, body: object) -> Answer:
        row = await self._thread(lambda: self.store.scenario(scenario_id))
        if row is None:
            return 404, {"error": "not_found"}
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str) or not body["prompt"].strip():
            return 400, {"error": "prompt_required"}
        given = body.get("params", {})
        if not isinstance(given, dict):
            return 400, {"error": "params must be an object"}
        if row.state != "ready":
            return 409, {"error": "scenario_not_ready", "state": row.state}
        prompt = body["prompt"][:MAX_INPUT_CHARS]
        values = await self._thread(lambda: match.derive_values(row.template or {}, match.samples_of(row.body), prompt))
        params = {**(values or {}), **given}
        answer: dict[str, Any] = {
            "scenarioId": scenario_id,
            "prompt": prompt,
            "dry": True,
            "derived": bool(values),
            "costUsd": 0.0,
        }
        specs = row.body.get("paramsObject") or {}
        missing = [n for n, s in specs.items() if isinstance(s, dict) and s.get("role") == "target" and n not in params]
        if missing:
            error = {"stage": "params", "message": f"no value for target parameter {', '.join(missing)}"}
            return 200, {
                **answer,
                "ok": False,
                "params": params,
                "missing": missing,
                "steps": [],
                "responseModel": None,
                "error": error,
            }
        steps = row.body.get("steps") or []
        outputs = [(s.get("sample") or {}).get("toolOutput") for s in steps]
        try:
            run = await selfcheck.dry_run(await self.pool(), self._serialized(row), params, outputs)
        except LogicError:
            return 503, {"error": "logic_sandbox_unavailable"}
        return 200, {**answer, "missing": [], **run.wire()}

    # --- library functions (the CLI wires them) ------------------------------------------------------

    async def explain(self, prompt: str) -> dict[str, Any]:
        """Which scenario ``prompt`` would match, by which rule, with which values — or why none did."""
        found = await self._thread(lambda: self.find(prompt, self.project, wait_for_model=5.0, explain=True))
        if isinstance(found, match.Hit):
            return {
                "matched": True,
                "scenarioId": found.scenario_id,
                "rule": found.rule,
                "similarity": found.similarity,
                "params": found.values,
                "considered": [c.wire() for c in found.considered],
            }
        return {"matched": False, "embedding": found.embedding, "considered": [c.wire() for c in found.considered]}

    async def stats(self, *, project: str | None = None) -> dict[str, Any]:
        """What ``bir stats`` shows: per scenario its runs, hits, outcome mix and savings; and the totals."""
        return await self._thread(lambda: stats_of(self.store, project))


def support_of(template: Mapping[str, Any]) -> int:
    """How many agreeing runs a scenario rests on (a template from before issue 19 says nothing: one)."""
    value = template.get("support", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def derived_params(body: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Every parameter's value: the slot values; settings fall back to their samples; a target without one is
    missing."""
    params: dict[str, Any] = {}
    missing: list[str] = []
    for name, spec in (body.get("paramsObject") or {}).items():
        if not isinstance(spec, dict):
            continue
        value = values.get(name)
        if value is None and spec.get("role") != "target":
            value = spec.get("sampleValue")
        if value is None:
            missing.append(name)
        params[name] = value
    return params, missing


def stats_of(store: Store, project: str | None) -> dict[str, Any]:
    hits = store.ticket_counts()
    rows = []
    for run in store.runs(project, limit=100_000):
        scenario = store.scenario_of_run(run.id)
        if scenario is None:
            continue
        rows.append(
            booking.scenario_stats(
                scenario.id,
                intent=str(scenario.body.get("intent", "")),
                state=scenario.state,
                runs=support_of(scenario.template or {}),
                hits=hits.get(scenario.id, 0),
                baseline=booking.Baseline.of(run.finish),
                executions=store.executions(scenario.id),
            )
        )
    calls, spent = store.model_calls()
    totals = {**booking.totals(rows), "modelCalls": calls, "modelCostUsd": round(spent, 6)}
    return {"scenarios": rows, "totals": totals, "store": {**store.counts(), "bytes": store.size_bytes()}}


@contextlib.asynccontextmanager
async def opened(
    home: Path | None = None,
    *,
    project: str | os.PathLike[str] | None = None,
    pool: Any | None = None,
    embedder: Embedder | None = None,
    store_path: Path | None = None,
    load_model: bool = True,
    settings: config.Settings | None = None,
) -> AsyncIterator[LocalService]:
    """Open the store under ``home`` (else ``BIR_HOME`` of ``settings``, read now when None) and run a
    ``LocalService`` on it for the block.

    Raises:
        StoreError: the store file is not a bir store, is corrupt, or cannot be opened.
    """
    from bir.hooks.local.store import default_path

    settings = settings if settings is not None else config.load()
    path = store_path or default_path(home if home is not None else settings.home)
    store = await to_thread.run_sync(lambda: Store(path))
    try:
        resolved = None if project is None else await to_thread.run_sync(lambda: str(Path(project).resolve()))
        async with LocalService(
            store, project=resolved, pool=pool, embedder=embedder, load_model=load_model, settings=settings
        ) as service:
            yield service
    finally:
        await to_thread.run_sync(store.close)
