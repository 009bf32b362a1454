"""Cheap look-ups the operating commands share: the project's control server (``/health``) and the service.

Each is bounded by its own short time limit and never raises for what it finds: an absent server or a
refused token is an answer, put in the returned value for the pure parts to judge.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from bir.core import config, credentials
from bir.core.service import ServiceClient, ServiceError
from bir.core.urls import display_url
from bir.hooks import api
from bir.hooks.control_client import ControlClient, ControlError
from bir.hooks.discovery import Discovery, read_discovery
from bir.hooks.local import wants_local

HEALTH_TIMEOUT_S: Final = 2.0
SERVICE_CHECK_TIMEOUT_S: Final = 3.0
# The service has no health route; reading a scenario no one owns costs one lookup, and tells a
# refused token (401/403) from an accepted one (404: "not yours or not there", spec §16.5).
PROBE_SCENARIO_ID: Final = "scn_bir_sign_in_check"
MAX_HEALTH_BYTES: Final = 64 * 1024

Verdict = Literal["accepted", "refused", "unreachable", "unexpected", "unconfigured"]
# Who serves this machine's sessions: matching, recording, derivation and booking.
Serving = Literal["remote", "local", "none"]


def serving(sign_in: credentials.Effective, settings: config.Settings) -> Serving:
    """Which service answers the sessions here: the local service where it is the one in use (no service
    configured, or ``BIR_SERVICE=local``: ``bir.hooks.local.wants_local``), else the BaseIn service at the URL
    in effect, else none. ``bir doctor`` judges being signed out by it: signed out is not "broken" where the
    local service serves.
    """
    if wants_local(settings):
        return "local"
    return "remote" if sign_in.url else "none"


@dataclass(frozen=True)
class ControlFacts:
    """The project's control server as seen from outside: its discovery file and its ``/health``."""

    discovery: Discovery | None
    health: api.Health | None
    error: str | None = None


@dataclass(frozen=True)
class ServiceCheck:
    """What one cheap request to the service showed."""

    verdict: Verdict
    url: str | None
    detail: str = ""


async def control_facts(project: Path, timeout_s: float = HEALTH_TIMEOUT_S) -> ControlFacts:
    """The project's live control server and its ``/health`` (``health`` None with ``error`` when it did not answer)."""
    found = read_discovery(project)
    if found is None:
        return ControlFacts(None, None)
    try:
        async with ControlClient(found, max_answer_bytes=MAX_HEALTH_BYTES) as control:
            health = await control.call(api.HEALTH, timeout_s=timeout_s)
    except ControlError as exc:
        return ControlFacts(found, None, str(exc))
    return ControlFacts(found, health)


async def check_service(
    url: str | None,
    token: str | None,
    timeout_s: float = SERVICE_CHECK_TIMEOUT_S,
    settings: config.Settings | None = None,
) -> ServiceCheck:
    """Whether the service at ``url`` answers as the BaseIn service and accepts ``token``, within
    ``timeout_s`` and ``BIR_SERVICE_TIMEOUT_MS`` of ``settings`` (read now when None).

    Only the service's own answer counts as accepted: a JSON object, for the scenario or for its
    absence (404, "not yours or not there"). Any other server at that URL (a web page's 404, a proxy's
    error) is ``unexpected``, never a sign-in.

    Raises:
        ConfigError: ``settings`` is None and a ``BIR_*`` variable holds an unusable value.
    """
    if not url:
        return ServiceCheck("unconfigured", None, "no service URL: run `bir login --url URL`")
    settings = settings if settings is not None else config.load()
    timeout_s = min(timeout_s, settings.service_timeout_ms / 1000)
    shown = display_url(url.rstrip("/"))
    async with ServiceClient(url, token or "", timeout_s=timeout_s, settings=settings) as service:
        try:
            status, body = await service.request("GET", f"/scenarios/{PROBE_SCENARIO_ID}", route="sign_in_check")
        except ServiceError as exc:
            if exc.kind in ("unreachable", "timeout"):
                return ServiceCheck("unreachable", shown, str(exc))
            return ServiceCheck("unexpected", shown, str(exc))
        if status in (401, 403):
            return ServiceCheck("refused", shown, f"HTTP {status}")
        if status in (200, 404) and _is_object(body):
            return ServiceCheck("accepted", shown)
        what = "a JSON object" if _is_object(body) else "not the BaseIn service's JSON"
        return ServiceCheck("unexpected", shown, f"HTTP {status}, {what}")


def _is_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except (ValueError, RecursionError):
        return False
