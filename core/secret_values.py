"""The secrets bir knows by value, and replacing them in text (issue 16 item 7).

Pattern redaction (``bir.core.redact``) misses a secret of no known form, so the values themselves are
replaced too: bir's own (every ``secret`` variable of ``bir.core.config``, registered when it loads), the
host's (``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``, ``CLAUDE_CODE_OAUTH_TOKEN``), and the stored
sign-in's token once it is read (``remember_secret``). A value shorter than ``MIN_SECRET_CHARS`` is not
replaced: it would turn ordinary words into ``[REDACTED]``.

Standard library only and no other module of bir: the logger applies it to every line it writes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Final

REDACTED: Final = "[REDACTED]"
MIN_SECRET_CHARS: Final = 8
# The host's secrets, which bir's processes see in their environment.
HOST_SECRETS: Final = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
_MAX_DEPTH: Final = 200

_variables: set[str] = set(HOST_SECRETS)
_remembered: set[str] = set()


def register_secret_variables(names: Iterable[str]) -> None:
    """Environment variables whose values are secrets (``bir.core.config`` registers its own)."""
    _variables.update(names)


def remember_secret(value: str | None) -> None:
    """Replace ``value`` from now on in this process (the stored sign-in's token, once read)."""
    if value is not None and len(value.strip()) >= MIN_SECRET_CHARS:
        _remembered.add(value.strip())


def known_secrets(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secret values this process knows now, longest first (so none is left half-replaced)."""
    source = os.environ if env is None else env
    found = set(_remembered)
    for name in _variables:
        value = source.get(name, "").strip()
        if len(value) >= MIN_SECRET_CHARS:
            found.add(value)
    return tuple(sorted(found, key=len, reverse=True))


def redact_values(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """``text`` with every known secret value replaced by ``[REDACTED]`` (no pattern is applied)."""
    for secret in known_secrets() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_values_deep(value: object, secrets: tuple[str, ...] | None = None, depth: int = 0) -> object:
    """A copy of JSON-like ``value`` with known secret values replaced in every string, keys included."""
    known = known_secrets() if secrets is None else secrets
    if not known or depth >= _MAX_DEPTH:
        return value
    if isinstance(value, str):
        return redact_values(value, known)
    if isinstance(value, Mapping):
        return {
            (redact_values(k, known) if isinstance(k, str) else k): redact_values_deep(v, known, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_values_deep(item, known, depth + 1) for item in value]
    return value
