"""Secrets are replaced before anything leaves the machine or lands in a log."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bir.core.redact import REDACTED, is_secret_key, redact, redact_text

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    "key",
    [
        "authorization",
        "Authorization",
        "api_key",
        "apiKey",
        "API-KEY",
        "x-api-key",
        "token",
        "access_token",
        "refreshToken",
        "password",
        "DB_PASSWORD",
        "secret",
        "client_secret",
        "cookie",
        "Set-Cookie",
        "private_key",
        "aws_secret_access_key",
        "githubToken",
    ],
)
def test_keys_named_like_secrets_are_recognised_in_any_case_or_separator(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key", ["key", "max_tokens", "input_tokens", "token_type", "nextPageToken", "page_token", "author", "name"]
)
def test_ordinary_keys_are_not_secrets(key: str) -> None:
    assert not is_secret_key(key)


def test_redact_replaces_secret_values_and_keeps_everything_else() -> None:
    data = {
        "headers": {"Authorization": "Bearer abc.def", "Accept": "json"},
        "apiKey": "k-123",
        "password": None,
        "tokens": [{"access_token": "t1"}, {"nextPageToken": "cursor-2"}],
        "count": 3,
        "ok": True,
        "pair": ("a", "b"),
    }
    out = redact(data)
    assert out == {
        "headers": {"Authorization": REDACTED, "Accept": "json"},
        "apiKey": REDACTED,
        "password": None,
        "tokens": [{"access_token": REDACTED}, {"nextPageToken": "cursor-2"}],
        "count": 3,
        "ok": True,
        "pair": ["a", "b"],
    }
    assert data["apiKey"] == "k-123"  # a copy: the input is untouched


def test_strings_inside_data_are_redacted_by_their_form() -> None:
    out = redact({"content": [{"type": "text", "text": f"token is {JWT}"}]})
    assert out == {"content": [{"type": "text", "text": f"token is {REDACTED}"}]}


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Authorization: Bearer abcdef123456", "Authorization: Bearer "),
        ("authorization: Basic dXNlcjpwYXNz", "authorization: Basic "),
        ('{"Authorization": "Bearer abc.def.ghi"}', '{"Authorization": "Bearer '),
        ("curl -H 'x' --oauth2-bearer x Bearer eyJ0eXAiOiJKV1Qi.abc", "curl -H 'x' --oauth2-bearer x Bearer "),
        ("key sk-ant-api03-AbCdEf_1234567890-xyz here", "key "),
        ("OPENAI sk-proj-AbCdEfGhIjKlMnOpQrSt1234", "OPENAI "),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", ""),
        ("gho_abcdefghijklmnopqrstuvwxyz0123456789", ""),
        ("github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz", ""),
        ("slack xoxb-1234567890-abcdefghij", "slack "),
        ("id AKIAIOSFODNN7EXAMPLE ok", "id "),
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key="),
        (f"jwt {JWT}", "jwt "),
        (PEM, ""),
        ("https://api.example.com/v1?user=a&password=hunter2&x=1", "https://api.example.com/v1?user=a&password="),
        ("GET /cb?token=abc123&state=ok", "GET /cb?token="),
        ("postgres://admin:s3cr3t@db.internal:5432/app", "postgres://admin:"),
        ('{"client_secret": "shh it is secret"}', '{"client_secret": "'),
        ("DB_PASSWORD=hunter2", "DB_PASSWORD="),
        ("Cookie: session=abc; theme=dark", "Cookie: "),
        ("set-cookie: id=1; HttpOnly", "set-cookie: "),
    ],
)
def test_credentials_in_text_are_redacted(text: str, kept: str) -> None:
    out = redact_text(text)
    assert REDACTED in out
    assert out.startswith(kept)
    for secret in ("abcdef123456", "dXNlcjpwYXNz", "hunter2", "s3cr3t", "wJalrXUtnFEMI", "MIIEpAIBAA", "shh it"):
        assert secret not in out


def test_the_end_of_a_url_after_a_redacted_password_is_kept() -> None:
    out = redact_text("postgres://admin:s3cr3t@db.internal:5432/app")
    assert out == f"postgres://admin:{REDACTED}@db.internal:5432/app"
    assert redact_text("x?password=a&next=2") == f"x?password={REDACTED}&next=2"


@pytest.mark.parametrize(
    "text",
    [
        "the bearer of bad news",
        "basic instructions",
        "https://host:8080/path",
        "max_tokens=4096 and token_type=Bearer",
        "nextPageToken=abc123",
        "git push origin main",
        "eu-west-1",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_an_unterminated_private_key_is_still_redacted() -> None:
    out = redact_text("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n")
    assert "MIIEvQ" not in out


@pytest.mark.parametrize(
    "text",
    [
        "a" * 400_000,
        "-" * 400_000,
        "password=" * 50_000,
        "https://" + "a:" * 200_000,
        "eyJ" * 130_000 + ".",
        "-----BEGIN PRIVATE KEY-----" * 10_000,
        "Bearer " * 60_000,
        "a_" * 200_000 + "token",
    ],
)
def test_huge_adversarial_inputs_are_redacted_without_backtracking(text: str) -> None:
    # A catastrophic backtrack on these inputs would run into the per-test timeout.
    out = redact_text(text)
    assert len(out) <= len(text) + len(REDACTED) * 200_000


@given(st.text(max_size=300))
def test_redaction_is_idempotent(text: str) -> None:
    once = redact_text(text)
    assert redact_text(once) == once


def test_deeply_nested_data_is_bounded() -> None:
    deep: object = "password=x"
    for _ in range(500):
        deep = [deep]
    assert redact(deep) is not None


@pytest.mark.parametrize("name", ["BIR_TOKEN", "BIR_DERIVE_API_KEY", "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"])
def test_a_known_secret_is_redacted_by_value_whatever_its_form(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "hunter2hunter2")
    assert redact_text("the value hunter2hunter2, again:hunter2hunter2") == "the value [REDACTED], again:[REDACTED]"
    assert redact({"note": "x hunter2hunter2", "hunter2hunter2": 1}) == {"note": "x [REDACTED]", "[REDACTED]": 1}


def test_a_secret_too_short_to_tell_from_a_word_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIR_TOKEN", "abc")
    assert redact_text("abc def") == "abc def"
