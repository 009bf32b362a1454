"""The control server's connections: none a local process can hold to starve the others (issue 16 item 2).

uvicorn bounds a connection's idle time only *between* requests (``timeout_keep_alive``, armed when a
response completes and cancelled by any byte received), and its ``limit_concurrency`` counts idle
connections too: 515 connections that never send a byte made every request, with the token or
without, answer 503 for as long as they stayed open. So here:

- a request must arrive whole (headers and body) within ``REQUEST_READ_S`` of the connection opening,
  or of the first byte after a keep-alive wait; past that the connection is closed, however slowly it
  trickles bytes;
- no concurrency limit answers 503: a connection that has not yet shown the bearer token is
  *untrusted*, and past ``MAX_UNTRUSTED`` of them the oldest *silent* one (no byte of a request since it
  opened, or since its last answer, for ``SPEAK_GRACE_S``) is closed to make room, so they can never take
  the place of a hook's or a proxy's connection (once a request on it passed the token check, the route
  guard marks it trusted). A hook's brand-new connection is untrusted until its request reaches the
  guard, and a churning flood of connections that never send a byte closed it there before, between
  its accept and its first byte (uvicorn accepts a whole backlog in one go) or while its request was on
  its way. Now a connection that sends a request is never evicted by newer ones (the read deadline
  holds it instead), and a new one has its grace to speak. Only past ``max_open`` untrusted connections
  (what the process's open-file limit leaves room for, ``fd_room``) is the oldest closed regardless;
- uvicorn's keep-alive wait stays, at ``KEEP_ALIVE_S``.

The protocol is uvicorn's h11 one with those hooks; h11 bounds the size of a request's head itself.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from bir.core.log import log_event

REQUEST_READ_S: Final = 5.0
KEEP_ALIVE_S: Final = 5
MAX_UNTRUSTED: Final = 256
# A new connection's time to send its first byte before newer ones may evict it: an honest client sends at
# once, a loaded machine can hold it back a few hundred milliseconds.
SPEAK_GRACE_S: Final = 1.0
# Past the ceiling, the least a connection is given.
CEILING_GRACE_S: Final = 0.1
# Untrusted connections past which the oldest is closed whatever it is doing (file descriptors are finite),
# and the descriptors kept for everything else the server opens.
MAX_OPEN: Final = 4 * MAX_UNTRUSTED
RESERVED_FDS: Final = 256
# The connections the kernel queues before the server accepts them, and so the most uvicorn accepts in one
# loop pass (asyncio accepts up to the backlog at a time).
LISTEN_BACKLOG: Final = 1024
# Loop passes from a connection's accept until a byte it had sent is surely read: its transport registers
# its reader in the pass after ``connection_made``, the pass after that selects it, the next one reads.
_PASSES_TO_READ: Final = 3
# Closed connections are logged as counts, at most this often: a flood must not become a flood of lines.
_LOG_EVERY_S: Final = 5.0

Peer = tuple[str, int]


def fd_room(wanted: int = MAX_OPEN) -> int:
    """How many untrusted connections this process can hold open, up to ``wanted``: the soft limit of open
    files is raised toward the hard one for it (a server's right), less one accept burst (a connection past
    the ceiling waits one for its bytes) and ``RESERVED_FDS``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + LISTEN_BACKLOG + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(hard, need)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(MAX_UNTRUSTED, min(wanted, soft - LISTEN_BACKLOG - RESERVED_FDS))


class ConnectionBook:
    """The open connections of one server that have not shown the token yet, oldest first: the silent ones
    (evictable once past their grace) and those sending a request (never evicted by newer ones).

    Kept by connection, not by peer address: on loopback the kernel reuses a closed connection's port at
    once (``tcp_tw_reuse``), so a hook's new connection can have the address of a flood's that the server
    has not seen close yet; keyed by address, the hook's took the old one's place in the queue and was
    evicted as the oldest.
    """

    def __init__(
        self,
        max_untrusted: int = MAX_UNTRUSTED,
        max_open: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_untrusted = max_untrusted
        self.max_open = max(max_untrusted, fd_room() if max_open is None else max_open)
        self._clock = clock
        # Per silent connection: when it opened (or was last answered), and the loop pass it opened in.
        self._silent: OrderedDict[BoundedH11, tuple[float, int]] = OrderedDict()
        self._speaking: OrderedDict[BoundedH11, None] = OrderedDict()
        # The newest connection from each address: the one a request the route guard sees came on.
        self._by_peer: dict[Peer, BoundedH11] = {}
        self.dropped: Counter[str] = Counter()
        self._unlogged: Counter[str] = Counter()
        self._logged_at = 0.0
        self._pass = 0
        self._ticking = False
        self._sweep: asyncio.TimerHandle | None = None

    @property
    def untrusted(self) -> int:
        return len(self._silent) + len(self._speaking)

    def opened(self, protocol: BoundedH11) -> None:
        peer = protocol.peer()
        if peer is not None:
            self._by_peer[peer] = protocol
        self._silent[protocol] = (self._clock(), self._pass)
        self._make_room()

    def speaking(self, protocol: BoundedH11) -> None:
        """``protocol`` received a byte of a request: newer connections do not evict it."""
        if self._silent.pop(protocol, None) is not None:
            self._speaking[protocol] = None

    def silent(self, protocol: BoundedH11) -> None:
        """``protocol`` was answered and waits (untrusted): evictable again after its grace."""
        if protocol in self._speaking:
            del self._speaking[protocol]
            self._silent[protocol] = (self._clock(), self._pass)

    def trust(self, peer: Peer | None) -> None:
        """A request on the (newest) connection from ``peer`` showed the token: it is never evicted."""
        protocol = None if peer is None else self._by_peer.get(peer)
        if protocol is not None:
            self._silent.pop(protocol, None)
            self._speaking.pop(protocol, None)

    def closed(self, protocol: BoundedH11) -> None:
        self._silent.pop(protocol, None)
        self._speaking.pop(protocol, None)
        peer = protocol.peer()
        if peer is not None and self._by_peer.get(peer) is protocol:
            del self._by_peer[peer]

    def _swept(self) -> None:
        self._sweep = None
        self._make_room()

    def _tick(self) -> None:
        self._ticking = False
        self._pass += 1
        self._make_room()

    def _make_room(self) -> None:
        loop = asyncio.get_running_loop()
        now = self._clock()
        while self.untrusted > self.max_untrusted and self._silent:
            oldest, (since, _) = next(iter(self._silent.items()))
            if since > now - SPEAK_GRACE_S:
                # Every silent one is within its grace to speak: look again when the oldest's ends, so the
                # limit holds even if no other connection comes meanwhile.
                if self._sweep is None:
                    self._sweep = loop.call_later(since + SPEAK_GRACE_S - now, self._swept)
                break
            self._evict(oldest)
        # Past the ceiling a silent connection goes without its grace, but only once the loop has looked for
        # its bytes: uvicorn accepts a whole backlog in one pass, a hook's among them, before reading any.
        while self.untrusted > self.max_open and self._silent:
            oldest, (since, opened_in) = next(iter(self._silent.items()))
            if opened_in + _PASSES_TO_READ > self._pass or since > now - CEILING_GRACE_S:
                if not self._ticking:
                    self._ticking = True
                    loop.call_soon(self._tick)
                break
            self._evict(oldest)
        while len(self._speaking) > self.max_open:
            self._evict(next(iter(self._speaking)))

    def _evict(self, protocol: BoundedH11) -> None:
        self._silent.pop(protocol, None)
        self._speaking.pop(protocol, None)
        protocol.drop("evicted")

    def note_dropped(self, why: str) -> None:
        """Count a connection the server closed (``evicted``: the oldest without the token; ``slow``: no
        whole request in time), logging the counts at most every few seconds."""
        self.dropped[why] += 1
        self._unlogged[why] += 1
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log_event("control.connections_dropped", **dict(self._unlogged), untrusted=self.untrusted)
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
        self.book.opened(self)

    def data_received(self, data: bytes) -> None:
        self.book.speaking(self)
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
        self.book.closed(self)
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._disarm()
        self.book.silent(self)
        super().on_response_complete()

    def drop(self, why: str) -> None:
        """Close the connection at once (it holds no request the server is answering)."""
        self._disarm()
        if not self.transport.is_closing():
            self.book.note_dropped(why)
            self.transport.close()

    def peer(self) -> Peer | None:
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
