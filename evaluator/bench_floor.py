"""The in-process floor of ``bir bench eval``: ``python -I -B -m bir.evaluator.bench_floor``.

It reads a ``FloorRequest`` (JSON) on stdin, runs each body in one raw mini-racer context driven the
way the workers' engine drives it (``engine_v8.V8Engine._eval``: one ``mr_eval`` round trip per call,
with the workers' V8 flags), and writes a ``FloorReply`` (JSON) on stdout. What the pool adds (the
realm's lock and repair, the worker's pipe and framing, the supervisor) is absent. What any
in-process caller does on every call is there: each body is compiled once as a function, and each
call encodes its Python arguments to JSON, runs one script that parses them from a string literal,
calls the function and stringifies its result, and decodes that result. That is the fastest round
trip this stack allows for a call from Python.

With ``engine`` it also times the workers' own engine (``V8Engine.run``: the locked realm, its
runner and its repair after every job) in this process: the pool's cost split into what the realm
adds and what the pipe and the supervisor add.

It is a process of its own so that V8 is never loaded into the bench process that runs the pool.
"""

from __future__ import annotations

import hashlib
import os
import queue
import sys
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec

from bir.evaluator.realm import PARAMETERS

EVAL_TIMEOUT_S: Final = 30.0
EVAL_TIMEOUT_MS: Final = 10_000
MAX_REQUEST_BYTES: Final = 16 * 1024 * 1024


class FloorCase(msgspec.Struct, frozen=True):
    name: str
    kind: str
    body: str
    args: str  # JSON text of the argument list, in the contract's order


class FloorRequest(msgspec.Struct, frozen=True):
    cases: list[FloorCase]
    warmup: int
    calls: int
    mix: str = "mix"
    memory_mb: int = 64
    engine: bool = True


class FloorReply(msgspec.Struct, frozen=True):
    v8_version: str
    samples_ns: dict[str, list[int]]  # per case, and the mix: one duration per timed call
    results: dict[str, str]  # per case: the JSON text of the last result
    engine_samples_ns: dict[str, list[int]] = {}  # the same for the workers' engine, when asked


class _RawV8:
    """One mini-racer context and nothing else: no realm, no runner, no time limit."""

    def __init__(self, memory_mb: int) -> None:
        from bir.evaluator.engine_v8 import init_v8

        init_v8(memory_mb)
        from py_mini_racer import _mini_racer

        self._maker = _mini_racer._make_context()
        self._ctx: Any = self._maker.__enter__()
        self._queue: queue.Queue[Any] = self._ctx._non_cancelable_mr_task_results_queue
        self.version = str(self._ctx.v8_version())

    def eval(self, code: str) -> object:
        """One round trip.

        Raises:
            RuntimeError: the script did not answer within ``EVAL_TIMEOUT_S``.
            py_mini_racer.JSEvalException: the script threw or did not compile.
        """
        ctx = self._ctx
        handle = ctx._python_to_value_handle(code)  # kept alive until the answer arrives
        ctx._dll.mr_eval(ctx._ctx, handle.raw, 0)
        try:
            answer = self._queue.get(timeout=EVAL_TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError(f"a floor script did not answer within {EVAL_TIMEOUT_S:.0f} s") from None
        del handle
        return ctx._value_handle_to_python(answer)


def _caller(engine: _RawV8, fn: str, args: object) -> Callable[[], object]:
    """One in-process call as any caller makes it: the Python arguments encoded to JSON, one script
    that parses them, calls the compiled function and stringifies its result, and the result decoded."""
    encode = msgspec.json.encode
    decode = msgspec.json.decode
    head, tail = f"JSON.stringify({fn}.apply(undefined, JSON.parse(", ")))"

    def call() -> object:
        text = engine.eval(head + encode(encode(args).decode()).decode() + tail)
        return decode(text) if isinstance(text, str) else text

    return call


def measure(request: FloorRequest) -> FloorReply:
    """Time every case, then the mix (every case in turn), after ``warmup`` untimed calls each.

    Raises:
        ValueError: a case names an unknown logic kind.
        RuntimeError: a script did not answer, or a body failed in the workers' engine.
        py_mini_racer.JSEvalException: a body threw or did not compile.
    """
    engine = _RawV8(request.memory_mb)
    calls: list[Callable[[], object]] = []
    for index, case in enumerate(request.cases):
        if case.kind not in PARAMETERS:
            raise ValueError(f"unknown logic kind {case.kind[:60]!r}")
        fn = f"__bench_f{index}"
        engine.eval(f"globalThis.{fn} = function ({PARAMETERS[case.kind]}) {{\n{case.body}\n}}; 0")
        calls.append(_caller(engine, fn, msgspec.json.decode(case.args)))
    samples: dict[str, list[int]] = {}
    results: dict[str, str] = {}
    clock = time.perf_counter_ns
    for case, call in zip(request.cases, calls, strict=True):
        for _ in range(request.warmup):
            call()
        timed: list[int] = []
        value: object = None
        for _ in range(request.calls):
            started = clock()
            value = call()
            timed.append(clock() - started)
        if not request.calls:
            value = call()
        samples[case.name] = timed
        results[case.name] = msgspec.json.encode(value).decode()
    mixed: list[int] = []
    for i in range(request.calls):
        call = calls[i % len(calls)]
        started = clock()
        call()
        mixed.append(clock() - started)
    samples[request.mix] = mixed
    engine_samples = _measure_engine(request) if request.engine else {}
    return FloorReply(v8_version=engine.version, samples_ns=samples, results=results, engine_samples_ns=engine_samples)


def _measure_engine(request: FloorRequest) -> dict[str, list[int]]:
    """The same timings through ``V8Engine.run``, as a worker calls it for a job."""
    from bir.evaluator.engine_v8 import V8Engine
    from bir.evaluator.wire import Job

    engine = V8Engine(request.memory_mb)
    jobs = []
    for index, case in enumerate(request.cases):
        key = hashlib.sha256(f"{case.kind}\0{case.body}".encode()).hexdigest()[:32]
        jobs.append(Job(id=index, kind=case.kind, key=key, body=case.body, args=case.args, timeout_ms=EVAL_TIMEOUT_MS))
    clock = time.perf_counter_ns

    def run(job: Job) -> None:
        outcome = engine.run(job)
        if outcome.settle:
            engine.settle(time.monotonic() + EVAL_TIMEOUT_MS / 1000)
        if not outcome.ok:
            raise RuntimeError(f"{request.cases[job.id].name} failed in the engine: {outcome.message}")

    samples: dict[str, list[int]] = {}
    for case, job in zip(request.cases, jobs, strict=True):
        for _ in range(request.warmup):
            run(job)
        timed: list[int] = []
        for _ in range(request.calls):
            started = clock()
            run(job)
            timed.append(clock() - started)
        samples[case.name] = timed
    mixed: list[int] = []
    for i in range(request.calls):
        started = clock()
        run(jobs[i % len(jobs)])
        mixed.append(clock() - started)
    samples[request.mix] = mixed
    return samples


def read_request() -> FloorRequest:
    """The request on stdin.

    Raises:
        ValueError: it is larger than ``MAX_REQUEST_BYTES``.
        msgspec.DecodeError: it is not a ``FloorRequest``.
    """
    raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    if len(raw) > MAX_REQUEST_BYTES:
        raise ValueError(f"the request is larger than {MAX_REQUEST_BYTES} bytes")
    return msgspec.json.decode(raw, type=FloorRequest)


def main() -> None:
    code = 0
    try:
        reply = measure(read_request())
        sys.stdout.buffer.write(msgspec.json.encode(reply))
        sys.stdout.flush()
    except Exception as exc:  # noqa: BLE001 - the bench reads one line of stderr, never a traceback
        sys.stderr.write(f"bir.evaluator.bench_floor: {type(exc).__name__}: {str(exc)[:500]}\n")
        code = 1
    sys.stderr.flush()
    # mini-racer's threads can hold a normal exit; the answer is already written.
    os._exit(code)


if __name__ == "__main__":
    main()
