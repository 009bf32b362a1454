"""``bir status``: gathered from a real control server (the live controller, the fake BaseIn over loopback
HTTP) and the stores, then judged and rendered by pure functions."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from bir.cli import main
from bir.core import config, credentials, installed
from bir.core.off_switch import OffState
from bir.hooks import api
from bir.hooks.commands import status
from bir.hooks.commands.probes import ControlFacts, ServiceCheck, check_service
from bir.hooks.commands.status import StatusFacts
from bir.hooks.discovery import Discovery
from tests.fakes.fixtures import running_fake_service
from tests.hooks.control_rig import live_server
from tests.hooks.ops_facts import replay_view_of


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path.resolve()


async def status_json(project: Path) -> tuple[int, dict[str, Any]]:
    captured: list[str] = []

    def call() -> int:
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["status", "--project", str(project), "--json"])
        captured.append(out.getvalue())
        return code

    code = await anyio.to_thread.run_sync(call)
    data: dict[str, Any] = json.loads(captured[0])
    return code, data


@pytest.mark.anyio
async def test_status_shows_the_server_its_uptime_live_proxies_the_last_hello_and_the_service(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed.update(project, replay=True, allow=("fleet",), install={"localServers": ["fleet", "bir"]})
    async with running_fake_service() as fake, live_server(project, fake) as http:
        monkeypatch.setenv("BIR_AUTH_URL", fake.url)
        monkeypatch.setenv("BIR_TOKEN", fake.token)
        await http.post("/proxy/register", json={"serverName": "fleet", "proxyId": "p1"})
        hello = {"pid": os.getpid(), "version": "test", "tools": 1, "off": False}
        assert (await http.post("/scenario/hello", json=hello)).status_code == 200
        code, data = await status_json(project)
    assert code == 0
    assert data["installed"] is True
    assert data["replay"]["replay"] is True
    assert data["replay"]["allow"] == ["fleet"]
    control = data["controlServer"]
    assert control["answering"] is True
    assert control["uptimeMs"] >= 0
    assert control["served"] == ["fleet"]
    assert control["lastHello"]["tools"] == 1
    assert control["service"] == "ok"
    assert data["service"]["check"] == "accepted"
    assert data["problems"] == []


@pytest.mark.anyio
async def test_a_refused_token_is_a_problem_with_its_fix_and_a_non_zero_exit(project: Path) -> None:
    async with running_fake_service() as fake:
        credentials.save(fake.url, "wrong-token")
        code, data = await status_json(project)
    assert code == 1
    assert data["service"]["urlFrom"] == "stored"
    assert data["service"]["check"] == "refused"
    assert data["problems"][0]["fix"] == "bir login"


def test_status_of_a_project_without_bir_says_how_to_install(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_SERVICE", "remote")
    assert main(["status", "--project", str(project)]) == 0
    out = capsys.readouterr().out
    assert "installed: no — bir install" in out
    assert "signed out — bir login" in out
    assert "\x1b[" not in out  # not a terminal: no colour


def test_with_no_service_configured_status_says_the_local_service_is_in_use_and_how_full_its_store_is(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--project", str(project)]) == 0
    out = capsys.readouterr().out
    assert "service:  local (on this machine) — 0 runs, 0 ready scenarios, 0.0 of 256 MB in " in out
    assert main(["status", "--project", str(project), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["service"]["kind"] == "local"
    assert data["service"]["local"]["exists"] is False
    assert data["problems"] == []


def test_a_local_store_that_is_not_ours_is_a_problem_status_names(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = config.home() / "local" / "store.db"
    store.parent.mkdir(parents=True)
    store.write_text("my notes\n" * 20)
    assert main(["status", "--project", str(project), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert "not a bir store" in data["problems"][0]["what"]
    assert store.read_text() == "my notes\n" * 20


def facts(
    health: api.Health | None, *, off: bool = False, verdict: str = "accepted", down: bool = False
) -> StatusFacts:
    discovery = Discovery("http://127.0.0.1:1", "t", 4242, "0", 0, "/p")
    return StatusFacts(
        project="/p",
        replay=replay_view_of(replay=True, allow=None, wrapped=("fleet",)),
        down=down,
        off=OffState(env=False, file=off, path="/home/.baseinstrunner/off"),
        control=ControlFacts(discovery, health, None if health else "/health: ConnectError"),
        sign_in=credentials.Effective("https://svc", "t", "stored", "stored"),
        service=ServiceCheck(verdict, "https://svc"),  # type: ignore[arg-type]
        log="/home/.baseinstrunner/logs/k.log",
    )


def test_a_service_cooling_down_and_a_proxy_that_is_not_polling_are_shown_in_words() -> None:
    health = api.Health(
        ok=True,
        pid=4242,
        version="0",
        uptime_ms=3_720_000,
        served=[],
        wrapped=["fleet"],
        service="cooling",
        service_cooling_ms=42_000,
    )
    text = status.render_text(facts(health))
    assert "up 1 h 2 min" in text
    assert "fleet no proxy" in text
    assert "cooling down" in text
    assert "42 s left" in text
    assert status.assess(facts(health)) == []


def test_a_server_that_does_not_answer_is_broken_and_the_off_switch_is_loud() -> None:
    found = facts(None, off=True)
    problems = status.assess(found)
    assert len(problems) == 1
    assert "does not answer" in problems[0].what
    assert "bir down && bir up" in problems[0].fix
    text = status.render_text(found)
    assert "bir is OFF" in text
    assert "bir on" in text


def test_colour_is_used_only_when_asked() -> None:
    health = api.Health(ok=True, pid=1, version="0", uptime_ms=1000, served=["fleet"], wrapped=["fleet"])
    assert "\x1b[" in status.render_text(facts(health), colour=True)
    assert "\x1b[" not in status.render_text(facts(health), colour=False)


@pytest.mark.anyio
async def test_the_service_check_shows_its_url_without_userinfo() -> None:
    check = await check_service("http://me:hunter22@127.0.0.1:1", "tok", timeout_s=1)
    assert check.verdict == "unreachable"
    assert check.url == "http://***@127.0.0.1:1"
    assert "hunter22" not in check.detail
