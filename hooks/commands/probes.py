"""Cheap look-ups the operating commands share: the project's control server (``/health``) and the service.

Each is bounded by its own short time limit and never raises for what it finds: an absent server or a
refused token is an answer, put in the returned value for the pure parts to judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from bir.core import config
from bir.core.service import ServiceClient, ServiceError
from bir.core.urls import display_url
from bir.hooks import api
from bir.hooks.control_client import ControlClient, ControlError
from bir.hooks.discovery import Discovery, read_discovery

HEALTH_TIMEOUT_S: Final = 2.0
SERVICE_CHECK_TIMEOUT_S: Final = 3.0
# The service has no health route; reading a scenario no one owns costs one lookup, and tells a
# refused token (401/403) from an accepted one (404: "not yours or not there", spec §16.5).
PROBE_SCENARIO_ID: Final = "scn_bir_sign_in_check"
MAX_HEALTH_BYTES: Final = 64 * 1024

Verdict = Literal["accepted", "refused", "unreachable", "unexpected", "unconfigured"]


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


async def check_service(url: str | None, token: str | None, timeout_s: float = SERVICE_CHECK_TIMEOUT_S) -> ServiceCheck:
    """Whether the service at ``url`` answers and accepts ``token``.

    Raises:
        ConfigError: ``BIR_SERVICE_TIMEOUT_MS`` holds an unusable value.
    """
    if not url:
        return ServiceCheck("unconfigured", None, "no service URL: run `bir login --url URL`")
    timeout_s = min(timeout_s, config.require_int("BIR_SERVICE_TIMEOUT_MS") / 1000)
    shown = display_url(url.rstrip("/"))
    async with ServiceClient(url, token or "", timeout_s=timeout_s) as service:
        try:
            await service.get_scenario(PROBE_SCENARIO_ID)
        except ServiceError as exc:
            if exc.status in (200, 404):  # 200 but not a scenario: still signed in
                return ServiceCheck("accepted", shown)
            if exc.status in (401, 403):
                return ServiceCheck("refused", shown, f"HTTP {exc.status}")
            if exc.kind in ("unreachable", "timeout"):
                return ServiceCheck("unreachable", shown, str(exc))
            return ServiceCheck("unexpected", shown, str(exc))
    return ServiceCheck("accepted", shown)
