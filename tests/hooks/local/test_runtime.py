"""The local service's long-lived side: a prompt that comes before the model loaded still matches by slot,
and a paraphrase then is a miss that waits for the model no longer than its bound."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import device_by_id, list_devices_in
from bir.hooks.local import LOCAL_TOKEN, LOCAL_URL
from bir.hooks.local.app import build_app
from bir.hooks.local.embed import Embedder, MiniLM
from bir.hooks.local.runtime import MODEL_WAIT_S, LocalService
from bir.hooks.local.store import Store

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
