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

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from bir.benchmarks.scripted_host import ScriptedHost
from bir.cli import main
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
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
        # What the recalculation changed: the first step's output body (the row rule), and the support;
        # the steps, parameters and state stayed.
        assert edit["changes"] == ["bodies", "support"]
        assert len(edit["runs"]) == 2
        [stored] = store.edits(scenario_id)
        assert stored.before is not None
        assert stored.after is not None
        (before_in, before_out), (after_in, after_out) = stored.before["bodies"][0], stored.after["bodies"][0]
        assert before_in == after_in
        assert '"only"' in str(before_out)
        assert '"max"' in str(after_out)
        assert '"priority"' in str(after_out)
        assert stored.before["bodies"][1] == stored.after["bodies"][1]
        assert (stored.before["support"], stored.after["support"]) == (1, 2)
        assert stored.before["steps"] == stored.after["steps"]

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

    # The person sees it in `bir scenario edits`, as a calculation edit saying what it changed and why.
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(lambda: main(["scenario", "edits", scenario_id, "--json"]))
    out = capsys.readouterr().out
    assert code == 0, out
    [listed] = json.loads(out)["edits"]
    assert (listed["id"], listed["kind"], listed["changes"]) == (edit["id"], "calculation", ["bodies", "support"])
    code = await anyio.to_thread.run_sync(lambda: main(["scenario", "edits", scenario_id]))
    out = capsys.readouterr().out
    assert code == 0, out
    [row] = [line for line in out.splitlines() if line.startswith(edit["id"])]
    edit_id, step, kind = row.split()[:3]
    assert (edit_id, step) == (edit["id"], "-")
    # The kind column is ten characters wide today: "calculation" shows as "calculati…".
    assert kind in ("calculation", "calculati…")
    assert "bodies, support" in row
    assert "recalculated from 2 runs (repair after divergence)" in row
