"""The local service's long-lived side: a prompt that comes before the model loaded still matches by slot,
and a paraphrase then is a miss that waits for the model no longer than its bound; finishes past the
store's limit prune its oldest runs."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

from bir.core import log
from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.local import LOCAL_TOKEN, LOCAL_URL, open_local_service
from bir.hooks.local.app import build_app
from bir.hooks.local.embed import Embedder, MiniLM
from bir.hooks.local.runtime import MODEL_WAIT_S, LocalService
from bir.hooks.local.store import Store
from tests.backends import serving

pytestmark = pytest.mark.anyio
PROMPT = "show the details of the riskiest device in eu-west-1"


def mcp(value: object) -> str:
    return json.dumps({"content": [{"type": "text", "text": json.dumps(value)}], "isError": False})


async def test_a_prompt_before_the_model_loaded_matches_by_slot_and_a_paraphrase_waits_only_its_bound(
    tmp_path: Path,
) -> None:
    import httpx

    release = threading.Event()

    def slow() -> MiniLM:
        release.wait(30)
        raise RuntimeError("never loaded in this test")

    store = Store(tmp_path / "store.db")
    embedder = Embedder(load=slow)
    try:
        async with (
            EvaluatorPool(workers=1) as pool,
            LocalService(store, project="/p", pool=pool, embedder=embedder) as service,
            ServiceClient(LOCAL_URL, LOCAL_TOKEN, transport=httpx.ASGITransport(app=build_app(service))) as client,
        ):
            rows = list_devices_in("eu-west-1")
            top = max(rows, key=lambda r: r["risk"])
            assert await client.match("run_a", PROMPT, {}) is None
            await client.post_step(
                "run_a",
                {
                    "stepIndex": 0,
                    "toolName": "mcp__fleet__list_devices",
                    "toolInput": {"region": "eu-west-1"},
                    "toolOutput": mcp(rows),
                },
            )
            await client.post_step(
                "run_a",
                {
                    "stepIndex": 1,
                    "toolName": "mcp__fleet__get_device",
                    "toolInput": {"id": top["id"]},
                    "toolOutput": mcp(device_by_id(top["id"])),
                },
            )
            await client.finish_run("run_a", {"output": "done"})
            assert await service.idle()
            assert not embedder.ready
            hit = await client.match("run_b", "show the details of the riskiest device in us-east-1", {})
            assert hit is not None
            assert hit.matched is not None
            assert hit.matched.scenario_id == "scn_a"
            began = time.monotonic()
            paraphrase = await client.match("run_c", "display the details of the riskiest device in us-east-1", {})
            waited = time.monotonic() - began
            # No model: the paraphrase is a miss (recorded), and it never waits past the model's bound.
            assert paraphrase is None
            assert waited < MODEL_WAIT_S + 1.0
            release.set()
    finally:
        release.set()
        store.close()


async def test_finishes_past_BIR_LOCAL_STORE_MB_prune_the_oldest_runs_through_the_service(
    tmp_path: Path, pool: EvaluatorPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_LOCAL_STORE_MB", "1")
    stream = io.StringIO()
    log.set_stream(stream)
    ids = [f"run_{i:02d}" for i in range(40)]
    try:
        async with (
            open_local_service(tmp_path, project="/p", pool=pool, load_model=False) as local,
            ServiceClient(local.base_url, LOCAL_TOKEN, transport=local.transport) as client,
        ):
            for i, run_id in enumerate(ids):
                # A model-written file: no step to replay, so no ready scenario keeps a run from its turn.
                assert await client.match(run_id, f"write today's notes, number {i}", {}) is None
                write = {"file_path": f"/notes/{i}.md", "content": f"{i} " + "n" * 40_000}
                await client.post_step(run_id, {"stepIndex": 0, "toolName": "Write", "toolInput": write})
                assert (await client.finish_run(run_id, {"output": "written"})).status == "finished"
            assert await local.service.idle()
            store = local.service.store
            kept = {r.id for r in store.runs("/p", limit=100)}
            assert store.size_bytes() <= 1024 * 1024
    finally:
        log.set_stream(None)
    # The oldest went, the newest stayed: what is left is the newest runs, in one piece.
    assert ids[-1] in kept
    assert ids[0] not in kept
    assert kept == set(ids[-len(kept) :])
    pruned = [e for line in stream.getvalue().splitlines() if (e := json.loads(line))["event"] == "local.pruned"]
    assert pruned
    assert sum(e["runs"] for e in pruned) == len(ids) - len(kept)
    assert {e["max_bytes"] for e in pruned} == {1024 * 1024}


async def test_derivation_gives_a_setting_the_prompt_does_not_state_its_sample_and_names_a_missing_target(
    tmp_path: Path, pool: EvaluatorPool
) -> None:
    async with serving("local", tmp_path, pool) as backend:
        scenario_id = await backend.ready_scenario()
        assert backend.local is not None
        store = backend.local.store
        row = store.scenario(scenario_id)
        assert row is not None
        # The local calculator writes targets only: a setting comes with a service's scenario or the model pass.
        assert {s["role"] for s in row.body["paramsObject"].values()} == {"target"}
        setting = {"sampleValue": 50, "description": "how many rows a page holds", "role": "setting"}
        store.update_scenario_body(
            scenario_id, {**row.body, "paramsObject": {**row.body["paramsObject"], "limit": setting}}
        )

        asked = "show the details of the riskiest device in ap-southeast-2"
        status, answer = await backend.local.derive(scenario_id, {"prompt": asked})
        assert status == 200
        assert answer == {
            "params": {"region": "ap-southeast-2", "limit": 50},
            "derived": True,
            "missing": [],
            "costUsd": 0.0,
        }
        status, unrelated = await backend.local.derive(scenario_id, {"prompt": "write a poem"})
        assert (status, unrelated["params"], unrelated["missing"]) == (200, {"region": None, "limit": 50}, ["region"])
