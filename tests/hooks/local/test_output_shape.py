"""One output shape for an MCP tool whoever saw the call (issue 17 item 2), for a tool with structured output.

The ``tracker`` demo server answers ``search_issues`` with ``structuredContent`` beside the same JSON as
text. Recorded through a ``bir-proxy`` (wrapped), a scenario is calculated by the local service and then
replayed with the server unwrapped, where the host's hook shows only the content array; and the other way
round. Everything is real (control server, local service, ``bir-proxy``, the tracker server, V8) but the
model, scripted by ``bir.benchmarks.scripted_host``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bir.benchmarks.scripted_host import ScriptedHost
from bir.examples.tracker_server import search_issues

pytestmark = pytest.mark.anyio
TOP = "show the top priority open issue of project {project}"
MODEL = "claude-sonnet-4-5"
TRACKER = {"tracker": [sys.executable, "-m", "bir.examples.tracker_server"]}
SEARCH = "mcp__tracker__search_issues"
GET = "mcp__tracker__get_issue"
USAGE = [{"input_tokens": 9_000, "output_tokens": 150, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def local_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)


def top(project: str) -> str:
    return str(max(search_issues(project, "open"), key=lambda r: r["priority"])["key"])


async def record(project: Path, *, wrapped: bool) -> str:
    """Turn one, for WEB (five open issues: the rule is the highest priority), recorded; its scenario's id."""
    async with ScriptedHost.open(project, TRACKER, unwrapped=() if wrapped else ("tracker",)) as host:
        assert (await host.prompt(TOP.format(project="WEB"))).context is None
        await host.call(SEARCH, {"project": "WEB", "status": "open"})
        await host.call(GET, {"key": top("WEB")})
        await host.end(f"{top('WEB')} is the top one", USAGE, model=MODEL)
        await host.settled()
        store = host.local.store
        [scenario] = [s for s in map(store.scenario_of_run, [r.id for r in store.runs(None)]) if s]
        assert scenario.state == "ready", scenario.reason
        return str(scenario.id)


async def test_a_tool_with_structured_output_recorded_wrapped_replays_with_its_server_unwrapped(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    scenario_id = await record(project, wrapped=True)

    async with ScriptedHost.open(project, TRACKER, unwrapped=("tracker",)) as host:
        # No proxy for tracker: the plan is steered, its outputs threaded from the hook's content array.
        armed = await host.prompt(TOP.format(project="API"))
        assert armed.steer, armed.context
        # The model follows the directive; bir pins each call to the step's arguments.
        searched = await host.call(SEARCH, {"project": "API", "status": "open"})
        assert searched.pinned
        assert searched.ran_input == {"project": "API", "status": "open"}
        got = await host.call(GET, {"key": top("API")})
        assert got.pinned
        assert got.ran_input == {"key": top("API")}
        assert top("API") in got.text()
        await host.end(f"{top('API')} is the top one", USAGE, model=MODEL)
        await host.settled()
        assert [e["outcome"] for e in host.local.store.executions(scenario_id)] == ["steered_full"]


async def test_a_tool_with_structured_output_recorded_unwrapped_replays_through_its_proxy(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    scenario_id = await record(project, wrapped=False)

    async with ScriptedHost.open(project, TRACKER) as host:
        # A proxy for tracker: the plan runs directly, its outputs read from the proxy's CallToolResult.
        armed = await host.prompt(TOP.format(project="API"))
        assert armed.direct, armed.context
        answer = await host.run_scenario()
        assert answer["ok"] is True, answer
        assert answer.get("partial") in (False, None)
        assert top("API") in str(answer["text"])
        await host.end(f"{top('API')} is the top one", USAGE, model=MODEL)
        await host.settled()
        assert [e["outcome"] for e in host.local.store.executions(scenario_id)] == ["steered_full"]
