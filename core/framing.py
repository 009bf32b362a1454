"""JSON-RPC over stdio, sans I/O: a line splitter and a cheap look at a line's envelope.

MCP's stdio transport is one JSON message per line, split on ``\\n`` only (a ``\\r`` or a
U+2028 inside a line is part of it). The splitter is in the h11 style: bytes go in with
``feed``, lines come out of ``next_line`` until it answers ``NEED_DATA``. A line longer than
the limit is never buffered: the splitter drops it as it arrives and ``next_line`` raises
``LineTooLong`` where it stood, then carries on with the next line.

The relay forwards the original bytes of every line it does not rewrite, so lines come out
exactly as they went in, without their ``\\n``.
"""

from __future__ import annotations

import enum
import json
from collections import deque
from typing import Any, Final, Literal

import msgspec

DEFAULT_MAX_LINE_BYTES: Final = 64 * 1024 * 1024


class NeedData(enum.Enum):
    """The splitter's one sentinel; an enum so that ``is NEED_DATA`` narrows a type."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA
"""What ``next_line`` answers when no whole line is buffered."""


class FramingError(Exception):
    """The peer broke the framing (the peer's mistake, not ours)."""


class LineTooLong(FramingError):
    """A line went past the splitter's limit; its bytes were dropped."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a message line exceeded {limit} bytes and was dropped")
        self.limit = limit


class _Oversized:
    """Placeholder left in the line queue where an over-long line was dropped."""


_OVERSIZED: Final = _Oversized()


class LineSplitter:
    """Split a byte stream into ``\\n``-terminated lines, with a hard size limit per line.

    Raises:
        ValueError: ``max_line_bytes`` is not positive.
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        self._lines: deque[bytes | _Oversized] = deque()
        self._partial = bytearray()
        self._discarding = False  # inside an over-long line: drop until its newline
        self._eof = False

    @property
    def buffered_bytes(self) -> int:
        """Bytes held that are not yet handed out (whole lines and the partial one)."""
        return len(self._partial) + sum(len(x) for x in self._lines if isinstance(x, bytes))

    def feed(self, data: bytes) -> None:
        """Take in bytes read from the peer. ``b""`` means end of stream.

        Raises:
            RuntimeError: bytes fed after end of stream (our mistake).
        """
        if self._eof:
            if data:
                raise RuntimeError("data fed after end of stream")
            return
        if not data:
            self._eof = True
            if self._partial and not self._discarding:
                # A last message without its newline is still a message.
                self._lines.append(bytes(self._partial))
            self._partial.clear()
            self._discarding = False
            return
        start = 0
        end = len(data)
        while start < end:
            newline = data.find(b"\n", start)
            stop = end if newline == -1 else newline
            if self._discarding:
                if newline != -1:
                    self._discarding = False
            elif len(self._partial) + (stop - start) > self.max_line_bytes:
                # Checked before the bytes are buffered: an over-long line never sits in memory.
                self._partial.clear()
                self._lines.append(_OVERSIZED)
                self._discarding = newline == -1
            elif newline == -1:
                self._partial += data[start:stop]
            elif self._partial:
                self._partial += data[start:stop]
                self._lines.append(bytes(self._partial))
                self._partial.clear()
            else:
                self._lines.append(data[start:stop])
            if newline == -1:
                break
            start = newline + 1

    def next_line(self) -> bytes | Literal[NeedData.NEED_DATA]:
        """The next whole line without its ``\\n``, or ``NEED_DATA``.

        Raises:
            LineTooLong: the next line was over the limit and was dropped; call again for the rest.
        """
        if not self._lines:
            return NEED_DATA
        line = self._lines.popleft()
        if isinstance(line, _Oversized):
            raise LineTooLong(self.max_line_bytes)
        return line


# --- a look at the envelope, without re-serialising the line ---------------------------------


RequestId = int | float | str | None


class Envelope(msgspec.Struct, frozen=True):
    """The routing fields of one JSON-RPC message. ``params``/``result``/``error`` stay raw."""

    jsonrpc: str | None = None
    id: int | float | str | msgspec.UnsetType | None = msgspec.UNSET
    method: str | None = None
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET

    @property
    def request_id(self) -> RequestId:
        """The id, as sent (``None`` also for a message without one: see ``has_id``)."""
        return None if isinstance(self.id, msgspec.UnsetType) else self.id

    @property
    def has_id(self) -> bool:
        return self.id is not msgspec.UNSET

    @property
    def is_request(self) -> bool:
        return self.method is not None and self.has_id

    @property
    def is_notification(self) -> bool:
        return self.method is not None and not self.has_id

    @property
    def is_response(self) -> bool:
        return self.method is None and self.has_id

    @property
    def is_error(self) -> bool:
        return self.error is not msgspec.UNSET


_envelope_decoder: Final = msgspec.json.Decoder(Envelope)


def peek(line: bytes) -> Envelope | None:
    """The routing fields of ``line``, or ``None`` when it is not one JSON-RPC object (a batch,
    a blank line, noise) or cannot be read (nested too deeply, a lone surrogate): such a line is
    forwarded untouched."""
    stripped = line.strip()
    if not stripped.startswith(b"{"):
        return None
    try:
        return _envelope_decoder.decode(stripped)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


class _NoId(enum.Enum):
    NO_ID = "NO_ID"


NO_ID: Final = _NoId.NO_ID
"""What ``unreadable_id`` answers when not even the id of a line can be found."""


def unreadable_id(line: bytes) -> RequestId | Literal[_NoId.NO_ID]:
    """The id of a JSON-RPC response ``peek`` could not read (a lone surrogate ``\\ud800`` in a string,
    which the standard library's parser accepts), so its request can fail at once; ``NO_ID`` when there is
    none or the line is nested too deeply for any parser.

    Only called for the rare line ``peek`` refused.
    """
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return NO_ID
    if not isinstance(message, dict) or "method" in message or "id" not in message:
        return NO_ID
    request_id = message["id"]
    if request_id is None or (isinstance(request_id, int | float | str) and not isinstance(request_id, bool)):
        return request_id
    return NO_ID


def deeper_than(value: object, limit: int) -> bool:
    """True when ``value`` (decoded JSON) nests lists and objects more than ``limit`` levels deep.

    Iterative, so a value too deep for a recursive encoder or decoder is measured without one.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def id_key(request_id: RequestId) -> tuple[bool, RequestId]:
    """A dictionary key for a JSON-RPC id that keeps ``1`` and ``"1"`` apart."""
    return (isinstance(request_id, str), request_id)


def decode_raw(raw: msgspec.Raw | msgspec.UnsetType | None) -> Any:
    """Decode a raw field fully (only done for the few messages the proxy reads).

    Raises:
        FramingError: the field is not valid JSON.
    """
    if raw is None or raw is msgspec.UNSET:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise FramingError(f"unreadable JSON field: {exc}") from exc


def encode_message(message: dict[str, Any]) -> bytes:
    """Serialise one message as a line body (no newline)."""
    return msgspec.json.encode(message)
