"""``bir-hooks``' composition: a live session's server, controller and housekeeping, in-process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from bir.core import config
from bir.core.delivery import tmp_dir
from bir.core.service import ServiceClient
from bir.hooks.daemon import live_session

pytestmark = pytest.mark.anyio


async def test_a_running_server_sweeps_bundle_files_past_their_hour_without_another_being_written(
    tmp_path: Path,
) -> None:
    folder = tmp_dir(config.home())
    folder.mkdir(parents=True, exist_ok=True)
    old, fresh = folder / "bundle-old.txt", folder / "bundle-fresh.txt"
    for path in (old, fresh):
        path.write_text("results")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    project = tmp_path / "project"
    project.mkdir()
    async with ServiceClient(None, None) as service, live_session(project, service=service, sweep_every_s=0.05):
        with anyio.fail_after(10):
            while old.exists():  # noqa: ASYNC110 - the sweep runs on the server's own clock
                await anyio.sleep(0.02)
    assert fresh.exists()
