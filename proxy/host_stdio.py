"""The host's side of the relay: our stdin and stdout as anyio byte streams.

Pipes, sockets and terminals go through the event loop's pipe transports (non-blocking, with
flow control on writes). A regular file (``bir-proxy … < requests.jsonl``) cannot be watched by
the loop; it never blocks for long, so it is read and written from a worker thread.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import stat
from typing import Final

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream

_READ_CHUNK: Final = 256 * 1024
_FLUSH_S: Final = 2.0
_FLUSH_POLL_S: Final = 0.01


class _PipeReader(ByteReceiveStream):
    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.ReadTransport, fd: int) -> None:
        self._reader = reader
        self._transport = transport
        self._fd = fd

    async def receive(self, max_bytes: int = _READ_CHUNK) -> bytes:
        data = await self._reader.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        self._transport.close()
        _close_fd(self._fd)


class _PipeWriter(ByteSendStream):
    def __init__(self, writer: asyncio.StreamWriter, fd: int) -> None:
        self._writer = writer
        self._fd = fd

    async def send(self, item: bytes) -> None:
        if self._writer.transport.is_closing():
            raise anyio.BrokenResourceError
        self._writer.write(item)
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        # Let what is buffered reach the host first, but not forever.
        transport = self._writer.transport
        with anyio.move_on_after(_FLUSH_S):
            while transport.get_write_buffer_size() and not transport.is_closing():  # noqa: ASYNC110 - no flush event
                await anyio.sleep(_FLUSH_POLL_S)
        transport.close()
        _close_fd(self._fd)


class _FileReader(ByteReceiveStream):
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def receive(self, max_bytes: int = _READ_CHUNK) -> bytes:
        data = await anyio.to_thread.run_sync(os.read, self._fd, max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        _close_fd(self._fd)


class _FileWriter(ByteSendStream):
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def send(self, item: bytes) -> None:
        try:
            await anyio.to_thread.run_sync(_write_all, self._fd, item)
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        _close_fd(self._fd)


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


async def open_host_stdio(stdin_fd: int = 0, stdout_fd: int = 1) -> tuple[ByteReceiveStream, ByteSendStream]:
    """Our stdin and stdout as streams. The descriptors are duplicated, so closing the streams
    leaves fds 0 and 1 themselves open.

    Raises:
        OSError: a descriptor is not open.
    """
    loop = asyncio.get_running_loop()
    in_fd = os.dup(stdin_fd)
    out_fd = os.dup(stdout_fd)
    receive: ByteReceiveStream
    send: ByteSendStream
    if _is_regular_file(in_fd):
        receive = _FileReader(in_fd)
    else:
        reader = asyncio.StreamReader(limit=_READ_CHUNK, loop=loop)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(in_fd, "rb", buffering=0, closefd=False)
        )
        receive = _PipeReader(reader, transport, in_fd)
    if _is_regular_file(out_fd):
        send = _FileWriter(out_fd)
    else:
        w_transport, w_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(out_fd, "wb", buffering=0, closefd=False)
        )
        send = _PipeWriter(asyncio.StreamWriter(w_transport, w_protocol, None, loop), out_fd)
    return receive, send


def _is_regular_file(fd: int) -> bool:
    # The loop's pipe transports take pipes, sockets and character devices that the selector can
    # watch (/dev/null cannot be); anything else is read and written from a thread.
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return True
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ | selectors.EVENT_WRITE)
        except (OSError, ValueError):
            return True
    return False
