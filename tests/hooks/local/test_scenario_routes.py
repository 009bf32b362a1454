"""The §16.5 scenario routes of the local service, through ``ScenarioApi`` (what ``bir scenario`` calls):
list, show, calculate, check, save with the fake's rules on forced saves and freezes, edits, undo, the
dry replay; and forget, export and import of the store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bir.core.scenario_api import ScenarioApi
from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.local import open_local_service
from bir.hooks.local.runtime import LocalService
from bir.hooks.local.store import Store, StoreError

pytestmark = pytest.mark.anyio
PROMPT = "show the details of the riskiest device in eu-west-1"


def mcp(value: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


@dataclass
class Rig:
    service: LocalService
    client: ServiceClient
    api: ScenarioApi
    scenario_id: str


@pytest.fixture(scope="module")
async def pool() -> AsyncIterator[EvaluatorPool]:
    async with EvaluatorPool(workers=1) as running:
        yield running


@pytest.fixture
async def rig(tmp_path: Path, pool: EvaluatorPool) -> AsyncIterator[Rig]:
    async with (
        open_local_service(tmp_path, project="/p", pool=pool) as local,
        ServiceClient(local.base_url, "local", transport=local.transport) as client,
    ):
        rows = list_devices_in("eu-west-1")
        top = max(rows, key=lambda r: r["risk"])
        assert await client.match("run_src", PROMPT, {}) is None
        await client.post_step(
            "run_src",
            {
                "stepIndex": 0,
                "toolName": "mcp__fleet__list_devices",
                "toolInput": {"region": "eu-west-1"},
                "toolOutput": mcp(rows),
            },
        )
        await client.post_step(
            "run_src",
            {
                "stepIndex": 1,
                "toolName": "mcp__fleet__get_device",
                "toolInput": {"id": top["id"]},
                "toolOutput": mcp(device_by_id(top["id"])),
            },
        )
        await client.finish_run(
            "run_src",
            {
                "output": "done",
                "durationMs": 5000,
                "usage": [],
                "costUsd": 0.0,
                "measured": False,
                "pricingVersion": "2026-08-30",
            },
        )
        assert await local.service.idle()
        yield Rig(local.service, client, ScenarioApi(client), "scn_src")


async def test_the_runs_list_and_a_runs_scenario_have_the_shapes_bir_scenario_reads(rig: Rig) -> None:
    listed = (await rig.api.list_runs()).data()
    assert listed["runs"][0]["id"] == "run_src"
    assert listed["runs"][0]["scenario"] == {"id": "scn_src", "state": "ready"}
    shown = (await rig.api.run_scenario("run_src")).data()
    assert shown["id"] == "scn_src"
    assert shown["chainRevision"] >= 1
    assert [s["mark"] for s in shown["steps"]] == [None, None]
    assert set(shown["steps"][0]["sample"]) == {"params", "respParams", "toolOutput"}
    assert (await rig.api.run_scenario("run_none")).status == 404


async def test_calculating_again_without_force_changes_nothing_and_with_force_recalculates(rig: Rig) -> None:
    same = await rig.api.calculate("run_src", force=False, discard_edits=False)
    assert (same.status, same.data()["calculated"]) == (200, False)
    again = await rig.api.calculate("run_src", force=True, discard_edits=False)
    assert again.status == 202
    assert again.data()["state"] == "ready"


async def test_a_check_writes_nothing_and_a_save_that_breaks_the_recording_is_refused_unless_forced_with_a_note(
    rig: Rig,
) -> None:
    broken = {"inputLogic": "return { id: 'dev-000' };"}
    checked = await rig.api.check(rig.scenario_id, 1, broken)
    assert checked.status == 200
    assert checked.data()["ok"] is False
    assert checked.data()["problems"][0]["code"] == "input_mismatch"
    before = (await rig.api.scenario(rig.scenario_id)).data()
    assert (await rig.api.save(rig.scenario_id, 1, broken)).error_code() == "check_failed"
    assert (await rig.api.save(rig.scenario_id, 1, {**broken, "force": True})).error_code() == "note_required"
    forced = await rig.api.save(rig.scenario_id, 1, {**broken, "force": True, "note": "pin the device"})
    assert forced.status == 200
    assert forced.data()["forced"] is True
    after = (await rig.api.scenario(rig.scenario_id)).data()
    assert after["chainRevision"] == before["chainRevision"] + 1
    assert after["steps"][1]["toolInputLogic"] == broken["inputLogic"]
    assert (await rig.api.calculate("run_src", force=True, discard_edits=False)).error_code() == "scenario_has_edits"


async def test_a_freeze_is_lifted_only_by_unfreeze_and_an_undo_walks_the_edit_back(rig: Rig) -> None:
    frozen = await rig.api.save(rig.scenario_id, 0, {"freeze": True})
    assert frozen.status == 200
    shown = (await rig.api.scenario(rig.scenario_id)).data()
    assert shown["steps"][0]["mark"] == "by_hand"
    assert (await rig.api.save(rig.scenario_id, 0, {"freeze": True})).error_code() == "nothing_to_change"
    edits = (await rig.api.edits(rig.scenario_id)).data()["edits"]
    undone = await rig.api.revert(rig.scenario_id, edits[0]["id"], {})
    assert undone.status == 200
    assert undone.data()["undone"] == edits[0]["id"]
    assert (await rig.api.scenario(rig.scenario_id)).data()["steps"][0]["mark"] is None
    assert (await rig.api.revert(rig.scenario_id, edits[0]["id"], {})).error_code() == "already_undone"
    history = (await rig.api.edits(rig.scenario_id)).data()["edits"]
    assert [e["kind"] for e in history] == ["undo", "edit"]
    assert history[0]["undoes"] == edits[0]["id"]


async def test_a_stale_revision_is_a_conflict(rig: Rig) -> None:
    refused = await rig.api.save(rig.scenario_id, 0, {"freeze": True, "expectedRevision": 999})
    assert refused.status == 409
    assert refused.error_code() == "revision_conflict"


async def test_the_dry_replay_derives_the_new_value_and_runs_the_logic_over_the_recording(rig: Rig) -> None:
    reply = await rig.api.dry_replay(rig.scenario_id, "show the details of the riskiest device in us-east-1", {})
    data = reply.data()
    assert (reply.status, data["ok"], data["derived"], data["costUsd"]) == (200, True, True, 0.0)
    assert data["params"] == {"region": "us-east-1"}
    assert data["steps"][0]["input"] == {"region": "us-east-1"}
    assert [s["status"] for s in data["steps"]] == ["ok", "ok"]
    missing = (await rig.api.dry_replay(rig.scenario_id, "write a poem", {})).data()
    assert (missing["ok"], missing["missing"]) == (False, ["region"])
    assert (await rig.api.dry_replay(rig.scenario_id, "  ", {})).error_code() == "prompt_required"


async def test_a_forgotten_scenario_takes_its_run_with_it_and_keeps_the_booked_savings(rig: Rig) -> None:
    answer = await rig.client.match("run_x", "show the details of the riskiest device in us-east-1", {})
    assert answer is not None
    assert answer.matched is not None
    ticket = answer.matched.execution_ticket
    assert ticket is not None
    booked = await rig.client.report_execution(
        rig.scenario_id, {"ticket": ticket, "outcome": "steered_full", "sessionCostUsd": 0.01}
    )
    assert booked.booked
    removed = rig.service.store.forget(rig.scenario_id)
    assert removed == ["run_src", "scn_src"]
    assert rig.service.store.scenario(rig.scenario_id) is None
    assert rig.service.store.run("run_src") is None
    assert len(rig.service.store.executions(rig.scenario_id)) == 1
    again = await rig.client.match("run_y", "show the details of the riskiest device in us-east-1", {})
    assert again is None


async def test_an_exported_store_imports_into_another_whole_and_twice_adds_nothing(rig: Rig, tmp_path: Path) -> None:
    document: dict[str, Any] = json.loads(json.dumps(rig.service.store.export()))
    other = Store(tmp_path / "other" / "store.db")
    added = other.import_document(document)
    assert added["runs"] == 1
    assert added["scenarios"] == 1
    assert other.scenario("scn_src") is not None
    assert len(other.steps("run_src")) == 2
    assert sum(other.import_document(document).values()) == 0
    with pytest.raises(StoreError, match="not a bir local store export"):
        other.import_document({"format": "something else"})
    other.close()
