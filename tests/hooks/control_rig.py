"""The control-server rig for route-level tests: the fake BaseIn over loopback HTTP, an in-process
``ControlServer`` with the live controller, a real ``bir-proxy`` over the demo fleet server, real V8."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bir.core import config, log
from bir.core.service import ServiceClient
from bir.hooks.daemon import live_session
from bir.hooks.discovery import write_discovery
from bir.hooks.replay.host import ProxyHost, proxy_environment
from bir.hooks.server.control import ControlServer
from bir.hooks.session.controller import Controller
from bir.hooks.session.switches import Switches
from tests.fakes.baseinsvc import Canned, FakeBaseIn
from tests.fakes.fixtures import running_fake_service
from tests.paths import SCENARIOS

PROMPT = "find the riskiest device in eu-west-1 and show its details"


def scenario(name: str = "fleet-direct") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCENARIOS / f"{name}.json").read_text())
    return data


@dataclass
class Rig:
    fake: FakeBaseIn
    server: ControlServer
    controller: Controller
    http: httpx.AsyncClient
    logs: io.StringIO
    switches: dict[str, Any]
    calls_log: Path

    def fleet_calls(self) -> list[dict[str, Any]]:
        """Every call the demo fleet server ran, in order (its ``FLEET_CALL_LOG``)."""
        if not self.calls_log.exists():
            return []
        return [json.loads(line) for line in self.calls_log.read_text().splitlines() if line.strip()]

    async def hook(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(path, json=body)
        assert response.status_code == 200
        answer: dict[str, Any] = response.json()
        return answer

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.logs.getvalue().splitlines():
            record = json.loads(line)
            if record.get("event") == name:
                found.append(record)
        return found

    async def until(self, condition: Callable[[], object], seconds: float = 10.0) -> None:
        """Wait for work the routes left in the background (the outbox, a cancelled run) to show."""
        with anyio.fail_after(seconds):
            while not condition():  # noqa: ASYNC110 - what is awaited is a log line or a fake's request
                await anyio.sleep(0.02)

    async def prompt_beside(self, event: str, action: Callable[[], Awaitable[object]]) -> dict[str, Any]:
        """Post ``PROMPT``, run ``action`` once the prompt has logged ``event``, and answer the prompt's answer."""
        answers: list[dict[str, Any]] = []

        async def prompt() -> None:
            answers.append(await self.hook("/session/prompt", hook_input("UserPromptSubmit", prompt=PROMPT)))

        async with anyio.create_task_group() as group:
            group.start_soon(prompt)
            await self.until(lambda: self.events(event))
            await action()
        return answers[0]


def hook_input(event: str, session: str = "sess-1", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": session,
        "transcript_path": f"/nonexistent/{session}.jsonl",
        "cwd": "/tmp/project",
        "prompt_id": "p-1",
        "permission_mode": "default",
        "hook_event_name": event,
    }
    base.update(fields)
    return base


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    log.set_stream(stream)
    yield stream
    log.set_stream(None)


@pytest.fixture
async def rig(
    tmp_path: Path, captured_logs: io.StringIO, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> AsyncIterator[Rig]:
    """A live session behind a real control server and a real fleet proxy; a test's
    ``@pytest.mark.settings(field=value, …)`` sets what its ``Settings`` say (read once, as ``bir-hooks`` does)."""
    monkeypatch.setenv("BIR_AUTH_URL", "http://placeholder")
    marker = request.node.get_closest_marker("settings")
    settings = config.load()._replace(**marker.kwargs) if marker is not None else None
    switches: dict[str, Any] = {"off": False, "replay": True, "allow": None}
    async with running_fake_service() as fake:
        project = tmp_path / "project"
        project.mkdir()
        calls = tmp_path / "fleet-calls.jsonl"
        async with (
            ServiceClient(fake.url, fake.token) as service,
            live_session(
                project,
                service=service,
                switches=lambda: Switches(switches["off"], switches["replay"], switches["allow"]),
                settings=settings,
            ) as live,
        ):
            server = live.server
            write_discovery(server.discovery(project))
            host = ProxyHost(
                "fleet",
                f"{sys.executable} -m bir.examples.fleet_server",
                project=project,
                env={**proxy_environment(Path(os.environ["BIR_HOME"])), "FLEET_CALL_LOG": str(calls)},
            )
            try:
                await host.start()
                with anyio.fail_after(20):
                    await server.queue.wait_served("fleet")
                headers = {"authorization": f"Bearer {server.token}"}
                async with httpx.AsyncClient(base_url=server.url or "", headers=headers, trust_env=False) as http:
                    # A live bir-scenario with its tool: this process stands in for it.
                    hello = {"pid": os.getpid(), "version": "test", "tools": 1, "off": False}
                    assert (await http.post("/scenario/hello", json=hello)).status_code == 200
                    yield Rig(fake, server, live.controller, http, captured_logs, switches, calls)
            finally:
                with anyio.CancelScope(shield=True):
                    await host.stop()


def direct_hit(fake: FakeBaseIn, similarity: float = 0.95) -> str:
    data = scenario()
    ticket = fake.add_match(PROMPT, data, similarity=similarity)
    fake.derive_answers[data["id"]] = Canned(
        200, {"params": {"region": "eu-west-1", "limit": 200}, "derived": True, "missing": [], "costUsd": 0.0004}
    )
    return ticket


@asynccontextmanager
async def live_server(project: Path, fake: FakeBaseIn) -> AsyncIterator[httpx.AsyncClient]:
    """A control server with the live controller and its default switches (read from the store and the
    off file at each use), published for ``project``."""
    async with (
        ServiceClient(fake.url, fake.token) as service,
        live_session(project, service=service) as live,
    ):
        server = live.server
        write_discovery(server.discovery(project))
        headers = {"authorization": f"Bearer {server.token}"}
        async with httpx.AsyncClient(base_url=server.url or "", headers=headers, trust_env=False) as http:
            yield http


def transcript_call(
    path: Path, tool_use_id: str, name: str, tool_input: Any, result: Any = None, *, error: str | None = None
) -> None:
    """Append one tool call to a transcript as Claude Code writes it (FACTS.md §5): the assistant's
    ``tool_use`` line, then, unless ``result`` is None and there is no ``error``, the user's ``tool_result``
    line carrying ``toolUseResult``."""
    use = {"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input}
    lines = [{"type": "assistant", "message": {"role": "assistant", "content": [use]}}]
    if result is not None or error is not None:
        content = error if error is not None else json.dumps(result)
        block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": error is not None}
        line: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": [block]}}
        line["toolUseResult"] = f"Error: {error}" if error is not None else result
        lines.append(line)
    with path.open("a", encoding="utf-8") as handle:
        for entry in lines:
            handle.write(json.dumps(entry) + "\n")
