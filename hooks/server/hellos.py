"""The hellos of ``bir-scenario`` processes: whether a delivery tool is live for a direct plan (§6.3).

One book per control server, shared at construction with whoever decides a plan's mode, so the server
and the session read the same hellos without either holding the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from bir.core.paths import pid_alive
from bir.hooks import api

MAX_HELLOS = 64
# §6.3: a direct plan is announced only while bir-scenario said hello within this window.
HELLO_FRESH_S = 30 * 60


@dataclass(frozen=True)
class SeenHello:
    """The last ``/scenario/hello`` of one ``bir-scenario`` process; ``at`` is monotonic seconds."""

    hello: api.Hello
    at: float


class HelloBook:
    """The newest hello of each ``bir-scenario`` pid, at most ``MAX_HELLOS`` of them."""

    def __init__(self) -> None:
        self.seen: dict[int, SeenHello] = {}
        self._heard = asyncio.Event()

    def note(self, seen: SeenHello) -> None:
        self.seen.pop(seen.hello.pid, None)
        self.seen[seen.hello.pid] = seen
        while len(self.seen) > MAX_HELLOS:
            del self.seen[next(iter(self.seen))]
        # Whoever waits for a delivery tool looks again; the next waiter gets a fresh event.
        self._heard.set()
        self._heard = asyncio.Event()

    def clear(self) -> None:
        self.seen.clear()

    def delivery_tool_live(self) -> bool:
        """Whether a live ``bir-scenario`` with a tool, not off, said hello within 30 minutes (§6.3)."""
        now = time.monotonic()
        return any(
            now - seen.at < HELLO_FRESH_S and seen.hello.tools > 0 and not seen.hello.off and pid_alive(seen.hello.pid)
            for seen in self.seen.values()
        )

    async def wait_for_delivery_tool(self, within_s: float) -> bool:
        """Whether a delivery tool is live, waiting up to ``within_s`` for a hello that makes it so."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while not self.delivery_tool_live():
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heard.wait(), left)
        return True

    def last(self) -> api.LastHello | None:
        """The newest hello heard, with its age, for ``/health``."""
        if not self.seen:
            return None
        seen = max(self.seen.values(), key=lambda s: s.at)
        age_ms = int(max(0.0, time.monotonic() - seen.at) * 1000)
        hello = seen.hello
        return api.LastHello(pid=hello.pid, version=hello.version, tools=hello.tools, off=hello.off, age_ms=age_ms)
