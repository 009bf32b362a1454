"""A fake Anthropic Messages endpoint (``POST /v1/messages``): a configurable answer and usage.

It answers forced tool use the way the real API does (platform.claude.com, "Tool use" → "Forcing
tool use", and the Messages API reference): a request whose ``tool_choice`` is ``{"type": "tool",
"name": N}`` (or ``{"type": "any"}``) gets an assistant message whose ``content`` holds only
``tool_use`` blocks, ``{"type": "tool_use", "id": "toolu_…", "name": N, "input": {…}}`` with
``input`` an already parsed object, and ``stop_reason: "tool_use"``. No text comes before the
block: the API prefills the assistant turn with the call, so a forced reply has no preamble even
when asked for one. The ``input`` here is ``tool_input``, whatever it holds: the real API does not
hold a model to its ``input_schema`` either (only ``strict`` tools are).

Two of the real API's checks are here too, as ``400 invalid_request_error``: a tool ``input_schema``
property key outside ``^[a-zA-Z0-9_.-]{1,64}$`` (the real message, quoted), and a ``tool_choice``
naming a tool the request does not offer (the wording is ours). A request without ``tool_choice``
gets one text block, ``reply_text``, and ``stop_reason: "end_turn"``.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bir.benchmarks.serving import Releaser
from tests.fakes.baseinsvc import Canned

PROPERTY_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")


@dataclass(frozen=True)
class SeenMessage:
    headers: dict[str, str]
    body: Any


def _invalid(message: str) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": message}}, 400)


def _offered_tools(body: Any) -> list[dict[str, Any]]:
    tools = body.get("tools") if isinstance(body, dict) else None
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []


def _refused(body: Any) -> JSONResponse | None:
    """The real API's 400 for a request the fake would otherwise answer, or None."""
    tools = _offered_tools(body)
    for index, tool in enumerate(tools):
        schema = tool.get("input_schema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(properties, dict) and any(PROPERTY_KEY.fullmatch(str(key)) is None for key in properties):
            return _invalid(
                f"tools.{index}.custom.input_schema.properties: Property keys should match pattern "
                "'^[a-zA-Z0-9_.-]{1,64}$'"
            )
    choice = body.get("tool_choice") if isinstance(body, dict) else None
    named = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "tool" else None
    if named is not None and named not in {t.get("name") for t in tools}:
        return _invalid(f"tool_choice.name: no tool named {named!r} is in tools")
    return None


@dataclass
class FakeAnthropic:
    api_key: str = "sk-test-key"
    # The forced tool's input; the text of an answer that was not forced.
    tool_input: dict[str, Any] = field(default_factory=dict)
    reply_text: str = "{}"
    usage: dict[str, Any] = field(default_factory=lambda: {"input_tokens": 100, "output_tokens": 20})
    latency_s: float = 0.0
    # An answer given instead of a reply (e.g. a 500, or a 200 whose body is not JSON).
    forced: Canned | None = None
    requests: list[SeenMessage] = field(default_factory=list)
    url: str = ""
    releaser: Releaser = field(default_factory=Releaser)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _tool_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def messages_url(self) -> str:
        return f"{self.url}/v1/messages"

    def prompts(self) -> list[str]:
        """The text of each request's first user message."""
        with self._lock:
            return [str(r.body["messages"][0]["content"]) for r in self.requests if isinstance(r.body, dict)]

    def _content(self, body: Any) -> tuple[list[dict[str, Any]], str]:
        choice = body.get("tool_choice") if isinstance(body, dict) else None
        kind = choice.get("type") if isinstance(choice, dict) else None
        tools = _offered_tools(body)
        if kind not in ("tool", "any") or not tools:
            return [{"type": "text", "text": self.reply_text}], "end_turn"
        assert isinstance(choice, dict)
        name = choice.get("name") if kind == "tool" else tools[0].get("name")
        with self._lock:
            tool_id = f"toolu_fake_{next(self._tool_ids):03d}"
        return [{"type": "tool_use", "id": tool_id, "name": name, "input": dict(self.tool_input)}], "tool_use"

    async def _messages(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(SeenMessage(dict(request.headers.items()), body))
        await self.releaser.wait(self.latency_s)
        if request.headers.get("x-api-key") != self.api_key:
            error = {"type": "authentication_error", "message": "invalid x-api-key"}
            return JSONResponse({"type": "error", "error": error}, status_code=401)
        if not request.headers.get("anthropic-version"):
            return _invalid("anthropic-version header is required")
        refused = _refused(body)
        if refused is not None:
            return refused
        if self.forced is not None:
            return self.forced.response()
        content, stop_reason = self._content(body)
        return JSONResponse(
            {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": self.usage,
            }
        )

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])
