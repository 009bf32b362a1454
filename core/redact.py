"""Secrets out of anything that leaves the machine or lands in a log (spec §7.2, §13.2, §16.3).

``redact`` copies JSON-like data with the values of secret-named keys replaced, and every string run
through ``redact_text``, which replaces credentials recognisable by their form: ``Authorization``
headers, Anthropic/OpenAI/GitHub/Slack/AWS/Google keys, JWTs, PEM private keys, ``password=`` and
``token=`` assignments and query parameters, and ``user:pass@`` in URLs.

Every pattern is linear: no nested quantifiers, bounded repetitions where a match could run long, and
character classes that exclude the character ending the match, so a huge output costs one pass per
pattern and never backtracks catastrophically.

Patterns miss a secret of no known form, so the secrets bir knows are replaced by value first
(``bir.core.secret_values``: ``BIR_TOKEN``, ``BIR_DERIVE_API_KEY``, ``ANTHROPIC_API_KEY``, the stored token).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final

from bir.core.secret_values import (
    HOST_SECRETS,
    MIN_SECRET_CHARS,
    known_secrets,
    redact_values,
    redact_values_deep,
    remember_secret,
)

REDACTED: Final = "[REDACTED]"
_MAX_DEPTH: Final = 200
__all__ = [
    "HOST_SECRETS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "is_secret_key",
    "known_secrets",
    "redact",
    "redact_text",
    "redact_values",
    "redact_values_deep",
    "remember_secret",
]
# Keys (lower-cased, separators removed) whose value is a secret whatever it looks like.
_SECRET_KEYS: Final = frozenset(
    {
        "authorization", "proxyauthorization", "auth", "apikey", "xapikey", "token", "accesstoken", "refreshtoken",
        "idtoken", "authtoken", "xauthtoken", "bearertoken", "sessiontoken", "csrftoken", "xsrftoken", "xcsrftoken",
        "password", "passwd", "pwd", "passphrase", "secret", "clientsecret", "secretkey", "secretaccesskey",
        "awssecretaccesskey", "awssessiontoken", "cookie", "cookies", "setcookie", "privatekey", "credentials",
        "credential", "sessionid", "connectionstring",
    }
)  # fmt: skip
_SECRET_SUFFIXES: Final = (
    "token", "secret", "password", "passwd", "apikey", "privatekey", "accesskey", "secretkey", "signingkey",
    "encryptionkey", "masterkey", "credentials", "cookie",
)  # fmt: skip
# Tokens that are cursors, not credentials: a scenario's output logic may need to read them.
_NOT_SECRET_SUFFIXES: Final = ("pagetoken", "nexttoken", "continuationtoken", "synctoken", "cursortoken")
_KEY_SEPARATORS = re.compile(r"[^a-z0-9]")

_Sub = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]


def is_secret_key(key: str) -> bool:
    """True for a key named like a secret (``apiKey``, ``client_secret``, ``Set-Cookie``), in any case or separator."""
    norm = _KEY_SEPARATORS.sub("", key.lower())
    if not norm or norm.endswith(_NOT_SECRET_SUFFIXES):
        return False
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_SUFFIXES)


def _looks_like_token(token: str) -> bool:
    # "Bearer instructions" is prose; a credential has a digit, a symbol of the base64/JWT alphabets,
    # or capitals past its first letter (base64 of "user:pass" is "dXNlcjpwYXNz").
    return any(c.isdigit() or c in "._~+/=-" for c in token) or any(c.isupper() for c in token[1:])


def _scheme_token(match: re.Match[str]) -> str:
    token = match.group("token")
    return match.group(0) if not _looks_like_token(token) else f"{match.group('scheme')}{REDACTED}"


def _authorization(match: re.Match[str]) -> str:
    return f"{match.group('head')}{match.group('scheme') or ''}{REDACTED}"


_SECRET_NAME = (
    r"(?:[A-Za-z0-9]{1,40}[_-]){0,4}"
    r"(?:password|passwd|pwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"secret[_-]?access[_-]?key|client[_-]?secret|credentials?)"
)


def _assignment_any(match: re.Match[str]) -> str:
    if not is_secret_key(match.group("key")):
        return match.group(0)
    for group in ("value", "value2", "value3", "value4"):
        if match.group(group) is not None:
            start = match.start(group) - match.start(0)
            end = match.end(group) - match.start(0)
            whole = match.group(0)
            return whole[:start] + REDACTED + whole[end:]
    return match.group(0)  # pragma: no cover - one value group always matches


_SUBSTITUTIONS: Final[tuple[_Sub, ...]] = (
    # PEM private keys, with or without their END line; the body may hold header lines with a '-'.
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----(?:[^-]|-(?!----)){0,100000}"
            r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----)?"
        ),
        REDACTED,
    ),
    # Authorization / Proxy-Authorization headers and fields: keep the scheme, drop the credential.
    (
        re.compile(
            r"(?i)(?P<head>(?<![A-Za-z0-9_-])(?:proxy-)?authorization\\?[\"']?\s{0,5}[:=]\s{0,5}\\?[\"']?\s{0,5})"
            r"(?P<scheme>(?:bearer|basic|token|digest|negotiate|bot)\s{1,5})?"
            r"[^\s\"'\\,;]{1,4096}"
        ),
        _authorization,
    ),
    (
        re.compile(r"(?P<scheme>(?<![A-Za-z0-9])(?i:bearer|basic)\s{1,5})(?P<token>[A-Za-z0-9._~+/=-]{8,4096})"),
        _scheme_token,
    ),
    # Cookie headers: everything to the end of the line.
    (re.compile(r"(?im)^(\s{0,20}(?:set-)?cookie\s{0,5}:\s{0,5})[^\r\n]{1,16384}"), rf"\g<1>{REDACTED}"),
    # Vendor key formats.
    (re.compile(r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_-]{8,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9])AIza[A-Za-z0-9_-]{35}"), REDACTED),
    # JWTs: a JSON header and payload (base64url of '{"' is "eyJ") and a signature.
    (re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.ey[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), REDACTED),
    # user:password@ in a URL.
    (
        re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]{0,20}://[^/\s:@\"'<>]{0,256}:)[^/\s@\"'<>]{1,1024}@"),
        rf"\g<pre>{REDACTED}@",
    ),
    # name=value, name: value, "name": "value" and ?name=value, for secret-like names.
    (
        re.compile(
            r"(?i)(?<![A-Za-z0-9_-])(?P<key>" + _SECRET_NAME + r")"
            r"(?P<sep>\\?[\"']?\s{0,5}[:=]\s{0,5})"
            r"(?:\\\"(?P<value>[^\"\\\r\n]{1,4096})\\\"|"
            r"\"(?P<value2>[^\"\\\r\n]{1,4096})\"|"
            r"'(?P<value3>[^'\\\r\n]{1,4096})'|"
            r"(?P<value4>[^\s\"'&,;<>(){}\[\]\\]{1,4096}))"
        ),
        _assignment_any,
    ),
)


def redact_text(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """``text`` with every known secret value and every recognisable credential replaced by ``[REDACTED]``."""
    text = redact_values(text, secrets)
    for pattern, replacement in _SUBSTITUTIONS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: object) -> object:
    """A deep copy of JSON-like ``value`` with secrets replaced by ``[REDACTED]``.

    The value of a secret-named key is replaced whole (unless it is empty, null or a boolean); every
    other string goes through :func:`redact_text`. Tuples become lists; a value JSON cannot hold
    becomes its redacted ``str``.
    """
    return _redact(value, 0, known_secrets())


def _redact(value: object, depth: int, secrets: tuple[str, ...]) -> object:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return redact_text(value, secrets)
    if depth >= _MAX_DEPTH:
        return redact_text(str(value)[:10_000], secrets)
    if isinstance(value, Mapping):
        out: dict[object, object] = {}
        for key, item in value.items():
            empty = item is None or item == "" or isinstance(item, bool)
            shown = redact_values(key, secrets) if isinstance(key, str) else key
            if isinstance(key, str) and is_secret_key(key) and not empty:
                out[shown] = REDACTED
            else:
                out[shown] = _redact(item, depth + 1, secrets)
        return out
    if isinstance(value, list | tuple):
        return [_redact(item, depth + 1, secrets) for item in value]
    return redact_text(str(value), secrets)
