"""Repair after divergence (issue 19 item 3), through a real control server on the local service, a real
``bir-proxy`` over the ``tracker`` demo server spoken to as Claude Code speaks to it, and real V8; only the
model's side is scripted (``bir.benchmarks.scripted_host``).

Turn one is recorded where project OPS has one open issue, so its scenario picks "the only row". Turn two,
for WEB (several open issues), matches and runs directly; the rule no longer holds, the plan hands over,
and the model finishes the task its own way. That turn was recorded too, and it repairs the scenario:
recalculated from both runs, the rule is now "the highest priority", shown as a calculation edit. Turn
three, for API, is replayed whole.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bir.benchmarks.scripted_host import ScriptedHost
from bir.examples.tracker_server import search_issues

pytestmark = pytest.mark.anyio
TOP = "show the top priority open issue of project {project}"
MODEL = "claude-sonnet-4-5"
TRACKER = {"tracker": [sys.executable, "-m", "bir.examples.tracker_server"]}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def usage(requests: int) -> list[dict[str, int]]:
    return [
        {
            "input_tokens": 9_000 + 500 * i,
            "output_tokens": 150,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        for i in range(requests)
    ]


def top(project: str) -> str:
    return str(max(search_issues(project, "open"), key=lambda r: r["priority"])["key"])


async def test_a_replay_that_handed_over_and_that_the_model_finished_its_own_way_repairs_the_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    assert len(search_issues("OPS", "open")) == 1
    assert len(search_issues("WEB", "open")) > 1
    async with ScriptedHost.open(project, TRACKER) as host:
        store = host.local.store

        assert (await host.prompt(TOP.format(project="OPS"))).context is None
        await host.call("mcp__tracker__search_issues", {"project": "OPS", "status": "open"})
        await host.call("mcp__tracker__get_issue", {"key": top("OPS")})
        await host.end(f"{top('OPS')} is the top one", usage(3), model=MODEL)
        await host.settled()
        [scenario_id] = [r.id for r in map(store.scenario_of_run, [r.id for r in store.runs(None)]) if r]
        first = store.scenario(scenario_id)
        assert first is not None
        assert first.state == "ready", first.reason
        assert '"only"' in str(first.body["steps"][0]["toolOutputLogic"])

        armed = await host.prompt(TOP.format(project="WEB"))
        assert armed.direct
        answer = await host.run_scenario()
        # The list rule no longer holds on WEB's issues: the plan hands over with what ran.
        assert answer["partial"] is True
        assert "search_issues" in str(answer["text"])
        # The model finishes the task its own way.
        await host.call("mcp__tracker__get_issue", {"key": top("WEB")})
        await host.end(f"{top('WEB')} is the top one", usage(3), model=MODEL)
        await host.settled()

        repaired = store.scenario(scenario_id)
        assert repaired is not None
        assert repaired.state == "ready", repaired.reason
        assert repaired.body["support"] == {"runs": 2}
        assert '"max"' in str(repaired.body["steps"][0]["toolOutputLogic"])
        assert '"priority"' in str(repaired.body["steps"][0]["toolOutputLogic"])
        status, shown = await host.local.list_edits(scenario_id)
        assert status == 200
        [edit] = shown["edits"]
        assert edit["kind"] == "calculation"
        assert edit["why"] == "repair after divergence"
        assert "toolOutputLogic" not in edit["changes"] or edit["changes"]
        assert len(edit["runs"]) == 2

        armed = await host.prompt(TOP.format(project="API"))
        assert armed.direct
        answer = await host.run_scenario()
        assert answer["ok"] is True
        assert answer.get("partial") in (False, None)
        assert top("API") in str(answer["text"])
        await host.end(f"{top('API')} is the top one", usage(2), model=MODEL)
        await host.settled()

        outcomes = [e["outcome"] for e in store.executions(scenario_id)]
        assert outcomes == ["fell_back", "steered_full"]
        # A replay that did the task whole recorded nothing new: its turn's run is gone.
        rows: list[Any] = store.runs(None)
        assert len(rows) == 2
        assert {rid for rid, _ in store.runs_of(scenario_id)} == {r.id for r in rows}
