"""``bir bench eval``: the evaluator pool against the in-process floor of the same stack.

For each body of ``bir.benchmarks.corpus`` and for their mix it measures:

- the **floor**: the body in a raw mini-racer context, one engine round trip per call, in a
  subprocess (``bir.evaluator.bench_floor``) so that V8 never loads into this process; in the same
  subprocess, the workers' own engine (the locked realm and its repair) without the pool around it;
- the **pool with one worker**: sequential latency (p50/p90/p99), and throughput with the worker
  saturated by several concurrent callers;
- the **pool with all workers** (``BIR_LOGIC_WORKERS``): throughput with enough concurrent callers
  to keep every worker busy, taken in rounds alternating with the one-worker pool's throughput so
  that a shared machine's drifting load weighs on both alike;

and the ratios between them, against the goals of issue 10: on the mix, p50 within 1.5× of the floor's,
p99 within 1.5× of the floor's p99, and two workers at least 1.9× one worker's throughput (0.95× per
worker). The goals are reported, not enforced: the command fails only when it could not measure.

Besides (full mode, or whatever ``Counts`` asks for):

- **recycling**: the pool at the default ``BIR_LOGIC_MAX_JOBS`` and at a budget of ``SMALL_MAX_JOBS``
  (shorter than a worker's start at full speed), each under sequential and saturated load: jobs past
  budget, holds at the margin, jobs that waited on a start and how long, the most jobs one worker ran;
- **walls**: what the kernel's walls (``bir.evaluator.walls``) cost: a worker's start, spawn to
  handshake, with and without them, taken in turn; and the mix's sequential latency in a one-worker
  pool with and without them, in alternating rounds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

import msgspec

from bir.benchmarks.corpus import CASES, MIX, Case
from bir.benchmarks.machine import machine_facts
from bir.benchmarks.stats import percentile
from bir.core import config
from bir.core.errors import LogicError
from bir.evaluator.bench_floor import FloorCase, FloorReply, FloorRequest
from bir.evaluator.pool import EvaluatorPool
from bir.evaluator.process import WorkerEvents, WorkerProcess
from bir.evaluator.wire import Codec, Hello
from bir.hooks.commands.result import print_refusal

REPORT_VERSION: Final = 1
# Large enough that no worker is recycled during a run: recycling is measured on its own.
BENCH_MAX_JOBS: Final = 1_000_000
FLOOR_TIMEOUT_S: Final = 600.0
MAX_ERROR_CHARS: Final = 1000
GOAL_P50_RATIO: Final = 1.5
GOAL_P99_RATIO: Final = 1.5
GOAL_SCALING_PER_WORKER: Final = 0.95  # two workers at least 1.9× one
# One worker's throughput and all workers' are taken in this many alternating rounds.
THROUGHPUT_ROUNDS: Final = 4
# A budget a saturated pool serves faster than a worker starts: where the margin (and holds) show.
SMALL_MAX_JOBS: Final = 100
WALLS_ROUNDS: Final = 6


@dataclass(frozen=True, slots=True)
class Counts:
    """How many calls each measurement makes. ``recycle_calls``, ``quickjs_calls`` and ``walls_starts``
    at 0 skip the recycling runs, the QuickJS line and the walls' costs."""

    warmup: int
    sequential: int
    throughput: int
    callers_per_worker: int
    recycle_calls: int
    quickjs_calls: int
    walls_starts: int = 0
    walls_calls: int = 0


QUICK: Final = Counts(
    warmup=100,
    sequential=500,
    throughput=600,
    callers_per_worker=4,
    recycle_calls=0,
    quickjs_calls=0,
    walls_starts=4,
    walls_calls=600,
)
FULL: Final = Counts(
    warmup=100,
    sequential=3000,
    throughput=4000,
    callers_per_worker=4,
    recycle_calls=6000,
    quickjs_calls=300,
    walls_starts=12,
    walls_calls=3000,
)

_Call = tuple[str, str, tuple[object, ...]]


class BenchError(Exception):
    """The bench could not measure (the floor failed, a body failed, a pool did not start)."""


def run_eval_bench(
    *, quick: bool, as_json: bool, counts: Counts | None = None, progress: Callable[[str], None] = lambda _: None
) -> int:
    """Run the evaluator benchmark and print a table, or one JSON document with ``as_json``.

    ``counts`` overrides the iteration counts of the mode (tests use a tiny configuration).
    Answers 0 when it measured (whether or not the goals were met), 1 when it could not.

    Raises:
        ConfigError: a ``BIR_LOGIC_*`` variable is malformed.
    """
    chosen = counts if counts is not None else (QUICK if quick else FULL)
    try:
        report = measure(chosen, mode="quick" if quick else "full", progress=progress)
    except (BenchError, LogicError, OSError, RuntimeError) as exc:
        print_refusal(
            "bir bench eval", "could_not_measure", str(exc)[:MAX_ERROR_CHARS], as_json=as_json, out=sys.stdout,
            err=sys.stderr,
        )  # fmt: skip
        return 1
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(render_table(report))
    return 0


def measure(counts: Counts, *, mode: str, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Measure the floor, then the pools, and assemble the report (``progress`` hears each part).

    Raises:
        BenchError: the floor failed, or a body answered differently in the pool.
        LogicError: a body failed in the pool.
        RuntimeError: a pool's workers did not start.
        ConfigError: a ``BIR_LOGIC_*`` variable is malformed.
    """
    workers = config.load().logic_workers
    started = time.monotonic()
    load_before = os.getloadavg()
    args = {case.name: case.args_factory() for case in CASES}
    progress(f"the in-process floor: {len(CASES)} bodies, {counts.sequential} calls each…")
    floor = _run_floor(CASES, args, counts)
    pools = asyncio.run(_measure_pools(CASES, args, counts, workers, floor.results, progress=progress))
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "mode": mode,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(load_before, v8=floor.v8_version),
        "settings": {
            **asdict(counts),
            "workers": workers,
            "max_jobs": BENCH_MAX_JOBS,
            "timeout_ms": config.load().logic_timeout_ms,
            "memory_mb": config.load().logic_memory_mb,
        },
        "cases": {},
    }
    for name in [case.name for case in CASES] + [MIX]:
        kind = next((c.kind for c in CASES if c.name == name), MIX)
        arg_bytes = sum(len(json.dumps(a)) for c in CASES if name in (c.name, MIX) for a in args[c.name])
        report["cases"][name] = _case_report(
            name,
            kind=kind,
            arg_bytes=arg_bytes,
            floor_ns=floor.samples_ns[name],
            engine_ns=floor.engine_samples_ns.get(name, []),
            pools=pools,
        )
    report["goals"] = _goals(report["cases"][MIX], workers)
    report["case_p50_ratio_geomean"] = _geomean(
        [row["ratios"]["p50_vs_floor"] for name, row in report["cases"].items() if name != MIX]
    )
    report["recycling"] = pools["recycling"]
    report["walls"] = pools["walls"]
    report["quickjs"] = pools["quickjs"]
    report["pool_stats"] = pools["stats"]
    report["duration_s"] = round(time.monotonic() - started, 1)
    return report


# --- the floor --------------------------------------------------------------------------------------------


def _run_floor(cases: Sequence[Case], args: dict[str, tuple[object, ...]], counts: Counts) -> FloorReply:
    request = FloorRequest(
        cases=[FloorCase(c.name, c.kind, c.body, json.dumps(list(args[c.name]))) for c in cases],
        warmup=counts.warmup,
        calls=counts.sequential,
        mix=MIX,
        memory_mb=config.load().logic_memory_mb,
    )
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-B", "-m", "bir.evaluator.bench_floor"],
            input=msgspec.json.encode(request),
            capture_output=True,
            timeout=FLOOR_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"the in-process floor did not finish within {FLOOR_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip()[-MAX_ERROR_CHARS:]
        raise BenchError(f"the in-process floor failed ({done.returncode}): {tail}")
    try:
        return msgspec.json.decode(done.stdout, type=FloorReply)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BenchError(f"the in-process floor answered something unreadable: {exc}") from None


# --- the pools --------------------------------------------------------------------------------------------


async def _measure_pools(
    cases: Sequence[Case],
    args: dict[str, tuple[object, ...]],
    counts: Counts,
    workers: int,
    floor_results: dict[str, str],
    *,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    calls: dict[str, list[_Call]] = {c.name: [(c.kind, c.body, args[c.name])] for c in cases}
    calls[MIX] = [(c.kind, c.body, args[c.name]) for c in cases]
    one: dict[str, dict[str, Any]] = {}
    every: dict[str, dict[str, Any]] = {}
    stats: dict[str, Any] = {}

    # Both pools at once (idle workers cost nothing), so that the two throughputs can be taken in
    # alternating rounds: on a shared machine the load drifts, and a drift between two separate
    # runs would show up as scaling (or its absence).
    async with (
        EvaluatorPool(workers=1, max_jobs=BENCH_MAX_JOBS, engine="v8") as pool,
        EvaluatorPool(workers=workers, max_jobs=BENCH_MAX_JOBS, engine="v8") as pool_all,
    ):
        for case in cases:
            kind, body, arguments = calls[case.name][0]
            result = await pool.evaluate(kind, body, *arguments)
            if result != json.loads(floor_results[case.name]):
                raise BenchError(f"{case.name} answered differently in the pool and in the floor")
        callers_all = counts.callers_per_worker * workers
        for number, (name, batch) in enumerate(calls.items(), 1):
            progress(f"the pools, {name} ({number} of {len(calls)})…")
            await _sequential(pool, batch, counts.warmup)
            samples = await _sequential(pool, batch, counts.sequential)
            await _saturate(pool_all, batch, max(counts.warmup, workers * 2), callers_all)
            one_per_s, all_per_s = await _alternate(
                pool,
                pool_all,
                batch,
                counts.throughput,
                callers_one=counts.callers_per_worker,
                callers_every=callers_all,
            )
            one[name] = {**_latency(samples), "callers": counts.callers_per_worker, "calls_per_s": one_per_s}
            every[name] = {
                "workers": workers,
                "callers": callers_all,
                "calls": counts.throughput,
                "calls_per_s": all_per_s,
            }
        stats["one_worker"] = pool.stats().as_dict()
        stats["all_workers"] = pool_all.stats().as_dict()

    recycling: list[dict[str, Any]] | None = None
    if counts.recycle_calls > 0:
        recycling = []
        for max_jobs in (config.load().logic_max_jobs, SMALL_MAX_JOBS):
            for load in ("sequential", "saturated"):
                progress(f"recycling at max_jobs {max_jobs}, {load}…")
                row, pool_stats = await _recycling(calls[MIX], counts, workers, max_jobs, load)
                recycling.append(row)
                stats[f"recycling_{max_jobs}_{load}"] = pool_stats

    walls_cost: dict[str, Any] | None = None
    if counts.walls_starts > 0:
        progress(f"the kernel's walls, {counts.walls_starts} worker starts with and without…")
        walls_cost = await _walls_cost(calls[MIX], counts)

    quickjs: dict[str, Any] | None = None
    if counts.quickjs_calls > 0:
        progress(f"QuickJS, {counts.quickjs_calls} calls…")
        async with EvaluatorPool(workers=1, max_jobs=BENCH_MAX_JOBS, engine="quickjs") as pool:
            await _sequential(pool, calls[MIX], 2 * len(calls[MIX]))
            quickjs = _latency(await _sequential(pool, calls[MIX], counts.quickjs_calls))
            stats["quickjs"] = pool.stats().as_dict()

    return {
        "one": one,
        "all": every,
        "recycling": recycling,
        "walls": walls_cost,
        "quickjs": quickjs,
        "stats": stats,
    }


async def _recycling(
    batch: Sequence[_Call], counts: Counts, workers: int, max_jobs: int, load: str
) -> tuple[dict[str, Any], dict[str, int]]:
    """One pool at ``max_jobs`` under ``load`` ("sequential": one caller; "saturated": four callers a
    worker): its latency or throughput, and how its recycling went."""
    async with EvaluatorPool(workers=workers, max_jobs=max_jobs, engine="v8") as pool:
        await _sequential(pool, batch, counts.warmup)
        row: dict[str, Any] = {"max_jobs": max_jobs, "margin": pool.margin, "workers": workers, "load": load}
        if load == "sequential":
            row |= _latency(await _sequential(pool, batch, counts.recycle_calls))
        else:
            callers = counts.callers_per_worker * workers
            row |= {
                "calls": counts.recycle_calls,
                "callers": callers,
                "calls_per_s": await _saturate(pool, batch, counts.recycle_calls, callers),
            }
        s = pool.stats()
        row |= {
            "recycled": s.recycled,
            "past_budget": s.past_budget,
            "holds": s.holds,
            "most_jobs_per_worker": s.most_jobs_per_worker,
            "job_limit": math.floor((max_jobs + max_jobs // 10) * pool.margin),
            "spawn_waits": s.spawn_waits,
            "spawn_wait_ms_max": round(s.spawn_wait_us_max / 1000, 1),
            "cold_waits": s.cold_waits,
        }
        return row, s.as_dict()


async def _walls_cost(batch: Sequence[_Call], counts: Counts) -> dict[str, Any]:
    """What the walls cost: worker starts with and without them, taken in turn, and the mix's sequential
    latency in a one-worker pool with and without them, in alternating rounds."""
    starts: dict[str, list[int]] = {"on": [], "off": []}
    raising: list[int] = []  # what raising the walls took inside each walled worker, in ns
    warming: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bir-bench-walls-") as cwd:
        for _ in range(counts.walls_starts):
            for mode in ("on", "off"):
                took, hello = await _time_start(cwd, walls=mode == "on")
                starts[mode].append(took)
                if mode == "on":
                    raising.append(hello.walls_us * 1000)
                    warming.append(hello.warm_up_us * 1000)
    samples: dict[str, list[int]] = {"on": [], "off": []}
    async with (
        EvaluatorPool(workers=1, max_jobs=BENCH_MAX_JOBS, engine="v8", walls=True) as walled,
        EvaluatorPool(workers=1, max_jobs=BENCH_MAX_JOBS, engine="v8", walls=False) as bare,
    ):
        state = walled.walls
        for pool in (walled, bare):
            await _sequential(pool, batch, counts.warmup)
        rounds = max(1, min(WALLS_ROUNDS, counts.walls_calls))
        for r in range(rounds):
            share = counts.walls_calls // rounds + (1 if r < counts.walls_calls % rounds else 0)
            for mode, pool in (("on", walled), ("off", bare)):
                samples[mode] += await _sequential(pool, batch, share)
    start_ms = {mode: _start_summary(values) for mode, values in starts.items()}
    mix = {mode: _latency(values) for mode, values in samples.items()}
    return {
        "state": state,
        "start_ms": start_ms,
        "in_worker_ms": {"raise_walls": _start_summary(raising), "warm_up": _start_summary(warming)},
        "mix": mix,
        "ratios": {
            "start_p50_on_vs_off": _ratio(start_ms["on"]["p50"], start_ms["off"]["p50"]),
            "mix_p50_on_vs_off": _ratio(mix["on"]["p50_us"], mix["off"]["p50_us"]),
            "mix_p99_on_vs_off": _ratio(mix["on"]["p99_us"], mix["off"]["p99_us"]),
        },
    }


async def _time_start(cwd: str, *, walls: bool) -> tuple[int, Hello]:
    """One worker's start, spawn to handshake, in ns, and its handshake; the worker is then stopped."""
    worker = WorkerProcess(
        WorkerEvents(), engine="v8", memory_mb=config.load().logic_memory_mb, cwd=cwd,
        job_budget=BENCH_MAX_JOBS, codec=Codec(), walls=walls,
    )  # fmt: skip
    started = time.perf_counter_ns()
    try:
        hello = await worker.start(60.0)
        return time.perf_counter_ns() - started, hello
    finally:
        worker.shutdown()
        try:
            await asyncio.wait_for(worker.exited.wait(), 10.0)
        except TimeoutError:
            worker.kill("bench")
            await worker.exited.wait()


def _start_summary(samples_ns: Sequence[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "starts": len(ordered),
        "p50": round(percentile(ordered, 0.5) / 1e6, 2) if ordered else 0.0,
        "max": round(ordered[-1] / 1e6, 2) if ordered else 0.0,
    }


async def _sequential(pool: EvaluatorPool, batch: Sequence[_Call], n: int) -> list[int]:
    """``n`` calls one after the other, taking the batch in turn; one duration (ns) per call."""
    clock = time.perf_counter_ns
    samples: list[int] = []
    for i in range(n):
        kind, body, arguments = batch[i % len(batch)]
        started = clock()
        await pool.evaluate(kind, body, *arguments)
        samples.append(clock() - started)
    return samples


async def _alternate(
    one: EvaluatorPool,
    every: EvaluatorPool,
    batch: Sequence[_Call],
    n: int,
    *,
    callers_one: int,
    callers_every: int,
) -> tuple[float, float]:
    """The throughputs of ``one`` and ``every`` (calls per second), ``n`` calls each, taken in
    ``THROUGHPUT_ROUNDS`` alternating rounds."""
    rounds = max(1, min(THROUGHPUT_ROUNDS, n))
    elapsed = [0.0, 0.0]
    for r in range(rounds):
        share = n // rounds + (1 if r < n % rounds else 0)
        for i, (pool, callers) in enumerate(((one, callers_one), (every, callers_every))):
            started = time.perf_counter_ns()
            await _saturate(pool, batch, share, callers)
            elapsed[i] += (time.perf_counter_ns() - started) / 1e9
    return round(n / max(elapsed[0], 1e-9), 1), round(n / max(elapsed[1], 1e-9), 1)


async def _saturate(pool: EvaluatorPool, batch: Sequence[_Call], n: int, callers: int) -> float:
    """``n`` calls shared by ``callers`` concurrent callers; answers calls per second."""
    next_index = 0

    async def caller() -> None:
        nonlocal next_index
        while next_index < n:
            kind, body, arguments = batch[next_index % len(batch)]
            next_index += 1
            await pool.evaluate(kind, body, *arguments)

    started = time.perf_counter_ns()
    async with asyncio.TaskGroup() as group:
        for _ in range(callers):
            group.create_task(caller())
    elapsed_s = max(time.perf_counter_ns() - started, 1) / 1e9
    return round(n / elapsed_s, 1)


# --- the report -------------------------------------------------------------------------------------------


def percentiles(samples_ns: Sequence[int]) -> tuple[float, float, float]:
    """p50, p90 and p99 of ``samples_ns`` in microseconds, nearest rank (0.0 for no samples)."""
    if not samples_ns:
        return 0.0, 0.0, 0.0
    ordered = sorted(samples_ns)
    p50, p90, p99 = (percentile(ordered, fraction) / 1000 for fraction in (0.50, 0.90, 0.99))
    return p50, p90, p99


def _latency(samples_ns: Sequence[int]) -> dict[str, Any]:
    p50, p90, p99 = percentiles(samples_ns)
    mean = statistics.fmean(samples_ns) / 1000 if samples_ns else 0.0
    return {
        "calls": len(samples_ns),
        "p50_us": round(p50, 1),
        "p90_us": round(p90, 1),
        "p99_us": round(p99, 1),
        "mean_us": round(mean, 1),
        "sequential_calls_per_s": round(1e6 / mean, 1) if mean else 0.0,
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def _case_report(
    name: str,
    *,
    kind: str,
    arg_bytes: int,
    floor_ns: Sequence[int],
    engine_ns: Sequence[int],
    pools: dict[str, Any],
) -> dict[str, Any]:
    floor = _latency(floor_ns)
    engine = _latency(engine_ns)
    one = pools["one"][name]
    every = pools["all"][name]
    return {
        "kind": kind,
        "arg_bytes": arg_bytes,
        "floor": floor,
        "engine_in_process": engine,
        "pool_one_worker": one,
        "pool_all_workers": every,
        "ratios": {
            "p50_vs_floor": _ratio(one["p50_us"], floor["p50_us"]),
            "p99_vs_floor": _ratio(one["p99_us"], floor["p99_us"]),
            "engine_p50_vs_floor": _ratio(engine["p50_us"], floor["p50_us"]),
            "throughput_all_vs_one": _ratio(every["calls_per_s"], one["calls_per_s"]),
        },
    }


def _goals(mix: dict[str, Any], workers: int) -> list[dict[str, Any]]:
    p50_ratio = mix["ratios"]["p50_vs_floor"]
    p99_ratio = mix["ratios"]["p99_vs_floor"]
    scaling = mix["ratios"]["throughput_all_vs_one"]
    scaling_target = round(GOAL_SCALING_PER_WORKER * workers, 2)
    return [
        {
            "goal": f"mix p50 within {GOAL_P50_RATIO:g}× of the in-process floor",
            "value": p50_ratio,
            "target": GOAL_P50_RATIO,
            "met": p50_ratio is not None and p50_ratio <= GOAL_P50_RATIO,
        },
        {
            "goal": f"mix p99 within {GOAL_P99_RATIO:g}× of the floor's p99 (one worker, sequential)",
            "value": p99_ratio,
            "target": GOAL_P99_RATIO,
            "met": p99_ratio is not None and p99_ratio <= GOAL_P99_RATIO,
        },
        {
            "goal": f"mix throughput of {workers} workers at least {scaling_target:g}× one worker's",
            "value": scaling,
            "target": scaling_target,
            # One worker has nothing to scale against.
            "met": None if workers < 2 else scaling is not None and scaling >= scaling_target,
        },
    ]


def _geomean(ratios: Sequence[float | None]) -> float | None:
    """The geometric mean of the per-case ratios: the mix's own p50 sits where half the calls are
    small bodies and half are not, so a little noise moves it far; this one does not."""
    values = [r for r in ratios if r is not None and r > 0]
    if not values:
        return None
    return round(math.exp(sum(math.log(v) for v in values) / len(values)), 2)


def render_table(report: dict[str, Any]) -> str:
    """The report as a plain-text table with the goals and the pools' counters."""
    machine = report["machine"]
    settings = report["settings"]
    workers = settings["workers"]
    load = " ".join(f"{x:.2f}" for x in machine["loadavg_before"])
    lines = [
        f"bir bench eval ({report['mode']}): V8 {machine['v8']}, {machine['cpus']} CPUs, load {load}, "
        f"{settings['sequential']} sequential calls and {settings['throughput']} for throughput per row",
        "",
        f"{'':<16}{'floor, µs':^24}{'engine':>8}  {'pool, 1 worker, µs':^24}  {'pool/floor':^11}"
        f"  {'throughput, calls/s':^33}".rstrip(),
        f"{'case':<16}{'p50':>8}{'p90':>8}{'p99':>8}{'p50':>8}  {'p50':>8}{'p90':>8}{'p99':>8}  {'p50':>5}{'p99':>6}"
        f"  {'floor':>8}{'1 worker':>9}{f'{workers} workers':>10}{'ratio':>6}".rstrip(),
    ]
    for name, row in report["cases"].items():
        floor, one, every, ratios = row["floor"], row["pool_one_worker"], row["pool_all_workers"], row["ratios"]
        lines.append(
            f"{name:<16}{floor['p50_us']:>8.1f}{floor['p90_us']:>8.1f}{floor['p99_us']:>8.1f}"
            f"{row['engine_in_process']['p50_us']:>8.1f}"
            f"  {one['p50_us']:>8.1f}{one['p90_us']:>8.1f}{one['p99_us']:>8.1f}"
            f"  {_times(ratios['p50_vs_floor']):>5}{_times(ratios['p99_vs_floor']):>6}"
            f"  {floor['sequential_calls_per_s']:>8.0f}{one['calls_per_s']:>9.0f}{every['calls_per_s']:>10.0f}"
            f"{_times(ratios['throughput_all_vs_one']):>6}"
        )
    lines.append("")
    lines.append("goals:")
    for goal in report["goals"]:
        verdict = {True: "met", False: "MISSED", None: "n/a"}[goal["met"]]
        value = goal["value"]
        shown = "n/a" if value is None else f"{value:g}×"
        lines.append(f"  [{verdict}] {goal['goal']}: {shown}")
    geomean = report.get("case_p50_ratio_geomean")
    if geomean is not None:
        lines.append(f"  (per-case p50 pool/floor ratios, geometric mean: {geomean:g}×)")
    recycling = report["recycling"]
    if recycling is not None:
        lines.append("recycling (mix, v8):")
        for row in recycling:
            if row["load"] == "sequential":
                speed = f"p50 {row['p50_us']:.1f} µs, p99 {row['p99_us']:.1f} µs"
            else:
                speed = f"{row['calls_per_s']:.0f} calls/s with {row['callers']} callers"
            lines.append(
                f"  max_jobs {row['max_jobs']}, {row['workers']} workers, {row['load']}: {speed}; "
                f"recycled {row['recycled']}, jobs past budget {row['past_budget']}, holds {row['holds']}, "
                f"most jobs a worker ran {row['most_jobs_per_worker']} (limit {row['job_limit']}), "
                f"jobs that waited on a start {row['spawn_waits']} (longest {row['spawn_wait_ms_max']:.1f} ms), "
                f"cold waits {row['cold_waits']}"
            )
    walls_cost = report["walls"]
    if walls_cost is not None:
        on, off = walls_cost["start_ms"]["on"], walls_cost["start_ms"]["off"]
        mix_on, mix_off = walls_cost["mix"]["on"], walls_cost["mix"]["off"]
        ratios = walls_cost["ratios"]
        lines.append("walls (" + ", ".join(f"{k} {v.split(':')[0]}" for k, v in walls_cost["state"].items()) + "):")
        lines.append(
            f"  a worker's start, p50 (max) over {on['starts']}: {on['p50']:.1f} ms ({on['max']:.1f}) with, "
            f"{off['p50']:.1f} ms ({off['max']:.1f}) without: {_times(ratios['start_p50_on_vs_off'])}×"
        )
        inside = walls_cost["in_worker_ms"]
        lines.append(
            f"  inside a walled worker, p50 (max): raising the walls {inside['raise_walls']['p50']:.2f} ms "
            f"({inside['raise_walls']['max']:.2f}), the warm-up jobs before them {inside['warm_up']['p50']:.2f} ms "
            f"({inside['warm_up']['max']:.2f}; with or without the walls)"
        )
        lines.append(
            f"  mix, 1 worker, sequential, {mix_on['calls']} calls each: p50 {mix_on['p50_us']:.1f} µs with, "
            f"{mix_off['p50_us']:.1f} µs without ({_times(ratios['mix_p50_on_vs_off'])}×); "
            f"p99 {mix_on['p99_us']:.1f} µs with, {mix_off['p99_us']:.1f} µs without "
            f"({_times(ratios['mix_p99_on_vs_off'])}×)"
        )
    quickjs = report["quickjs"]
    if quickjs is not None:
        lines.append(
            f"QuickJS, 1 worker, mix: p50 {quickjs['p50_us']:.1f} µs, p99 {quickjs['p99_us']:.1f} µs "
            f"over {quickjs['calls']} calls"
        )
    lines.append("pool stats:")
    for name, stats in report["pool_stats"].items():
        shown = ", ".join(f"{k} {v}" for k, v in stats.items())
        lines.append(f"  {name}: {shown}")
    after = " ".join(f"{x:.2f}" for x in machine["loadavg_after"])
    lines.append(f"took {report['duration_s']:.1f} s; load after {after}")
    return "\n".join(lines) + "\n"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"
