"""Evaluator tests drive real worker processes running real V8 (and QuickJS) on asyncio, behind the
kernel's walls wherever this kernel offers them: the whole contract and isolation corpus runs walled."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from bir.evaluator import EvaluatorPool, walls


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=["v8", "quickjs", "v8-public", "quickjs-public"])
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """The engine a pool is asked for. "…-public" is that engine on its library's public API, the
    fallback a worker takes when the private surface it prefers moved, forced for the whole module."""
    name, _, surface = str(request.param).partition("-")
    if not surface:
        yield name
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BIR_LOGIC_ENGINE_SURFACE", surface)
        yield name


@pytest.fixture(scope="module")
async def pool(engine: str) -> AsyncIterator[EvaluatorPool]:
    """A shared pool per engine for tests that do not disturb its workers."""
    async with EvaluatorPool(workers=2, timeout_ms=2000, memory_mb=64, max_jobs=100_000, engine=engine) as shared:
        if walls.all_up(walls.describe()):
            assert walls.all_up(shared.walls), shared.walls
        yield shared
