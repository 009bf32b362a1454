"""The MCP host ``bir replay --wrap`` is for its ``bir-proxy``: what the proxy and its upstream are given
(never bir's own secrets), the handshake and how it fails, where the proxy's stderr goes, and a bounded stop."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from bir.core import config
from bir.hooks.replay import host as host_module
from bir.hooks.replay.host import HostSessionError, ProxyHost, proxy_environment
from tests.paths import REPO

pytestmark = pytest.mark.anyio

ENVDUMP = REPO / "tests" / "fakes" / "envdump_server.py"
SECRETS = {"BIR_TOKEN": "tok-secret", "BIR_DERIVE_API_KEY": "sk-derive-secret"}


async def _names_the_upstream_sees(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Start a real bir-proxy wrapping the env-dump server in ``env``; answer the upstream's variable names."""
    dump = tmp_path / "env.json"
    host = ProxyHost("envdump", f"{sys.executable} {ENVDUMP} {dump}", project=tmp_path, env=env)
    try:
        result = await host.start()
    finally:
        await host.stop()
    assert result.server_info.name == "envdump"
    names: list[str] = json.loads(dump.read_text())
    return names


def _descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


@pytest.fixture
def new_processes() -> Callable[[], list[psutil.Process]]:
    """The processes below this one that were not there when the test began (other tests' pools are)."""
    before = {p.pid for p in _descendants()}
    return lambda: [p for p in _descendants() if p.pid not in before]


def _with_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("BIR_TEST_PLAIN", "kept")


async def test_a_wrapped_upstream_started_by_bir_replay_does_not_see_birs_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_secrets(monkeypatch)
    names = await _names_the_upstream_sees(tmp_path, proxy_environment(config.home()))
    assert "BIR_TEST_PLAIN" in names
    assert not set(SECRETS) & set(names)


async def test_a_proxy_given_birs_secrets_still_starts_its_upstream_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_secrets(monkeypatch)
    names = await _names_the_upstream_sees(tmp_path, dict(os.environ))  # the secrets reach the proxy itself
    assert "BIR_TEST_PLAIN" in names
    assert not set(SECRETS) & set(names)


def test_the_proxy_environment_has_no_secret_and_points_at_the_given_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_secrets(monkeypatch)
    env = proxy_environment(tmp_path)
    assert env["BIR_HOME"] == str(tmp_path)
    assert not set(SECRETS) & set(env)


async def test_hosts_stopped_in_the_order_they_started_leave_no_process_behind(
    tmp_path: Path, new_processes: Callable[[], list[psutil.Process]]
) -> None:
    env = proxy_environment(config.home())
    hosts = [
        ProxyHost(name, f"{sys.executable} {ENVDUMP} {tmp_path / name}", project=tmp_path, env=env)
        for name in ("first", "second")
    ]
    try:
        for host in hosts:
            await host.start()
        assert len([p for p in new_processes() if "bir.proxy" in p.cmdline()]) == 2
    finally:
        # Not the reverse order: each session lives in its own task, so any order is a clean stop.
        for host in hosts:
            await host.stop()
    assert new_processes() == []


async def test_a_server_that_exits_before_the_handshake_is_a_clear_error(
    tmp_path: Path, new_processes: Callable[[], list[psutil.Process]]
) -> None:
    host = ProxyHost(
        "quits", f"{sys.executable} -c 'import sys; sys.exit(3)'", project=tmp_path, env=proxy_environment(tmp_path)
    )
    try:
        with pytest.raises(
            HostSessionError,
            match=r"^--wrap quits: `.*` exited before the MCP handshake, so it is not a stdio MCP server",
        ):
            await host.start()
    finally:
        await host.stop()
    assert new_processes() == []


async def test_a_command_that_is_not_an_mcp_server_times_out_and_its_whole_tree_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_processes: Callable[[], list[psutil.Process]]
) -> None:
    monkeypatch.setattr(host_module, "INITIALIZE_TIMEOUT_S", 1.0)
    host = ProxyHost("mute", "sleep 600", project=tmp_path, env=proxy_environment(tmp_path))
    try:
        with pytest.raises(
            HostSessionError,
            match=r"^--wrap mute: `sleep 600` did not answer MCP's initialize within 1 s, so it is not a stdio",
        ):
            await host.start()
        assert any(p.cmdline()[:1] == ["sleep"] for p in new_processes())
    finally:
        await host.stop()
    # The SDK stops the proxy's process group: its upstream goes with it.
    assert new_processes() == []


async def test_an_unparsable_command_is_refused_before_anything_starts(
    tmp_path: Path, new_processes: Callable[[], list[psutil.Process]]
) -> None:
    host = ProxyHost("bad", "'unclosed", project=tmp_path, env=proxy_environment(tmp_path))
    with pytest.raises(HostSessionError, match=r"^--wrap bad: No closing quotation"):
        await host.start()
    await host.stop()
    assert new_processes() == []


async def test_the_proxys_stderr_goes_to_its_own_log_file_readable_by_the_user_only(tmp_path: Path) -> None:
    log_path = tmp_path / "logs" / "child.log"
    dump = tmp_path / "env.json"
    host = ProxyHost(
        "envdump",
        f"{sys.executable} {ENVDUMP} {dump}",
        project=tmp_path,
        env=proxy_environment(config.home()),
        log_path=log_path,
    )
    try:
        await host.start()
    finally:
        await host.stop()
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    events = [json.loads(line)["event"] for line in log_path.read_text().splitlines() if line.startswith("{")]
    assert "proxy.started" in events
    assert "proxy.host_closed" in events


async def test_a_log_that_cannot_be_opened_is_a_clear_error_and_starts_nothing(
    tmp_path: Path, new_processes: Callable[[], list[psutil.Process]]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    host = ProxyHost("x", "true", project=tmp_path, env=proxy_environment(tmp_path), log_path=blocker / "child.log")
    with pytest.raises(HostSessionError, match="cannot open the log"):
        await host.start()
    await host.stop()
    assert new_processes() == []


async def test_lines_that_are_not_json_rpc_are_logged_by_server_not_dropped(
    tmp_path: Path, captured_logs: io.StringIO
) -> None:
    noisy = f"{sys.executable} {ENVDUMP} {tmp_path / 'env.json'} 5"
    host = ProxyHost("noisy", noisy, project=tmp_path, env=proxy_environment(config.home()))
    try:
        result = await host.start()
    finally:
        await host.stop()
    assert result.server_info.name == "envdump"
    lines = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
    unreadable = [line for line in lines if line["event"] == "replay.proxy_unreadable"]
    assert [line["server"] for line in unreadable] == ["noisy"] * host_module.UNREADABLE_LOGGED
    assert all(len(line["error"]) <= host_module.MAX_ERROR_CHARS for line in unreadable)
    [total] = [line for line in lines if line["event"] == "replay.proxy_unreadable_total"]
    assert total["lines"] == 5


def test_the_sdk_clients_warnings_become_bounded_log_lines(captured_logs: io.StringIO) -> None:
    sdk = logging.getLogger("mcp.client.stdio")
    sdk.warning("MCP server process %d is still alive after the kill escalation; %s", 4242, "x" * 1000)
    sdk.info("below the level kept")
    [line] = [json.loads(text) for text in captured_logs.getvalue().splitlines()]
    assert (line["event"], line["level"], line["error"]) == ("replay.mcp_client", "WARNING", None)
    assert line["message"].startswith("MCP server process 4242 is still alive")
    assert len(line["message"]) <= host_module.MAX_ERROR_CHARS
