"""What the local service adds to the service's contract, through the real ``ServiceClient``.

The contract itself runs against the fake service and the local one alike: ``tests/core/test_service.py``
and ``tests/hooks/session/test_outbox.py`` take the ``backend`` fixture (``tests/backends.py``), so the
local service keeps the fake's server-side rules. Here: a full store, and derivation without a model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bir.core.service import ServiceClient, ServiceError
from bir.evaluator import EvaluatorPool
from bir.hooks.local import open_local_service
from tests.backends import serving

pytestmark = pytest.mark.anyio


async def test_a_full_local_store_answers_503_so_the_outbox_tries_again(tmp_path: Path, pool: EvaluatorPool) -> None:
    async with (
        open_local_service(tmp_path, project="/p", pool=pool) as local,
        ServiceClient(local.base_url, "local", transport=local.transport) as client,
    ):
        assert await client.match("run_5", "a prompt", {}) is None
        with local.service.store.raw() as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages}")
        statuses = []
        for i in range(50):
            try:
                await client.post_step("run_5", {"stepIndex": i, "toolName": "Read", "toolOutput": "x" * 20_000})
            except ServiceError as exc:
                statuses.append(exc.status)
                break
        assert statuses == [503]
        assert local.service.store.run("run_5") is not None


async def test_derivation_answers_the_slot_values_at_no_cost(tmp_path: Path, pool: EvaluatorPool) -> None:
    async with serving("local", tmp_path, pool) as backend:
        scenario_id, _ = await backend.ticket()
        answer = await backend.client.derive(scenario_id, "show the details of the riskiest device in ap-southeast-2")
        assert answer == {"params": {"region": "ap-southeast-2"}, "derived": True, "missing": [], "costUsd": 0.0}
        unrelated = await backend.client.derive(scenario_id, "write a poem")
        assert unrelated == {"params": {"region": None}, "derived": False, "missing": ["region"], "costUsd": 0.0}
        assert backend.local is not None
        stats = await backend.local.stats()
        assert stats["totals"]["hits"] == 1
