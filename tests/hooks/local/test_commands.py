"""The commands on the local store: ``bir scenario list|show|match|forget`` and ``bir stats``, as a person
runs them in a project with no service configured."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from bir.cli import main
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.local import local_client

PROMPT = "show the details of the riskiest device in eu-west-1"


def mcp(value: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


async def _record(project: Path) -> None:
    async with EvaluatorPool(workers=1) as pool, local_client(project=project, pool=pool, load_model=False) as client:
        rows = list_devices_in("eu-west-1")
        top = max(rows, key=lambda r: r["risk"])
        assert await client.match("run_cmd", PROMPT, {}) is None
        await client.post_step(
            "run_cmd",
            {
                "stepIndex": 0,
                "toolName": "mcp__fleet__list_devices",
                "toolInput": {"region": "eu-west-1"},
                "toolOutput": mcp(rows),
            },
        )
        await client.post_step(
            "run_cmd",
            {
                "stepIndex": 1,
                "toolName": "mcp__fleet__get_device",
                "toolInput": {"id": top["id"]},
                "toolOutput": mcp(device_by_id(top["id"])),
            },
        )
        await client.finish_run("run_cmd", {"output": "done"})
        # The calculation runs in the background of the service: recalculating waits for it.
        reply = await client.request("POST", "/recordings/runs/run_cmd/calculate", route="calculate", json_body={})
        assert reply[0] in (200, 202)


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    anyio.run(_record, project)
    return project


def test_scenario_list_and_show_read_the_local_store(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["runs"][0]["scenario"] == {"id": "scn_cmd", "state": "ready"}
    assert main(["scenario", "show", "scn_cmd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["intent"] == "show the details of the riskiest device in {region}"


def test_scenario_match_says_the_rule_and_the_values_or_why_none_matched(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = str(recorded)
    assert (
        main(["scenario", "match", "show the details of the riskiest device in us-east-1", "--project", project]) == 0
    )
    assert 'Matches scn_cmd by the slot rule (similarity 1.0), with {"region": "us-east-1"}.' in capsys.readouterr().out
    assert main(["scenario", "match", "delete the riskiest device in us-east-1", "--project", project, "--json"]) == 1
    missed = json.loads(capsys.readouterr().out)
    assert missed["matched"] is False
    assert missed["considered"][0]["scenarioId"] == "scn_cmd"


def test_scenario_forget_removes_the_scenario_and_its_run(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "forget", "scn_cmd"]) == 0
    assert "Forgot run_cmd, scn_cmd." in capsys.readouterr().out
    assert main(["scenario", "forget", "scn_cmd"]) == 1
    assert "Nothing is called scn_cmd in the local store." in capsys.readouterr().out
    assert main(["stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["store"]["runs"] == 0
