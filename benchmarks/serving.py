"""Serve an ASGI app on 127.0.0.1 (a random port) from a thread of its own, for the fakes and the benches.

The listening socket is bound before the thread starts, so a client may connect at once: the
kernel queues the connection until uvicorn accepts it, and no test has to wait for a "started" flag.
A thread of its own keeps uvicorn off the test's event loop and out of the main thread's signal handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator

import anyio
import anyio.to_thread
import uvicorn
from starlette.types import ASGIApp

SHUTDOWN_TIMEOUT_S = 10.0


class Releaser:
    """Lets a handler wait (the fakes' latency) until the server stops, whichever comes first."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._lock = threading.Lock()

    def bind(self) -> None:
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()

    def release(self) -> None:
        with self._lock:
            if self._loop is not None and self._stopping is not None:
                self._loop.call_soon_threadsafe(self._stopping.set)

    async def wait(self, seconds: float) -> None:
        """Sleep ``seconds`` (``float('inf')`` for ever), cut short when the server stops."""
        if seconds <= 0 or self._stopping is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), None if seconds == float("inf") else seconds)


@contextlib.contextmanager
def serve_in_thread(app: ASGIApp, releaser: Releaser, port: int = 0) -> Iterator[str]:
    """Run ``app`` until the block ends; yields its base URL (``http://127.0.0.1:<port>``).

    ``port`` 0 picks a free one; a given port lets a test bring a stopped server back at the same URL.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http="h11",
        ws="none",
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    async def main() -> None:
        releaser.bind()
        await server.serve(sockets=[sock])

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread below
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"fake-http-{port}", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        releaser.release()
        thread.join(SHUTDOWN_TIMEOUT_S)
        sock.close()
        if failure:
            raise RuntimeError(f"the fake server failed: {failure[0]!r}") from failure[0]


@contextlib.asynccontextmanager
async def serve_in_thread_async(app: ASGIApp, releaser: Releaser, port: int = 0) -> AsyncIterator[str]:
    """``serve_in_thread`` for async tests: the shutdown's join runs off the event loop."""
    block = serve_in_thread(app, releaser, port)
    url = block.__enter__()
    try:
        yield url
    finally:
        await anyio.to_thread.run_sync(block.__exit__, None, None, None)
