"""``EvaluatorPool``: N supervised worker processes that run logic bodies, one job each at a time.

The supervisor's vocabulary (after gunicorn's arbiter): ``_spawn`` a worker into a slot, ``_dispatch``
queued jobs to idle workers, ``_murder`` a worker past its hard deadline or memory, ``_reap`` one that
exited, ``_recycle`` one that served its jobs. Every job ends exactly once: with a result, or a
``LogicError``, whatever happens to its worker.

Budgets: each job is bounded by ``timeout_ms`` inside the isolate and by a SIGKILL from here a little
later; memory by the engine's limit and by the worker's RSS, watched here. A worker is replaced
after ``max_jobs`` jobs (plus up to 10% jitter, so workers do not all recycle at once). Its
replacement, a *spare*, is started ahead by as many jobs as the worker will serve while a spare
starts (from the measured start time and the measured interval between jobs, with a safety factor),
and waits warm, serving nothing, until the worker reaches its budget: then the swap is instant. The
pool's first spares start with its first workers, and are warm when ``start`` returns (with
``warm_spares=False`` they start right after, and ``start`` does not wait for them: half the start time
and the memory at first, and a first budget that may run into the margin). When jobs come
faster than a spare can start, the old worker serves on past its budget (``PoolStats.past_budget``
counts those jobs), but never past ``margin`` times it (``BIR_LOGIC_BUDGET_MARGIN``): there it is
*held*, and its next job waits for the spare (``spawn_waits`` counts it, ``spawn_wait_us_*`` how
long); the wait ends when the spare is up, or when its start fails or passes its deadline, and the
held worker then serves on until a spare is up. A job whose worker died runs once more before its
body is blamed; a body that overran its time or memory, or took a worker down twice, is refused with
the same message for ten minutes.

Walls: each worker puts the kernel's walls up on itself before its first job (``bir.evaluator.walls``;
``walls=False`` or ``BIR_LOGIC_WALLS=0`` starts it without); ``walls`` is what the last worker to start
said of them, and a wall that is down is logged once per process (``evaluator.walls_down``).

asyncio only (the control server and the proxies run on asyncio).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import math
import random
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final

import msgspec

from bir.core import config
from bir.core.errors import LogicError, Reason, as_reason
from bir.core.log import log_event
from bir.evaluator import walls
from bir.evaluator.engine import memory_message, timeout_message
from bir.evaluator.process import WorkerEvents, WorkerProcess
from bir.evaluator.realm import PARAMETERS
from bir.evaluator.refusals import RefusalLedger
from bir.evaluator.wire import Codec, Hello, Job, Result

START_DEADLINE_S: Final = 30.0
WATCH_S: Final = 0.02  # how often the watchdog checks hard deadlines and memory
MAX_ATTEMPTS: Final = 2
MAX_SPAWN_FAILURES: Final = 3
MAX_KEYS_CACHED: Final = 1000
RECYCLED: Final = "served its jobs"
# A spare starts this many times its expected start time before its worker reaches its budget.
SPARE_LEAD_FACTOR: Final = 2.0
EWMA_WEIGHT: Final = 0.2
# Until a start is measured: about what one takes on a quiet two-core machine.
FIRST_START_GUESS_S: Final = 0.3
# After a start failed, the next one waits this long, doubling per failure in a row (at most MAX_RETRY_S):
# a spare that cannot start is not retried after every job.
FIRST_RETRY_S: Final = 0.5
MAX_RETRY_S: Final = 30.0
_json_decoder = msgspec.json.Decoder(dict[str, Any])
_json_encoder = msgspec.json.Encoder()
# Wall states already logged by this process (per engine): a wall that is down is said once, not per worker.
_walls_logged: set[tuple[str, tuple[tuple[str, str], ...]]] = set()


@dataclass(slots=True)
class _Counters:
    """What the pool counts as it runs (``PoolStats`` is the frozen view of it)."""

    jobs: int = 0
    workers_started: int = 0
    recycled: int = 0
    timeouts: int = 0
    memory_kills: int = 0
    crashes: int = 0
    refused: int = 0
    overloaded: int = 0
    retries: int = 0
    cold_waits: int = 0
    retired: int = 0
    past_budget: int = 0
    holds: int = 0
    most_jobs_per_worker: int = 0
    spawn_waits: int = 0
    spawn_wait_us_total: int = 0
    spawn_wait_us_max: int = 0
    spawn_failures: int = 0


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A pool's counters since it started (jobs run, workers started, recycled and retired, jobs that
    timed out, ran out of memory or crashed, refusals, overloads, retries, waits for a cold worker) and
    its state now: jobs queued, workers ready, bodies it refuses.

    Recycling on time: ``past_budget`` is the jobs a worker ran past its budget because its spare was
    not ready yet (goal 0); ``holds`` the times a worker reached its margin (``BIR_LOGIC_BUDGET_MARGIN``
    times its budget) with no spare ready, and was held; ``most_jobs_per_worker`` the most jobs one
    worker ran; ``spawn_waits`` the jobs that waited while the pool was short of workers because some
    were starting (or held for theirs), and ``spawn_wait_us_total`` / ``spawn_wait_us_max`` how long
    (goal 0); ``spawn_failures`` the starts that failed (after one, the next waits, doubling per failure
    in a row up to 30 s). ``spares`` is the warm spares ready now."""

    jobs: int
    workers_started: int
    recycled: int
    timeouts: int
    memory_kills: int
    crashes: int
    refused: int
    overloaded: int
    retries: int
    cold_waits: int
    retired: int
    past_budget: int
    holds: int
    most_jobs_per_worker: int
    spawn_waits: int
    spawn_wait_us_total: int
    spawn_wait_us_max: int
    spawn_failures: int
    queued: int
    workers_live: int
    refusing: int
    spares: int

    def as_dict(self) -> dict[str, int]:
        """The counters as a JSON object."""
        return dataclasses.asdict(self)


@dataclass(eq=False)
class _JobRecord:
    id: int
    kind: str
    key: str
    body: str
    args: str
    future: asyncio.Future[dict[str, Any]]
    attempts: int = 0
    queued_at: float = field(default_factory=time.monotonic)
    # time.monotonic() past which its worker is killed (the watchdog's hard deadline), once it runs.
    kill_at: float = math.inf
    # Since when it waits while the pool is short of workers because some are starting, if it does.
    short_since: float | None = None

    def wire(self, timeout_ms: int) -> Job:
        return Job(id=self.id, kind=self.kind, key=self.key, body=self.body, args=self.args, timeout_ms=timeout_ms)


class EvaluatorPool(WorkerEvents):
    """A supervised pool of logic workers.

    Every argument is optional: given, it is brought under its ``BIR_LOGIC_*`` variable's ceiling;
    not given, that variable of ``settings`` (read now when None). Use it as an async context manager;
    ``evaluate`` runs one body.
    """

    def __init__(
        self,
        workers: int | None = None,
        timeout_ms: int | None = None,
        memory_mb: int | None = None,
        max_jobs: int | None = None,
        *,
        engine: str | None = None,
        queue_max: int | None = None,
        margin: float | None = None,
        walls: bool | None = None,
        warm_spares: bool = True,
        settings: config.Settings | None = None,
    ) -> None:
        read = settings if settings is not None else config.load()
        given = config.bounded(
            read._replace(
                logic_workers=read.logic_workers if workers is None else workers,
                logic_timeout_ms=read.logic_timeout_ms if timeout_ms is None else timeout_ms,
                logic_memory_mb=read.logic_memory_mb if memory_mb is None else memory_mb,
                logic_max_jobs=read.logic_max_jobs if max_jobs is None else max_jobs,
                logic_queue=read.logic_queue if queue_max is None else queue_max,
                logic_budget_margin=read.logic_budget_margin if margin is None else margin,
            )
        )
        self.workers = given.logic_workers
        self.timeout_ms = given.logic_timeout_ms
        self.memory_mb = given.logic_memory_mb
        self.max_jobs = given.logic_max_jobs
        self.queue_max = given.logic_queue
        self.margin = given.logic_budget_margin
        self.walls_enabled = given.logic_walls if walls is None else walls
        self._surface = given.logic_engine_surface
        # Whether start() waits for the first spares too (else they start right after, in the background).
        self.warm_spares = warm_spares
        # What the last worker to start said of its walls (bir.evaluator.walls), once one has.
        self.walls: dict[str, str] = {}
        chosen = engine if engine is not None else given.logic_engine
        if chosen not in ("v8", "quickjs"):
            raise config.ConfigError(f"engine must be v8 or quickjs, got {chosen!r}")
        self.engine = chosen
        self._codec = Codec()
        self._keys: dict[tuple[str, str], str] = {}  # (kind, body) -> its key, hashed once
        self._refusals = RefusalLedger()
        self._live: list[WorkerProcess] = []  # every worker that answered its handshake, until reaped
        self._procs: set[WorkerProcess] = set()  # every process started, until it exited
        self._idle: deque[WorkerProcess] = deque()
        self._pending: deque[_JobRecord] = deque()
        self._next_id = 0
        self._closed = False
        self._started = False
        self._cwd: str | None = None
        self._spawn_failures = 0  # in a row; reset by a start that succeeds
        self._retry_start_at = 0.0  # time.monotonic() before which no spare is started (after failures)
        self._spares_coming: set[WorkerProcess] = set()  # workers whose spare's start is scheduled, not begun
        # Starts in flight, each with the worker it is the spare of (None: a worker of its own).
        self._starting: dict[WorkerProcess, WorkerProcess | None] = {}
        self._spare_of: dict[WorkerProcess, WorkerProcess] = {}  # a serving worker -> its spare, starting or ready
        self._start_s = FIRST_START_GUESS_S  # moving average of a worker's start, spawn to handshake
        self._job_interval_s: float | None = None  # moving average of the time between a worker's jobs
        self._monitor: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._counts = _Counters()

    # -- lifecycle -------------------------------------------------------------------------------------

    async def __aenter__(self) -> EvaluatorPool:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the workers and their first spares, and wait until each has answered its handshake
        (the spares only with ``warm_spares``).

        Raises:
            RuntimeError: no worker could start.
        """
        if self._started:
            return
        self._started = True
        self._cwd = tempfile.mkdtemp(prefix="bir-eval-")
        # Each first worker with its spare, all starting at once: the first budget is on time too.
        firsts = [self._new_worker() for _ in range(self.workers)]
        spares = [self._spawn(spare_for=w) for w in firsts] if self.warm_spares else []
        results = await asyncio.gather(*(self._spawn(worker=w) for w in firsts), *spares, return_exceptions=True)
        if not any(isinstance(r, WorkerProcess) for r in results):
            first = next((r for r in results if isinstance(r, BaseException)), None)
            await self.close()
            raise RuntimeError(f"the evaluator's workers could not start: {first}")
        for worker in firsts:
            spare = self._spare_of.get(worker)
            if worker not in self._live and spare is not None and spare.state == "ready":
                self._promote(spare, worker)  # its worker did not start: the spare serves instead
        if not self._ready_workers():
            await self.close()
            raise RuntimeError("the evaluator's workers could not start")
        if not self.warm_spares:
            for worker in self._ready_workers():
                if worker not in self._spare_of:
                    self._spawn_soon(spare_for=worker)
        self._monitor = asyncio.get_running_loop().create_task(self._watch())
        log_event(
            "evaluator.started",
            workers=self.workers,
            engine=self.engine,
            timeout_ms=self.timeout_ms,
            memory_mb=self.memory_mb,
            max_jobs=self.max_jobs,
            margin=self.margin,
            walls=self.walls,
        )

    async def close(self) -> None:
        """Fail queued jobs with ``closed``, stop every worker (bounded), remove the working folder."""
        if self._closed:
            return
        self._closed = True
        while self._pending:
            record = self._pending.popleft()
            self._fail(record, "closed", "the evaluator pool is closed")
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        spawning = list(self._tasks)
        for task in spawning:
            task.cancel()
        await asyncio.gather(*spawning, return_exceptions=True)
        workers = list(self._procs)
        for worker in workers:
            worker.retiring = True
            worker.shutdown()
        if not await _all_exited(workers, 1.0):
            for worker in workers:
                worker.kill("close")
            await _all_exited(workers, 2.0)
        for worker in workers:
            if worker.current is not None:
                self._finish_record(worker, LogicError("closed", "the evaluator pool is closed"))
        self._spare_of.clear()
        if self._cwd is not None:
            shutil.rmtree(self._cwd, ignore_errors=True)

    # -- the API -----------------------------------------------------------------------------------------

    async def evaluate(self, kind: str, body: str, *args: object) -> dict[str, Any]:
        """Run one logic body with the contract's arguments and answer its result object.

        Raises:
            LogicError: the body threw, did not compile, returned something refused, overran its time
                or memory, is refused for a recent overrun, took its worker down twice, or the pool
                is overloaded or closed.
            TypeError: an argument is not JSON data.
        """
        if kind not in PARAMETERS:
            raise LogicError("compile", f"unknown logic kind {kind[:60]!r}", kind)
        if self._closed or not self._started:
            why = "the evaluator pool is closed" if self._closed else "the evaluator pool is not started"
            raise LogicError("closed", why, kind)
        key = self._keys.get((kind, body))
        if key is None:
            if len(self._keys) >= MAX_KEYS_CACHED:
                self._keys.clear()
            key = self._keys[(kind, body)] = hashlib.sha256(f"{kind}\0{body}".encode()).hexdigest()[:32]
        refusal = self._refusals.check(key)
        if refusal is not None:
            self._counts.refused += 1
            raise LogicError("refused", refusal.message, kind)
        if self._spawn_failures >= MAX_SPAWN_FAILURES and not self._serving_workers():
            raise LogicError("crashed", "the evaluator's workers cannot start (see evaluator.spawn_failed)", kind)
        if len(self._pending) >= self.queue_max:
            self._counts.overloaded += 1
            raise LogicError(
                "overloaded",
                f"the evaluator is overloaded: {len(self._pending)} jobs are waiting"
                f" (BIR_LOGIC_QUEUE={self.queue_max})",
                kind,
            )
        try:
            args_text = _json_encoder.encode(list(args)).decode()
        except (TypeError, msgspec.EncodeError) as exc:
            raise TypeError(f"logic arguments must be JSON data: {exc}") from None
        self._next_id += 1
        loop = asyncio.get_running_loop()
        record = _JobRecord(self._next_id, kind, key, body, args_text, loop.create_future())
        if not self._idle:
            self._mark_if_short(record)
        self._pending.append(record)
        self._dispatch()
        try:
            return await record.future
        except asyncio.CancelledError:
            # Queued: it never starts. Running: it finishes under its own limit and is discarded.
            with contextlib.suppress(ValueError):
                self._pending.remove(record)
            raise

    def stats(self) -> PoolStats:
        """Counters since the pool started, and the current queue and worker counts."""
        return PoolStats(
            **dataclasses.asdict(self._counts),
            queued=len(self._pending),
            workers_live=sum(1 for w in self._live if w.state == "ready"),
            refusing=len(self._refusals),
            spares=sum(1 for w in self._spare_of.values() if w.state == "ready"),
        )

    # -- supervision -------------------------------------------------------------------------------------

    def _new_worker(self) -> WorkerProcess:
        assert self._cwd is not None
        budget = self.max_jobs + random.randint(0, self.max_jobs // 10)
        return WorkerProcess(
            self,
            engine=self.engine,
            memory_mb=self.memory_mb,
            cwd=self._cwd,
            job_budget=budget,
            job_limit=max(budget, math.floor(budget * self.margin)),
            codec=self._codec,
            walls=self.walls_enabled,
            surface=self._surface,
        )

    async def _spawn(
        self, spare_for: WorkerProcess | None = None, *, worker: WorkerProcess | None = None
    ) -> WorkerProcess:
        if worker is None:
            worker = self._new_worker()
        self._starting[worker] = spare_for
        if spare_for is not None:
            self._spare_of[spare_for] = worker
        self._procs.add(worker)
        began = time.monotonic()
        try:
            hello = await worker.start(START_DEADLINE_S)
        except asyncio.CancelledError:
            self._forget_start(worker)
            raise
        except BaseException as exc:
            self._forget_start(worker)
            self._spawn_failures += 1
            self._counts.spawn_failures += 1
            self._retry_start_at = time.monotonic() + self._retry_delay_s()
            log_event("evaluator.spawn_failed", error=str(exc)[:500], failures=self._spawn_failures)
            if self._spawn_failures >= MAX_SPAWN_FAILURES and not self._serving_workers():
                while self._pending:
                    self._fail(self._pending.popleft(), "crashed", f"the evaluator's workers cannot start: {exc}")
            raise
        self._start_s += EWMA_WEIGHT * ((time.monotonic() - began) - self._start_s)
        self._note_walls(hello)
        predecessor = self._starting.pop(worker, None)
        self._spawn_failures = 0
        self._counts.workers_started += 1
        if self._closed:
            worker.kill("close")
            return worker
        if predecessor is None or predecessor.retiring or predecessor.state == "dead":
            self._promote(worker, predecessor)
        elif predecessor.jobs_done >= predecessor.job_budget and predecessor.current is None:
            self._retire(predecessor, RECYCLED)  # promotes the spare
        # Otherwise it waits warm until its worker reaches its budget (_after_job).
        return worker

    def _note_walls(self, hello: Hello) -> None:
        self.walls = dict(hello.walls)
        if walls.all_up(hello.walls):
            return
        key = (hello.engine, tuple(sorted(hello.walls.items())))
        if key not in _walls_logged:
            _walls_logged.add(key)
            log_event("evaluator.walls_down", engine=hello.engine, walls=hello.walls)

    def _forget_start(self, worker: WorkerProcess) -> None:
        predecessor = self._starting.pop(worker, None)
        if predecessor is not None and self._spare_of.get(predecessor) is worker:
            self._lose_spare(predecessor)

    def _lose_spare(self, served: WorkerProcess) -> None:
        """``served``'s spare did not start, or died: its next job starts another. Held for that spare,
        it waits no longer and serves on until one is up."""
        del self._spare_of[served]
        if served.held:
            served.held = False
            served.hold_released = True
            if served.state == "ready" and not served.retiring:
                self._idle.append(served)
                self._dispatch()

    def _promote(self, worker: WorkerProcess, predecessor: WorkerProcess | None) -> None:
        """Make a ready worker one that serves (a first worker, or a spare taking over)."""
        if predecessor is not None and self._spare_of.get(predecessor) is worker:
            del self._spare_of[predecessor]
        self._live.append(worker)
        self._idle.append(worker)
        self._maybe_start_spare(worker)
        self._dispatch()

    def _spawn_soon(self, delay_s: float = 0.0, spare_for: WorkerProcess | None = None) -> asyncio.Task[Any] | None:
        if self._closed:
            return None

        if spare_for is not None:
            # Until its task runs, `_spare_of` does not show the spare: the next job must not start another.
            self._spares_coming.add(spare_for)

        async def go() -> WorkerProcess | None:
            if delay_s:
                await asyncio.sleep(delay_s)
            if spare_for is not None:
                self._spares_coming.discard(spare_for)  # _spawn puts it in _spare_of before it yields
            try:
                return await self._spawn(spare_for)
            except Exception:  # noqa: BLE001 - logged in _spawn; the next need will try again
                if not self._closed and self._live_count() < self.workers:
                    self._spawn_soon(self._retry_delay_s())
                return None

        task = asyncio.get_running_loop().create_task(go())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if spare_for is not None:
            task.add_done_callback(lambda _: self._spares_coming.discard(spare_for))
        return task

    def _retry_delay_s(self) -> float:
        """How long to wait before the next start, after ``_spawn_failures`` failures in a row."""
        return min(MAX_RETRY_S, FIRST_RETRY_S * float(2 ** min(max(self._spawn_failures - 1, 0), 6)))

    def _ready_workers(self) -> list[WorkerProcess]:
        return [w for w in self._live if w.state == "ready" and not w.retiring and not w.held]

    def _serving_workers(self) -> list[WorkerProcess]:
        """Workers that serve or will: the ready ones and those held for their spare (which serve on
        should the spare not start)."""
        return [w for w in self._live if w.state == "ready" and not w.retiring]

    def _mark_if_short(self, record: _JobRecord) -> None:
        """A job that has to queue while the pool is short of ready workers waits on a start."""
        if record.short_since is None and len(self._ready_workers()) < self.workers:
            record.short_since = time.monotonic()

    def _live_count(self) -> int:
        """Workers serving or about to: a spare counts only once its worker is gone."""
        serving = sum(1 for w in self._live if not w.retiring)
        starting = sum(1 for p in self._starting.values() if p is None or p.retiring or p.state == "dead")
        return serving + starting

    def _dispatch(self) -> None:
        while self._pending and self._idle:
            worker = self._idle.popleft()
            if worker.state != "ready" or worker.retiring or worker.current is not None:
                continue
            record = self._pending.popleft()
            if record.future.done():
                self._idle.appendleft(worker)
                continue
            self._run_on(worker, record)
        if not self._pending or self._closed:
            return
        # A worker held for its spare is not cold: what waits for it is counted in spawn_waits.
        if not self._idle and not self._ready_workers() and not any(w.held for w in self._live):
            self._counts.cold_waits += 1
            if self._live_count() < self.workers:
                self._spawn_soon()

    def _run_on(self, worker: WorkerProcess, record: _JobRecord) -> None:
        worker.current = record
        if worker.jobs_done >= worker.job_budget:
            self._counts.past_budget += 1
        if record.short_since is not None:
            waited_us = int((time.monotonic() - record.short_since) * 1e6)
            record.short_since = None
            self._counts.spawn_waits += 1
            self._counts.spawn_wait_us_total += waited_us
            self._counts.spawn_wait_us_max = max(self._counts.spawn_wait_us_max, waited_us)
        if not worker.send(record.wire(self.timeout_ms)):
            worker.current = None
            self._pending.appendleft(record)
            worker.kill("pipe")
            return
        # The watchdog (_watch) kills the worker past this; a timer per job would cost a heap push
        # and a cancel on every call for a deadline that is almost never reached.
        record.kill_at = time.monotonic() + (self.timeout_ms + max(250, self.timeout_ms // 4)) / 1000.0

    def _murder(self, worker: WorkerProcess, record: _JobRecord, why: str) -> None:
        """The worker is past its hard deadline or memory: kill it and fail its job as the body's fault."""
        if worker.current is not record:
            return
        worker.kill(why)
        if why == "timeout":
            error = LogicError("timeout", timeout_message(record.kind, self.timeout_ms), record.kind)
        else:
            error = LogicError("memory", memory_message(record.kind, self.memory_mb), record.kind)
        self._finish_record(worker, error)
        log_event("evaluator.worker_killed", pid=worker.pid, why=why, kind=record.kind)

    def _finish_record(self, worker: WorkerProcess, outcome: dict[str, Any] | LogicError) -> None:
        record = worker.current
        if not isinstance(record, _JobRecord):
            return
        worker.current = None
        self._counts.jobs += 1
        if isinstance(outcome, LogicError):
            if outcome.reason in ("timeout", "memory"):
                if outcome.reason == "timeout":
                    self._counts.timeouts += 1
                else:
                    self._counts.memory_kills += 1
                self._refusals.record(record.key, outcome.reason, outcome.message)
            elif outcome.reason == "crashed":
                self._counts.crashes += 1
            if not record.future.done():
                record.future.set_exception(outcome)
        elif not record.future.done():
            record.future.set_result(outcome)

    def _fail(self, record: _JobRecord, reason: Reason, message: str) -> None:
        if not record.future.done():
            record.future.set_exception(LogicError(reason, message, record.kind))

    # -- events from workers -------------------------------------------------------------------------------

    def on_result(self, worker: WorkerProcess, result: Result) -> None:
        record = worker.current
        if not isinstance(record, _JobRecord) or record.id != result.id:
            return
        if result.ok:
            try:
                value: dict[str, Any] | LogicError = _json_decoder.decode(result.value or "")
            except msgspec.DecodeError:
                value = LogicError("result", f"{record.kind} returned a result that is not a JSON object", record.kind)
        else:
            value = LogicError(as_reason(result.reason), result.message or "the body failed", record.kind)
        self._finish_record(worker, value)
        worker.jobs_done += 1
        self._counts.most_jobs_per_worker = max(self._counts.most_jobs_per_worker, worker.jobs_done)
        self._after_job(worker)

    def _after_job(self, worker: WorkerProcess) -> None:
        if worker.state != "ready":
            return
        now = time.monotonic()
        if worker.last_job_at is not None:
            interval = now - worker.last_job_at
            if self._job_interval_s is None:
                self._job_interval_s = interval
            else:
                self._job_interval_s += EWMA_WEIGHT * (interval - self._job_interval_s)
        worker.last_job_at = now
        if worker.retiring:
            worker.shutdown()  # it asked to go while this job ran
            return
        spare = self._spare_of.get(worker)
        if worker.jobs_done >= worker.job_budget and spare is not None and spare.state == "ready":
            self._retire(worker, RECYCLED)  # the warm spare takes over at once
            return
        self._maybe_start_spare(worker)
        if worker.jobs_done >= worker.job_limit and not worker.hold_released and worker in self._spare_of:
            self._hold(worker)
            return
        self._idle.append(worker)
        self._dispatch()

    def _hold(self, worker: WorkerProcess) -> None:
        """The worker reached its margin with its spare still starting: it serves nothing more, and the
        jobs waiting now wait for that spare (``_spawn`` retires the worker once the spare is up)."""
        worker.held = True
        self._counts.holds += 1
        for record in self._pending:
            self._mark_if_short(record)
        self._dispatch()

    def _maybe_start_spare(self, worker: WorkerProcess) -> None:
        """Start the worker's spare once it has no more jobs left than it will serve while one starts."""
        if worker in self._spare_of or worker in self._spares_coming or self._closed or worker.retiring:
            return
        if time.monotonic() < self._retry_start_at:
            return  # the last start failed: the worker serves on, and a later job tries again
        margin = max(1, worker.job_budget // 10)
        lead = margin
        if self._job_interval_s is not None:
            expected = SPARE_LEAD_FACTOR * self._start_s / max(self._job_interval_s, 1e-6)
            lead = max(margin, math.ceil(min(expected, float(worker.job_budget))))
        if worker.job_budget - worker.jobs_done <= lead:
            self._spawn_soon(spare_for=worker)

    def _retire(self, worker: WorkerProcess, why: str) -> None:
        worker.retiring = True
        with contextlib.suppress(ValueError):
            self._idle.remove(worker)
        self._counts.retired += 1
        if why == RECYCLED:
            self._counts.recycled += 1
        log_event("evaluator.worker_retired", pid=worker.pid, why=why, jobs=worker.jobs_done)
        if worker.current is None:
            worker.shutdown()
        self._hand_over(worker)

    def _hand_over(self, worker: WorkerProcess) -> None:
        """A worker stops serving: its ready spare takes its place, a starting one will, else start one."""
        spare = self._spare_of.get(worker)
        if spare is not None and spare.state == "ready" and spare not in self._starting:
            self._promote(spare, worker)
        if self._live_count() < self.workers:
            self._spawn_soon()

    def on_retire(self, worker: WorkerProcess, why: str) -> None:
        if not worker.retiring:
            self._retire(worker, why)

    def on_exit(self, worker: WorkerProcess, returncode: int | None) -> None:
        self._procs.discard(worker)
        for served, spare in list(self._spare_of.items()):
            # A spare that died in its start is let go by _spawn, once the failure is counted (and the
            # next start put off): here, a job ending meanwhile would start another at once.
            if spare is worker and worker not in self._starting:
                self._lose_spare(served)
        with contextlib.suppress(ValueError):
            self._live.remove(worker)
        with contextlib.suppress(ValueError):
            self._idle.remove(worker)
        record = worker.current
        retried: _JobRecord | None = None
        if isinstance(record, _JobRecord):
            worker.current = None
            if self._closed:
                self._fail(record, "closed", "the evaluator pool is closed")
            else:
                record.attempts += 1
                if record.attempts < MAX_ATTEMPTS and not self._closed:
                    self._counts.retries += 1
                    self._pending.appendleft(record)
                    retried = record
                else:
                    worker.current = record
                    message = f"{record.kind} took its worker down twice"
                    self._finish_record(worker, LogicError("crashed", message, record.kind))
                    self._refusals.record(record.key, "crashed", message)
        if worker.kill_reason is None and not worker.retiring:
            log_event("evaluator.worker_died", pid=worker.pid, returncode=returncode, stderr=worker.stderr_tail[-500:])
        if not self._closed:
            self._hand_over(worker)
            self._spare_of.pop(worker, None)
            if retried is not None and not self._idle:
                self._mark_if_short(retried)
        self._dispatch()

    # -- the watchdog: hard deadlines and memory -------------------------------------------------------------

    async def _watch(self) -> None:
        limit_growth = (2 * self.memory_mb + 32) * 1024 * 1024
        while not self._closed:
            await asyncio.sleep(WATCH_S)
            now = time.monotonic()
            for worker in list(self._live):
                record = worker.current
                if not isinstance(record, _JobRecord) or worker.state != "ready":
                    continue
                if now >= record.kill_at:
                    self._murder(worker, record, "timeout")
                elif worker.rss() > worker.baseline_rss + limit_growth:
                    self._murder(worker, record, "memory")


async def _all_exited(workers: list[WorkerProcess], timeout_s: float) -> bool:
    try:
        await asyncio.wait_for(asyncio.gather(*(w.exited.wait() for w in workers)), timeout_s)
    except TimeoutError:
        return False
    return True
