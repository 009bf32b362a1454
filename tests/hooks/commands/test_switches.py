"""The switches, the lifecycle and the sign-in, through ``bir.cli.main`` in-process (real files, the fake
BaseIn over loopback HTTP), and through real ``bir-hooks``, ``bir-hook`` and ``bir-scenario`` processes
where a process boundary is what is being proven."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
import pytest
from mcp.client.session import IncomingMessage

from bir.cli import main
from bir.core import credentials, installed
from bir.core.paths import revive_stamp
from bir.core.service import ServiceClient
from bir.hooks.discovery import Discovery, read_discovery, write_discovery
from tests.fakes.fixtures import running_fake_service
from tests.hooks.control_rig import live_server
from tests.proxy.test_scenario_server import bir_scenario, control_server

BIN = Path(sys.executable).parent


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path.resolve()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run(capsys, *argv, "--json")
    data: dict[str, Any] = json.loads(out)
    return code, data


# -- bir replay status|on|off|allow -------------------------------------------------------------------


def test_replay_switches_are_refused_where_bir_is_not_installed_and_say_to_install(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["replay", "on"], ["replay", "off"], ["replay", "allow", "fleet"]):
        code, out, err = run(capsys, *argv, "--project", str(project))
        assert code == 1
        assert out == ""
        assert "not installed" in err
        assert "bir install --replay" in err
    assert installed.project(project) is None
    code, out, _ = run(capsys, "replay", "status", "--project", str(project))
    assert code == 0
    assert "not installed" in out
    assert "replay is off" in out


def test_replay_on_off_and_allow_are_stored_for_the_project(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    installed.update(project, install={"localServers": ["fleet", "github", "bir"]})
    code, data = run_json(capsys, "replay", "on", "--project", str(project))
    assert code == 0
    assert data["replay"] is True
    assert data["allow"] is None
    assert any("no allowlist" in w for w in data["warnings"])
    code, out, _ = run(capsys, "replay", "allow", "fleet, github", "--project", str(project))
    assert code == 0
    assert "fleet, github" in out
    stored = installed.project(project)
    assert stored is not None
    assert stored.replay
    assert stored.allow == ("fleet", "github")
    code, data = run_json(capsys, "replay", "status", "--project", str(project))
    assert (data["replay"], data["allow"], data["warnings"]) == (True, ["fleet", "github"], [])
    run(capsys, "replay", "allow", "all", "--project", str(project))
    run(capsys, "replay", "off", "--project", str(project))
    stored = installed.project(project)
    assert stored is not None
    assert not stored.replay
    assert stored.allow is None


def test_a_bad_allowlist_is_a_usage_error_that_shows_how(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    installed.update(project, replay=True)
    code, _, err = run(capsys, "replay", "allow", "fleet,,github", "--project", str(project))
    assert code == 2
    assert "bir replay allow fleet,github" in err
    code, _, err = run(capsys, "replay", "allow", "--project", str(project))
    assert code == 2
    assert "say which servers" in err
    stored = installed.project(project)
    assert stored is not None
    assert stored.allow is None


def test_the_environment_overrides_are_named_in_the_status(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    installed.update(project, replay=True, allow=("fleet",), install={"localServers": ["fleet", "bir"]})
    monkeypatch.setenv("BIR_REPLAY", "0")
    monkeypatch.setenv("BIR_REPLAY_ALLOW_SERVERS", "github")
    code, out, _ = run(capsys, "replay", "status", "--project", str(project))
    assert code == 0
    assert "Replay is off" in out
    assert "BIR_REPLAY=0" in out
    assert "github" in out
    assert "BIR_REPLAY_ALLOW_SERVERS" in out


def test_bir_replay_without_a_switch_still_needs_a_scenario_and_a_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--prompt", "x"]) == 2
    assert "--scenario and --prompt" in capsys.readouterr().err


# -- the switches seen by a running control server and a running bir-scenario --------------------------


async def hook(project: Path, event: str, body: dict[str, Any]) -> dict[str, Any]:
    """Run the real ``bir-hook EVENT`` for ``project`` and return what it printed."""
    payload = {"session_id": "sess-ops", "cwd": str(project), "hook_event_name": event, **body}
    done = await anyio.run_process(
        [str(BIN / "bir-hook"), event],
        input=json.dumps(payload).encode(),
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(project)},
        check=False,
    )
    assert done.returncode == 0
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.anyio
async def test_bir_off_and_on_reach_a_running_control_server_through_the_hooks(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed.update(project, replay=True)
    async with running_fake_service() as fake, live_server(project, fake):
        assert main(["off"]) == 0
        assert await hook(project, "UserPromptSubmit", {"prompt": "check the fleet"}) == {}
        assert fake.requests_to("match") == []
        assert main(["on"]) == 0
        assert await hook(project, "UserPromptSubmit", {"prompt": "check the fleet"}) == {}
        assert len(fake.requests_to("match")) == 1
    out = capsys.readouterr().out
    assert "bir is off everywhere" in out
    assert "bir on" in out
    assert "bir is on again" in out


@pytest.mark.anyio
async def test_bir_replay_off_and_on_reach_a_running_control_server_without_a_restart(project: Path) -> None:
    installed.update(project, replay=True)
    async with running_fake_service() as fake, live_server(project, fake) as http:
        prompt = {"session_id": "s", "cwd": str(project), "prompt": "p", "hook_event_name": "UserPromptSubmit"}
        for argv, expected in ((["replay", "off"], False), (["replay", "on"], True)):
            assert main([*argv, "--project", str(project)]) == 0
            assert (await http.post("/session/prompt", json=prompt)).status_code == 200
            health = (await http.get("/health")).json()
            assert health.get("replay", False) is expected
            registered = await http.post("/proxy/register", json={"serverName": "fleet", "proxyId": "p1"})
            assert registered.json()["replay"] is expected


@pytest.mark.anyio
async def test_a_running_bir_scenario_lists_nothing_after_bir_off_and_run_scenario_after_bir_on(
    project: Path, tmp_path: Path
) -> None:
    changed = [anyio.Event(), anyio.Event()]

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            next(event for event in changed if not event.is_set()).set()

    installed.update(project, replay=True)  # run_scenario is listed only while replay is on
    async with control_server(project), bir_scenario(project, tmp_path / "err", on_message=on_message) as client:
        assert [tool.name for tool in (await client.list_tools()).tools] == ["run_scenario"]
        assert main(["off"]) == 0
        with anyio.fail_after(10):
            await changed[0].wait()
        assert (await client.list_tools()).tools == []
        assert main(["on"]) == 0
        with anyio.fail_after(10):
            await changed[1].wait()
        assert [tool.name for tool in (await client.list_tools()).tools] == ["run_scenario"]


def test_after_bir_off_a_hook_answers_empty_and_revives_no_server(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed.update(project, replay=True)
    assert main(["off"]) == 0
    stamp = revive_stamp(Path(os.environ["BIR_HOME"]), project)
    assert anyio.run(hook, project, "SessionStart", {}) == {}
    assert not stamp.exists()
    assert read_discovery(project) is None


def test_bir_on_warns_when_bir_off_is_set_in_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_OFF", "1")
    code, out, _ = run(capsys, "on")
    assert code == 0
    assert "bir was not off" in out
    assert "BIR_OFF=1" in out


# -- bir up / bir down ---------------------------------------------------------------------------------


@pytest.fixture
def stopper(project: Path) -> Iterator[None]:
    """Whatever a test leaves running for ``project`` is stopped."""
    yield
    found = read_discovery(project)
    if found is not None:
        main(["down", "--project", str(project)])


@pytest.mark.usefixtures("stopper")
def test_up_starts_a_detached_control_server_and_down_stops_it_and_keeps_hooks_from_reviving_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed.update(project, replay=True, down=True)
    # `bir up` in a process of its own: the server it starts outlives it, as it does for a person.
    argv = [str(BIN / "bir"), "up", "--project", str(project), "--json"]
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["started"] is True
    stored = installed.project(project)
    assert stored is not None
    assert not stored.down
    found = read_discovery(project)
    assert found is not None
    assert found.pid == data["server"]["pid"]
    code, out, _ = run(capsys, "up", "--project", str(project))
    assert code == 0
    assert "already up" in out

    code, out, _ = run(capsys, "down", "--project", str(project))
    assert code == 0
    assert f"pid {found.pid}" in out
    assert "bir up" in out
    assert read_discovery(project) is None
    stored = installed.project(project)
    assert stored is not None
    assert stored.down

    # A hook in a down project answers {} and starts nothing (the revive stamp is written before a start).
    stamp = revive_stamp(Path(os.environ["BIR_HOME"]), project)
    stamp.unlink(missing_ok=True)
    assert anyio.run(hook, project, "SessionStart", {}) == {}
    assert not stamp.exists()
    code, out, _ = run(capsys, "down", "--project", str(project))
    assert code == 0
    assert "No control server was running" in out


def test_up_is_refused_where_bir_is_not_installed(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "up", "--project", str(project))
    assert code == 1
    assert out == ""
    assert "bir install" in err
    assert read_discovery(project) is None


def test_down_never_signals_a_process_that_is_not_a_control_server(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A discovery file naming this test's own pid: alive, but not bir-hooks.
    write_discovery(Discovery("http://127.0.0.1:9", "t", os.getpid(), "0", 0, str(project)))
    code, _, err = run(capsys, "down", "--project", str(project))
    assert code == 1
    assert "not a bir-hooks process" in err
    assert "nothing was signalled" in err


# -- bir login / bir logout ----------------------------------------------------------------------------


async def cli(*argv: str) -> int:
    # Commands that run their own event loop, from a thread beside the test's loop.
    return await anyio.to_thread.run_sync(main, list(argv))


@pytest.fixture
def stdin(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """What ``bir login`` reads its token from: a pipe, not a terminal."""

    def give(text: str) -> None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))

    return give


@pytest.mark.anyio
async def test_login_checks_the_token_stores_it_0600_and_logout_forgets_it(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    async with running_fake_service() as fake:
        stdin(fake.token + "\n")
        assert await cli("login", "--url", fake.url) == 0
    out = capsys.readouterr().out
    assert "Signed in to" in out
    assert "accepted the token" in out
    assert "next request to the service (no restart)" in out
    path = credentials.credentials_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert credentials.load() == credentials.Credentials(fake.url, fake.token, credentials.load().saved_at)  # type: ignore[union-attr]
    assert await cli("logout") == 0
    assert "Signed out" in capsys.readouterr().out
    assert not path.exists()


@pytest.mark.anyio
async def test_a_token_the_service_refuses_is_not_stored(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    async with running_fake_service() as fake:
        stdin("wrong\n")
        assert await cli("login", "--url", fake.url) == 1
    err = capsys.readouterr().err
    assert "refused this token" in err
    assert "nothing was stored" in err
    assert credentials.load() is None


@pytest.mark.anyio
async def test_a_service_that_does_not_answer_as_the_service_stores_nothing_and_says_how_to_store_it_anyway(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    async with running_fake_service() as fake:
        fake.down = True
        stdin("tok\n")
        assert await cli("login", "--url", fake.url, "--json") == 1
        data = json.loads(capsys.readouterr().out)
        assert data["error"] == "not_the_service"
        assert "503" in data["message"]
        assert "--no-check" in data["message"]
        assert credentials.load() is None

        stdin("tok\n")
        asked = len(fake.requests)
        assert await cli("login", "--url", fake.url, "--no-check") == 0
        assert len(fake.requests) == asked
    out = capsys.readouterr().out
    assert "without checking it (--no-check): bir did not contact the service" in out
    assert credentials.load() is not None


def test_a_url_that_does_not_answer_is_not_stored(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    stdin("piped-token\n")
    # Nothing listens on port 9 of loopback.
    code, _, err = run(capsys, "login", "--url", "http://127.0.0.1:9")
    assert code == 1
    assert "could not be reached" in err
    assert "nothing was stored" in err
    assert credentials.load() is None


@pytest.mark.anyio
async def test_a_web_page_that_answers_404_is_not_taken_for_the_service(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    from bir.benchmarks.serving import Releaser, serve_in_thread_async

    async def page(request: object) -> HTMLResponse:
        return HTMLResponse("<h1>Not Found</h1>", status_code=404)

    app = Starlette(routes=[Route("/{path:path}", page)])
    async with serve_in_thread_async(app, Releaser()) as url:
        stdin("tok\n")
        assert await cli("login", "--url", url) == 1
    assert "did not answer as the BaseIn service" in capsys.readouterr().err
    assert credentials.load() is None


def test_login_reads_the_token_from_stdin_when_it_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    stdin("piped-token\n")
    code, out, _ = run(capsys, "login", "--url", "http://127.0.0.1:9", "--no-check")
    assert code == 0
    assert "without checking" in out
    stored = credentials.load()
    assert stored is not None
    assert stored.token == "piped-token"


def test_a_token_on_the_command_line_is_refused_with_the_way_that_keeps_it_out_of_ps(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    stdin("")
    code, _, err = run(capsys, "login", "--url", "http://127.0.0.1:9", "--token", "t0k3n")
    assert code == 2
    assert "`ps`" in err
    assert "| bir login" in err
    assert "t0k3n" not in err
    assert credentials.load() is None
    with pytest.raises(SystemExit):
        main(["login", "--help"])
    assert "--token" not in capsys.readouterr().out


def test_login_without_a_url_or_a_token_is_a_usage_error_that_says_how(
    capsys: pytest.CaptureFixture[str], stdin: Callable[[str], None]
) -> None:
    stdin("t\n")
    code, _, err = run(capsys, "login")
    assert code == 2
    assert "--url" in err
    stdin("")
    code, _, err = run(capsys, "login", "--url", "https://basein.example.com")
    assert code == 2
    assert "pipe it on stdin" in err
    assert credentials.load() is None


def test_login_warns_that_the_environment_wins(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, stdin: Callable[[str], None]
) -> None:
    monkeypatch.setenv("BIR_AUTH_URL", "http://127.0.0.1:9/other")
    monkeypatch.setenv("BIR_TOKEN", "env-token")
    stdin("stored-token\n")
    code, out, _ = run(capsys, "login", "--url", "http://127.0.0.1:9", "--no-check")
    assert code == 0
    assert "BIR_AUTH_URL in this environment wins" in out
    assert "BIR_TOKEN in this environment wins" in out
    assert ServiceClient().base_url == "http://127.0.0.1:9/other"
    assert ServiceClient()._sign_in()[1] == "env-token"
