"""A fake Anthropic Messages endpoint (``POST /v1/messages``): a configurable reply text and usage."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bir.benchmarks.serving import Releaser
from tests.fakes.baseinsvc import Canned


@dataclass(frozen=True)
class SeenMessage:
    headers: dict[str, str]
    body: Any


@dataclass
class FakeAnthropic:
    api_key: str = "sk-test-key"
    reply_text: str = "{}"
    usage: dict[str, Any] = field(default_factory=lambda: {"input_tokens": 100, "output_tokens": 20})
    latency_s: float = 0.0
    # An answer given instead of a reply (e.g. a 500, or a 200 whose body is not JSON).
    forced: Canned | None = None
    requests: list[SeenMessage] = field(default_factory=list)
    url: str = ""
    releaser: Releaser = field(default_factory=Releaser)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def messages_url(self) -> str:
        return f"{self.url}/v1/messages"

    def prompts(self) -> list[str]:
        """The text of each request's first user message."""
        with self._lock:
            return [str(r.body["messages"][0]["content"]) for r in self.requests if isinstance(r.body, dict)]

    async def _messages(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(SeenMessage(dict(request.headers.items()), body))
        await self.releaser.wait(self.latency_s)
        if request.headers.get("x-api-key") != self.api_key:
            error = {"type": "authentication_error", "message": "invalid x-api-key"}
            return JSONResponse({"type": "error", "error": error}, status_code=401)
        if not request.headers.get("anthropic-version"):
            error = {"type": "invalid_request_error", "message": "anthropic-version header is required"}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        if self.forced is not None:
            return self.forced.response()
        return JSONResponse(
            {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": [{"type": "text", "text": self.reply_text}],
                "stop_reason": "end_turn",
                "usage": self.usage,
            }
        )

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])
