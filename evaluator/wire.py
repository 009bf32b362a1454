"""The evaluator's wire: tagged msgspec structs in length-prefixed MessagePack frames.

A frame is a 4-byte big-endian payload length followed by one MessagePack-encoded message. The codec
is sans-IO in the h11 style: ``FrameDecoder.feed(bytes)`` then ``next_frame()`` until it answers
``None``; the length is checked against a hard maximum *before* anything is buffered for it, so a
lying or corrupt peer cannot make us allocate. One typed decoder per direction, built once.
"""

from __future__ import annotations

import struct
from typing import Final

import msgspec

PROTOCOL_VERSION: Final = 1
HEADER: Final = struct.Struct(">I")
# Large enough for a tool output of several MB plus its parameters; small enough that a corrupt
# length prefix is caught before it costs memory.
MAX_FRAME_BYTES: Final = 32 * 1024 * 1024

# --- supervisor → worker ---------------------------------------------------------------------------


class Job(msgspec.Struct, tag="job", frozen=True):
    id: int
    kind: str
    key: str  # hash of kind and body: the worker's compile-cache key
    body: str
    args: str  # JSON text of the argument list, in the contract's order
    timeout_ms: int


class Shutdown(msgspec.Struct, tag="shutdown", frozen=True):
    pass


ToWorker = Job | Shutdown


# --- worker → supervisor ---------------------------------------------------------------------------


class Hello(msgspec.Struct, tag="hello", frozen=True):
    protocol: int
    pid: int
    engine: str
    engine_version: str
    # Why the engine runs on its library's public API instead of the private surface it prefers, or None.
    fallback: str | None = None
    # Each of the kernel's walls (bir.evaluator.walls) and its state: "up…", "down: why" or "off: why".
    walls: dict[str, str] = {}
    # How long the worker took, in µs, to warm its engine up and to put the walls up (worker.wall_up).
    warm_up_us: int = 0
    walls_us: int = 0


class Result(msgspec.Struct, tag="result", frozen=True):
    id: int
    ok: bool
    value: str | None = None  # JSON text of the result object when ok
    reason: str | None = None  # one of bir.core.errors.REASONS when not ok
    message: str | None = None


class Retire(msgspec.Struct, tag="retire", frozen=True):
    """The worker asks to be replaced after its current job (tainted realm, heap high, limit hit)."""

    why: str


FromWorker = Hello | Result | Retire


class FrameTooLarge(ValueError):
    """A frame's announced length is past the hard maximum (the peer is broken or hostile)."""


class ProtocolError(ValueError):
    """A frame did not decode into a message of the expected direction."""


class FrameDecoder:
    """Bytes in, frame payloads out; no I/O.

    Bytes arrive by ``feed`` (a copy of bytes read elsewhere) or straight into its buffer:
    ``reserve(n)`` answers writable room for at least ``n`` bytes (a ``readv`` into it costs no copy
    and no allocation per read), ``commit(n)`` says how many arrived. One buffer, reused for the
    life of the decoder; it grows only to hold a frame larger than itself, never past the maximum.
    """

    __slots__ = ("_buf", "_end", "_max", "_start")

    def __init__(self, max_frame: int = MAX_FRAME_BYTES, initial: int = 1 << 16) -> None:
        self._buf = bytearray(initial)
        self._start = 0  # the first byte not yet handed out
        self._end = 0  # the end of the bytes received
        self._max = max_frame

    def feed(self, data: bytes) -> None:
        n = len(data)
        self.reserve(n)[:n] = data
        self._end += n

    def reserve(self, n: int) -> memoryview:
        """Writable room for at least ``n`` more bytes, at the end of what is buffered. Release the
        view (or let it go) before the next call on this decoder: the buffer may move."""
        if len(self._buf) - self._end < n:
            held = self._end - self._start
            if held + n > len(self._buf):
                grown = bytearray(max(held + n, 2 * len(self._buf)))
                grown[:held] = memoryview(self._buf)[self._start : self._end]
                self._buf = grown
            else:
                self._buf[:held] = self._buf[self._start : self._end]
            self._start, self._end = 0, held
        return memoryview(self._buf)[self._end :]

    def commit(self, n: int) -> None:
        """``n`` bytes were written into the view ``reserve`` answered."""
        self._end += n

    def wanted(self) -> int:
        """How many more bytes the frame being read needs at least (the header's, when unknown).

        Raises:
            FrameTooLarge: the announced length is past the maximum.
        """
        held = self._end - self._start
        if held < HEADER.size:
            return HEADER.size - held
        return max(HEADER.size + self._length() - held, 0)

    def _length(self) -> int:
        (length,) = HEADER.unpack_from(self._buf, self._start)
        if length > self._max:
            raise FrameTooLarge(f"frame of {length} bytes announced; the limit is {self._max}")
        return int(length)

    def next_view(self) -> memoryview | None:
        """The next complete payload as a view into the buffer (valid until the next call on this
        decoder), or None when more bytes are needed.

        Raises:
            FrameTooLarge: the announced length is past the maximum.
        """
        held = self._end - self._start
        if held < HEADER.size:
            return None
        end = self._start + HEADER.size + self._length()
        if end > self._end:
            return None
        view = memoryview(self._buf)[self._start + HEADER.size : end]
        if end == self._end:
            self._start = self._end = 0  # empty: the next frame starts at the front again
        else:
            self._start = end
        return view

    def next_frame(self) -> bytes | None:
        """The next complete payload, or None when more bytes are needed.

        Raises:
            FrameTooLarge: the announced length is past the maximum.
        """
        view = self.next_view()
        if view is None:
            return None
        with view:
            return bytes(view)

    @property
    def buffered(self) -> int:
        return self._end - self._start


class Codec:
    """Encoders and one typed decoder per direction, built once and reused."""

    __slots__ = ("_dec_from_worker", "_dec_to_worker", "_enc", "_max")

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._enc = msgspec.msgpack.Encoder()
        self._dec_to_worker = msgspec.msgpack.Decoder(ToWorker)
        self._dec_from_worker = msgspec.msgpack.Decoder(FromWorker)
        self._max = max_frame

    def encode(self, message: ToWorker | FromWorker) -> bytes:
        """One frame: header and payload.

        Raises:
            FrameTooLarge: the encoded message is past the maximum.
        """
        buf = bytearray(HEADER.size)
        self._enc.encode_into(message, buf, HEADER.size)
        length = len(buf) - HEADER.size
        if length > self._max:
            raise FrameTooLarge(f"message of {length} bytes; the limit is {self._max}")
        HEADER.pack_into(buf, 0, length)
        return bytes(buf)

    def decode_to_worker(self, payload: bytes | memoryview) -> ToWorker:
        """Raises: ProtocolError: the payload is not a supervisor → worker message."""
        try:
            return self._dec_to_worker.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ProtocolError(f"bad frame from supervisor: {exc}") from None

    def decode_from_worker(self, payload: bytes | memoryview) -> FromWorker:
        """Raises: ProtocolError: the payload is not a worker → supervisor message."""
        try:
            return self._dec_from_worker.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ProtocolError(f"bad frame from worker: {exc}") from None
