"""What a ``bir-proxy`` that ``bir replay`` starts, and its upstream, are given: never bir's own secrets."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from bir.core import config
from bir.hooks.replay.host import ProxyHost, proxy_environment
from tests.paths import REPO

pytestmark = pytest.mark.anyio

ENVDUMP = REPO / "tests" / "fakes" / "envdump_server.py"
SECRETS = {"BIR_TOKEN": "tok-secret", "BIR_DERIVE_API_KEY": "sk-derive-secret"}


async def _names_the_upstream_sees(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Start a real bir-proxy wrapping the env-dump server in ``env``; answer the upstream's variable names."""
    dump = tmp_path / "env.json"
    host = ProxyHost("envdump", f"{sys.executable} {ENVDUMP} {dump}", project=tmp_path, env=env)
    try:
        await host.start()
    finally:
        await host.stop()
    names: list[str] = json.loads(dump.read_text())
    return names


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
