"""The Claude Code part of ``bir demo``: what the host does in a session, done by this process.

A session's host runs bir's hooks as commands (``bir-hook EVENT`` with the hook's JSON on stdin, its
answer on stdout), speaks MCP over stdio to the servers of the project (the demo fleet server behind
``bir-proxy``, and ``bir-scenario``), passes each tool call's id in ``_meta`` as Claude Code 2.1.332
does, and writes the model's messages with their usage to the session's transcript (FACTS.md §2, §5).
This class does the same with the same commands, so what bir does in the demo is what it does in a
session. The model is the one part it cannot have offline: its choices are the demo's script, and its
usage is counted the way ``FakeMessagesApi`` counts it, four bytes a token over what a request carries,
plus the context a real Claude Code request carries (see ``CONTEXT_TOKENS``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO, cast

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from bir.core import config

MODEL: Final = "claude-opus-5-5"
# What a Claude Code 2.1.332 request carries besides the conversation: its system prompt (7.5 KB) and tool
# definitions (61.5 KB) and the first message's reminders (9.9 KB), measured 2026-12-01 against the fake
# Messages API for a one-word prompt, at four bytes a token; a warm session reads it from the cache.
CONTEXT_TOKENS: Final = 19_700
BYTES_PER_TOKEN: Final = 4
HOOK_TIMEOUT_S: Final = 20.0
CALL_TIMEOUT_S: Final = 120.0
TOOL_USE_ID_META: Final = "claudecode/toolUseId"


class HostError(RuntimeError):
    """Something the demo's host needs did not work; the message says what."""


def _tokens(value: object) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // BYTES_PER_TOKEN)


@dataclass
class Turn:
    """One prompt of one session: its conversation so far and what its model requests cost."""

    session_id: str
    prompt: str
    transcript: Path
    prompt_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    conversation: list[Any] = field(default_factory=list)
    requests: int = 0
    tokens: int = 0


class DemoHost:
    """Plays Claude Code for one project. Use as ``async with DemoHost(...) as host``."""

    def __init__(self, project: Path, home: Path, *, fleet_log: Path, errlog: TextIO) -> None:
        self.project = project
        self.home = home
        self.fleet_log = fleet_log
        self._errlog = errlog
        self._clients: dict[str, Client] = {}
        self._stack = contextlib.AsyncExitStack()
        self._stop = anyio.Event()
        self._ready: list[anyio.Event] = []
        self._tool_ids = 0
        self._message_ids = 0

    def _env(self, **extra: str) -> dict[str, str]:
        env = config.without_secrets(os.environ)
        env["BIR_HOME"] = str(self.home)
        env.update(extra)
        return env

    async def __aenter__(self) -> DemoHost:
        python = sys.executable
        servers = {
            # What `bir install` writes for a project's stdio server, and for the bir server.
            "fleet": StdioServerParameters(
                command=python,
                args=[
                    *("-m", "bir.proxy", "--server-name", "fleet", "--project", str(self.project), "--"),
                    *(python, "-m", "bir.examples.fleet_server"),
                ],
                env=self._env(FLEET_CALL_LOG=str(self.fleet_log)),
                cwd=str(self.project),
            ),
            "bir": StdioServerParameters(
                command=python,
                args=["-m", "bir.proxy.scenario_server", "--project", str(self.project)],
                env=self._env(),
                cwd=str(self.project),
            ),
        }
        # Each server starts in a task of its own (they start at once, as a host starts them, and each
        # client is entered and left in one task); the block runs until every one has initialized.
        group = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.callback(self._stop.set)
        try:
            for name, params in servers.items():
                ready = anyio.Event()
                group.start_soon(self._serve, name, params, ready)
                self._ready.append(ready)
            with anyio.fail_after(CALL_TIMEOUT_S):
                for ready in self._ready:
                    await ready.wait()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def _serve(self, name: str, params: StdioServerParameters, ready: anyio.Event) -> None:
        try:
            async with Client(stdio_client(params, errlog=self._errlog), mode="legacy", read_timeout_seconds=60) as c:
                self._clients[name] = c
                ready.set()
                await self._stop.wait()
        except Exception as exc:
            raise HostError(f"the {name} MCP server did not start or stopped: {exc}") from exc

    async def __aexit__(self, *exc: object) -> None:
        # The SDK closes each server's stdin, waits, then kills its process tree.
        await self._stack.aclose()

    # --- hooks -------------------------------------------------------------------------------------

    async def hook(self, event: str, turn: Turn, **fields: Any) -> dict[str, Any]:
        """Run ``bir-hook EVENT`` as Claude Code does, with the hook's JSON on stdin; its answer, parsed."""
        body = {
            "session_id": turn.session_id,
            "transcript_path": str(turn.transcript),
            "cwd": str(self.project),
            "prompt_id": turn.prompt_id,
            "permission_mode": "default",
            "hook_event_name": event,
            **fields,
        }
        with anyio.fail_after(HOOK_TIMEOUT_S):
            done = await anyio.run_process(
                [sys.executable, "-m", "bir.hooks.hook_client", event],
                input=json.dumps(body).encode(),
                cwd=str(self.project),
                env=self._env(CLAUDE_PROJECT_DIR=str(self.project)),
                check=False,
            )
        try:
            answer = json.loads(done.stdout or b"{}")
        except ValueError:
            raise HostError(f"bir-hook {event} printed something that is not JSON: {done.stdout[:200]!r}") from None
        return answer if isinstance(answer, dict) else {}

    # --- the model's requests ---------------------------------------------------------------------

    def begin(self, session_id: str, prompt: str) -> Turn:
        """A prompt as the user types it: the session's transcript gets its line."""
        transcript = self.home.parent / "transcripts" / f"{session_id}.jsonl"
        transcript.parent.mkdir(parents=True, exist_ok=True)
        turn = Turn(session_id, prompt, transcript)
        turn.conversation.append({"role": "user", "content": prompt})
        self._write(turn, {"type": "user", "message": {"role": "user", "content": prompt}})
        return turn

    def model_says(self, turn: Turn, content: list[dict[str, Any]]) -> None:
        """One model request and its answer ``content``, written to the transcript with its usage."""
        self._message_ids += 1
        usage = {
            "input_tokens": _tokens(turn.conversation),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": CONTEXT_TOKENS,
            "output_tokens": _tokens(content),
        }
        turn.requests += 1
        turn.tokens += sum(usage.values())
        turn.conversation.append({"role": "assistant", "content": content})
        message = {
            "id": f"msg_demo_{self._message_ids:04d}",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": content,
            "stop_reason": "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn",
            "usage": usage,
        }
        self._write(turn, {"type": "assistant", "message": message})

    def tool_use(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        self._tool_ids += 1
        return {"type": "tool_use", "id": f"toolu_demo_{self._tool_ids:03d}", "name": name, "input": dict(arguments)}

    def _write(self, turn: Turn, line: dict[str, Any]) -> None:
        line = {**line, "sessionId": turn.session_id, "cwd": str(self.project), "uuid": str(uuid.uuid4())}
        with turn.transcript.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

    # --- tools ------------------------------------------------------------------------------------

    async def run_tool(self, turn: Turn, call: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
        """One tool call as Claude Code makes it: PreToolUse (whose answer may change the arguments or deny
        the call), the MCP call with its id in ``_meta``, PostToolUse; the result's content and whether it
        is an error, which the conversation gets too."""
        name, arguments, tool_use_id = str(call["name"]), dict(call["input"]), str(call["id"])
        pre = await self.hook("PreToolUse", turn, tool_name=name, tool_input=arguments, tool_use_id=tool_use_id)
        decided = pre.get("hookSpecificOutput") or {}
        if decided.get("permissionDecision") == "deny":
            reason = str(decided.get("permissionDecisionReason") or "denied by a hook")
            content, failed = [{"type": "text", "text": reason}], True
        else:
            if isinstance(decided.get("updatedInput"), dict):
                arguments = dict(decided["updatedInput"])
            server, _, tool = name.removeprefix("mcp__").partition("__")
            client = self._clients.get(server)
            if client is None:
                raise HostError(f"the demo has no MCP server {server!r} for {name}")
            with anyio.fail_after(CALL_TIMEOUT_S):
                # An open map on the wire; the SDK's type names only its reserved keys.
                meta = cast(types.RequestParamsMeta, {TOOL_USE_ID_META: tool_use_id})
                result = await client.call_tool(tool, arguments, meta=meta)
            content = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
            failed = bool(result.is_error)
            event = "PostToolUseFailure" if failed else "PostToolUse"
            extra: dict[str, Any] = {"error": text_of(content)[:2000]} if failed else {"tool_response": content}
            await self.hook(event, turn, tool_name=name, tool_input=arguments, tool_use_id=tool_use_id, **extra)
        result_block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": failed}
        turn.conversation.append({"role": "user", "content": [result_block]})
        return content, failed

    def fleet_calls(self) -> list[dict[str, Any]]:
        """The calls that reached the fleet server, in order (its ``FLEET_CALL_LOG``)."""
        if not self.fleet_log.exists():
            return []
        return [json.loads(line) for line in self.fleet_log.read_text(encoding="utf-8").splitlines() if line]


def text_of(content: list[dict[str, Any]]) -> str:
    """The text blocks of a tool result, joined."""
    return "\n".join(str(block.get("text", "")) for block in content if block.get("type") == "text")
