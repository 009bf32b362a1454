"""Async tests in this folder run on asyncio (uvicorn's loop), through anyio's pytest plugin."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
