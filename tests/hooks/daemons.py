"""Real ``bir-hooks`` control servers for the tests that need the process: started as a hook would start
one, waited for until it published itself, and stopped at the end whatever the test did."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from bir.hooks.discovery import Discovery, read_discovery

BIN = Path(sys.executable).parent
PUBLISH_S = 30.0


def start_server(project: Path, env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Discovery]:
    """``bir-hooks --project PROJECT`` with ``env`` over this process's, once its discovery file names it."""
    environment = {**os.environ, "BIR_LOGIC_WORKERS": "1", **(env or {})}
    process = subprocess.Popen(
        [str(BIN / "bir-hooks"), "--project", str(project)], env=environment, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + PUBLISH_S
    while (found := read_discovery(project)) is None or found.pid != process.pid:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"bir-hooks did not publish itself (exit {process.poll()})")
        time.sleep(0.05)
    return process, found


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Servers to stop at the end, whatever the test did."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.terminate()
            process.wait(30)
