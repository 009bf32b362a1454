"""An evaluator worker process: ``python -I -B -m bir.evaluator.worker --engine v8 --memory-mb N``.

It reads ``Job`` frames on stdin and answers ``Result`` frames on stdout, one job at a time. The
protocol descriptor is a private copy of fd 1; fd 1 itself is pointed at stderr, so nothing the
engine or Python prints can corrupt a frame. The worker dies with its parent (``PR_SET_PDEATHSIG``,
and EOF on stdin), refuses core dumps and file writes, and exits rather than serve from a realm it
could not restore.

Once its engine is up and before its first job, it puts up the kernel's walls on itself
(``wall_up``: ``bir.evaluator.walls``) unless ``--walls off``; from then on it can open no file, so it
first runs a few warm-up jobs through the engine, which load every module and touch every file (the
time zone) a job's code paths need. Its ``Hello`` says which walls are up.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from typing import Final

from bir.evaluator import walls
from bir.evaluator.engine import Engine, Outcome, Wedged, bounded, timeout_message
from bir.evaluator.wire import (
    PROTOCOL_VERSION,
    Codec,
    FrameDecoder,
    FromWorker,
    Hello,
    Job,
    Result,
    Retire,
    Shutdown,
)

READ_CHUNK: Final = 1 << 16
# Time a body's queued work may take past the job's own limit before the worker gives up on it.
SETTLE_SLACK_S: Final = 0.1
HEAP_CHECK_EVERY: Final = 4
EXIT_WEDGED: Final = 3
EXIT_PROTOCOL: Final = 4
WEDGED: Final = "the isolate did not stop when told to"
_PAGE: Final = resource.getpagesize()


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    # The parent may have died before prctl took effect.
    if parent_pid and os.getppid() != parent_pid:
        os._exit(0)


def _harden() -> None:
    # No RLIMIT_AS: V8 reserves far more address space than it uses and breaks under it.
    for limit, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, 0)):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(limit, (value, value))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when a worker ends


class _Channel:
    """Blocking frame I/O on the worker's private descriptors."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._codec = Codec()
        self._decoder = FrameDecoder()

    @property
    def read_fd(self) -> int:
        return self._read_fd

    def has_bytes(self) -> bool:
        """Whether bytes of a next message are already read (waiting on the descriptor would miss them)."""
        return self._decoder.buffered > 0

    def send(self, message: FromWorker) -> None:
        view = memoryview(self._codec.encode(message))
        while view:
            written = os.write(self._write_fd, view)
            view = view[written:]

    def receive(self) -> Job | Shutdown | None:
        """The next message, or None at EOF."""
        decoder = self._decoder
        while True:
            payload = decoder.next_view()
            if payload is not None:
                with payload:
                    return self._codec.decode_to_worker(payload)
            # Straight into the decoder's reused buffer: a fresh read buffer per job would cost an
            # allocation (an mmap and munmap, with its TLB shootdown, for a large one) every time.
            room = decoder.reserve(max(decoder.wanted(), READ_CHUNK))
            with room:
                n = os.readv(self._read_fd, [room])
            if not n:
                return None
            decoder.commit(n)


def _make_engine(name: str, memory_mb: int, surface: str = "auto") -> Engine:
    if name == "quickjs":
        from bir.evaluator.engine_quickjs import make_quickjs_engine

        return make_quickjs_engine(memory_mb, surface)
    from bir.evaluator.engine_v8_choice import make_v8_engine

    return make_v8_engine(memory_mb, surface)


def serve(channel: _Channel, engine: Engine, memory_mb: int) -> int:
    jobs = 0
    rss_floor = _rss_bytes()
    while True:
        message = channel.receive()
        if message is None or isinstance(message, Shutdown):
            return 0
        started = time.monotonic()
        try:
            outcome = engine.run(message)
        except Wedged:
            return _wedged(channel, message)
        except Exception as exc:  # noqa: BLE001 - an engine fault is this job's crash, not the pool's
            outcome = Outcome(
                ok=False, reason="crashed", message=bounded(f"the engine failed: {exc}"), retire="engine fault"
            )
        retire = outcome.retire
        if outcome.settle:
            # The job may have queued work (promise callbacks) that runs after it: its answer waits
            # until that work is done and undone, and is a timeout if it does not end in time.
            try:
                why = engine.settle(max(started + message.timeout_ms / 1000.0, time.monotonic() + SETTLE_SLACK_S))
            except Wedged:
                return _wedged(channel, message)
            retire = retire or why or None
        if retire:
            # Before the answer, so that the pool never hands this worker another job.
            channel.send(Retire(why=retire))
        if not outcome.sent:
            channel.send(_result(message.id, outcome))
        jobs += 1
        if not retire and jobs % HEAP_CHECK_EVERY == 0:
            heap = _heap_verdict(engine, memory_mb, rss_floor)
            if heap:
                channel.send(Retire(why=heap))


def _wedged(channel: _Channel, job: Job) -> int:
    """The isolate did not stop: the job is a timeout, and the worker goes."""
    channel.send(Retire(why=WEDGED))
    channel.send(Result(id=job.id, ok=False, reason="timeout", message=timeout_message(job.kind, job.timeout_ms)))
    return EXIT_WEDGED


def _result(job_id: int, outcome: Outcome) -> Result:
    return Result(id=job_id, ok=outcome.ok, value=outcome.value, reason=outcome.reason, message=outcome.message)


_statm_fd: int | None = None


def _rss_bytes() -> int:
    # The heap check runs every few jobs, now in the path of the next one: one pread on a
    # descriptor kept open instead of an open, a read and a close.
    global _statm_fd
    try:
        if _statm_fd is None:
            _statm_fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(_statm_fd, 256, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _heap_verdict(engine: object, memory_mb: int, rss_floor: int) -> str | None:
    """Asking V8 for its heap costs a third of a millisecond, so the cheap RSS reading decides
    whether to ask at all."""
    heap_used = getattr(engine, "heap_used", None)
    collect = getattr(engine, "collect", None)
    if heap_used is None or collect is None:
        return None
    half = memory_mb * 1024 * 1024 // 2
    if _rss_bytes() - rss_floor <= half:
        return None
    if heap_used() <= half:
        return None
    collect()
    if heap_used() > half:
        return "its heap stays above half the memory limit"
    return None


# Run before the walls go up: each path a job takes (an answer, a throw, a compile error, a refused
# result; dates and their time zone, Intl, regular expressions, JSON) loads what it needs now.
WARM_UP: Final = (
    "return {d: String(new Date(0)) + new Date(0).getTimezoneOffset() + new Date(0).toLocaleString(),"
    " i: typeof Intl === 'undefined' ? '' : new Intl.DateTimeFormat().resolvedOptions().timeZone"
    " + new Intl.NumberFormat('en').format(1.5) + 'a'.localeCompare('b'),"
    " r: /(\\d+)-\\w/u.exec('12-x')[1], j: JSON.parse(JSON.stringify({a: ['\u00e9']})).a[0]}",
    "throw new TypeError('warm-up')",
    "return {",
    "return [1]",
)


def wall_up(engine: Engine, *, enabled: bool = True, spent: dict[str, int] | None = None) -> dict[str, str]:
    """Warm the engine up, then put the kernel's walls up on this process (``walls.raise_walls``), on
    every thread the engine has. Answers each wall's state; ``spent`` gets the µs each step took. The
    worker calls this once its engine is up and before its first job; a test applies the very same
    function, then acts as an escaped body."""
    started = time.perf_counter_ns()
    _rss_bytes()  # its descriptor opens now: no file can be opened once the walls are up
    for i, body in enumerate(WARM_UP):
        # A random key, as a real one is: a fixed one could be a real body's key, cached with this body.
        job = Job(id=-1 - i, kind="paramsLogic", key=secrets.token_hex(16), body=body, args="[{}]", timeout_ms=10_000)
        if engine.run(job).settle:
            engine.settle(time.monotonic() + 10.0)
    warm = time.perf_counter_ns()
    if not enabled:
        off = "off: --walls off (BIR_LOGIC_WALLS=0)"
        state = {"no_new_privs": off, "landlock": off, "seccomp": off}
    else:
        runners = getattr(engine, "thread_runners", None)
        readable = getattr(engine, "readable", ())
        state = walls.raise_walls(runners() if runners is not None else (), readable=readable)
    if spent is not None:
        spent["warm_up_us"] = (warm - started) // 1000
        spent["walls_us"] = (time.perf_counter_ns() - warm) // 1000
    return state


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bir.evaluator.worker")
    parser.add_argument("--engine", choices=("v8", "quickjs"), default="v8")
    parser.add_argument("--memory-mb", type=int, default=64)
    parser.add_argument("--parent-pid", type=int, default=0)
    # "public" forces the engine's fallback onto its library's public API (BIR_LOGIC_ENGINE_SURFACE, for tests).
    parser.add_argument("--surface", choices=("auto", "public"), default="auto")
    parser.add_argument("--walls", choices=("on", "off"), default="on")
    args = parser.parse_args(argv)

    _die_with_parent(args.parent_pid)
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    channel = _Channel(0, protocol_out)
    engine = _make_engine(args.engine, args.memory_mb, args.surface)
    _harden()
    spent: dict[str, int] = {}
    state = wall_up(engine, enabled=args.walls == "on", spent=spent)
    answer_early = getattr(engine, "answer_early", None)
    if answer_early is not None:
        # A plain answer leaves from the isolate's thread the moment the engine call returns.
        answer_early(
            lambda job_id, o: channel.send(
                Result(id=job_id, ok=o.ok, value=o.value, reason=o.reason, message=o.message)
            ),
            inbox_fd=channel.read_fd,
            inbox_ready=channel.has_bytes,
        )
    channel.send(
        Hello(
            protocol=PROTOCOL_VERSION,
            pid=os.getpid(),
            engine=engine.name,
            engine_version=engine.version,
            fallback=getattr(engine, "fallback", None),
            walls=state,
            warm_up_us=spent["warm_up_us"],
            walls_us=spent["walls_us"],
        )
    )
    try:
        code = serve(channel, engine, args.memory_mb)
    except (BrokenPipeError, ConnectionResetError):
        code = 0
    except Exception as exc:  # noqa: BLE001 - a protocol fault: say so on stderr, then exit
        sys.stderr.write(f"bir.evaluator.worker: {type(exc).__name__}: {bounded(str(exc), 500)}\n")
        code = EXIT_PROTOCOL
    sys.stderr.flush()
    # The isolate's thread may still be busy (a wedged body): do not wait for it at exit.
    os._exit(code)


if __name__ == "__main__":
    main()
