"""The JSON-RPC line splitter and envelope look, driven by tables of bytes: no sockets."""

from __future__ import annotations

import msgspec
import pytest

from bir.core.framing import (
    NEED_DATA,
    LineSplitter,
    LineTooLong,
    decode_raw,
    id_key,
    peek,
)

_TOO_LONG = "TOO_LONG"


def _drain(splitter: LineSplitter) -> list[bytes | str]:
    out: list[bytes | str] = []
    while True:
        try:
            line = splitter.next_line()
        except LineTooLong:
            out.append(_TOO_LONG)
            continue
        if line is NEED_DATA:
            return out
        out.append(line)


SPLIT_CASES: list[tuple[str, list[bytes], list[bytes | str]]] = [
    ("one line in one chunk", [b'{"a":1}\n'], [b'{"a":1}']),
    ("two lines in one chunk", [b"a\nb\n"], [b"a", b"b"]),
    ("a line split across chunks", [b'{"a"', b":1", b"}\n"], [b'{"a":1}']),
    ("no newline yet means no line", [b"abc"], []),
    ("carriage returns stay in the line", [b"a\r\nb\r\n"], [b"a\r", b"b\r"]),
    ("a U+2028 inside a line does not split it", ["x\u2028y\n".encode()], ["x\u2028y".encode()]),
    ("blank lines are lines", [b"\n\n"], [b"", b""]),
    ("a newline alone finishes a buffered line", [b"abc", b"\n"], [b"abc"]),
    ("bytes after the last newline wait", [b"a\nbc"], [b"a"]),
    ("invalid utf-8 passes through untouched", [b"\xff\xfe\n"], [b"\xff\xfe"]),
]


@pytest.mark.parametrize(("chunks", "expected"), [c[1:] for c in SPLIT_CASES], ids=[c[0] for c in SPLIT_CASES])
def test_the_splitter_hands_out_exact_lines_split_on_newline_only(
    chunks: list[bytes], expected: list[bytes | str]
) -> None:
    splitter = LineSplitter(1024)
    out: list[bytes | str] = []
    for chunk in chunks:
        splitter.feed(chunk)
        out.extend(_drain(splitter))
    assert out == expected


LIMIT_CASES: list[tuple[str, list[bytes], list[bytes | str]]] = [
    ("a line at the limit passes", [b"12345678\n"], [b"12345678"]),
    ("a line past the limit in one chunk is dropped", [b"123456789\nok\n"], [_TOO_LONG, b"ok"]),
    ("a line growing past the limit is dropped", [b"12345", b"6789", b"abc\nok\n"], [_TOO_LONG, b"ok"]),
    ("a newline ends the dropped line", [b"123456789", b"\n", b"ok\n"], [_TOO_LONG, b"ok"]),
    ("lines before the long one are kept", [b"a\n123456789\nb\n"], [b"a", _TOO_LONG, b"b"]),
]


@pytest.mark.parametrize(("chunks", "expected"), [c[1:] for c in LIMIT_CASES], ids=[c[0] for c in LIMIT_CASES])
def test_a_line_past_the_limit_raises_once_and_the_stream_carries_on(
    chunks: list[bytes], expected: list[bytes | str]
) -> None:
    splitter = LineSplitter(8)
    out: list[bytes | str] = []
    for chunk in chunks:
        splitter.feed(chunk)
        out.extend(_drain(splitter))
    assert out == expected


def test_an_over_long_line_is_never_buffered() -> None:
    splitter = LineSplitter(1000)
    for _ in range(50):
        splitter.feed(b"x" * 999)
        assert splitter.buffered_bytes < 1000
    splitter.feed(b"\nnext\n")
    assert _drain(splitter) == [_TOO_LONG, b"next"]


def test_end_of_stream_hands_out_a_last_line_without_its_newline() -> None:
    splitter = LineSplitter(64)
    splitter.feed(b'a\n{"last":true}')
    splitter.feed(b"")
    assert _drain(splitter) == [b"a", b'{"last":true}']


def test_end_of_stream_inside_a_dropped_line_hands_out_nothing_more() -> None:
    splitter = LineSplitter(4)
    splitter.feed(b"123456")
    splitter.feed(b"")
    assert _drain(splitter) == [_TOO_LONG]


def test_feeding_after_end_of_stream_is_our_mistake() -> None:
    splitter = LineSplitter(64)
    splitter.feed(b"")
    with pytest.raises(RuntimeError):
        splitter.feed(b"more")


def test_a_non_positive_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_line_bytes"):
        LineSplitter(0)


def test_a_large_message_in_small_chunks_comes_out_whole() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"result":"' + b"y" * 2_000_000 + b'"}'
    splitter = LineSplitter()
    for start in range(0, len(body), 65536):
        splitter.feed(body[start : start + 65536])
    splitter.feed(b"\n")
    assert _drain(splitter) == [body]


PEEK_CASES: list[tuple[str, bytes, dict[str, object] | None]] = [
    (
        "a request",
        b'{"jsonrpc":"2.0","id":0,"method":"tools/list"}',
        {"is_request": True, "request_id": 0, "method": "tools/list"},
    ),
    (
        "a notification has no id at all",
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        {"is_notification": True, "has_id": False},
    ),
    ("a response", b'{"jsonrpc":"2.0","id":"bir:3","result":{}}', {"is_response": True, "request_id": "bir:3"}),
    ("an error response", b'{"jsonrpc":"2.0","id":7,"error":{"code":-1}}', {"is_response": True, "is_error": True}),
    ("a null id is an id", b'{"jsonrpc":"2.0","id":null,"error":{"code":-1}}', {"has_id": True, "request_id": None}),
    ("leading whitespace is fine", b'  {"id":1,"method":"ping"}', {"is_request": True}),
    ("a batch is not looked into", b'[{"id":1,"method":"ping"}]', None),
    ("noise is not a message", b"Starting server...", None),
    ("broken json is not a message", b'{"id":1,', None),
    ("an id of the wrong type is not a message", b'{"id":[1],"method":"x"}', None),
]


@pytest.mark.parametrize(("line", "expected"), [c[1:] for c in PEEK_CASES], ids=[c[0] for c in PEEK_CASES])
def test_peek_reads_the_routing_fields_of_a_line(line: bytes, expected: dict[str, object] | None) -> None:
    envelope = peek(line)
    if expected is None:
        assert envelope is None
        return
    assert envelope is not None
    for name, value in expected.items():
        assert getattr(envelope, name) == value, name


def test_peek_leaves_params_undecoded_until_asked() -> None:
    envelope = peek(b'{"id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x"}}}')
    assert envelope is not None
    assert isinstance(envelope.params, msgspec.Raw)
    assert decode_raw(envelope.params) == {"name": "echo", "arguments": {"m": "x"}}


def test_ids_one_and_string_one_are_different_keys() -> None:
    assert id_key(1) != id_key("1")
    assert id_key(0) == id_key(0)
