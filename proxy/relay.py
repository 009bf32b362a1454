"""The relay core: host ⇄ upstream, byte for byte, with the proxy's few rewrites and its own requests.

Both directions are split into lines (``framing.LineSplitter``) and each line is looked at once
(``framing.peek``); a line that needs no change is written out exactly as it came in. The two id
spaces are kept apart: host request ids are never rewritten (servers reuse id 0, so nothing may
be assumed about them), and the proxy's own requests use string ids ``"bir:<n>"``, whose
responses the relay consumes and never passes to the host (spec §12 point 3).

What the relay changes or adds:

* ``tools/list`` results declare ``__bir_call_id__`` while a control server is known, and host
  ``tools/call`` arguments lose it before the upstream (``bir.proxy.rewrite``).
* Each host ``tools/call`` is reported (``on_step``, never awaited) when its response comes back.
* When the upstream is gone, every host request still waiting, and every one that arrives later,
  is answered with a JSON-RPC error instead of silence.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from bir.core.framing import (
    DEFAULT_MAX_LINE_BYTES,
    NEED_DATA,
    NO_ID,
    Envelope,
    FramingError,
    LineSplitter,
    LineTooLong,
    RequestId,
    decode_raw,
    encode_message,
    id_key,
    peek,
    unreadable_id,
)
from bir.core.log import log_event
from bir.hooks.api import StepReport
from bir.proxy import rewrite

UPSTREAM_EXITED: Final = -32000
OWN_ID_PREFIX: Final = "bir:"
# Host requests the relay tracks at once; the oldest is forgotten past this (it only loses its
# error answer should the upstream die, and its step report).
MAX_PENDING: Final = 4096
_MAX_ERROR_CHARS: Final = 2000
_RECEIVE_BYTES: Final = 256 * 1024
# Where Claude Code puts its tool-use id in a tools/call (FACTS.md §4).
TOOL_USE_ID_META: Final = "claudecode/toolUseId"
# Requests whose _meta tells the session's protocol version (small ones: never a tools/call).
_SESSION_METHODS: Final = frozenset({"initialize", "server/discover", "tools/list", "ping"})
LIST_CHANGED: Final = b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}'
_PROTOCOL_META_KEYS: Final = frozenset(
    {
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientInfo",
        "io.modelcontextprotocol/clientCapabilities",
    }
)


class HostGone(Exception):
    """The host stopped reading our stdout."""


class UpstreamGone(Exception):
    """The upstream exited, or its pipes broke, before it answered."""


class RequestTimedOut(Exception):
    """A request of the proxy's own ran out of time; ``notifications/cancelled`` was sent upstream."""


class UpstreamRequestError(Exception):
    """The upstream answered a request of the proxy's own with a JSON-RPC error."""

    def __init__(self, code: object, message: str) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code = code


@dataclass
class _HostRequest:
    method: str
    request_id: RequestId
    started: float
    tool_name: str | None = None
    arguments: Any = None
    call_id: str | None = None
    tool_use_id: str | None = None
    report: bool = False


@dataclass
class _OwnRequest:
    done: anyio.Event = field(default_factory=anyio.Event)
    envelope: Envelope | None = None
    gone: bool = False
    unreadable: bool = False


UNREADABLE_ANSWER: Final = "the upstream's answer could not be read (not valid JSON, or a lone surrogate in a string)"


def error_response(request_id: RequestId, code: int, message: str) -> bytes:
    """One JSON-RPC error response line body (no newline)."""
    return encode_message(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message[:_MAX_ERROR_CHARS]}}
    )


class Relay:
    """One host session relayed to one upstream.

    ``control_known`` tells whether a control server may inject call ids right now; ``on_step``
    takes each finished host ``tools/call`` (it must not block: it is called on the relay path).
    """

    def __init__(
        self,
        *,
        upstream_in: ByteSendStream,
        host_out: ByteSendStream,
        control_known: Callable[[], bool] = lambda: False,
        on_step: Callable[[StepReport], None] | None = None,
        server_name: str = "upstream",
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._upstream_in = upstream_in
        self._host_out = host_out
        self._control_known = control_known
        self._on_step = on_step
        self._server_name = server_name
        self._max_line_bytes = max_line_bytes
        self._clock = clock
        self._upstream_lock = anyio.Lock()
        self._host_lock = anyio.Lock()
        self._pending: dict[tuple[bool, RequestId], _HostRequest] = {}
        self._own: dict[str, _OwnRequest] = {}
        self._next_own = 0
        self._exit_message: str | None = None
        self._protocol_meta: dict[str, Any] = {}
        # A tools/list the host got while no control server was known lacked the call id's declaration.
        self._listed_without_call_id = False
        self.ready = anyio.Event()
        """Set once the host's session with the upstream is initialized: own requests may go."""
        self.upstream_gone = anyio.Event()

    # -- the two pumps -------------------------------------------------------------------------

    async def pump_host(self, host_in: ByteReceiveStream) -> None:
        """Relay the host's lines upstream until the host closes its end."""
        splitter = LineSplitter(self._max_line_bytes)
        async for line in _lines(host_in, splitter, "host"):
            await self._from_host(line)

    async def pump_upstream(self, upstream_out: ByteReceiveStream) -> None:
        """Relay the upstream's lines to the host until the upstream closes its end.

        Raises:
            HostGone: the host stopped reading.
        """
        splitter = LineSplitter(self._max_line_bytes)
        try:
            async for line in _lines(upstream_out, splitter, "upstream"):
                await self._from_upstream(line)
        finally:
            self._mark_upstream_gone()

    async def fail_pending(self, message: str) -> None:
        """Answer every host request still waiting with a JSON-RPC error; later ones get it at once.

        Raises:
            HostGone: the host stopped reading.
        """
        self._exit_message = message
        self._mark_upstream_gone()
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            self._finish_step(entry, None, message)
            await self._send_host(error_response(entry.request_id, UPSTREAM_EXITED, message))

    # -- the proxy's own requests ----------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any:
        """Send one request of the proxy's own upstream (id ``"bir:<n>"``) and return its result.

        On timeout, ``notifications/cancelled`` goes upstream for it before this raises.

        Raises:
            RequestTimedOut: no answer within ``timeout_s``.
            UpstreamRequestError: the upstream answered with a JSON-RPC error.
            UpstreamGone: the upstream is gone, before or while it was asked.
        """
        if self.upstream_gone.is_set():
            raise UpstreamGone("the upstream has exited")
        self._next_own += 1
        request_id = f"{OWN_ID_PREFIX}{self._next_own}"
        own = _OwnRequest()
        self._own[request_id] = own
        try:
            if self._protocol_meta:
                params = {**params, "_meta": {**_as_dict(params.get("_meta")), **self._protocol_meta}}
            line = encode_message({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            if not await self._send_upstream(line):
                raise UpstreamGone("the upstream's stdin is closed")
            with anyio.move_on_after(max(0.0, timeout_s)):
                await own.done.wait()
            if not own.done.is_set():
                await self._send_upstream(
                    encode_message(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/cancelled",
                            "params": {"requestId": request_id, "reason": "bir-proxy: the step's time ran out"},
                        }
                    )
                )
                log_event("proxy.own_request_cancelled", request_id=request_id, method=method)
                raise RequestTimedOut(f"no answer within {round(timeout_s * 1000)} ms; cancelled upstream")
            if own.unreadable:
                raise UpstreamRequestError(None, UNREADABLE_ANSWER)
            if own.gone or own.envelope is None:
                raise UpstreamGone("the upstream exited before it answered")
            if own.envelope.is_error:
                error = _as_dict(decode_raw(own.envelope.error))
                raise UpstreamRequestError(error.get("code"), str(error.get("message", "error")))
            return decode_raw(own.envelope.result)
        finally:
            self._own.pop(request_id, None)

    # -- host → upstream -----------------------------------------------------------------------

    async def _from_host(self, line: bytes) -> None:
        envelope = peek(line)
        if envelope is None:
            await self._send_upstream(line)
            return
        if envelope.is_notification:
            self._note_host_notification(envelope)
            await self._send_upstream(line)
            return
        if not envelope.is_request:
            await self._send_upstream(line)  # the host answering a request of the upstream's
            return
        assert envelope.method is not None
        request_id = envelope.request_id
        if self._exit_message is not None:
            await self._send_host(error_response(request_id, UPSTREAM_EXITED, self._exit_message))
            return
        entry = _HostRequest(envelope.method, request_id, self._clock())
        if envelope.method in _SESSION_METHODS:
            self._note_protocol_meta(envelope)
        if envelope.method == "tools/call":
            line = self._prepare_tools_call(line, envelope, entry)
        self._remember(entry)
        if not await self._send_upstream(line):
            log_event("proxy.upstream_write_failed", method=envelope.method)

    def _prepare_tools_call(self, line: bytes, envelope: Envelope, entry: _HostRequest) -> bytes:
        stripped = rewrite.strip_tools_call_request(line)
        report = self._control_known()
        if stripped is not None:
            line, entry.call_id, entry.arguments = stripped
            report = True
        elif report:
            try:
                entry.arguments = _as_dict(decode_raw(envelope.params)).get("arguments")
            except FramingError:
                report = False
        if report:
            try:
                params = _as_dict(decode_raw(envelope.params))
            except FramingError:
                params = {}
            name = params.get("name")
            entry.tool_name = name if isinstance(name, str) else None
            entry.report = entry.tool_name is not None
            # The host's own id for the call (FACTS.md §4): it tells the control server which session's
            # PreToolUse this call belongs to, and so which session this proxy serves.
            host_id = _as_dict(params.get("_meta")).get(TOOL_USE_ID_META)
            entry.tool_use_id = host_id if isinstance(host_id, str) and 0 < len(host_id) <= 256 else None
        return line

    def _note_protocol_meta(self, envelope: Envelope) -> None:
        # A 2026-07-28 ("modern") session has no handshake: every request carries the protocol
        # version and client identity in _meta. The proxy's own requests copy the host's.
        try:
            meta = _as_dict(_as_dict(decode_raw(envelope.params)).get("_meta"))
        except FramingError:
            return
        found = {k: v for k, v in meta.items() if k in _PROTOCOL_META_KEYS}
        if found:
            self._protocol_meta = found

    def _note_host_notification(self, envelope: Envelope) -> None:
        if envelope.method == "notifications/initialized":
            self.ready.set()
        elif envelope.method == "notifications/cancelled":
            try:
                params = _as_dict(decode_raw(envelope.params))
            except FramingError:
                return
            request_id = params.get("requestId")
            if isinstance(request_id, int | float | str):
                entry = self._pending.pop(id_key(request_id), None)
                if entry is not None:
                    self._finish_step(entry, None, "cancelled by the host")

    def _remember(self, entry: _HostRequest) -> None:
        key = id_key(entry.request_id)
        self._pending.pop(key, None)  # a reused id replaces the old entry (and moves it to the end)
        self._pending[key] = entry
        if len(self._pending) > MAX_PENDING:
            oldest = next(iter(self._pending))
            dropped = self._pending.pop(oldest)
            log_event("proxy.pending_dropped", method=dropped.method, pending=MAX_PENDING)

    # -- upstream → host -----------------------------------------------------------------------

    async def _from_upstream(self, line: bytes) -> None:
        envelope = peek(line)
        if envelope is None:
            await self._from_upstream_unreadable(line)
            return
        if not envelope.is_response:
            await self._send_host(line)
            return
        request_id = envelope.request_id
        key = id_key(request_id)
        entry = self._pending.pop(key, None)
        if entry is None:
            if isinstance(request_id, str) and request_id.startswith(OWN_ID_PREFIX):
                self._settle_own(request_id, envelope)
                return
            await self._send_host(line)  # an answer to something we no longer track: still the host's
            return
        if not envelope.is_error and (entry.method != "initialize" or self._protocol_meta):
            # Past initialize, the host's notifications/initialized sets it; a modern session
            # (no handshake) is ready once anything succeeded.
            self.ready.set()
        if entry.method == "tools/list" and not envelope.is_error:
            if self._control_known():
                line = rewrite.rewrite_tools_list_response(line) or line
                self._listed_without_call_id = False
            else:
                self._listed_without_call_id = True
        # The host gets its answer first; the step report (a decode of the whole result) comes after.
        await self._send_host(line)
        if entry.report:
            if envelope.is_error:
                error = _as_dict(_decode_quietly(envelope.error))
                self._finish_step(entry, None, str(error.get("message", "error")))
            else:
                self._finish_step(entry, _decode_quietly(envelope.result), None)

    async def control_found(self) -> None:
        """A control server is known now: a host that listed the tools before it was asks again
        (``notifications/tools/list_changed``, FACTS.md §4), so the call id a pin adds is declared."""
        if not self._listed_without_call_id:
            return
        self._listed_without_call_id = False
        log_event("proxy.tools_changed", server=self._server_name, why="a control server is known: the call id")
        await self._send_host(LIST_CHANGED)

    async def _from_upstream_unreadable(self, line: bytes) -> None:
        """A line ``peek`` cannot read: the host gets it untouched, and the request it answers (when its
        id can be found) fails now instead of at its deadline."""
        request_id = unreadable_id(line)
        if request_id is NO_ID:
            await self._send_host(line)
            return
        if isinstance(request_id, str) and request_id.startswith(OWN_ID_PREFIX):
            own = self._own.get(request_id)
            if own is not None:
                own.unreadable = True
                own.done.set()
            log_event("proxy.answer_unreadable", request_id=request_id)
            return
        entry = self._pending.pop(id_key(request_id), None)
        await self._send_host(line)
        if entry is not None:
            log_event("proxy.answer_unreadable", method=entry.method)
            self._finish_step(entry, None, UNREADABLE_ANSWER)

    def _settle_own(self, request_id: str, envelope: Envelope) -> None:
        own = self._own.get(request_id)
        if own is None:
            return  # a late answer to a request we gave up on: consumed, never the host's
        own.envelope = envelope
        own.done.set()

    def _finish_step(self, entry: _HostRequest, result: Any, error: str | None) -> None:
        if not entry.report or self._on_step is None or entry.tool_name is None:
            return
        entry.report = False
        report = StepReport(
            server_name=self._server_name,
            tool_name=entry.tool_name,
            tool_use_id=entry.tool_use_id,
            arguments=entry.arguments,
            result=result,
            error=None if error is None else error[:_MAX_ERROR_CHARS],
            call_id=entry.call_id,
            duration_ms=round((self._clock() - entry.started) * 1000, 3),
        )
        try:
            self._on_step(report)
        except Exception as exc:  # noqa: BLE001 - reporting never takes the relay down
            log_event("proxy.step_report_failed", error=f"{type(exc).__name__}: {exc}")

    def _mark_upstream_gone(self) -> None:
        self.upstream_gone.set()
        for own in self._own.values():
            own.gone = True
            own.done.set()

    # -- writers -------------------------------------------------------------------------------

    async def _send_upstream(self, line: bytes) -> bool:
        """Write one line upstream; False when the upstream's stdin is gone (its exit follows)."""
        async with self._upstream_lock:
            try:
                await self._upstream_in.send(line + b"\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return False
        return True

    async def _send_host(self, line: bytes) -> None:
        async with self._host_lock:
            try:
                await self._host_out.send(line + b"\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise HostGone("the host closed our stdout") from exc


async def _lines(stream: ByteReceiveStream, splitter: LineSplitter, side: str) -> AsyncIterator[bytes]:
    """The stream's lines until it ends (a last line without its newline included); an over-long
    line is logged and skipped."""
    ended = False
    while True:
        try:
            line = splitter.next_line()
        except LineTooLong as exc:
            log_event("proxy.line_dropped", side=side, limit=exc.limit)
            continue
        if line is not NEED_DATA:
            yield line
            continue
        if ended:
            return
        try:
            data = await stream.receive(_RECEIVE_BYTES)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            data = b""
        ended = not data
        splitter.feed(data)


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _decode_quietly(raw: Any) -> Any:
    try:
        return decode_raw(raw)
    except FramingError:
        return None
