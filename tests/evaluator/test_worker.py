"""The worker process on its own: its handshake, its frames, and how it refuses a broken peer."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bir.evaluator.wire import HEADER, PROTOCOL_VERSION, Codec, FrameDecoder, FromWorker, Hello, Job, Result
from bir.evaluator.worker import EXIT_PROTOCOL, _heap_verdict


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-I", "-B", "-m", "bir.evaluator.worker", "--engine", "v8", "--memory-mb", "32"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={},
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def _read(process: subprocess.Popen[bytes], codec: Codec, decoder: FrameDecoder) -> FromWorker:
    assert process.stdout is not None
    while (payload := decoder.next_frame()) is None:
        data = os.read(process.stdout.fileno(), 65536)
        assert data, "the worker closed its stdout"
        decoder.feed(data)
    return codec.decode_from_worker(payload)


def _send(process: subprocess.Popen[bytes], data: bytes) -> None:
    assert process.stdin is not None
    process.stdin.write(data)
    process.stdin.flush()


def test_a_worker_says_hello_with_its_protocol_then_answers_jobs_in_order(worker: subprocess.Popen[bytes]) -> None:
    codec, decoder = Codec(), FrameDecoder()
    hello = _read(worker, codec, decoder)
    assert isinstance(hello, Hello)
    assert hello.protocol == PROTOCOL_VERSION
    assert hello.engine == "v8"
    assert hello.pid == worker.pid
    jobs = [
        Job(
            id=i,
            kind="paramsLogic",
            key=f"{i:032x}",
            body=f"return {{n: {i}, p: params.x}}",
            args='[{"x": 7}]',
            timeout_ms=1000,
        )
        for i in range(1, 4)
    ]
    _send(worker, b"".join(codec.encode(job) for job in jobs))
    answers = [_read(worker, codec, decoder) for _ in jobs]
    assert answers == [Result(id=i, ok=True, value=f'{{"n":{i},"p":7}}') for i in range(1, 4)]


def test_a_worker_answers_a_job_whose_frame_arrives_in_pieces_and_one_whose_answer_waits_for_its_promises(
    worker: subprocess.Popen[bytes],
) -> None:
    codec, decoder = Codec(), FrameDecoder()
    assert isinstance(_read(worker, codec, decoder), Hello)
    frame = codec.encode(
        Job(id=1, kind="paramsLogic", key="1" * 32, body="return {a: params.a}", args='[{"a": 2}]', timeout_ms=1000)
    )
    for i in range(0, len(frame), 9):
        _send(worker, frame[i : i + 9])
    assert _read(worker, codec, decoder) == Result(id=1, ok=True, value='{"a":2}')
    # Its answer is not sent from the isolate's thread: the dozing worker thread must be woken for
    # it (were it not, the answer would come only when the job's minute is up).
    body = "const o = {n: 1}; Promise.resolve().then(() => { o.n = 2 }); return o"
    _send(worker, codec.encode(Job(id=2, kind="paramsLogic", key="2" * 32, body=body, args="[{}]", timeout_ms=60_000)))
    assert worker.stdout is not None
    readable, _, _ = select.select([worker.stdout], [], [], 20)
    assert readable, "the answer did not come before the job's own time limit"
    assert _read(worker, codec, decoder) == Result(id=2, ok=True, value='{"n":1}')


def test_a_frame_that_is_not_a_job_makes_the_worker_exit_with_a_protocol_error(
    worker: subprocess.Popen[bytes],
) -> None:
    codec, decoder = Codec(), FrameDecoder()
    assert isinstance(_read(worker, codec, decoder), Hello)
    garbage = b"\xc1not msgpack"
    _send(worker, HEADER.pack(len(garbage)) + garbage)
    assert worker.wait(timeout=10) == EXIT_PROTOCOL


def test_a_worker_exits_when_its_stdin_closes(worker: subprocess.Popen[bytes]) -> None:
    codec, decoder = Codec(), FrameDecoder()
    assert isinstance(_read(worker, codec, decoder), Hello)
    assert worker.stdin is not None
    worker.stdin.close()
    assert worker.wait(timeout=10) == 0


class _Heap:
    """The two readings the heap rule takes from an engine, scripted."""

    def __init__(self, before: int, after: int) -> None:
        self.readings = [before, after]
        self.collected = False

    def heap_used(self) -> int:
        return self.readings[1] if self.collected else self.readings[0]

    def collect(self) -> None:
        self.collected = True


MB = 1024 * 1024


def test_a_heap_that_stays_above_half_the_limit_after_a_collection_retires_the_worker() -> None:
    engine = _Heap(before=40 * MB, after=33 * MB)
    assert _heap_verdict(engine, 64, rss_floor=-(10**12)) == "its heap stays above half the memory limit"
    assert engine.collected


def test_a_heap_that_a_collection_brings_under_half_keeps_the_worker() -> None:
    engine = _Heap(before=40 * MB, after=5 * MB)
    assert _heap_verdict(engine, 64, rss_floor=-(10**12)) is None


def test_the_heap_is_not_asked_while_the_process_has_not_grown() -> None:
    engine = _Heap(before=40 * MB, after=40 * MB)
    assert _heap_verdict(engine, 64, rss_floor=10**12) is None
    assert not engine.collected
