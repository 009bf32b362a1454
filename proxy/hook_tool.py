"""``bir-scenario``'s ``hook`` tool: the tool events of ``bir install --mcp-hooks``, with no process per hook.

Claude Code calls it as an ``mcp_tool`` hook (FACTS.md §3.3) with every field of the hook input
interpolated into a string (``bir.hooks.api.MCP_HOOK_INPUT``). The tool rebuilds the hook input, POSTs
it to the event's hook route exactly as ``bir-hook`` would, and answers the route's JSON as text; Claude
Code reads that text as the hook's output. Every failure, the off switch, and a call that is not a hook
(a model's, which carries ``claudecode/toolUseId``) answer ``{}``: the host session must never fail
because of bir, and a model calling the tool changes nothing.

The tool is not listed in ``tools/list`` (Claude Code 2.1.197 and 2.1.332 call an unlisted tool from an
``mcp_tool`` hook): the model never sees it, and no request carries its definition.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bir.hooks import api

EMPTY: Final = "{}"
# The client's own deadline is the control server's deadline plus this, and always this much under the
# timeout ``bir install`` writes for the hook, so Claude Code never has to give up on the call.
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
MODEL_CALL_META: Final = "claudecode/toolUseId"
_JSON_FIELDS: Final = frozenset({"tool_input", "tool_response"})

# (route, body, deadline in seconds) -> (status, reply body); raises on a transport failure.
Post = Callable[[str, bytes, float], Awaitable[tuple[int, bytes]]]


@dataclass(frozen=True)
class HookReply:
    """What the tool answers (the hook output JSON as text) and, when it fell back to ``{}``, why."""

    text: str
    event: str | None = None
    failure: str | None = None


def hook_input(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """The hook input Claude Code interpolated into ``arguments``, or None when they are not one of a
    tool event (no ``session_id``, or an event other than ``api.MCP_HOOK_EVENTS``).

    An empty string is an absent field; ``tool_input`` and ``tool_response`` are parsed back from JSON
    text (kept as text when they are not JSON), ``duration_ms`` to a number and ``is_interrupt`` to a bool.
    """
    body: dict[str, Any] = {}
    for name in api.MCP_HOOK_FIELDS:
        value = arguments.get(name)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            body[name] = value
        elif name in _JSON_FIELDS:
            body[name] = _json_or_text(value)
        elif name == "duration_ms":
            number = _number(value)
            if number is not None:
                body[name] = number
        elif name == "is_interrupt":
            if value in ("true", "false"):
                body[name] = value == "true"
        else:
            body[name] = value
    if not isinstance(body.get("session_id"), str) or body.get("hook_event_name") not in api.MCP_HOOK_EVENTS:
        return None
    return body


def answer_text(status: int, reply: bytes) -> str | None:
    """The route's answer as the hook's output text, or None when it is not a 200 with a JSON object."""
    if status != 200 or len(reply) > MAX_ANSWER_BYTES:
        return None
    try:
        value = json.loads(reply)
    except ValueError:
        return None
    return reply.decode("utf-8") if isinstance(value, dict) else None


async def answer_hook(
    arguments: Mapping[str, Any] | None,
    meta: Mapping[str, Any] | None,
    *,
    off: bool,
    post: Post,
    host: int | None = None,
) -> HookReply:
    """The tool's answer to one call; never raises but for cancellation. ``host`` is the Claude Code
    process that started this server (``bir.core.host``): the hook's session is that host's."""
    if meta is not None and MODEL_CALL_META in meta:
        return HookReply(EMPTY, failure="called by the model, not by a hook")
    body = hook_input(arguments or {})
    if body is None:
        return HookReply(EMPTY, failure="not a tool event's hook input")
    if host is not None:
        body[api.HOOK_HOST_PID_FIELD] = host
    event = str(body["hook_event_name"])
    if off:
        return HookReply(EMPTY, event)
    route = api.HOOK_ROUTES[event].path
    try:
        status, reply = await post(route, api.encode(body), api.HOOK_ROUTES[event].client_s)
    except Exception as exc:  # noqa: BLE001 - whatever failed, the hook answers {} and the session goes on
        return HookReply(EMPTY, event, f"{route}: {type(exc).__name__}: {exc}"[:300])
    text = answer_text(status, reply)
    if text is None:
        return HookReply(EMPTY, event, f"{route} answered {status} with {len(reply)} bytes that are not a JSON object")
    return HookReply(text, event)


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _number(value: str) -> float | int | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number.is_integer() else number
