"""Async tests in this folder run on asyncio (uvicorn's loop), through anyio's pytest plugin."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The control-server rig's fixtures, for every test in this folder that asks for them.
from tests.hooks.control_rig import captured_logs, rig  # noqa: E402, F401
