"""``bir-hooks``: its composition (a live session's server, controller and housekeeping, in-process), and its
lifecycle with real ``bir-hooks``, ``bir-hook`` and ``bir-proxy`` processes, the real demo fleet and real
V8: a control server that nothing uses exits after ``BIR_CONTROL_IDLE_MS`` (and the next hook brings one
back); a proxy that polls keeps it alive, and its goodbye is seen at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
import pytest

from bir.core import config, installed
from bir.core.delivery import tmp_dir
from bir.core.log import logs_dir
from bir.core.paths import project_key
from bir.core.service import ServiceClient
from bir.hooks.daemon import live_session
from bir.hooks.discovery import Discovery, read_discovery
from bir.hooks.replay.host import ProxyHost, proxy_environment
from tests.hooks.daemons import start_server
from tests.paths import REPO

BIN = Path(sys.executable).parent
FLEET = f"{sys.executable} {REPO / 'examples' / 'fleet_server.py'}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = (tmp_path / "project").resolve()
    path.mkdir()
    installed.update(path, replay=True)
    return path


def events(project: Path, name: str) -> list[dict[str, object]]:
    path = logs_dir(config.home()) / f"{project_key(project)}.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [record for line in lines if (record := json.loads(line)).get("event") == name]


def health(found: Discovery) -> dict[str, object]:
    answer = httpx.get(found.url + "/health", headers={"authorization": f"Bearer {found.token}"}, timeout=5)
    data: dict[str, object] = answer.json()
    return data


def test_a_server_nothing_uses_exits_after_its_idle_time_and_the_next_hook_revives_one(
    project: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    process, found = start_server(project, {"BIR_CONTROL_IDLE_MS": "1500"})
    stopped.append(process)
    health(found)  # a look at it is not use
    published = time.monotonic()
    assert process.wait(30) == 0
    assert time.monotonic() - published >= 1.4
    assert [e["idle_ms"] for e in events(project, "control.idle_exit")] == [1500]
    assert read_discovery(project) is None

    hook = subprocess.run(
        [str(BIN / "bir-hook"), "SessionStart"],
        input=json.dumps({"session_id": "s1", "cwd": str(project), "hook_event_name": "SessionStart"}),
        capture_output=True,
        text=True,
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(project)},
        timeout=30,
        check=False,
    )
    assert (hook.returncode, hook.stdout.strip()) == (0, "{}")
    deadline = time.monotonic() + 30
    while (revived := read_discovery(project)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert revived is not None
    assert revived.pid != found.pid
    os.kill(revived.pid, 15)


async def health_of(client: httpx.AsyncClient, found: Discovery) -> dict[str, object]:
    answer = await client.get(found.url + "/health", headers={"authorization": f"Bearer {found.token}"}, timeout=5)
    assert answer.status_code == 200, answer.text
    data: dict[str, object] = answer.json()
    return data


@pytest.mark.anyio
async def test_a_polling_proxy_keeps_the_server_alive_and_its_goodbye_is_seen_within_a_second(
    project: Path, stopped: list[subprocess.Popen[bytes]]
) -> None:
    host = ProxyHost("fleet", FLEET, project=project, env=proxy_environment(config.home()))
    async with httpx.AsyncClient() as client:
        try:
            # The session's proxy is up first (as a host starts its servers); it finds the server once it is.
            await host.start()
            process, found = start_server(project, {"BIR_CONTROL_IDLE_MS": "3000"})
            stopped.append(process)
            with anyio.fail_after(30):
                while (await health_of(client, found)).get("served") != ["fleet"]:  # noqa: ASYNC110 - another process
                    await anyio.sleep(0.05)
            # Twice its idle time with a proxy parked on a poll: still serving.
            with pytest.raises(subprocess.TimeoutExpired):
                await anyio.to_thread.run_sync(process.wait, 6.0)
            assert (await health_of(client, found)).get("served") == ["fleet"]
            # The host closes the proxy's stdin (the end of its session): the server knows at once.
            async with anyio.create_task_group() as group:
                closed = time.monotonic()
                group.start_soon(host.stop)
                with anyio.fail_after(10):
                    while (now := await health_of(client, found)).get("served"):  # noqa: ASYNC110 - another process
                        await anyio.sleep(0.01)
                seen = time.monotonic() - closed
        finally:
            await host.stop()
    assert now.get("left") == ["fleet"]
    assert seen < 1.0
    assert await anyio.to_thread.run_sync(process.wait, 30) == 0
    assert events(project, "control.idle_exit")


@pytest.mark.anyio
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


def bir_hooks(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``bir-hooks`` for ``project``, run to its end (it is expected to refuse to start)."""
    return subprocess.run(
        [str(BIN / "bir-hooks"), "--project", str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_bir_hook_answers_empty(project: Path, env: dict[str, str]) -> None:
    """A prompt's ``bir-hook`` in ``project`` prints ``{}`` and nothing else, and exits 0."""
    hook = json.dumps({"hook_event_name": "UserPromptSubmit", "cwd": str(project), "prompt": "hi"})
    answer = subprocess.run(
        [str(BIN / "bir-hook"), "UserPromptSubmit"],
        input=hook,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (answer.returncode, answer.stdout.strip(), answer.stderr) == (0, "{}", "")


def test_bir_hooks_on_a_planted_store_symlink_exits_in_one_line_and_bir_hook_still_answers(
    project: Path, tmp_path: Path
) -> None:
    target = tmp_path / "victim"
    target.touch()
    (config.home() / "local").mkdir(mode=0o700)
    (config.home() / "local" / "store.db").symlink_to(target)
    env = {**os.environ, "BIR_SERVICE": "local", "BIR_LOGIC_WORKERS": "1"}
    done = bir_hooks(project, env)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "symbolic link" in done.stderr
    assert target.stat().st_size == 0
    assert_bir_hook_answers_empty(project, env)
    assert target.stat().st_size == 0


def _spoil_file_for_folder(home: Path) -> None:
    # (A folder bir may not write to would do as well for another user; these tests may run as root.)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "control").write_text("not a folder")


def _spoil_shared(home: Path) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    home.chmod(0o777)


def _spoil_fifo_logs(home: Path) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.mkfifo(home / "logs")


@pytest.mark.parametrize("spoil", [_spoil_file_for_folder, _spoil_shared, _spoil_fifo_logs])
def test_bir_hooks_in_a_home_it_cannot_use_exits_in_one_line_and_bir_hook_still_answers(
    project: Path, tmp_path: Path, spoil: Callable[[Path], None]
) -> None:
    home = tmp_path / "spoilt-home"
    spoil(home)
    env = {**os.environ, "BIR_HOME": str(home), "BIR_LOGIC_WORKERS": "1"}
    try:
        done = bir_hooks(project, env)
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert str(home) in done.stderr
        assert_bir_hook_answers_empty(project, env)
    finally:
        home.chmod(0o700)
