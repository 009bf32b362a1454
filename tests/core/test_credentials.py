"""The stored sign-in: 0600 on disk, the environment wins, and its token only ever goes to its own URL."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bir.core import credentials
from bir.core.service import ServiceClient


def test_a_saved_sign_in_is_readable_only_by_its_owner_and_reads_back() -> None:
    saved = credentials.save("https://basein.example.com/", "tok-1")
    path = credentials.credentials_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert credentials.load() == saved
    assert saved.url == "https://basein.example.com"


def test_a_url_that_is_not_http_or_a_token_with_spaces_is_refused_and_nothing_is_written() -> None:
    with pytest.raises(ValueError, match="http"):
        credentials.save("basein.example.com", "tok")
    with pytest.raises(ValueError, match="one word"):
        credentials.save("https://basein.example.com", "two words")
    assert not credentials.credentials_path().exists()


def test_a_corrupt_file_reads_as_signed_out() -> None:
    path = credentials.credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    assert credentials.load() is None
    assert credentials.effective().url is None


def test_the_environment_wins_over_the_stored_sign_in(monkeypatch: pytest.MonkeyPatch) -> None:
    credentials.save("https://stored.example.com", "stored-token")
    assert credentials.effective() == credentials.Effective(
        "https://stored.example.com", "stored-token", "stored", "stored"
    )
    monkeypatch.setenv("BIR_TOKEN", "env-token")
    assert credentials.effective().token == "env-token"
    assert credentials.effective().token_from == "environment"


def test_the_stored_token_never_goes_to_a_url_the_environment_points_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    credentials.save("https://stored.example.com", "stored-token")
    monkeypatch.setenv("BIR_AUTH_URL", "https://other.example.com")
    found = credentials.effective()
    assert (found.url, found.token, found.url_from) == ("https://other.example.com", None, "environment")


def test_the_service_client_falls_back_to_the_stored_sign_in() -> None:
    credentials.save("https://stored.example.com", "stored-token")
    client = ServiceClient()
    assert client.configured
    assert client.base_url == "https://stored.example.com"
    assert client._sign_in() == ("https://stored.example.com", "stored-token")
    assert ServiceClient("https://elsewhere.example.com")._sign_in() == ("https://elsewhere.example.com", None)


def test_removing_the_sign_in_says_whether_there_was_one() -> None:
    credentials.save("https://basein.example.com", "tok")
    assert credentials.remove() is True
    assert credentials.remove() is False
    assert not Path(os.environ["BIR_HOME"], "credentials.json").exists()


def test_a_plain_http_url_to_another_host_is_refused_and_nothing_is_stored() -> None:
    with pytest.raises(ValueError, match="is not https"):
        credentials.save("http://basein.example.com", "tok-1")
    assert not credentials.credentials_path().exists()
    assert credentials.save("http://127.0.0.1:8080/", "tok-1").url == "http://127.0.0.1:8080"


def test_the_stored_token_is_redacted_by_value_once_read() -> None:
    from bir.core.redact import redact_text

    credentials.save("https://basein.example.com", "plain-looking-secret-42")
    assert credentials.load() is not None
    assert redact_text("echo plain-looking-secret-42") == "echo [REDACTED]"
