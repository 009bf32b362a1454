"""The control server's connections: none a local process can hold to starve the others (issue 16 item 2).

uvicorn bounds a connection's idle time only *between* requests (``timeout_keep_alive``, armed when a
response completes and cancelled by any byte received), and its ``limit_concurrency`` counts idle
connections too: 515 connections that never send a byte made every request, with the token or
without, answer 503 for as long as they stayed open. So here:

- a request must arrive whole (headers and body) within ``REQUEST_READ_S`` of the connection opening,
  or of the first byte after a keep-alive wait; past that the connection is closed, however slowly it
  trickles bytes;
- no concurrency limit answers 503: a connection that has not yet shown the bearer token is
  *untrusted*, and past ``MAX_UNTRUSTED`` of them the oldest is closed to make room, so they can never
  take the place of a hook's or a proxy's connection (once a request on it passed the token check, the
  route guard marks it trusted);
- uvicorn's keep-alive wait stays, at ``KEEP_ALIVE_S``.

The protocol is uvicorn's h11 one with those hooks; h11 bounds the size of a request's head itself.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from bir.core.log import log_event

REQUEST_READ_S: Final = 5.0
KEEP_ALIVE_S: Final = 5
MAX_UNTRUSTED: Final = 256
# Closed connections are logged as counts, at most this often: a flood must not become a flood of lines.
_LOG_EVERY_S: Final = 5.0

Peer = tuple[str, int]


class ConnectionBook:
    """The open connections of one server that have not shown the token yet, oldest first."""

    def __init__(self, max_untrusted: int = MAX_UNTRUSTED) -> None:
        self.max_untrusted = max_untrusted
        self._untrusted: OrderedDict[Peer, BoundedH11] = OrderedDict()
        self.dropped: Counter[str] = Counter()
        self._unlogged: Counter[str] = Counter()
        self._logged_at = 0.0

    @property
    def untrusted(self) -> int:
        return len(self._untrusted)

    def opened(self, peer: Peer | None, protocol: BoundedH11) -> None:
        if peer is None:
            return
        self._untrusted[peer] = protocol
        while len(self._untrusted) > self.max_untrusted:
            _, oldest = self._untrusted.popitem(last=False)
            oldest.drop("evicted")

    def trust(self, peer: Peer | None) -> None:
        """A request on the connection from ``peer`` showed the token: it is never evicted."""
        if peer is not None:
            self._untrusted.pop(peer, None)

    def closed(self, peer: Peer | None) -> None:
        if peer is not None:
            self._untrusted.pop(peer, None)

    def note_dropped(self, why: str) -> None:
        """Count a connection the server closed (``evicted``: the oldest without the token; ``slow``: no
        whole request in time), logging the counts at most every few seconds."""
        self.dropped[why] += 1
        self._unlogged[why] += 1
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log_event("control.connections_dropped", **dict(self._unlogged), untrusted=len(self._untrusted))
            self._unlogged.clear()


class BoundedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request to arrive whole, and a book of its peers."""

    book: ConnectionBook  # set on the subclass each server makes (``protocol_for``)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()
        self.book.opened(self._peer(), self)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            # A request is on its way (or the next one after a keep-alive wait): it has until the deadline,
            # counted from its first byte, however slowly the rest comes.
            if self._read_deadline is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.book.closed(self._peer())
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._disarm()
        super().on_response_complete()

    def drop(self, why: str) -> None:
        """Close the connection at once (it holds no request the server is answering)."""
        self._disarm()
        if not self.transport.is_closing():
            self.book.note_dropped(why)
            self.transport.close()

    def _peer(self) -> Peer | None:
        client = self.client
        return (str(client[0]), int(client[1])) if client is not None else None

    def _arm(self) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(REQUEST_READ_S, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        answering = self.cycle is not None and self.cycle.response_started
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not answering:
            self.drop("slow")


def protocol_for(book: ConnectionBook) -> type[BoundedH11]:
    """The protocol class of one server, bound to its book."""
    return type("ControlH11", (BoundedH11,), {"book": book})
