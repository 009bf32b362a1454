"""Shared by the proxy's tests: async tests run on asyncio (the proxy's own backend)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
