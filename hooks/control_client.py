"""The one HTTP client of the control plane (spec §16.1): every request bir's processes make of a
control server, typed by route (``bir.hooks.api.ROUTES``).

Bounded twice, like the service client: a total deadline over the whole exchange (httpx's own timeout is
per read, so a server that drips bytes would never trip it) and a cap on the answer's size. It carries
the bearer token, never reads proxy variables from the environment (the token stays on loopback), and
turns every failure into one ``ControlError`` whose ``kind`` says what happened. ``bir-hook`` keeps its
own standard-library client (it must start in milliseconds) and reads the same route table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeVar

import anyio
import httpx

from bir.hooks import api

MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
# A control server is on loopback: one that does not take the connection at once is not there.
CONNECT_TIMEOUT_S: Final = 2.0
_SNIPPET_CHARS: Final = 200

ErrorKind = Literal["unreachable", "timeout", "refused", "unreadable", "too_large"]

_Q = TypeVar("_Q")
_A = TypeVar("_A")


class ControlError(Exception):
    """A control-server request that did not give a usable answer; ``status`` is the HTTP status when one came."""

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class Endpoint(Protocol):
    """Where a control server listens and its token (``bir.hooks.discovery.Discovery`` has both)."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str: ...


@dataclass(frozen=True)
class At:
    """An endpoint given as its two strings."""

    url: str
    token: str


class ControlClient:
    """Requests to the control server at ``endpoint``. An injected ``http`` client is used as is and left
    open; otherwise one is built (never reading proxy variables) and closed with this object."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        http: httpx.AsyncClient | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.url = endpoint.url.rstrip("/")
        self._headers = {"authorization": f"Bearer {endpoint.token}", "content-type": "application/json"}
        self._http = http or httpx.AsyncClient(trust_env=False)
        self._owns_http = http is None
        self._max = max_answer_bytes

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def send(
        self, route: api.Route[_Q, Any], body: _Q | bytes | None = None, *, timeout_s: float | None = None
    ) -> tuple[int, bytes]:
        """One exchange on ``route`` (``body`` a request of its type, or bytes already encoded); the status and
        the raw answer, whatever the status.

        Raises:
            ControlError: no answer in time (``timeout``), no connection or a broken one (``unreachable``), or
                an answer past the size cap (``too_large``).
        """
        limit_s = route.timeout_s if timeout_s is None else timeout_s
        content = None if body is None else body if isinstance(body, bytes) else api.encode(body)
        try:
            with anyio.fail_after(limit_s):
                async with self._http.stream(
                    route.method,
                    self.url + route.path,
                    content=content,
                    headers=self._headers,
                    timeout=httpx.Timeout(limit_s, connect=min(limit_s, CONNECT_TIMEOUT_S)),
                ) as response:
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > self._max:
                            raise ControlError("too_large", f"{route.path} answered more than {self._max} bytes")
                        chunks.append(chunk)
                    return response.status_code, b"".join(chunks)
        except TimeoutError:
            raise ControlError("timeout", f"{route.path} did not answer within {limit_s:g} s") from None
        except httpx.TimeoutException:
            raise ControlError("timeout", f"{route.path} did not answer within {limit_s:g} s") from None
        except httpx.HTTPError as exc:
            raise ControlError("unreachable", f"{route.path}: {type(exc).__name__}: {exc}"[:500]) from exc

    async def call(
        self, route: api.Route[_Q, _A], body: _Q | bytes | None = None, *, timeout_s: float | None = None
    ) -> _A:
        """``route``'s answer, decoded as its type.

        Raises:
            ControlError: as ``send``; and ``refused`` for a status other than 2xx, ``unreadable`` for an
                answer that is not the route's shape.
        """
        status, raw = await self.send(route, body, timeout_s=timeout_s)
        if status // 100 != 2:
            snippet = raw[:_SNIPPET_CHARS].decode("utf-8", "replace")
            raise ControlError("refused", f"{route.path} answered HTTP {status}: {snippet}", status=status)
        try:
            return api.decode(route.answer, raw)
        except api.BodyError as exc:
            raise ControlError("unreadable", f"{route.path}: unreadable answer: {exc}", status=status) from None
