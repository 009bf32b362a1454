"""Async tests in this folder run on asyncio (uvicorn's loop), through anyio's pytest plugin."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The control-server rig's fixtures, and `stopped` for real bir-hooks processes, for every test in this folder.
from tests.hooks.control_rig import captured_logs, rig  # noqa: E402, F401
from tests.hooks.daemons import stopped  # noqa: E402, F401
