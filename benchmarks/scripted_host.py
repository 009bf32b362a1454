"""A scripted Claude Code for the workload benchmark and the repair tests: everything real but the model.

``ScriptedHost`` holds one project's real control server (``live_session``: the controller, the local
service it chose because none is configured, the evaluator pool) and, for each MCP server, a real
``bir-proxy`` wrapping it, spoken to over stdio with the MCP SDK's client exactly as Claude Code speaks to
it (``initialize``, ``tools/call`` carrying ``_meta["claudecode/toolUseId"]``). What the model would do is
the caller's script: ``prompt`` posts ``UserPromptSubmit`` and says whether bir armed a plan; ``call``
makes one tool call the way the host does (``PreToolUse``, the call through the proxy with the pinned
arguments if bir pinned it, ``PostToolUse`` with the content the host saw); ``run_scenario`` is the model
calling ``mcp__bir__run_scenario``; ``end`` writes the turn's model usage to its transcript and posts
``Stop``. Nothing here decides anything bir decides.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
import anyio.lowlevel
import httpx

from bir.hooks.hook_routes import HOOK_ROUTES

RUN_SCENARIO: Final = "mcp__bir__run_scenario"
TOOL_USE_ID_META: Final = "claudecode/toolUseId"
SESSION_ID: Final = "sess-scripted"


@dataclass(frozen=True)
class Armed:
    """What ``UserPromptSubmit`` answered: the directive bir added, if any."""

    context: str | None

    @property
    def direct(self) -> bool:
        return self.context is not None and RUN_SCENARIO in self.context

    @property
    def steer(self) -> bool:
        return self.context is not None and not self.direct


@dataclass(frozen=True)
class CallResult:
    """One tool call as the model saw it: the content (or the denial's reason) and whether bir pinned it."""

    content: list[dict[str, Any]]
    is_error: bool
    pinned: bool = False
    denied: str | None = None
    ran_input: dict[str, Any] | None = None

    def text(self) -> str:
        return "".join(str(b.get("text", "")) for b in self.content if isinstance(b, dict))


@dataclass
class ScriptedHost:
    """See the module's docstring; use as ``async with ScriptedHost.open(...) as host``."""

    project: Path
    transcript: Path
    http: httpx.AsyncClient
    sessions: dict[str, Any]
    controller: Any
    local: Any
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _messages: Any = field(default_factory=lambda: itertools.count(1))

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        project: Path,
        servers: Mapping[str, Sequence[str]],
        *,
        replay: bool = True,
        find: Any = None,
        unwrapped: Collection[str] = (),
        errlog: TextIO | None = None,
    ) -> AsyncIterator[ScriptedHost]:
        """A control server for ``project`` on the local service, and a proxied MCP session for each of
        ``servers`` (name → the command that runs it), until the block ends. A server named in ``unwrapped``
        is spoken to directly, as Claude Code does with a server bir does not wrap: no proxy, and its hooks
        see only the content array. ``find`` replaces the local service's matcher (the benchmark's
        "service's rule"). What the servers write on stderr goes to ``errlog`` (by default this process's).

        Raises:
            RuntimeError: a server did not start or its proxy never registered.
        """
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        from bir.core import config
        from bir.core.service import ServiceClient
        from bir.evaluator import EvaluatorPool
        from bir.hooks.daemon import live_session
        from bir.hooks.discovery import write_discovery
        from bir.hooks.local import LOCAL_TOKEN, open_local_service
        from bir.hooks.replay.host import proxy_environment
        from bir.hooks.session.switches import Switches

        switches = Switches(False, replay, None)
        async with contextlib.AsyncExitStack() as stack:
            pool = await stack.enter_async_context(EvaluatorPool(workers=1))
            local = await stack.enter_async_context(open_local_service(config.home(), project=project, pool=pool))
            if find is not None:
                local.service.find = find.__get__(local.service)  # type: ignore[method-assign]
            client = await stack.enter_async_context(
                ServiceClient(local.base_url, LOCAL_TOKEN, transport=local.transport)
            )
            live = await stack.enter_async_context(live_session(project, service=client, switches=lambda: switches))
            server = live.server
            write_discovery(server.discovery(project))
            env = proxy_environment(config.home())
            sessions: dict[str, Any] = {}
            for name, command in servers.items():
                wrapped = name not in unwrapped
                proxy = [sys.executable, "-m", "bir.proxy", "--server-name", name, "--project", str(project), "--"]
                argv = [*proxy, *command] if wrapped else list(command)
                params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(project))
                # Without an errlog, the SDK's own default (the process's stderr when it was imported): the
                # sys.stderr of the moment may be a capture with no file descriptor to hand a child.
                transport = stdio_client(params) if errlog is None else stdio_client(params, errlog)
                read, write = await stack.enter_async_context(transport)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                sessions[name] = session
                if wrapped:
                    with anyio.fail_after(30):
                        await server.queue.wait_served(name)
            headers = {"authorization": f"Bearer {server.token}"}
            http = await stack.enter_async_context(
                httpx.AsyncClient(base_url=server.url or "", headers=headers, trust_env=False, timeout=60)
            )
            hello = {"pid": os.getpid(), "version": "scripted", "tools": 1, "off": False}
            (await http.post("/scenario/hello", json=hello)).raise_for_status()
            transcript = project / ".scripted-transcript.jsonl"
            yield cls(project, transcript, http, sessions, live.controller, local.service)

    # --- the hooks -------------------------------------------------------------------------------

    def _hook(self, event: str, **fields: Any) -> dict[str, Any]:
        return {
            "session_id": SESSION_ID,
            "transcript_path": str(self.transcript),
            "cwd": str(self.project),
            "prompt_id": f"p{next(self._ids)}",
            "permission_mode": "default",
            "hook_event_name": event,
            **fields,
        }

    async def _post(self, event: str, **fields: Any) -> dict[str, Any]:
        response = await self.http.post(HOOK_ROUTES[event].path, json=self._hook(event, **fields))
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    async def prompt(self, text: str) -> Armed:
        """``UserPromptSubmit``: what bir answered (a plan's directive, or nothing)."""
        answer = await self._post("UserPromptSubmit", prompt=text)
        specific = answer.get("hookSpecificOutput") or {}
        context = specific.get("additionalContext")
        return Armed(context if isinstance(context, str) and context else None)

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> CallResult:
        """One tool call as the host makes it: ``PreToolUse``, the call (pinned arguments where bir pinned
        it), ``PostToolUse``. Only ``mcp__<server>__<tool>`` calls of an opened server are made."""
        tool_use_id = f"toolu_scripted_{next(self._ids)}"
        pre = await self._post("PreToolUse", tool_name=tool, tool_input=dict(arguments), tool_use_id=tool_use_id)
        specific = pre.get("hookSpecificOutput") or {}
        decision = specific.get("permissionDecision")
        if decision == "deny":
            return CallResult([], True, denied=str(specific.get("permissionDecisionReason") or ""))
        updated = specific.get("updatedInput")
        ran = dict(updated) if isinstance(updated, dict) else dict(arguments)
        pinned = isinstance(updated, dict)
        _, server, name = tool.split("__", 2)
        began = time.monotonic()
        result = await self.sessions[server].call_tool(name, ran, meta={TOOL_USE_ID_META: tool_use_id})
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        content = [b for b in dumped.get("content") or [] if isinstance(b, dict)]
        is_error = dumped.get("isError") is True
        event = "PostToolUseFailure" if is_error else "PostToolUse"
        extra: dict[str, Any] = {"tool_response": content}
        if is_error:
            extra = {"error": "".join(str(b.get("text", "")) for b in content)[:2000]}
        await self._post(
            event,
            tool_name=tool,
            tool_input=ran,
            tool_use_id=tool_use_id,
            duration_ms=round((time.monotonic() - began) * 1000),
            **extra,
        )
        return CallResult(content, is_error, pinned=pinned, ran_input=ran)

    async def run_scenario(self) -> dict[str, Any]:
        """The model calls ``mcp__bir__run_scenario`` as the directive asks: bir runs the plan."""
        tool_use_id = f"toolu_scripted_{next(self._ids)}"
        await self._post("PreToolUse", tool_name=RUN_SCENARIO, tool_input={}, tool_use_id=tool_use_id)
        response = await self.http.post("/scenario/run", json={"toolUseId": tool_use_id}, timeout=120)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        await self._post(
            "PostToolUse",
            tool_name=RUN_SCENARIO,
            tool_input={},
            tool_use_id=tool_use_id,
            tool_response=[{"type": "text", "text": str(answer.get("text") or answer.get("why") or "")}],
        )
        return answer

    async def end(self, answer: str, usage: Sequence[Mapping[str, int]], *, model: str) -> None:
        """The turn's model calls written to its transcript (one assistant message each), then ``Stop`` and
        ``SessionEnd``: each turn is a session of its own, booked at once."""
        with self.transcript.open("a", encoding="utf-8") as handle:
            for counts in usage:
                line = {
                    "type": "assistant",
                    "message": {
                        "id": f"msg_scripted_{next(self._messages)}",
                        "model": model,
                        "role": "assistant",
                        "usage": dict(counts),
                        "content": [],
                    },
                }
                handle.write(json.dumps(line) + "\n")
        await self._post("Stop", last_assistant_message=answer)
        await self._post("SessionEnd", reason="other")

    async def settled(self, timeout_s: float = 60.0) -> None:
        """Wait until everything the turns booked reached the local service and its calculations ended (a
        step recorded after its turn's finish starts one more): two rounds in a row that find nothing left."""
        outbox = self.controller.reports
        with anyio.fail_after(timeout_s):
            quiet = 0
            while quiet < 2:
                # A draft report waits for its turn's seal by design: only what is to be sent counts.
                # A sealed turn's steps reach the outbox only once its seal (in the background) is done.
                before = await self.controller.calls.sealed()
                before += sum(1 for item in outbox.pending() if not item.draft) + self.local.busy
                await outbox.flush(timeout_s)
                await self.local.idle(timeout_s)
                # One turn of the loop lets a step recorded just now reach the outbox.
                await anyio.lowlevel.checkpoint()
                quiet = quiet + 1 if before == 0 else 0
