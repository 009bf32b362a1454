"""The service's URL: https but to this machine, and never shown with its userinfo."""

from __future__ import annotations

import pytest

from bir.core.urls import display_url, hide_userinfo, insecure_reason, is_loopback_host


@pytest.mark.parametrize(
    "url",
    [
        "https://basein.example.com",
        "https://user:pw@basein.example.com/api",
        "http://127.0.0.1:8080",
        "http://127.3.4.5",
        "http://localhost:3000/",
        "http://[::1]:9000",
    ],
)
def test_https_anywhere_and_plain_http_to_this_machine_are_accepted(url: str) -> None:
    assert insecure_reason(url) is None


@pytest.mark.parametrize(
    "url", ["http://basein.example.com", "http://10.0.0.5:8080", "http://localhost.evil.com", "ftp://x.example", "x"]
)
def test_plain_http_to_any_other_host_is_refused_with_what_to_do(url: str) -> None:
    reason = insecure_reason(url)
    assert reason is not None
    assert "https://" in reason


def test_the_refusal_never_shows_a_password() -> None:
    reason = insecure_reason("http://me:hunter22@basein.example.com")
    assert reason is not None
    assert "hunter22" not in reason
    assert "http://***@basein.example.com" in reason


def test_userinfo_is_hidden_in_every_url_of_a_text() -> None:
    assert display_url("https://me:pw@h.example/x") == "https://***@h.example/x"
    assert display_url("https://h.example/x?a=b") == "https://h.example/x?a=b"
    text = "failed: ConnectError https://a:b@one.example and http://tok@two.example/p"
    assert hide_userinfo(text) == "failed: ConnectError https://***@one.example and http://***@two.example/p"


def test_loopback_hosts_are_told_apart() -> None:
    assert is_loopback_host("127.0.0.1")
    assert is_loopback_host("::1")
    assert not is_loopback_host("0.0.0.0")
    assert not is_loopback_host(None)
