"""The client of the BaseIn service (service-contract.md): match, recording, source run, derive, report, scenario.

Every request carries the bearer token and is bounded twice: by a total deadline (httpx's own timeout
is per read, so a server that drips bytes would never trip it) and by a cap on the answer's size.
Failures become one typed ``ServiceError`` whose message is short and never holds the answer's body,
because callers put it in log lines and in hand-over notes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import quote

import anyio
import httpx

from bir.core import config, credentials
from bir.core.log import log_event
from bir.core.secret_values import redact_values_deep
from bir.core.truncate import one_line
from bir.core.types import (
    MatchAnswer,
    PayloadError,
    RecordedStep,
    Scenario,
    parse_match,
    parse_recorded_steps,
    parse_scenario,
)
from bir.core.urls import hide_userinfo, insecure_reason

FRAMEWORK = "claude-code"
# A matched answer carries a whole scenario and a source run carries every tool output of a turn;
# past these sizes the answer is refused rather than held in memory.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
MAX_ERROR_CHARS = 300
_SNIPPET_CHARS = 120

ErrorKind = Literal["not_configured", "insecure", "timeout", "unreachable", "status", "bad_answer", "too_large"]
ReportStatus = Literal["booked", "duplicate", "not_recorded", "ticket_unknown"]
StepStatus = Literal["recorded", "unknown_run"]
FinishStatus = Literal["finished", "duplicate", "unknown_run"]


def _bounded(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return one_line(hide_userinfo(text), limit)


class ServiceError(Exception):
    """A request to the service that produced no usable answer.

    ``kind`` says why (``not_configured``, ``timeout``, ``unreachable``, ``status``, ``bad_answer``,
    ``too_large``); ``status`` is the HTTP status when one arrived. The message is at most
    ``MAX_ERROR_CHARS`` characters on one line.
    """

    def __init__(self, kind: ErrorKind, message: str, *, route: str, status: int | None = None) -> None:
        super().__init__(_bounded(message))
        self.kind: ErrorKind = kind
        self.route = route
        self.status = status


@dataclass(frozen=True)
class ReportResult:
    """What the service did with an execution report (spec §11.2, §11.2a)."""

    status: ReportStatus
    http_status: int
    execution_id: str | None = None

    @property
    def booked(self) -> bool:
        return self.status == "booked"


@dataclass(frozen=True)
class StepResult:
    """What the service did with one recorded step: stored it, or knows no such run (a hit, §12)."""

    status: StepStatus
    http_status: int


@dataclass(frozen=True)
class FinishResult:
    """What the service did with a run's finish: sealed it, had already sealed it, or knows no such run."""

    status: FinishStatus
    http_status: int


def _snippet(body: bytes) -> str:
    """A short hint of why the service refused: its ``error``/``message`` field, else the body's head."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("error", "message", "detail"):
            value = data.get(key)
            if isinstance(value, str) and value:
                return _bounded(value, _SNIPPET_CHARS)
    return _bounded(body[: _SNIPPET_CHARS * 4].decode("utf-8", "replace"), _SNIPPET_CHARS)


def status_error(route: str, status: int, body: bytes) -> ServiceError:
    """The ``ServiceError`` for an HTTP status the caller cannot use."""
    hint = _snippet(body)
    return ServiceError(
        "status", f"{route}: HTTP {status}" + (f" ({hint})" if hint else ""), route=route, status=status
    )


def decode_json(route: str, body: bytes, *, status: int | None = None) -> object:
    """Parse an answer's body.

    Raises:
        ServiceError: ``bad_answer`` when the body is not JSON.
    """
    try:
        return json.loads(body)
    except ValueError:
        raise ServiceError("bad_answer", f"{route}: the answer is not JSON", route=route, status=status) from None


async def send_bounded(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    route: str,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    json_body: object = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> tuple[int, bytes]:
    """Send one request and read its answer within ``timeout_s`` in total and ``max_bytes`` of body.

    Raises:
        ServiceError: ``timeout``, ``unreachable`` (transport failure or a malformed URL) or
            ``too_large``; an HTTP error status is returned, not raised.
    """
    body = bytearray()
    status = 0
    with anyio.move_on_after(timeout_s) as scope:
        try:
            async with client.stream(
                method, url, headers=dict(headers or {}), json=json_body, timeout=timeout_s
            ) as response:
                status = response.status_code
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise ServiceError(
                            "too_large", f"{route}: the answer is larger than {max_bytes} bytes", route=route
                        )
        except httpx.TimeoutException:
            raise ServiceError("timeout", f"{route}: no answer within {timeout_s:.1f} s", route=route) from None
        except (httpx.TransportError, httpx.InvalidURL) as exc:
            name = type(exc).__name__
            raise ServiceError("unreachable", f"{route}: {name}: {exc}", route=route) from None
    if scope.cancelled_caught:
        raise ServiceError("timeout", f"{route}: no answer within {timeout_s:.1f} s", route=route)
    return status, bytes(body)


def _segment(value: str) -> str:
    # Identifiers come from the service's own answers; quoting keeps one from reaching another route.
    return quote(value, safe="")


class ServiceClient:
    """The BaseIn service over HTTP. Use as ``async with ServiceClient() as service: ...``.

    ``base_url``, ``token`` and ``timeout_s`` default to ``BIR_AUTH_URL``, ``BIR_TOKEN`` (else the
    sign-in ``bir login`` stored, ``bir.core.credentials``) and ``BIR_SERVICE_TIMEOUT_MS`` of ``settings``
    (read now when None). The stored sign-in, where not given here, is read again at each request (only
    when its file changed), so a long-lived client (a control server's) follows ``bir login`` and
    ``bir logout`` without a restart. Without a base URL the client is not ``configured``: ``match`` and
    ``derive`` answer ``None`` and the other methods raise ``ServiceError("not_configured")``. An injected
    ``client`` is used as is and left open; otherwise one is built (over ``transport`` when given) and
    closed with this object.

    Raises:
        ConfigError: ``settings`` is None and a ``BIR_*`` variable holds an unusable value.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        settings: config.Settings | None = None,
    ) -> None:
        self._settings = settings if settings is not None else config.load()
        self._given_url = base_url
        self._given_token = token
        self._seen: tuple[object, ...] | None = None
        self._signed_in: credentials.Effective | None = None
        self._shown: tuple[str | None, bool] | None = None
        self._sign_in()  # a bad BIR_* value is refused here, not at the first request
        self.timeout_s = timeout_s if timeout_s is not None else self._settings.service_timeout_ms / 1000
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(transport=transport)
        # An app served in this process (the local service) is reached without crossing any network.
        self._in_process = isinstance(transport, httpx.ASGITransport)

    def _effective(self) -> credentials.Effective:
        """The sign-in in effect, read again only when the stored file changed."""
        path = credentials.credentials_path(self._settings.home)
        try:
            st = path.stat()
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = None
        seen = (str(path), stamp)
        if self._signed_in is None or seen != self._seen:
            self._signed_in, self._seen = credentials.effective(self._settings), seen
        return self._signed_in

    def _sign_in(self) -> tuple[str | None, str | None]:
        """The base URL and the token for the next request: what was given, else what is in effect now
        (the stored token only ever goes to the stored URL)."""
        url, token = self._given_url, self._given_token
        signed_in = self._effective() if url is None or token is None else None
        if url is None and signed_in is not None:
            url = signed_in.url
        base = url.rstrip("/") if url else None
        if token is None and signed_in is not None:
            same_url = signed_in.url is not None and signed_in.url.rstrip("/") == base
            token = signed_in.token if signed_in.token_from == "environment" or same_url else None
        shown = (base, bool(token))
        if self._shown is not None and shown != self._shown:
            log_event("service.sign_in_changed", url=base, token=bool(token))
        self._shown = shown
        return base, token

    @property
    def base_url(self) -> str | None:
        """The service's base URL in effect now (None: not configured)."""
        return self._sign_in()[0]

    @property
    def configured(self) -> bool:
        return self.base_url is not None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client when this object built it."""
        if self._owns_client:
            await self._client.aclose()

    async def _call(
        self, method: str, path: str, *, route: str, json_body: object = None, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        base_url, token = self._sign_in()
        if base_url is None:
            raise ServiceError("not_configured", f"{route}: no service URL (bir login, or BIR_AUTH_URL)", route=route)
        insecure = None if self._in_process else insecure_reason(base_url)
        if insecure is not None:
            # Refused before anything is sent: the token would cross the network in clear.
            raise ServiceError("insecure", f"{route}: {insecure}", route=route)
        # The secrets bir knows never leave in a body, whatever put them there (a prompt, an output).
        json_body = redact_values_deep(json_body)
        headers = {"accept": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        try:
            return await send_bounded(
                self._client,
                method,
                base_url + path,
                route=route,
                timeout_s=self.timeout_s if timeout_s is None else timeout_s,
                headers=headers,
                json_body=json_body,
            )
        except ServiceError as exc:
            log_event("service.request_failed", route=route, kind=exc.kind, error=str(exc))
            raise

    async def request(
        self, method: str, path: str, *, route: str, json_body: object = None, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        """One request to ``path`` (already quoted); the status and the raw body, whatever the status.

        For thin clients (``bir scenario``) that put every answer in words or print it unchanged.

        Raises:
            ServiceError: not configured, no answer in time, unreachable, or an answer too large.
        """
        return await self._call(method, path, route=route, json_body=json_body, timeout_s=timeout_s)

    def _failed(self, route: str, status: int, body: bytes) -> ServiceError:
        exc = status_error(route, status, body)
        log_event("service.request_failed", route=route, kind=exc.kind, status=status, error=str(exc))
        return exc

    async def match(
        self,
        run_id: str,
        input: str,
        metadata: Mapping[str, Any] | None = None,
        *,
        framework: str = FRAMEWORK,
        timeout_s: float | None = None,
    ) -> MatchAnswer | None:
        """Start a run for this prompt, or learn that it matches an earlier one (spec §2).

        Returns the answer on a hit (``matched`` set; the service created no run), ``None`` on a
        miss (the service created the run ``run_id``) and when the service is not configured.

        Raises:
            ServiceError: the service did not answer, refused, or answered something unreadable.
        """
        route = "match"
        if not self.configured:
            return None
        body = {"id": run_id, "framework": framework, "input": input, "metadata": dict(metadata or {})}
        status, raw = await self._call("POST", "/recordings/runs", route=route, json_body=body, timeout_s=timeout_s)
        if status not in (200, 201):
            raise self._failed(route, status, raw)
        try:
            answer = parse_match(decode_json(route, raw, status=status))
        except PayloadError as exc:
            raise ServiceError("bad_answer", f"{route}: {exc}", route=route, status=status) from None
        return answer if answer.matched is not None else None

    async def get_run_steps(self, run_id: str, *, timeout_s: float | None = None) -> tuple[RecordedStep, ...]:
        """The recorded steps of a run (spec §8.1), in the order the service sent them.

        Raises:
            ServiceError: not configured, no answer, a refusal (404 for an unknown run) or an unreadable answer.
        """
        route = "run_steps"
        status, raw = await self._call("GET", f"/recordings/runs/{_segment(run_id)}", route=route, timeout_s=timeout_s)
        if status != 200:
            raise self._failed(route, status, raw)
        try:
            return parse_recorded_steps(decode_json(route, raw, status=status))
        except PayloadError as exc:
            raise ServiceError("bad_answer", f"{route}: {exc}", route=route, status=status) from None

    async def report_execution(
        self, scenario_id: str, body: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> ReportResult:
        """Redeem a match's ticket with the turn's report (spec §11.2).

        201 booked, 200 a duplicate (the ticket was already claimed), 202 nothing worth booking and
        409 an unknown or expired ticket are all answers, not errors.

        Raises:
            ServiceError: not configured, no answer, or any other status.
        """
        route = "report_execution"
        path = f"/scenarios/{_segment(scenario_id)}/executions"
        status, raw = await self._call("POST", path, route=route, json_body=dict(body), timeout_s=timeout_s)
        result: ReportResult
        if status == 201:
            data = _loads_quietly(raw)
            execution_id = data.get("id") if isinstance(data, dict) else None
            result = ReportResult("booked", status, execution_id if isinstance(execution_id, str) else None)
        elif status == 200:
            result = ReportResult("duplicate", status)
        elif status == 202:
            result = ReportResult("not_recorded", status)
        elif status == 409:
            result = ReportResult("ticket_unknown", status)
        else:
            raise self._failed(route, status, raw)
        log_event("service.execution_reported", scenario_id=scenario_id, status=result.status)
        return result

    async def post_step(self, run_id: str, body: Mapping[str, Any], *, timeout_s: float | None = None) -> StepResult:
        """Record one settled tool call of a recorded run (service-contract.md).

        A 2xx is ``recorded``; 404 (an unknown run: a matched turn has none, §12) is ``unknown_run``,
        an answer and not an error.

        Raises:
            ServiceError: not configured, no answer, or any other status.
        """
        route = "step"
        path = f"/recordings/runs/{_segment(run_id)}/steps"
        status, raw = await self._call("POST", path, route=route, json_body=dict(body), timeout_s=timeout_s)
        if 200 <= status < 300:
            return StepResult("recorded", status)
        if status == 404:
            return StepResult("unknown_run", status)
        raise self._failed(route, status, raw)

    async def finish_run(self, run_id: str, body: Mapping[str, Any], *, timeout_s: float | None = None) -> FinishResult:
        """Seal a recorded run with the turn's answer and usage (service-contract.md).

        ``200 {}`` is ``finished``, ``200 {duplicate: true}`` (a second finish) is ``duplicate`` and
        404 is ``unknown_run``: all answers, not errors.

        Raises:
            ServiceError: not configured, no answer, or any other status.
        """
        route = "finish"
        path = f"/recordings/runs/{_segment(run_id)}/finish"
        status, raw = await self._call("POST", path, route=route, json_body=dict(body), timeout_s=timeout_s)
        if 200 <= status < 300:
            data = _loads_quietly(raw)
            duplicate = isinstance(data, dict) and data.get("duplicate") is True
            return FinishResult("duplicate" if duplicate else "finished", status)
        if status == 404:
            return FinishResult("unknown_run", status)
        raise self._failed(route, status, raw)

    async def derive(
        self,
        scenario_id: str,
        prompt: str,
        live_call: object = None,
        recent_results: object = None,
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any] | None:
        """Ask the service to derive a scenario's parameters (spec §16.3). The caller redacts first.

        Returns the answer object, or ``None`` when the service declined (any status but 200) or is
        not configured.

        Raises:
            ServiceError: no answer in time, unreachable, or a 200 whose body is not a JSON object.
        """
        route = "derive"
        if not self.configured:
            return None
        body: dict[str, object] = {"prompt": prompt}
        if live_call is not None:
            body["liveCall"] = live_call
        if recent_results is not None:
            body["recentResults"] = recent_results
        path = f"/scenarios/{_segment(scenario_id)}/derive"
        status, raw = await self._call("POST", path, route=route, json_body=body, timeout_s=timeout_s)
        if status != 200:
            log_event("service.derive_declined", scenario_id=scenario_id, status=status, error=_snippet(raw))
            return None
        data = decode_json(route, raw, status=status)
        if not isinstance(data, dict):
            raise ServiceError("bad_answer", f"{route}: the answer is not a JSON object", route=route, status=status)
        return data

    async def get_scenario(self, scenario_id: str, *, timeout_s: float | None = None) -> Scenario:
        """The serialized scenario (spec §16.5).

        Raises:
            ServiceError: not configured, no answer, a refusal (404 for an unknown id) or an unreadable scenario.
        """
        route = "scenario"
        status, raw = await self._call("GET", f"/scenarios/{_segment(scenario_id)}", route=route, timeout_s=timeout_s)
        if status != 200:
            raise self._failed(route, status, raw)
        try:
            return parse_scenario(decode_json(route, raw, status=status))
        except PayloadError as exc:
            raise ServiceError("bad_answer", f"{route}: {exc}", route=route, status=status) from None


def _loads_quietly(raw: bytes) -> object:
    # A booked report's id is informative only; an unreadable body must not turn a booking into an error.
    try:
        return json.loads(raw)
    except ValueError:
        return None
