"""Async context managers that run the fakes for a test: ``async with running_fake_service() as svc: ...``.

The fake is yielded with its ``url`` set; it stops (and any request held by its latency is released)
when the block ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from bir.benchmarks.serving import serve_in_thread_async
from tests.fakes.anthropicsvc import FakeAnthropic
from tests.fakes.baseinsvc import FakeBaseIn


@contextlib.asynccontextmanager
async def running_fake_service(fake: FakeBaseIn | None = None, *, port: int = 0) -> AsyncIterator[FakeBaseIn]:
    """Serve ``fake`` (a new one by default); ``port`` brings a stopped fake back at its old URL."""
    service = fake if fake is not None else FakeBaseIn()
    async with serve_in_thread_async(service.app, service.releaser, port) as url:
        service.url = url
        yield service


@contextlib.asynccontextmanager
async def running_fake_anthropic(fake: FakeAnthropic | None = None) -> AsyncIterator[FakeAnthropic]:
    anthropic = fake if fake is not None else FakeAnthropic()
    async with serve_in_thread_async(anthropic.app, anthropic.releaser) as url:
        anthropic.url = url
        yield anthropic
