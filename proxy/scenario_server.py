"""``bir-scenario``: the ``bir`` stdio MCP server, whose one tool is ``run_scenario`` (spec §6.3).

It holds no state, no credentials and no upstream connections: a ``tools/call`` becomes one
``POST /scenario/run`` to the control server found through the project's discovery file, and the
answer comes back as text, never as an error (``scenario_answer`` has the words). Esc
(``notifications/cancelled``) cancels the handler, which closes the HTTP request; the control
server then starts no further step.

"It says it is there": ``POST /scenario/hello`` goes out on ``initialize``, on ``tools/list``, when
the off switch flips, when the discovery file points somewhere new and every 5 minutes, from one
background sender, bounded at 1 s and never awaited by a request.

The off switch is ``BIR_OFF`` (read at start) or the file ``<BIR_HOME>/off`` (looked at every 2 s).
While off, ``tools/list`` lists nothing, and a flip is announced with ``notifications/tools/list_changed``.

``run_scenario`` is listed only while replay is on for the project (its stored switch, and ``BIR_REPLAY``
not ``0``; looked at with the off switch): ``bir install`` always registers this server, since it carries
the tool events' hooks, and without replay no tool of it rides along a request (D14).

The scenario tools (``bir.proxy.scenario_tools``, spec §16.5): the reading ones are listed where the
project's ``editing`` switch is on (``bir scenario editing on``, looked at with the off switch) or
``BIR_SCENARIO_TOOLS=read``, and answered even unlisted; the changing ones are listed and run only with
editing on. A change of the list is announced the same way.

The ``hook`` tool (``bir.proxy.hook_tool``, unlisted) answers the tool events (``bir install`` writes them
as ``mcp_tool`` hooks on this server): POSTed to the control server's hook routes. When the project has no
live control server, the hook tool and ``run_scenario`` start ``bir-hooks revive`` as ``bir-hook`` does
(``bir.core.revive``: installed, not down, once per 10 s) and answer as without one.

Usage: ``bir-scenario [--project DIR]`` (the project directory defaults to the working directory).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server

from bir.core import config, installed
from bir.core.host import host_pid
from bir.core.log import log_event
from bir.core.off_switch import file_says_off
from bir.core.paths import off_file
from bir.core.revive import revive_if_due
from bir.hooks import api
from bir.hooks.control_client import ControlClient, ControlError
from bir.hooks.discovery import Discovery, read_discovery
from bir.proxy.hook_tool import answer_hook
from bir.proxy.scenario_answer import (
    RUN_SCENARIO_DESCRIPTION,
    RUN_SCENARIO_INPUT_SCHEMA,
    RUN_SCENARIO_NAME,
    Answer,
    answer_from_reply,
    no_control_server,
    runner_off,
    unavailable,
)
from bir.proxy.scenario_tools import (
    CHANGE_TOOLS,
    EDITING_OFF,
    NOTHING_TO_READ,
    OFF_REFUSED,
    READ_TOOLS,
    ToolSettings,
    run_tool,
    tool_definitions,
)

HELLO_TIMEOUT_S: Final = 1.0
HELLO_EVERY_S: Final = 300.0
WATCH_EVERY_S: Final = 2.0
CONNECT_TIMEOUT_S: Final = 2.0
NOTIFY_TIMEOUT_S: Final = 1.0
# The bundle is budgeted upstream; this bound only stops a runaway reply from filling memory.
MAX_REPLY_BYTES: Final = 8 * 1024 * 1024
MAX_TOOL_USE_ID_CHARS: Final = 200
TOOL_USE_ID_META: Final = "claudecode/toolUseId"


def bir_version() -> str:
    """The installed ``bir`` version, for the hello."""
    try:
        return metadata.version("bir")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class ScenarioSettings:
    """What ``bir-scenario`` runs by, from the ``BIR_*`` variables it read once at start."""

    project_dir: Path
    run_timeout_s: float
    debug: bool
    env_off: bool
    off_path: Path
    read_tools: bool = False
    tools: ToolSettings | None = None
    env_replay: bool | None = None
    home: Path | None = None

    @classmethod
    def of(cls, project_dir: Path, settings: config.Settings) -> ScenarioSettings:
        """The part of ``settings`` ``bir-scenario`` uses, for ``project_dir``."""
        return cls(
            project_dir=project_dir,
            run_timeout_s=settings.scenario_run_timeout_ms / 1000,
            debug=settings.scenario_debug,
            env_off=settings.off,
            off_path=off_file(settings.home),
            read_tools=settings.scenario_tools == "read",
            tools=ToolSettings.of(settings),
            env_replay=settings.replay,
            home=settings.home,
        )


class OffSwitch:
    """``BIR_OFF`` from the start, or the off file while it exists."""

    def __init__(self, env_off: bool, path: Path) -> None:
        self._env_off = env_off
        self._path = path

    def read(self) -> bool:
        """Whether the runner is off right now."""
        return self._env_off or file_says_off(self._path)


class ScenarioLink:
    """The requests ``bir-scenario`` makes of its project's control server, found by discovery at each one."""

    def __init__(self, http: httpx.AsyncClient, project_dir: Path, home: Path) -> None:
        self._http = http
        self._project_dir = project_dir
        self._home = home

    def discovery(self) -> Discovery | None:
        """The control server of this project, or None when none is running (or its file is unreadable)."""
        try:
            return read_discovery(self._project_dir)
        except Exception as exc:  # noqa: BLE001 - a broken discovery file must read as "no control server"
            log_event("scenario.discovery_unreadable", error=f"{type(exc).__name__}: {exc}")
            return None

    def _client(self, found: Discovery) -> ControlClient:
        return ControlClient(found, http=self._http, max_answer_bytes=MAX_REPLY_BYTES)

    async def revive(self) -> bool:
        """Start the project's control server when it is due (``bir.core.revive``: an installed project, not
        down, at most once per 10 s across every hook); True if one was started. Never raises."""
        try:
            started = await anyio.to_thread.run_sync(revive_if_due, self._home, self._project_dir)
        except OSError as exc:
            log_event("scenario.recorder_revive", ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
            return False
        if started:
            log_event("scenario.recorder_revive", ok=True, project=str(self._project_dir))
        return started

    async def run(self, tool_use_id: str | None, timeout_s: float) -> Answer:
        """``POST /scenario/run`` and what it means for the model; never raises but for cancellation."""
        found = self.discovery()
        if found is None:
            await self.revive()
            return no_control_server("no discovery file for this project")
        body = api.ScenarioRunRequest(tool_use_id=tool_use_id)
        try:
            status, reply = await self._client(found).send(api.SCENARIO_RUN, body, timeout_s=timeout_s)
        except ControlError as exc:
            if exc.kind == "timeout":
                return unavailable(f"/scenario/run did not answer within {timeout_s:g} s")
            if exc.kind == "too_large":
                return unavailable(f"/scenario/run answered more than {MAX_REPLY_BYTES} bytes")
            if isinstance(exc.__cause__, httpx.ConnectError):
                return no_control_server(f"control server at {found.url} refused the connection: {exc.__cause__}")
            return unavailable(f"/scenario/run failed: {exc}")
        return answer_from_reply(status, reply)

    async def post_hook(self, route: str, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        """POST a hook input to a hook route of this project's control server, within ``timeout_s``.

        Raises:
            LookupError: no control server is running for the project.
            ControlError: no answer in time, or the request failed.
        """
        found = self.discovery()
        if found is None:
            # The next tool call's hook finds it: a revived server takes about a second to publish itself.
            await self.revive()
            raise LookupError("no discovery file for this project")
        hook = next(r for r in api.HOOKS.values() if r.path == route)
        return await self._client(found).send(hook, body, timeout_s=timeout_s)

    async def hello(self, payload: api.Hello) -> None:
        """``POST /scenario/hello``, bounded at 1 s; logs and swallows every failure."""
        found = self.discovery()
        if found is None:
            return
        try:
            status, _ = await self._client(found).send(api.SCENARIO_HELLO, payload, timeout_s=HELLO_TIMEOUT_S)
        except ControlError as exc:
            log_event("scenario.hello", ok=False, reason=str(exc), tools=payload.tools)
            return
        log_event("scenario.hello", ok=status == 200, status=status, tools=payload.tools, off=payload.off)


class Heartbeat:
    """One background sender of hellos: pokes coalesce, and silence sends one every ``every_s``."""

    def __init__(self, send: Callable[[], Awaitable[None]], every_s: float = HELLO_EVERY_S) -> None:
        self._send = send
        self._every_s = every_s
        self._wanted = anyio.Event()

    def poke(self) -> None:
        """Ask for a hello soon; never blocks."""
        self._wanted.set()

    async def run(self) -> None:
        """Send hellos until cancelled."""
        while True:
            with anyio.move_on_after(self._every_s):
                await self._wanted.wait()
            self._wanted = anyio.Event()
            await self._send()


class ScenarioServer:
    """The ``bir`` MCP server: tools, answers, hello and off switch, over one stdio connection."""

    def __init__(self, settings: ScenarioSettings, control: ScenarioLink) -> None:
        self.settings = settings
        self.control = control
        self.switch = OffSwitch(settings.env_off, settings.off_path)
        self.off = self.switch.read()
        self.editing, self.replay = self._read_switches()
        self.heartbeat = Heartbeat(self._send_hello)
        self._session: ServerSession | None = None
        self._seen_discovery: tuple[str, int] | None = None
        self._version = bir_version()
        # The Claude Code process that started this server: the session whose hooks the hook tool answers.
        self.host = host_pid()
        self.mcp: Server[Any] = Server(
            "bir", version=self._version, on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )
        self.mcp.middleware.append(self._observe)

    def tools(self) -> list[types.Tool]:
        """What ``tools/list`` answers now: ``run_scenario`` while replay is on, the scenario tools allowed,
        or nothing while off."""
        if self.off:
            return []
        run = types.Tool(
            name=RUN_SCENARIO_NAME, description=RUN_SCENARIO_DESCRIPTION, input_schema=dict(RUN_SCENARIO_INPUT_SCHEMA)
        )
        names = (READ_TOOLS if self.editing or self.settings.read_tools else ()) + (
            CHANGE_TOOLS if self.editing else ()
        )
        return [*([run] if self.replay else []), *tool_definitions(names)]

    def _read_switches(self) -> tuple[bool, bool]:
        """The project's ``editing`` and replay switches now (both off when the store cannot be read)."""
        try:
            switches = installed.project(self.settings.project_dir, self.settings.home)
        except Exception as exc:  # noqa: BLE001 - an unreadable store must read as "editing off"
            log_event("scenario.editing_unreadable", error=f"{type(exc).__name__}: {exc}")
            return False, False
        return switches is not None and switches.editing, installed.replay_on(switches, self.settings.env_replay)

    def _read_editing(self) -> bool:
        return self._read_switches()[0]

    async def _scenario_tool(self, params: types.CallToolRequestParams) -> types.CallToolResult:
        reading = params.name in READ_TOOLS
        if self.off:
            return _result(NOTHING_TO_READ if reading else OFF_REFUSED, is_error=not reading)
        if not reading and not self._read_editing():
            return _result(EDITING_OFF, is_error=True)
        tools = self.settings.tools or ToolSettings.of(config.load())
        answer = await run_tool(params.name, params.arguments or {}, tools, cwd=self.settings.project_dir)
        return _result(answer.text, is_error=answer.is_error)

    # Any: the SDK's stdio_server is unannotated; Server.run checks the streams' shape.
    async def serve(self, read_stream: Any, write_stream: Any) -> None:
        """Serve one connection until the client leaves, with the hello sender and the watcher beside it."""
        options = self.mcp.create_initialization_options(NotificationOptions(tools_changed=True))
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.heartbeat.run)
            tg.start_soon(self._watch)
            await self.mcp.run(read_stream, write_stream, options)
            tg.cancel_scope.cancel()

    async def _observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method in ("initialize", "server/discover"):
            # The connection's session carries the standalone channel tools/list_changed goes out on.
            self._session = ctx.session
            self.heartbeat.poke()
        return result

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.heartbeat.poke()
        return types.ListToolsResult(tools=self.tools())

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name in READ_TOOLS or params.name in CHANGE_TOOLS:
            return await self._scenario_tool(params)
        if params.name == api.MCP_HOOK_TOOL:
            return await self._hook(params)
        if params.name != RUN_SCENARIO_NAME:
            return _result(f"Unknown tool: {params.name[:100]}", is_error=True)
        tool_use_id = _tool_use_id(params.meta)
        if self.off:
            answer = runner_off()
        else:
            try:
                answer = await self.control.run(tool_use_id, self.settings.run_timeout_s)
            except anyio.get_cancelled_exc_class():
                log_event(
                    "scenario.answered", kind="cancelled", reason="the host cancelled the call", toolUseId=tool_use_id
                )
                raise
        text, is_error = answer.render(debug=self.settings.debug)
        log_event("scenario.answered", kind=answer.kind, reason=answer.reason, toolUseId=tool_use_id, chars=len(text))
        return _result(text, is_error=is_error)

    async def _hook(self, params: types.CallToolRequestParams) -> types.CallToolResult:
        # The off switch is read on every call, as bir-hook does: `bir off` takes effect at once.
        off = self.switch.read()
        reply = await answer_hook(params.arguments, params.meta, off=off, post=self.control.post_hook, host=self.host)
        if reply.failure is not None:
            log_event("scenario.hook", ok=False, hookEvent=reply.event, reason=reply.failure)
        return _result(reply.text, is_error=False)

    async def _send_hello(self) -> None:
        payload = api.Hello(
            pid=os.getpid(), version=self._version, tools=len(self.tools()), off=self.off, host_pid=self.host
        )
        await self.control.hello(payload)

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(WATCH_EVERY_S)
            await self.check()

    async def check(self) -> None:
        """Look at the off switch and the discovery file once; announce what changed."""
        off = self.switch.read()
        if off != self.off:
            self.off = off
            log_event("scenario.off_switch", off=off)
            await self._announce_tools_changed()
            self.heartbeat.poke()
        editing, replay = self._read_switches()
        if (editing, replay) != (self.editing, self.replay):
            if editing != self.editing:
                log_event("scenario.editing_switch", editing=editing)
            if replay != self.replay:
                log_event("scenario.replay_switch", replay=replay)
            self.editing, self.replay = editing, replay
            if not self.off:
                await self._announce_tools_changed()
                self.heartbeat.poke()
        found = self.control.discovery()
        seen = None if found is None else (found.url, found.pid)
        if seen != self._seen_discovery:
            self._seen_discovery = seen
            if seen is not None:
                self.heartbeat.poke()

    async def _announce_tools_changed(self) -> None:
        session = self._session
        if session is None:
            return
        with anyio.move_on_after(NOTIFY_TIMEOUT_S):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # noqa: BLE001 - a client that left must not stop the watcher
                log_event("scenario.notify_failed", error=f"{type(exc).__name__}: {exc}")


def _tool_use_id(meta: types.RequestParamsMeta | None) -> str | None:
    value = None if meta is None else meta.get(TOOL_USE_ID_META)
    if isinstance(value, str) and 0 < len(value) <= MAX_TOOL_USE_ID_CHARS:
        return value
    return None


def _result(text: str, *, is_error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


async def serve_stdio(settings: ScenarioSettings) -> None:
    """Serve ``bir-scenario`` on this process's stdin and stdout until stdin closes."""
    # trust_env=False: a user's HTTP_PROXY must never capture loopback traffic to the control server.
    timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as http, stdio_server() as (read, write):
        server = ScenarioServer(settings, ScenarioLink(http, settings.project_dir, settings.home or config.home()))
        await server.serve(read, write)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bir-scenario``; the exit code is 2 for a bad setting, else 0."""
    parser = argparse.ArgumentParser(prog="bir-scenario", description="The bir MCP server (run_scenario).")
    parser.add_argument("--project", type=Path, default=None, help="project directory (default: the working directory)")
    args = parser.parse_args(argv)
    project_dir = (args.project or Path.cwd()).resolve()
    try:
        settings = ScenarioSettings.of(project_dir, config.load())
    except config.ConfigError as exc:
        log_event("scenario.config_error", error=str(exc))
        return 2
    try:
        anyio.run(serve_stdio, settings)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
