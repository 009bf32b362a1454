"""The commands on the local store: ``bir scenario list|show|match|forget|export|import`` and ``bir stats``,
as a person runs them in a project with no service configured."""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

import anyio
import pytest

from bir.cli import main
from bir.core import config
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.local import embed, local_client
from bir.hooks.local.store import Store, default_path

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


def test_an_exported_store_imports_into_another_home_where_its_scenario_matches_and_twice_adds_nothing(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = tmp_path / "bir-store.json"
    assert main(["scenario", "export", str(exported)]) == 0
    said = capsys.readouterr().out
    assert f"Exported 1 run, 1 scenario, 0 edits, 0 bookings, 0 tickets (1 ready) to {exported}" in said
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    before = exported.read_bytes()
    assert main(["scenario", "export", str(exported)]) == 2
    assert "exists; give another file, or --force to replace it" in capsys.readouterr().err
    assert exported.read_bytes() == before
    assert main(["scenario", "export", str(exported), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"]["scenarios"] == 1

    monkeypatch.setenv("BIR_HOME", str(tmp_path / "another-home"))
    assert main(["scenario", "import", str(exported), "--json"]) == 0
    added = json.loads(capsys.readouterr().out)["added"]
    assert (added["runs"], added["steps"], added["scenarios"]) == (1, 2, 1)
    prompt = "show the details of the riskiest device in us-east-1"
    assert main(["scenario", "match", prompt, "--project", str(recorded)]) == 0
    assert 'Matches scn_cmd by the slot rule (similarity 1.0), with {"region": "us-east-1"}.' in capsys.readouterr().out
    assert main(["scenario", "import", str(exported)]) == 0
    again = capsys.readouterr().out
    assert "Imported 0 runs, 0 scenarios, 0 edits, 0 bookings, 0 tickets" in again
    assert "Already here, and kept as they are: 1 run, 1 scenario" in again


def test_an_import_that_does_not_fit_is_refused_whole_and_a_file_that_is_not_an_export_is_named(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = tmp_path / "bir-store.json"
    assert main(["scenario", "export", str(exported)]) == 0
    document = json.loads(exported.read_text())
    # The runs and steps are fine; a scenario row without its body cannot be stored.
    document["scenarios"][0].pop("body")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document))
    monkeypatch.setenv("BIR_HOME", str(tmp_path / "another-home"))
    capsys.readouterr()
    assert main(["scenario", "import", str(broken)]) == 1
    assert "nothing was imported" in capsys.readouterr().err
    assert main(["stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["store"]["runs"] == 0

    (tmp_path / "other.json").write_text(json.dumps({"format": "something else"}))
    assert main(["scenario", "import", str(tmp_path / "other.json"), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"] == "refused"
    (tmp_path / "torn.json").write_text(exported.read_text()[:100])
    assert main(["scenario", "import", str(tmp_path / "torn.json")]) == 2
    assert "is not JSON" in capsys.readouterr().err
    assert main(["scenario", "import", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_export_with_no_store_yet_says_so_and_creates_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "export", str(tmp_path / "x.json")]) == 1
    assert "there is no local store at" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


async def _record_ambiguous(project: Path) -> None:
    """A run whose pick is both the first row and the riskiest: one recording cannot say which was meant."""
    rows = [{"id": "dev-100", "risk": 90}, {"id": "dev-101", "risk": 20}]
    async with EvaluatorPool(workers=1) as pool, local_client(project=project, pool=pool, load_model=False) as client:
        assert await client.match("run_amb", "check the device to look at in eu-west-1", {}) is None
        for i, (tool, tool_input, output) in enumerate(
            [
                ("mcp__fleet__list_devices", {"region": "eu-west-1"}, rows),
                ("mcp__fleet__get_device", {"id": "dev-100"}, {"id": "dev-100"}),
            ]
        ):
            body = {"stepIndex": i, "toolName": tool, "toolInput": tool_input, "toolOutput": mcp(output)}
            await client.post_step("run_amb", body)
        await client.finish_run("run_amb", {"output": "done"})
        reply = await client.request("POST", "/recordings/runs/run_amb/calculate", route="calculate", json_body={})
        assert reply[0] in (200, 202)


def test_scenario_show_says_why_a_scenario_is_not_ready_and_what_the_model_pass_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    anyio.run(_record_ambiguous, project)
    assert main(["scenario", "show", "scn_amb"]) == 0
    shown = capsys.readouterr().out
    header, why, intent = shown.splitlines()[:3]
    assert "(not_ready," in header
    assert intent.startswith("intent: ")
    assert why.startswith("not ready: step 1 (mcp__fleet__get_device): argument id: ")
    assert "selector ambiguity" in why

    # What a model pass that declined added to the reason is shown too, on its own line.
    store = Store(default_path(config.home()))
    try:
        row = store.scenario("scn_amb")
        assert row is not None
        assert row.reason is not None
        store.set_reason("scn_amb", {**row.reason, "modelPass": "the pick is not in the prompt", "modelCostUsd": 0.01})
    finally:
        store.close()
    assert main(["scenario", "show", "scn_amb"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("not ready: step 1")
    assert lines[2] == "model pass: the pick is not in the prompt"
    assert main(["scenario", "show", "scn_amb", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reason"]["modelPass"] == "the pick is not in the prompt"


def test_scenario_match_logs_the_models_load_to_a_file_even_when_it_ends_after_the_command(
    recorded: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = threading.Event()

    def slow_load() -> embed.MiniLM:
        gate.wait(30)
        return embed.MiniLM.load()

    late = embed.Embedder(slow_load)
    monkeypatch.setattr(embed, "_shared", late)
    prompt = "show the details of the riskiest device in us-east-1"
    # The slot rule answers without the model: the command is done while the model still loads.
    assert main(["scenario", "match", prompt, "--project", str(recorded)]) == 0
    assert "by the slot rule" in capsys.readouterr().out
    gate.set()
    assert late.wait(30)
    assert '"event"' not in capsys.readouterr().err
    logged = "".join(p.read_text() for p in (config.home() / "logs").iterdir())
    assert '"event":"local.embedding_loaded"' in logged
