"""What ``bir-hook`` imports to answer a tool call: every module on that path is paid for at each call."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from bir.benchmarks.armed_pin import pre_tool_body
from bir.core.paths import project_key
from bir.hooks.discovery import write_discovery
from bir.hooks.server.control import ControlServer

pytestmark = pytest.mark.anyio

# Each cost an answered hook milliseconds, and none is needed to answer it.
NOT_ON_THE_PATH = ("bir.core.installed", "bir.core.log", "dataclasses", "inspect", "ssl", "hashlib", "subprocess")

SCRIPT = (
    "import sys\n"
    "sys.argv = ['bir-hook', 'PreToolUse']\n"
    "before = set(sys.modules)\n"
    "from bir.hooks import hook_client\n"
    "hook_client.main()\n"
    "sys.stderr.write(repr(sorted(m for m in {names!r} if m in sys.modules and m not in before)))\n"
)


async def test_an_answered_hook_imports_none_of_the_costly_modules_it_does_not_need(tmp_path: Path) -> None:
    control = ControlServer(replay_enabled=False)
    await control.start()
    try:
        project = tmp_path / "project"
        project.mkdir()
        write_discovery(control.discovery(project))
        body = json.dumps(pre_tool_body("s1", project)).encode()
        env = {**os.environ, "CLAUDE_PROJECT_DIR": str(project)}
        script = SCRIPT.format(names=NOT_ON_THE_PATH)
        done = await anyio.run_process([sys.executable, "-c", script], input=body, env=env, check=False)
    finally:
        await control.stop()
    assert json.loads(done.stdout) == {}
    assert done.stderr.decode() == "[]"
    # The answer came from the server: the hook logged no failure.
    assert not (Path(os.environ["BIR_HOME"]) / "logs" / "hook.log").exists()


def test_the_builtin_sha256_keys_a_project_as_hashlib_does(tmp_path: Path) -> None:
    import hashlib

    resolved = str(tmp_path.resolve())
    assert project_key(tmp_path) == hashlib.sha256(resolved.encode()).hexdigest()[:16]
