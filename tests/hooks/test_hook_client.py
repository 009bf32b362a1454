"""``bir-hook`` as Claude Code runs it: a real process, real pipes, a real server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, get_args

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bir.core import config, installed
from bir.core.paths import discovery_file, project_key, revive_stamp, server_lock, stall_stamp
from bir.hooks import api, hook_client
from bir.hooks.discovery import Discovery, write_discovery
from bir.hooks.server.control import ControlServer

pytestmark = pytest.mark.anyio

BIN = Path(sys.executable).parent
HOOK = str(BIN / "bir-hook")
TOKEN = "stand-in-token"
HEAVY = ("pydantic", "httpx", "anyio", "msgspec", "psutil", "uvicorn", "starlette", "mcp", "py_mini_racer", "dukpy")


class StandIn:
    """A loopback server answering the seven hook routes the way a test asks."""

    def __init__(self) -> None:
        self.mode = "echo"
        self.seen: list[tuple[str, str | None, bytes]] = []
        self.release = anyio.Event()
        self.url = ""

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        self.seen.append((request.url.path, request.headers.get("authorization"), body))
        if self.mode == "text":
            return PlainTextResponse("not json")
        if self.mode == "list":
            return JSONResponse([1, 2])
        if self.mode == "500":
            return JSONResponse({"hookSpecificOutput": {}}, status_code=500)
        if self.mode == "slow":
            await self.release.wait()
        return JSONResponse({"route": request.url.path, "echo": json.loads(body)})


class _Server(uvicorn.Server):
    """uvicorn leaving the test process's signals alone, with an event for "listening"."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@pytest.fixture
async def stand_in() -> AsyncIterator[StandIn]:
    state = StandIn()
    app = Starlette(routes=[Route(route.path, state.handle, methods=["POST"]) for route in api.HOOK_ROUTES.values()])
    sock = socket.create_server(("127.0.0.1", 0))
    server = _Server(uvicorn.Config(app, log_config=None, lifespan="off", timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    with anyio.fail_after(10):
        await server.ready.wait()
    state.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        yield state
    finally:
        state.release.set()
        server.should_exit = True
        await task


def _publish(project: Path, url: str, token: str = TOKEN, pid: int | None = None) -> None:
    write_discovery(
        Discovery(url=url, token=token, pid=pid or os.getpid(), version="t", started_at=0, project=str(project))
    )


async def _hook(
    event: str, body: bytes | str, project: Path | None, env: Mapping[str, str] | None = None
) -> tuple[str, str, int]:
    full = dict(os.environ)
    full.pop("CLAUDE_PROJECT_DIR", None)
    full.pop("BIR_OFF", None)
    if project is not None:
        full["CLAUDE_PROJECT_DIR"] = str(project)
    full.update(env or {})
    data = body.encode() if isinstance(body, str) else body
    done = await anyio.run_process([HOOK, event], input=data, env=full, check=False)
    return done.stdout.decode(), done.stderr.decode(), done.returncode


def _hook_log(home: Path) -> list[dict[str, Any]]:
    path = home / "logs" / "hook.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def home() -> Path:
    """BIR_HOME, which tests/conftest.py points at a temp folder."""
    return config.home()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


BODY = json.dumps({"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {}})


async def test_a_hook_posts_its_body_with_the_token_and_prints_the_answer(stand_in: StandIn, project: Path) -> None:
    _publish(project, stand_in.url)
    out, err, code = await _hook("PreToolUse", BODY, project)
    assert code == 0
    assert err == ""
    assert out.endswith("\n")
    assert out.count("\n") == 1
    # The body goes as Claude Code wrote it, with the session's host (here: this test process) in front.
    host = {"bir_host_pid": os.getpid()}
    assert json.loads(out) == {"route": "/tool/pre", "echo": {**host, **json.loads(BODY)}}
    sent = f'{{"bir_host_pid":{os.getpid()},'.encode() + BODY.encode()[1:]
    assert stand_in.seen == [("/tool/pre", f"Bearer {TOKEN}", sent)]


async def test_a_hook_run_through_sh_names_the_shells_parent_as_its_host(stand_in: StandIn, project: Path) -> None:
    _publish(project, stand_in.url)
    env = {**os.environ, "CLAUDE_PROJECT_DIR": str(project)}
    env.pop("CLAUDE_PID", None)
    # As Claude Code runs a command hook: `/bin/sh -c "<command>"` (the `; true` keeps the shell alive).
    done = await anyio.run_process(["/bin/sh", "-c", f"{HOOK} PreToolUse; true"], input=BODY.encode(), env=env)
    assert json.loads(done.stdout)["echo"]["bir_host_pid"] == os.getpid()


@pytest.mark.parametrize("event", list(api.HOOK_ROUTES))
async def test_every_event_goes_to_its_route(stand_in: StandIn, project: Path, event: str) -> None:
    _publish(project, stand_in.url)
    out, _, code = await _hook(event, "{}", project)
    assert code == 0
    assert json.loads(out)["route"] == api.HOOK_ROUTES[event].path


async def test_the_project_comes_from_the_hooks_cwd_without_claude_project_dir(
    stand_in: StandIn, project: Path
) -> None:
    _publish(project, stand_in.url)
    out, _, _ = await _hook("Stop", json.dumps({"cwd": str(project)}), None)
    assert json.loads(out)["route"] == "/session/stop"


async def test_a_hook_with_no_server_prints_an_empty_object(project: Path) -> None:
    assert await _hook("PreToolUse", BODY, project) == ("{}\n", "", 0)


async def test_a_refused_connection_prints_an_empty_object_and_logs(project: Path, home: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    _publish(project, f"http://127.0.0.1:{port}")
    assert await _hook("PostToolUse", "{}", project) == ("{}\n", "", 0)
    [line] = _hook_log(home)
    assert line["event"] == "hook.failed"
    assert "/tool/post" in line["error"]


async def test_a_server_past_the_deadline_gets_an_empty_object(stand_in: StandIn, project: Path) -> None:
    stand_in.mode = "slow"
    _publish(project, stand_in.url)
    # PostToolUse's own deadline is 3.5 s, inside the 5 s hook timeout install writes.
    assert await _hook("PostToolUse", "{}", project) == ("{}\n", "", 0)


@pytest.mark.parametrize("mode", ["text", "list", "500"])
async def test_an_answer_that_is_not_a_json_object_with_200_prints_an_empty_object(
    stand_in: StandIn, project: Path, mode: str, home: Path
) -> None:
    stand_in.mode = mode
    _publish(project, stand_in.url)
    assert await _hook("PreToolUse", BODY, project) == ("{}\n", "", 0)
    assert len(_hook_log(home)) == 1


@pytest.mark.parametrize("body", [b"", b"not json", b"[1]", b"\xff\xfe", b"{" * 100_000])
async def test_bad_stdin_prints_an_empty_object_and_posts_nothing(
    stand_in: StandIn, project: Path, body: bytes
) -> None:
    _publish(project, stand_in.url)
    assert await _hook("PreToolUse", body, project) == ("{}\n", "", 0)
    assert stand_in.seen == []


async def test_stdin_past_16_mib_is_bad_input(stand_in: StandIn, project: Path, home: Path) -> None:
    _publish(project, stand_in.url)
    body = b'{"x": "' + b"a" * (16 * 1024 * 1024) + b'"}'
    assert await _hook("PreToolUse", body, project) == ("{}\n", "", 0)
    assert stand_in.seen == []
    assert "larger" in _hook_log(home)[0]["error"]


@pytest.mark.parametrize("argv", [["Notification"], [], ["PreToolUse", "extra"]])
async def test_an_unknown_event_prints_an_empty_object(project: Path, argv: list[str]) -> None:
    full = {**os.environ, "CLAUDE_PROJECT_DIR": str(project)}
    done = await anyio.run_process([HOOK, *argv], input=b"{}", env=full, check=False)
    assert (done.stdout, done.stderr, done.returncode) == (b"{}\n", b"", 0)


async def test_bir_off_answers_at_once_without_contacting_the_server(stand_in: StandIn, project: Path) -> None:
    _publish(project, stand_in.url)
    assert await _hook("PreToolUse", BODY, project, {"BIR_OFF": "1"}) == ("{}\n", "", 0)
    assert stand_in.seen == []


async def test_a_discovery_file_of_a_dead_pid_is_no_server(stand_in: StandIn, project: Path) -> None:
    dead = await anyio.run_process([sys.executable, "-c", "import os; print(os.getpid())"])
    _publish(project, stand_in.url, pid=int(dead.stdout))
    assert await _hook("PreToolUse", BODY, project) == ("{}\n", "", 0)
    assert stand_in.seen == []


async def test_a_real_control_server_refusing_a_wrong_token_gives_an_empty_object(project: Path, home: Path) -> None:
    control = ControlServer(token="right", replay_enabled=False)
    await control.start()
    try:
        assert control.url is not None
        _publish(project, control.url, token="wrong")
        assert await _hook("PreToolUse", BODY, project) == ("{}\n", "", 0)
    finally:
        await control.stop()
    assert "401" in _hook_log(home)[0]["error"]


async def test_a_real_control_server_answers_the_hook_through_its_route(project: Path, home: Path) -> None:
    control = ControlServer(token="right", replay_enabled=False)
    await control.start()
    try:
        assert control.url is not None
        _publish(project, control.url, token="right")
        out, err, code = await _hook("PostToolUse", json.dumps({"session_id": "s1", "tool_name": "Bash"}), project)
    finally:
        await control.stop()
    assert (err, code) == ("", 0)
    assert isinstance(json.loads(out), dict)
    assert _hook_log(home) == []


async def test_the_hook_imports_only_the_standard_library(stand_in: StandIn, project: Path) -> None:
    _publish(project, stand_in.url)
    script = (
        "import sys\n"
        "sys.argv = ['bir-hook', 'PreToolUse']\n"
        "from bir.hooks import hook_client\n"
        "hook_client.main()\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "sys.stderr.write(repr(heavy))\n"
    )
    full = {**os.environ, "CLAUDE_PROJECT_DIR": str(project)}
    done = await anyio.run_process([sys.executable, "-c", script], input=BODY.encode(), env=full, check=False)
    assert json.loads(done.stdout)["route"] == "/tool/pre"
    assert done.stderr.decode() == "[]"


def test_the_hook_log_rotates_past_a_megabyte_keeping_one_old_file(project: Path, home: Path) -> None:
    logs = home / "logs"
    logs.mkdir()
    (logs / "hook.log").write_bytes(b"{}\n" * (1024 * 1024 // 3))
    (logs / "hook.log.1").write_bytes(b"older\n")
    env = {**os.environ, "CLAUDE_PROJECT_DIR": str(project)}
    subprocess.run([HOOK, "PreToolUse"], input=b"bad", check=True, capture_output=True, env=env)
    assert sorted(p.name for p in logs.iterdir()) == ["hook.log", "hook.log.1"]
    assert (logs / "hook.log.1").stat().st_size > 1000 * 1000
    assert len(_hook_log(home)) == 1


# -- revive ----------------------------------------------------------------------------------------


def _wait_for(predicate: Any, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def _read_pid(project: Path, home: Path) -> int:
    return int(json.loads(discovery_file(home, project).read_text())["pid"])


def _stop_server(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    _wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), 20)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def revived(project: Path, home: Path) -> Iterator[Path]:
    yield project
    path = discovery_file(home, project)
    if path.exists():
        _stop_server(_read_pid(project, home))


def test_a_hook_of_an_installed_project_revives_its_server_detached(revived: Path, home: Path) -> None:
    installed.update(revived, replay=False)
    done = subprocess.run(
        [HOOK, "UserPromptSubmit"],
        input=b"{}",
        capture_output=True,
        check=False,
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(revived)},
    )
    assert (done.stdout, done.stderr, done.returncode)[1:] == (b"", 0)
    assert json.loads(done.stdout) is not None
    _wait_for(lambda: discovery_file(home, revived).exists())
    pid = _read_pid(revived, home)
    assert pid != os.getpid()
    assert os.getsid(pid) == pid  # a session of its own: Claude Code's process group is not its
    assert (home / "logs" / f"{project_key(revived)}.log").exists()
    assert revive_stamp(home, revived).exists()


@pytest.mark.parametrize("state", ["not installed", "down"])
def test_a_hook_never_revives_a_project_not_installed_or_down(revived: Path, home: Path, state: str) -> None:
    if state == "down":
        installed.update(revived, down=True)
    done = subprocess.run(
        [HOOK, "SessionStart"],
        input=b"{}",
        capture_output=True,
        check=False,
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(revived)},
    )
    assert (done.stdout, done.stderr, done.returncode) == (b"{}\n", b"", 0)
    assert not revive_stamp(home, revived).exists()
    assert not server_lock(home, revived).exists()


def test_a_revive_is_started_at_most_once_per_ten_seconds(revived: Path, home: Path) -> None:
    installed.update(revived)
    stamp = revive_stamp(home, revived)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()
    done = subprocess.run(
        [HOOK, "PreToolUse"],
        input=b"{}",
        capture_output=True,
        check=False,
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(revived)},
    )
    assert done.stdout == b"{}\n"
    assert not server_lock(home, revived).exists()


def test_two_racing_revives_end_with_one_server(revived: Path, home: Path) -> None:
    installed.update(revived)
    command = [str(BIN / "bir-hooks"), "revive", "--project", str(revived)]
    first = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: discovery_file(home, revived).exists())
        _wait_for(lambda: first.poll() is not None or second.poll() is not None)
        loser = first if first.poll() is not None else second
        winner = second if loser is first else first
        assert loser.returncode == 0
        assert winner.poll() is None
        assert _read_pid(revived, home) == winner.pid
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=20)


def test_revive_exits_at_once_for_a_project_not_installed(project: Path, home: Path) -> None:
    done = subprocess.run(
        [str(BIN / "bir-hooks"), "revive", "--project", str(project)], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0
    assert not discovery_file(home, project).exists()


def test_bir_hooks_own_deadline_sits_between_the_servers_and_the_hooks_for_every_event() -> None:
    assert set(api.HOOK_ROUTES) == set(get_args(api.HookEvent))
    for route in api.HOOK_ROUTES.values():
        # Longer than the server's own deadline (its overdue answer still arrives), shorter than the hook's.
        assert route.answered_by_ms / 1000 < route.client_s < route.timeout_s


def test_help_is_for_a_person_and_names_the_events() -> None:
    done = subprocess.run([HOOK, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: bir-hook EVENT")
    assert "PreToolUse" in done.stdout


def test_the_host_goes_in_front_of_the_body_as_written_and_never_twice() -> None:
    body = b' \n{"session_id": "s", "tool_response": {"stdout": "x"}}'
    added = hook_client.with_host(body, json.loads(body), 4242)
    assert json.loads(added) == {"bir_host_pid": 4242, **json.loads(body)}
    assert added.endswith(b'"session_id": "s", "tool_response": {"stdout": "x"}}')
    assert hook_client.with_host(b"{}", {}, 4242) == b"{}"
    already = b'{"bir_host_pid": 1, "session_id": "s"}'
    assert hook_client.with_host(already, json.loads(already), 4242) == already


# -- a home bir can trust, and a server that does not answer (issue 16) -------------------------------


def test_a_planted_revive_stamp_symlink_never_truncates_its_target(project: Path, home: Path) -> None:
    installed.update(project, down=False)
    target = project / "precious.txt"
    target.write_text("the user's own\n")
    stamp = revive_stamp(home, project)
    stamp.parent.mkdir(mode=0o700, exist_ok=True)
    stamp.symlink_to(target)
    os.utime(stamp, (0, 0), follow_symlinks=False)  # a revive is due
    done = subprocess.run(
        [HOOK, "PreToolUse"],
        input=b"{}",
        capture_output=True,
        check=False,
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(project)},
    )
    assert (done.stdout, done.stderr, done.returncode) == (b"{}\n", b"", 0)
    assert target.read_text() == "the user's own\n"
    [line] = _hook_log(home)
    assert "symbolic link" in line["error"]


@pytest.mark.parametrize("planted", ["discovery", "log"])
async def test_a_fifo_in_the_home_never_holds_a_hook(project: Path, home: Path, planted: str) -> None:
    path = discovery_file(home, project) if planted == "discovery" else home / "logs" / "hook.log"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.mkfifo(path)
    with anyio.fail_after(5):
        assert await _hook("PreToolUse", BODY, project) == ("{}\n", "", 0)


async def test_a_server_that_did_not_answer_is_skipped_until_it_runs_again(
    stand_in: StandIn, project: Path, home: Path
) -> None:
    stand_in.mode = "slow"
    _publish(project, stand_in.url)
    assert await _hook("PostToolUse", "{}", project) == ("{}\n", "", 0)
    stamp = stall_stamp(home, project)
    assert stamp.read_text() == f"{os.getpid()}\n"
    # Later hooks answer at once and never reach the server.
    with anyio.fail_after(2):
        assert await _hook("PreToolUse", BODY, project) == ("{}\n", "", 0)
    assert len(stand_in.seen) == 1
    # Once it runs again (bir-hooks clears the stamp), hooks reach it.
    stand_in.mode = "echo"
    stamp.unlink()
    out, _, _ = await _hook("PreToolUse", BODY, project)
    assert json.loads(out)["route"] == "/tool/pre"


async def test_a_stall_stamp_of_another_server_is_ignored(stand_in: StandIn, project: Path, home: Path) -> None:
    _publish(project, stand_in.url)
    stamp = stall_stamp(home, project)
    stamp.write_text("999999999\n")
    out, _, _ = await _hook("PreToolUse", BODY, project)
    assert json.loads(out)["route"] == "/tool/pre"


def test_a_running_server_clears_the_note_that_it_did_not_answer(revived: Path, home: Path) -> None:
    child = subprocess.Popen(
        [str(BIN / "bir-hooks"), "--project", str(revived)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    try:
        _wait_for(lambda: discovery_file(home, revived).exists())
        stamp = stall_stamp(home, revived)
        stamp.write_text(f"{child.pid}\n")
        _wait_for(lambda: not stamp.exists(), 10)
    finally:
        child.terminate()
        child.wait(20)
