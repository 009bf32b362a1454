"""Waiting in a test for what another process or task writes: one deadline, one sentence when it passes."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

POLL_S = 0.05


def wait_for(predicate: Callable[[], object], seconds: float, what: str) -> None:
    """Poll ``predicate`` until it holds; past ``seconds`` the test fails saying ``what`` did not happen."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds:g} s")
        time.sleep(POLL_S)


async def until(condition: Callable[[], object], what: str, seconds: float = 30.0) -> None:
    """``wait_for`` inside an event loop: the tasks that make ``condition`` true run meanwhile."""
    with anyio.move_on_after(seconds):
        while not condition():  # noqa: ASYNC110 - what is awaited is written by another task or process
            await anyio.sleep(POLL_S)
        return
    raise AssertionError(f"{what}: not within {seconds:g} s")
