"""A scripted fake Anthropic Messages API for a real Claude Code binary (``ANTHROPIC_BASE_URL``): the
model of the end-to-end tests and of ``bir bench pin``'s whole session.

Claude Code only ever sends ``POST /v1/messages?beta=true`` with ``stream: true`` (FACTS.md §2); the
stream here follows the real API's event order (``message_start``, ``content_block_start/delta/stop``
per block, with ``input_json_delta`` for tool_use, ``message_delta`` with the stop reason and usage,
``message_stop``). The non-streaming JSON answer and ``count_tokens`` are there for completeness.

A script is a list of model turns, consumed one per request. A turn is a ``Turn`` (text, tool calls or
both) or a callable that receives the request and returns one, so a test can build its next tool call
from what came back (``request.tool_result_text(...)``). When the script runs out, the model answers a
final text turn. A callable that raises does not take the session down: the model answers a text turn
naming the failure, and the exception is kept in ``failures`` for the test to assert on.

Forced tool use is answered as the real API answers it (platform.claude.com, "Tool use" → "Forcing
tool use"): under ``tool_choice`` ``{"type": "tool", "name": N}`` or ``{"type": "any"}`` the API
prefills the assistant turn with a call, so the message holds ``tool_use`` blocks only (no text before
them, even when asked for), ``{"type": "tool_use", "id": "toolu_…", "name": N, "input": {…}}`` with
``input`` a parsed object, and ``stop_reason`` is ``"tool_use"``; ``disable_parallel_tool_use: true``
leaves exactly one. The scripted turn's text is dropped and its calls are kept (only those to ``N``).
A script whose turn calls nothing it may is the test's mistake: the call is made with ``{}`` and the
mismatch is kept in ``failures``. A ``tool_choice`` naming a tool that ``tools`` does not offer, or
forcing a call with no tools at all, is the real API's ``400 invalid_request_error`` (wording ours).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bir.benchmarks.serving import Releaser, serve_in_thread

FINAL_TEXT = "Done."
# Fixed cache figures so that every response carries all four usage counters (a cost > 0).
CACHE_CREATION_TOKENS = 120
CACHE_READ_TOKENS = 2048


@dataclass(frozen=True)
class ToolCall:
    """One tool_use block; an empty ``id`` gets a fresh ``toolu_fake_NNN``."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""


@dataclass(frozen=True)
class Turn:
    """One model answer: optional text first, then tool calls (``stop_reason`` is then ``tool_use``)."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.calls else "end_turn"


def say(text: str) -> Turn:
    """A final text answer (``end_turn``)."""
    return Turn(text=text)


def call(name: str, tool_input: Mapping[str, Any] | None = None, *, text: str = "", tool_id: str = "") -> Turn:
    """A turn that calls one tool, optionally after a line of text."""
    return Turn(text=text, calls=(ToolCall(name, dict(tool_input or {}), tool_id),))


def calls(*tool_calls: ToolCall, text: str = "") -> Turn:
    """A turn that calls several tools at once."""
    return Turn(text=text, calls=tuple(tool_calls))


@dataclass(frozen=True)
class ApiRequest:
    """A request as the fake API received it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return messages if isinstance(messages, list) else []

    def tool_names(self) -> list[str]:
        """The names offered in ``tools[]``."""
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return [t["name"] for t in tools or [] if isinstance(t, dict) and "name" in t]

    def tool_choice(self) -> dict[str, Any] | None:
        """The ``tool_choice`` when it forces a call (type ``any`` or ``tool``); None when text may answer."""
        choice = self.body.get("tool_choice") if isinstance(self.body, dict) else None
        return choice if isinstance(choice, dict) and choice.get("type") in ("any", "tool") else None

    def tool_results(self) -> dict[str, dict[str, Any]]:
        """Every tool_result block in the conversation, by ``tool_use_id``."""
        found: dict[str, dict[str, Any]] = {}
        for block in _blocks(self.messages):
            if block.get("type") == "tool_result":
                found[str(block.get("tool_use_id"))] = block
        return found

    def tool_result_text(self, tool_use_id: str) -> str:
        """The text of one tool_result (its text blocks joined).

        Raises:
            KeyError: the conversation holds no result for ``tool_use_id``.
        """
        return _text_of(self.tool_results()[tool_use_id].get("content"))

    def text(self) -> str:
        """All the text the model is shown: top-level ``system`` and every message, whatever its role."""
        parts = [_text_of(self.body.get("system")) if isinstance(self.body, dict) else ""]
        parts += [_text_of(m.get("content")) for m in self.messages]
        return "\n".join(parts)


def _blocks(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            yield from (b for b in content if isinstance(b, dict))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(b) for b in content)
    if isinstance(content, dict):
        if content.get("type") == "text":
            return str(content.get("text", ""))
        if content.get("type") == "tool_result":
            return _text_of(content.get("content"))
    return ""


Step = Turn | Callable[[ApiRequest], Turn]


@dataclass
class FakeMessagesApi:
    """The fake; ``serve()`` runs it and sets ``url``. Every ``/v1/messages`` request is in ``requests``."""

    script: list[Step] = field(default_factory=list)
    final_text: str = FINAL_TEXT
    requests: list[ApiRequest] = field(default_factory=list)
    other_requests: list[ApiRequest] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    url: str = ""
    releaser: Releaser = field(default_factory=Releaser)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _message_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    # Message ids are unique across instances, as the real API's are: a resumed session's transcript holds
    # the earlier turns' messages, and a turn's usage counts only the ids it has not seen.
    _message_prefix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    _tool_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def queue(self, *steps: Step) -> None:
        """Append model turns to the script."""
        with self._lock:
            self.script.extend(steps)

    @contextlib.contextmanager
    def serve(self) -> Iterator[FakeMessagesApi]:
        with serve_in_thread(self.app, self.releaser) as url:
            self.url = url
            yield self

    @property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/{rest:path}", self._elsewhere, methods=["GET", "HEAD", "POST", "PUT", "DELETE"]),
            ]
        )

    # -- handlers -------------------------------------------------------------------------------

    async def _seen(self, request: Request) -> ApiRequest:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        return ApiRequest(request.method, request.url.path, request.url.query, dict(request.headers.items()), body)

    async def _elsewhere(self, request: Request) -> Response:
        seen = await self._seen(request)
        with self._lock:
            self.other_requests.append(seen)
        return JSONResponse({"type": "error", "error": {"type": "not_found_error", "message": "no such route"}}, 404)

    async def _count_tokens(self, request: Request) -> Response:
        seen = await self._seen(request)
        with self._lock:
            self.other_requests.append(seen)
        return JSONResponse({"input_tokens": _input_tokens(seen)})

    async def _messages(self, request: Request) -> Response:
        seen = await self._seen(request)
        if not isinstance(seen.body, dict) or not isinstance(seen.body.get("messages"), list):
            error = {"type": "invalid_request_error", "message": "messages: a list is required"}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        refused = _tool_choice_refused(seen)
        if refused is not None:
            return refused
        with self._lock:
            self.requests.append(seen)
            step = self.script.pop(0) if self.script else say(self.final_text)
        turn = self._obeying_tool_choice(self._resolve(step, seen), seen)
        message = self._message(turn, seen)
        headers = {"request-id": f"req_fake_{message['id'][9:]}"}
        if seen.body.get("stream"):
            return StreamingResponse(_events(message), media_type="text/event-stream", headers=headers)
        return JSONResponse(message, headers=headers)

    # -- the answer -----------------------------------------------------------------------------

    def _resolve(self, step: Step, request: ApiRequest) -> Turn:
        if isinstance(step, Turn):
            return step
        try:
            return step(request)
        except Exception as exc:  # noqa: BLE001 - kept for the test; the session must end cleanly
            with self._lock:
                self.failures.append(exc)
            return say(f"the fake model's script failed: {exc!r}")

    def _obeying_tool_choice(self, turn: Turn, request: ApiRequest) -> Turn:
        choice = request.tool_choice()
        if choice is None:
            return turn
        name = choice.get("name") if choice["type"] == "tool" else None
        kept = tuple(c for c in turn.calls if name is None or c.name == name)
        if not kept:
            # A real model cannot decline a forced call; a script that does is kept for the test to see.
            wanted = name or request.tool_names()[0]
            called = [c.name for c in turn.calls]
            with self._lock:
                self.failures.append(ValueError(f"tool_choice forces {wanted}; the script's turn calls {called}"))
            kept = (ToolCall(wanted, {}),)
        if choice.get("disable_parallel_tool_use") is True:
            kept = kept[:1]
        return Turn(calls=kept)

    def _message(self, turn: Turn, request: ApiRequest) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if turn.text:
            content.append({"type": "text", "text": turn.text})
        for tool in turn.calls:
            tool_id = tool.id or f"toolu_fake_{next(self._tool_ids):03d}"
            content.append({"type": "tool_use", "id": tool_id, "name": tool.name, "input": dict(tool.input)})
        output_tokens = 8 + len(json.dumps(content)) // 4
        return {
            "id": f"msg_fake_{self._message_prefix}_{next(self._message_ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": request.body.get("model") or "claude-fake",
            "content": content,
            "stop_reason": turn.stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": _input_tokens(request),
                "cache_creation_input_tokens": CACHE_CREATION_TOKENS,
                "cache_read_input_tokens": CACHE_READ_TOKENS,
                "output_tokens": output_tokens,
                "service_tier": "standard",
            },
        }


def _tool_choice_refused(request: ApiRequest) -> Response | None:
    """The real API's 400 for a forced call it cannot make, or None."""
    choice = request.tool_choice()
    offered = request.tool_names()
    if choice is None:
        return None
    if not offered:
        message = "tool_choice: a forced call needs tools"
    elif choice["type"] == "tool" and choice.get("name") not in offered:
        message = f"tool_choice: no tool named {choice.get('name')!r} is in tools"
    else:
        return None
    return JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": message}}, 400)


def _input_tokens(request: ApiRequest) -> int:
    # About four bytes a token, as a realistic, request-dependent figure.
    return 1 + len(json.dumps(request.body.get("messages", []) if isinstance(request.body, dict) else [])) // 4


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _events(message: Mapping[str, Any]) -> AsyncIterator[bytes]:
    """The stream of one message, in the real API's order and shapes."""
    usage = dict(message["usage"])
    start_usage = {**usage, "output_tokens": 1}
    yield _sse("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                                      "usage": start_usage}})  # fmt: skip
    yield _sse("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield _sse("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": {"type": "text", "text": ""}})  # fmt: skip
            for piece in _pieces(block["text"]):
                delta = {"type": "text_delta", "text": piece}
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            yield _sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
            for piece in _pieces(json.dumps(block["input"])):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                 "usage": {"output_tokens": usage["output_tokens"]}})  # fmt: skip
    yield _sse("message_stop", {"type": "message_stop"})


def _pieces(text: str, size: int = 40) -> Sequence[str]:
    """Split into deltas as the real stream does (an empty text still sends one delta)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
