"""The frame codec, driven with bytes and messages only: no pipes, no processes."""

from __future__ import annotations

import pytest

from bir.evaluator.wire import (
    HEADER,
    Codec,
    FrameDecoder,
    FrameTooLarge,
    Hello,
    Job,
    ProtocolError,
    Result,
    Retire,
    Shutdown,
)


def _job(i: int = 1) -> Job:
    return Job(id=i, kind="paramsLogic", key="0" * 32, body="return {};", args="[{}]", timeout_ms=1000)


def test_a_message_round_trips_through_one_frame() -> None:
    codec = Codec()
    decoder = FrameDecoder()
    decoder.feed(codec.encode(_job()))
    payload = decoder.next_frame()
    assert payload is not None
    assert codec.decode_to_worker(payload) == _job()
    assert decoder.next_frame() is None


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 64])
def test_a_frame_split_across_reads_is_reassembled(chunk: int) -> None:
    codec = Codec()
    data = codec.encode(Result(id=7, ok=True, value='{"a":1}')) + codec.encode(Retire(why="x"))
    decoder = FrameDecoder()
    out = []
    for i in range(0, len(data), chunk):
        decoder.feed(data[i : i + chunk])
        while (payload := decoder.next_frame()) is not None:
            out.append(codec.decode_from_worker(payload))
    assert out == [Result(id=7, ok=True, value='{"a":1}'), Retire(why="x")]
    assert decoder.buffered == 0


def test_several_frames_in_one_read_come_out_in_order() -> None:
    codec = Codec()
    decoder = FrameDecoder()
    decoder.feed(b"".join(codec.encode(_job(i)) for i in range(5)) + codec.encode(Shutdown()))
    messages = []
    while (payload := decoder.next_frame()) is not None:
        messages.append(codec.decode_to_worker(payload))
    assert messages == [*[_job(i) for i in range(5)], Shutdown()]


def test_an_announced_length_past_the_maximum_is_refused_before_buffering() -> None:
    decoder = FrameDecoder(max_frame=1024)
    decoder.feed(HEADER.pack(1025))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_a_message_past_the_maximum_is_refused_when_encoded() -> None:
    codec = Codec(max_frame=100)
    with pytest.raises(FrameTooLarge):
        codec.encode(Job(id=1, kind="paramsLogic", key="0" * 32, body="x" * 200, args="[]", timeout_ms=1))


def test_a_payload_of_the_wrong_direction_is_a_protocol_error() -> None:
    codec = Codec()
    payload = codec.encode(Hello(protocol=1, pid=1, engine="v8", engine_version="x"))[HEADER.size :]
    with pytest.raises(ProtocolError):
        codec.decode_to_worker(payload)
    with pytest.raises(ProtocolError):
        codec.decode_from_worker(b"\xc1garbage")


def test_bytes_read_straight_into_the_buffer_come_out_as_the_same_frames() -> None:
    codec = Codec()
    data = b"".join(codec.encode(_job(i)) for i in range(3))
    decoder = FrameDecoder(initial=16)
    out = []
    position = 0
    while position < len(data):
        assert decoder.wanted() > 0
        room = decoder.reserve(7)
        n = min(len(room), len(data) - position)
        room[:n] = data[position : position + n]
        room.release()
        decoder.commit(n)
        position += n
        while (payload := decoder.next_view()) is not None:
            with payload:
                out.append(codec.decode_to_worker(payload))
    assert out == [_job(i) for i in range(3)]
    assert decoder.buffered == 0


def test_a_frame_larger_than_the_buffer_grows_it_and_a_held_view_keeps_its_bytes() -> None:
    codec = Codec()
    big = Job(id=9, kind="paramsLogic", key="0" * 32, body="x" * 5000, args="[]", timeout_ms=1)
    decoder = FrameDecoder(initial=64)
    decoder.feed(codec.encode(_job(1)) + codec.encode(big)[:10])
    first = decoder.next_view()
    assert first is not None
    decoder.feed(codec.encode(big)[10:])
    # The first frame's view still reads its own bytes: growing never moves them under it.
    assert codec.decode_to_worker(first) == _job(1)
    second = decoder.next_frame()
    assert second is not None
    assert codec.decode_to_worker(second) == big
    assert decoder.wanted() == HEADER.size


def test_an_announced_length_past_the_maximum_is_refused_before_reading_the_rest() -> None:
    decoder = FrameDecoder(max_frame=1024)
    decoder.feed(HEADER.pack(1025))
    with pytest.raises(FrameTooLarge):
        decoder.wanted()
