"""Fixtures the plan and logic tests share: a real evaluator pool on asyncio, per module."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bir.evaluator import EvaluatorPool


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def pool(anyio_backend: str) -> AsyncIterator[EvaluatorPool]:
    # A short limit, so that the tests of bodies that time out end quickly.
    async with EvaluatorPool(workers=2, timeout_ms=300) as running:
        yield running
