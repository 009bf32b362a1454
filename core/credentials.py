"""The stored sign-in: ``<BIR_HOME>/credentials.json`` (``bir login`` writes it, ``bir logout`` removes it).

Shape: ``{"version": 1, "url": "<service base URL>", "token": "<bearer token>", "savedAt": <epoch ms>}``,
mode 0600, written atomically. ``BIR_AUTH_URL`` and ``BIR_TOKEN`` win over it; the stored token goes
only to the stored URL, so a ``BIR_AUTH_URL`` pointing elsewhere never receives it.

Standard library only, like the other stores ``bir-hook`` may one day read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from bir.core import config
from bir.core.atomic import write_atomic
from bir.core.home_files import private_dir, read_private
from bir.core.log import log_event
from bir.core.secret_values import remember_secret
from bir.core.urls import display_url, insecure_reason

VERSION: Final = 1
# A URL and a token fit in far less; anything larger is not ours.
MAX_FILE_BYTES: Final = 64 * 1024
MAX_TOKEN_CHARS: Final = 8 * 1024
MAX_URL_CHARS: Final = 2048

Source = Literal["environment", "stored", "none"]


class CredentialsError(OSError):
    """The sign-in could not be stored or removed; the message says which file and why."""


@dataclass(frozen=True)
class Credentials:
    """A stored sign-in. ``saved_at`` is epoch milliseconds."""

    url: str
    token: str
    saved_at: int = 0


@dataclass(frozen=True)
class Effective:
    """The service URL and token in effect, and where each came from."""

    url: str | None
    token: str | None
    url_from: Source
    token_from: Source


def credentials_path(home: Path | None = None) -> Path:
    """``<BIR_HOME>/credentials.json``."""
    return (home if home is not None else config.home()) / "credentials.json"


def normalize_url(url: str) -> str:
    """The base URL as bir stores and compares it: trimmed, without a trailing slash.

    Raises:
        ValueError: not an http(s) URL with a host, or longer than ``MAX_URL_CHARS``.
    """
    from urllib.parse import urlsplit

    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if len(text) > MAX_URL_CHARS or parts.scheme not in ("http", "https") or not parts.hostname:
        shown = display_url(url[:200])
        raise ValueError(f"{shown!r} is not an http(s) URL with a host (e.g. https://basein.example.com)")
    reason = insecure_reason(text)
    if reason is not None:
        raise ValueError(reason)
    return text


def load(home: Path | None = None) -> Credentials | None:
    """The stored sign-in, or None (absent, unreadable or not this shape: logged, never raised)."""
    path = credentials_path(home)
    try:
        data = read_private(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log_event("credentials.unreadable", path=str(path), error=str(exc))
        return None
    try:
        raw = json.loads(data) if len(data) <= MAX_FILE_BYTES else None
    except ValueError:
        raw = None
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        log_event("credentials.corrupt", path=str(path))
        return None
    url, token, saved_at = raw.get("url"), raw.get("token"), raw.get("savedAt", 0)
    if not (isinstance(url, str) and url and isinstance(token, str) and token and isinstance(saved_at, int)):
        log_event("credentials.corrupt", path=str(path))
        return None
    remember_secret(token)
    return Credentials(url, token, saved_at)


def save(url: str, token: str, home: Path | None = None) -> Credentials:
    """Store a sign-in (0600, atomically), replacing any earlier one.

    Raises:
        ValueError: the URL is not usable, or the token is empty, has whitespace or is too long.
        CredentialsError: the file cannot be written.
    """
    url = normalize_url(url)
    token = token.strip()
    if not token or len(token) > MAX_TOKEN_CHARS or any(ch.isspace() for ch in token):
        raise ValueError("the token must be one word of at most 8192 characters")
    creds = Credentials(url, token, int(time.time() * 1000))
    path = credentials_path(home)
    body = {"version": VERSION, "url": creds.url, "token": creds.token, "savedAt": creds.saved_at}
    try:
        private_dir(path.parent)
        write_atomic(path, json.dumps(body, indent=2).encode("utf-8") + b"\n")
    except OSError as exc:
        raise CredentialsError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return creds


def remove(home: Path | None = None) -> bool:
    """Forget the stored sign-in; True if there was one.

    Raises:
        CredentialsError: the file exists and cannot be removed.
    """
    path = credentials_path(home)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise CredentialsError(f"cannot remove {path}: {exc.strerror or exc}") from exc
    return True


def effective(settings: config.Settings | None = None, home: Path | None = None) -> Effective:
    """The service URL and token in effect: ``BIR_AUTH_URL`` / ``BIR_TOKEN`` of ``settings`` (read now
    when None), else the sign-in stored under ``home`` (else the settings' ``BIR_HOME``).

    The stored token is used only while the URL in effect is the stored one.
    """
    settings = settings if settings is not None else config.load()
    env_url, env_token = settings.auth_url, settings.token
    stored = load(home if home is not None else settings.home)
    url: str | None = env_url
    url_from: Source = "environment" if env_url else "none"
    if url is None and stored is not None:
        url, url_from = stored.url, "stored"
    token: str | None = env_token
    token_from: Source = "environment" if env_token else "none"
    if token is None and stored is not None and url is not None and url.rstrip("/") == stored.url:
        token, token_from = stored.token, "stored"
    return Effective(url, token, url_from, token_from)
