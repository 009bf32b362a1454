"""The work queue between the control server and its proxies (spec §16.2, `ProxyWorkQueue`).

A direct step is handed to the ``bir-proxy`` that wraps the step's server: the proxy long-polls
(`wait_for_work`), runs the call on its own upstream, and posts the result back (`complete`), which
resolves the awaiting `call`. Pure asyncio: no HTTP here, the routes in ``bir.hooks.server.control`` drive it.

Two facts from the built system shape it:

* "No poller parked" is not "no proxy". A proxy is between polls exactly while it posts one step's
  result and re-polls, so work for a proxy seen within the last minute is *held* for its next poll,
  bounded by the call's own timeout. A server nothing has polled for a minute fails fast.
* Proxies are not interchangeable: each session starts its own, with its own upstream. A step goes
  to a proxy bound to the caller's session, else to an unbound one only while no other session is
  live; with two sessions live it is refused (`NoSessionProxyError`) and nothing is sent.
  ``bir replay`` has no session and takes the newest proxy.
* A proxy is bound from its first registration by its *host* (``bir.core.host``): the Claude Code
  process that started it, which the session's hooks name too. Whichever comes first, the proxy or the
  session's first hook, the other binds them; a later session of the same host (``/clear``) takes them
  over. A host that is gone ends its session and its proxies at once, ``SessionEnd`` or not.

Every structure is bounded and a call leaves nothing behind once it ends, whichever way it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from bir.core.log import log_event
from bir.core.paths import pid_alive
from bir.core.types import parse_qualified_name
from bir.hooks.api import Work

# A server whose proxies have all been silent this long is not served: calls fail fast.
PROXY_STALE_S = 60.0
# A proxy silent this long is forgotten (its session closed, or it died).
PROXY_FORGET_S = 600.0
# A session noted by a hook counts as live this long after it was last heard from.
SESSION_TTL_S = 1800.0
MAX_QUEUED_PER_SERVER = 64
MAX_PROXIES = 512
MAX_SESSIONS = 1024
_MAX_ERROR_CHARS = 2000
# How often a call that a proxy took checks that the proxy is still running.
PROXY_CHECK_S = 0.25


class WorkQueueError(Exception):
    """A direct step that did not produce a result."""


class NotSentError(WorkQueueError):
    """The step was never handed to a proxy: nothing ran."""


class NoProxyError(NotSentError):
    """No proxy has polled for the server recently (or the control server is stopping)."""


class NoSessionProxyError(NotSentError):
    """Other sessions are live and none of the server's proxies is bound to the caller's session."""


class ProxyExitedError(NotSentError):
    """The proxy the call was handed to exited before it took it: nothing ran."""


class QueueFullError(NotSentError):
    """Too much work is already waiting for the server's proxies."""


class StepTimeoutError(WorkQueueError):
    """The call's timeout passed. ``taken`` tells whether a proxy had picked the work up (it may have run)."""

    def __init__(self, message: str, *, taken: bool) -> None:
        super().__init__(message)
        self.taken = taken


class ProxyCallError(WorkQueueError):
    """The proxy sent the call and reported an error, or no result at all (it may or may not have run)."""


class ProxyGoneError(ProxyCallError):
    """The proxy that took the call exited before it answered (it may or may not have run)."""


@dataclass(eq=False)
class _Poll:
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    superseded: bool = False


@dataclass(eq=False)
class _Call:
    work: Work
    session_id: str | None
    outcome: asyncio.Future[tuple[object, str | None]]
    proxy: _Proxy
    taken: bool = False


@dataclass(eq=False)
class _Proxy:
    proxy_id: str
    server_name: str
    session_id: str | None
    pid: int | None
    order: int
    last_seen: float
    queue: deque[_Call] = field(default_factory=deque)
    poll: _Poll | None = None
    host_pid: int | None = None


def _local_name(server_name: str, tool_name: str) -> str:
    # Callers may hold the qualified name; the proxy needs the upstream's own.
    parsed = parse_qualified_name(tool_name)
    if parsed is not None and parsed[0] == server_name:
        return parsed[1]
    return tool_name


class ProxyWorkQueue:
    """Hands work to the proxy that owns a server and awaits its result. One event loop only."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        stale_after_s: float = PROXY_STALE_S,
        forget_after_s: float = PROXY_FORGET_S,
        session_ttl_s: float = SESSION_TTL_S,
        max_queued_per_server: int = MAX_QUEUED_PER_SERVER,
    ) -> None:
        self._clock = clock
        self._stale_after_s = stale_after_s
        self._forget_after_s = max(forget_after_s, stale_after_s)
        self._session_ttl_s = session_ttl_s
        self._max_queued = max_queued_per_server
        self._proxies: dict[str, _Proxy] = {}
        self._calls: dict[str, _Call] = {}
        self._sessions: dict[str, float] = {}
        # session id → its host's pid, as its hooks named it.
        self._hosts: dict[str, int] = {}
        self._order = 0
        self._closed = False
        # server name → when its last proxy unregistered (its host closed the session).
        self._left: dict[str, float] = {}
        self._seen = asyncio.Event()  # set (and replaced) each time a proxy is heard from

    # -- proxies -------------------------------------------------------------------------------

    def register(
        self,
        server_name: str,
        proxy_id: str,
        session_id: str | None = None,
        pid: int | None = None,
        host_pid: int | None = None,
    ) -> None:
        """Record a proxy (again): it counts as seen now. A session given here binds it; so does the
        newest session its host's hooks named."""
        self._prune()
        proxy = self._touch(server_name, proxy_id, pid, host_pid)
        if session_id:
            self._bind(proxy, session_id, "registered")
        elif proxy.host_pid is not None:
            session = self._session_of_host(proxy.host_pid)
            if session is not None:
                self._bind(proxy, session, "host")

    def bind(self, proxy_id: str, session_id: str) -> bool:
        """Bind a proxy to a session (learned from a correlated call it reported). False if unknown."""
        proxy = self._proxies.get(proxy_id)
        if proxy is None:
            return False
        self._bind(proxy, session_id, "call")
        return True

    def note_session(self, session_id: str, host_pid: int | None = None) -> None:
        """A session was heard from (a hook fired): it counts as live for ``session_ttl_s``, and while
        ``host_pid`` (its host, when the hook named it) runs. The host's proxies are the session's."""
        self._sessions.pop(session_id, None)
        self._sessions[session_id] = self._clock()
        while len(self._sessions) > MAX_SESSIONS:
            forgotten = next(iter(self._sessions))
            del self._sessions[forgotten]
            self._hosts.pop(forgotten, None)
        if host_pid is None or host_pid <= 1:
            return
        self._hosts.pop(session_id, None)
        self._hosts[session_id] = host_pid
        for proxy in self._proxies.values():
            if proxy.host_pid == host_pid:
                self._bind(proxy, session_id, "host")

    def end_session(self, session_id: str) -> None:
        """A session ended: it no longer counts as live, and its proxies are unbound from it."""
        self._sessions.pop(session_id, None)
        self._hosts.pop(session_id, None)
        for proxy in self._proxies.values():
            if proxy.session_id == session_id:
                proxy.session_id = None

    def unregister(self, proxy_id: str, server_name: str) -> bool:
        """A proxy whose host closed the session: forget it now, and fail the calls still queued for it
        (nothing of them ran). False when it was not known."""
        proxy = self._proxies.get(proxy_id)
        if proxy is None or proxy.server_name != server_name:
            return False
        self._drop(proxy)
        for call in proxy.queue:
            if not call.outcome.done():
                call.outcome.set_exception(ProxyExitedError(f"the {server_name} proxy left before it took the call"))
        proxy.queue.clear()
        if not self.is_served(server_name):
            self._left[server_name] = self._clock()
            while len(self._left) > MAX_PROXIES:
                del self._left[next(iter(self._left))]
        log_event("proxy.unregistered", server=server_name, proxy_id=proxy_id)
        return True

    def left(self) -> list[str]:
        """The servers whose last proxy unregistered and that no proxy serves now."""
        return sorted(name for name in self._left if not self.is_served(name))

    def host_of(self, session_id: str) -> int | None:
        """The host pid the session's hooks named, if any."""
        return self._hosts.get(session_id)

    def is_served(self, server_name: str) -> bool:
        """Whether a live proxy for the server (its host running) has polled within the last ``stale_after_s``."""
        now = self._clock()
        return any(
            p.server_name == server_name and self._live(p, now) and (p.pid is None or pid_alive(p.pid))
            for p in self._proxies.values()
        )

    async def wait_served(self, server_name: str) -> None:
        """Return once a proxy for ``server_name`` has polled or registered (bound it with a timeout)."""
        while not self.is_served(server_name):
            await self._seen.wait()

    def in_flight(self) -> list[Work]:
        """The calls a proxy has taken and not answered yet."""
        return [c.work for c in self._calls.values() if c.taken and not c.outcome.done()]

    def stats(self) -> dict[str, int]:
        """Sizes of the internal tables (tests assert nothing grows once calls end)."""
        return {
            "proxies": len(self._proxies),
            "queued": sum(len(p.queue) for p in self._proxies.values()),
            "calls": len(self._calls),
            "sessions": len(self._sessions),
            "parked": sum(1 for p in self._proxies.values() if p.poll is not None),
        }

    # -- the proxy's side ----------------------------------------------------------------------

    async def wait_for_work(self, server_name: str, proxy_id: str, hold_s: float) -> Work | None:
        """Long-poll: the proxy's next work, or None once ``hold_s`` passes with nothing for it.

        A second poll from the same proxy answers the first one with None.
        """
        self._prune()
        proxy = self._touch(server_name, proxy_id, None, None)
        if proxy.poll is not None:
            proxy.poll.superseded = True
            proxy.poll.wake.set()
        poll = _Poll()
        proxy.poll = poll
        try:
            with anyio.move_on_after(max(0.0, hold_s)):
                while not self._closed and not poll.superseded:
                    call = self._take(proxy)
                    if call is not None:
                        return call.work
                    poll.wake.clear()
                    await poll.wake.wait()
            return None
        finally:
            if proxy.poll is poll:
                proxy.poll = None
            proxy.last_seen = self._clock()

    def complete(self, work_id: str, result: object = None, error: str | None = None) -> bool:
        """Deliver a proxy's answer. True once per taken work; an unknown, untaken or repeated id is False.

        ``result`` None with no ``error`` means the proxy sent the call but got nothing back.
        """
        call = self._calls.get(work_id)
        if call is None or not call.taken or call.outcome.done():
            reason = "unknown" if call is None else ("not_taken" if not call.taken else "already_completed")
            log_event("proxy.result_ignored", work_id=work_id[:80], reason=reason)
            return False
        call.outcome.set_result((result, error))
        call.proxy.last_seen = self._clock()
        return True

    # -- the controller's side -----------------------------------------------------------------

    async def call(
        self,
        server_name: str,
        tool_name: str,
        arguments: object,
        timeout_s: float,
        session_id: str | None = None,
    ) -> object:
        """Dispatch one call to the server's proxy and await its result.

        Raises:
            NoProxyError: no proxy has polled for the server within ``stale_after_s``; nothing was sent.
            NoSessionProxyError: other sessions are live and no proxy of the server is bound to
                ``session_id``; nothing was sent.
            QueueFullError: too much work is already waiting for the server; nothing was sent.
            StepTimeoutError: ``timeout_s`` passed; the work was withdrawn if no proxy had taken it.
            ProxyCallError: the proxy reported an error, or no result.
        """
        if self._closed:
            raise NoProxyError("the control server is stopping")
        self._prune()
        if session_id:
            self.note_session(session_id)
        proxy = self._route(server_name, session_id)
        queued = sum(len(p.queue) for p in self._proxies.values() if p.server_name == server_name)
        if queued >= self._max_queued:
            raise QueueFullError(f"{queued} calls are already waiting for {server_name}")
        timeout_s = max(0.0, timeout_s)
        work = Work(
            work_id=secrets.token_hex(12),
            tool_name=_local_name(server_name, tool_name),
            arguments=arguments,
            timeout_ms=max(1, int(timeout_s * 1000)),
        )
        call = _Call(work, session_id, asyncio.get_running_loop().create_future(), proxy)
        self._calls[work.work_id] = call
        proxy.queue.append(call)
        if proxy.poll is not None:
            proxy.poll.wake.set()
        try:
            result, error = await self._await_outcome(call, server_name, timeout_s)
        except TimeoutError:
            raise StepTimeoutError(
                f"{server_name}/{work.tool_name} did not answer within {work.timeout_ms} ms", taken=call.taken
            ) from None
        finally:
            self._calls.pop(work.work_id, None)
            if not call.taken:
                # Withdrawn: a proxy polling later must not run a step its caller gave up on.
                with contextlib.suppress(ValueError):
                    call.proxy.queue.remove(call)
                log_event("proxy.work_withdrawn", server=server_name, tool=work.tool_name, work_id=work.work_id)
        if error is not None:
            raise ProxyCallError(str(error)[:_MAX_ERROR_CHARS])
        if result is None:
            raise ProxyCallError("the proxy sent no result: the call may or may not have run")
        return result

    async def _await_outcome(self, call: _Call, server_name: str, timeout_s: float) -> tuple[object, str | None]:
        """The proxy's answer; a proxy that took the call and then died fails it at once, not at its timeout.

        Raises:
            TimeoutError: ``timeout_s`` passed.
            ProxyGoneError: the proxy that took the call is no longer running.
            ProxyExitedError: the proxy the call waits for exited before taking it.
        """
        with anyio.fail_after(timeout_s):
            while True:
                done, _ = await asyncio.wait({call.outcome}, timeout=PROXY_CHECK_S)
                if done:
                    return call.outcome.result()
                pid = call.proxy.pid
                if pid is not None and not pid_alive(pid):
                    if call.taken:
                        raise ProxyGoneError(
                            f"the {server_name} proxy (pid {pid}) exited after it took the call:"
                            " it may or may not have run"
                        )
                    raise ProxyExitedError(f"the {server_name} proxy (pid {pid}) exited before it took the call")

    def close(self) -> None:
        """Stop: answer every parked poll, and fail every waiting call with `NoProxyError`."""
        self._closed = True
        for proxy in self._proxies.values():
            if proxy.poll is not None:
                proxy.poll.wake.set()
        for call in list(self._calls.values()):
            if not call.outcome.done():
                call.outcome.set_exception(NoProxyError("the control server is stopping"))

    # -- internals -----------------------------------------------------------------------------

    def _live(self, proxy: _Proxy, now: float) -> bool:
        if proxy.host_pid is not None and not pid_alive(proxy.host_pid):
            # Its host is gone: so is its session, and the proxy with it (whatever its last poll says).
            return False
        return proxy.poll is not None or now - proxy.last_seen < self._stale_after_s

    def _touch(self, server_name: str, proxy_id: str, pid: int | None, host_pid: int | None) -> _Proxy:
        now = self._clock()
        proxy = self._proxies.get(proxy_id)
        if proxy is None or proxy.server_name != server_name:
            if proxy is not None:
                self._drop(proxy)
            self._order += 1
            proxy = _Proxy(proxy_id, server_name, None, pid, self._order, now)
            self._proxies[proxy_id] = proxy
            self._evict_over_cap()
        proxy.last_seen = now
        if pid is not None:
            proxy.pid = pid
        self._left.pop(server_name, None)
        if host_pid is not None and host_pid > 1:
            proxy.host_pid = host_pid
        seen, self._seen = self._seen, asyncio.Event()
        seen.set()
        return proxy

    def _bind(self, proxy: _Proxy, session_id: str, by: str) -> None:
        if proxy.session_id != session_id:
            proxy.session_id = session_id
            log_event("proxy.bound", server=proxy.server_name, proxy_id=proxy.proxy_id, session_id=session_id, by=by)

    def _session_of_host(self, host_pid: int) -> str | None:
        """The newest session whose hooks named ``host_pid``."""
        return next((s for s, host in reversed(self._hosts.items()) if host == host_pid), None)

    def _take(self, proxy: _Proxy) -> _Call | None:
        while proxy.queue:
            call = proxy.queue.popleft()
            if call.outcome.done():
                continue
            call.taken = True
            if call.session_id and proxy.session_id is None:
                # The proxy ran a step of this session: it is that session's from now on.
                self._bind(proxy, call.session_id, "call")
            return call
        return None

    def _route(self, server_name: str, session_id: str | None) -> _Proxy:
        now = self._clock()
        live = [
            p
            for p in self._proxies.values()
            if p.server_name == server_name and self._live(p, now) and (p.pid is None or pid_alive(p.pid))
        ]
        if not live:
            raise NoProxyError(f"no proxy has polled for {server_name} in the last {self._stale_after_s:g} s")
        if not session_id:
            return max(live, key=lambda p: p.order)
        mine = [p for p in live if p.session_id == session_id]
        if mine:
            return max(mine, key=lambda p: p.order)
        if self._live_sessions(now) - {session_id}:
            raise NoSessionProxyError(f"another session is live and no proxy of {server_name} is bound to this session")
        host = self._hosts.get(session_id)
        # A proxy of another host belongs to another session, whether or not that session's hooks came yet.
        unbound = [p for p in live if p.session_id is None and (host is None or p.host_pid in (None, host))]
        if unbound:
            return max(unbound, key=lambda p: p.order)
        raise NoSessionProxyError(f"every proxy of {server_name} belongs to another session")

    def _live_sessions(self, now: float) -> set[str]:
        live = {s for s, seen in self._sessions.items() if now - seen < self._session_ttl_s}
        live.update(p.session_id for p in self._proxies.values() if p.session_id and self._live(p, now))
        return live

    def _prune(self) -> None:
        now = self._clock()
        for proxy in [p for p in self._proxies.values() if self._forgettable(p, now)]:
            self._drop(proxy)
        for session_id in [s for s, seen in self._sessions.items() if now - seen >= self._session_ttl_s]:
            del self._sessions[session_id]
            self._hosts.pop(session_id, None)
        for session_id in [s for s, host in self._hosts.items() if not pid_alive(host)]:
            # A host that is gone ended its session, SessionEnd or not: it stops counting at once.
            log_event("session.host_gone", session_id=session_id, host_pid=self._hosts[session_id])
            self.end_session(session_id)

    def _forgettable(self, proxy: _Proxy, now: float) -> bool:
        return proxy.poll is None and not proxy.queue and now - proxy.last_seen >= self._forget_after_s

    def _evict_over_cap(self) -> None:
        if len(self._proxies) <= MAX_PROXIES:
            return
        idle = [p for p in self._proxies.values() if p.poll is None and not p.queue]
        for proxy in sorted(idle, key=lambda p: p.last_seen)[: len(self._proxies) - MAX_PROXIES]:
            self._drop(proxy)

    def _drop(self, proxy: _Proxy) -> None:
        if self._proxies.get(proxy.proxy_id) is proxy:
            del self._proxies[proxy.proxy_id]
        if proxy.poll is not None:
            proxy.poll.superseded = True
            proxy.poll.wake.set()
