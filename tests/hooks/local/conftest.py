"""The local service's tests run on asyncio, with one real evaluator pool per module."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bir.evaluator import EvaluatorPool


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def pool(anyio_backend: str) -> AsyncIterator[EvaluatorPool]:
    async with EvaluatorPool(workers=1) as running:
        yield running
