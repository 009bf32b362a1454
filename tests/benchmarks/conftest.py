"""The benchmarks' own tests: their corpus runs in a real pool, on both engines."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bir.evaluator import EvaluatorPool


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=["v8", "quickjs"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
async def pool(engine: str) -> AsyncIterator[EvaluatorPool]:
    async with EvaluatorPool(workers=2, timeout_ms=2000, memory_mb=64, max_jobs=100_000, engine=engine) as shared:
        yield shared
