"""A full disk pauses recording while the session goes on (issue 18's reliability goal), at the outbox.

A real control server (``live_session``) on the local service, whose store is held at its size by
SQLite's page limit (what a full disk looks like to it: ``SQLITE_FULL``). The turn's steps and finish go
to the durable outbox as always; the store answers ``503`` (``StoreFull``); the outbox keeps every item
on disk and tries again later, every hook answers meanwhile, and once there is room again everything
arrives, once.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bir.core import log
from bir.core.service import ServiceClient
from bir.evaluator import EvaluatorPool
from bir.hooks.daemon import live_session
from bir.hooks.local import LOCAL_TOKEN, open_local_service
from bir.hooks.local.runtime import LocalService
from bir.hooks.session.outbox import outbox_dir
from bir.hooks.session.switches import Switches
from tests.polling import until

pytestmark = pytest.mark.anyio
PROMPT = "read the three notes"
OUTPUT = "n" * 30_000
Logged = Callable[[str], list[dict[str, Any]]]


@pytest.fixture
def logged() -> Iterator[Logged]:
    stream = io.StringIO()
    log.set_stream(stream)
    try:
        yield lambda event: [
            record for line in stream.getvalue().splitlines() if (record := json.loads(line))["event"] == event
        ]
    finally:
        log.set_stream(None)


def hook(event: str, session: str, transcript: Path, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": str(transcript),
        "cwd": "/tmp/project",
        "prompt_id": "p",
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


def set_page_limit(service: LocalService, pages: int | None) -> None:
    with service.store.raw() as conn:
        limit = pages if pages is not None else conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {int(limit)}")


def outbox_items(project: Path) -> list[Path]:
    return sorted(outbox_dir(project).glob("s*.json"))


@pytest.fixture
async def served(tmp_path: Path, pool: EvaluatorPool) -> AsyncIterator[tuple[Path, LocalService, httpx.AsyncClient]]:
    project = (tmp_path / "project").resolve()
    project.mkdir()
    async with (
        open_local_service(project=project, pool=pool, load_model=False) as local,
        ServiceClient(local.base_url, LOCAL_TOKEN, transport=local.transport) as client,
        live_session(project, service=client, switches=lambda: Switches(False, True, None)) as live,
    ):
        headers = {"authorization": f"Bearer {live.server.token}"}
        async with httpx.AsyncClient(base_url=live.server.url or "", headers=headers, trust_env=False) as http:
            yield project, local.service, http


async def test_a_full_store_pauses_recording_while_every_hook_answers_and_nothing_is_lost_once_there_is_room(
    served: tuple[Path, LocalService, httpx.AsyncClient], tmp_path: Path, logged: Logged
) -> None:
    project, service, http = served
    transcript = tmp_path / "transcript.jsonl"
    transcript.touch()
    store = service.store

    async def post(route: str, body: dict[str, Any]) -> Any:
        answer = await http.post(route, json=body)
        assert answer.status_code == 200
        return answer.json()

    # The prompt is a miss and its run is created while there is room; then the disk is full.
    assert await post("/session/prompt", hook("UserPromptSubmit", "s1", transcript, prompt=PROMPT)) == {}
    [run] = store.runs(str(project))
    set_page_limit(service, None)
    for n in range(3):
        call = {"tool_name": "Read", "tool_input": {"file_path": f"/notes/{n}.md"}, "tool_use_id": f"t{n}"}
        assert await post("/tool/pre", hook("PreToolUse", "s1", transcript, **call)) == {}
        assert await post("/tool/post", hook("PostToolUse", "s1", transcript, **call, tool_response=OUTPUT)) == {}
    # The turn's steps are sent when it is sealed (in the order the model made the calls), at Stop.
    assert await post("/session/stop", hook("Stop", "s1", transcript, last_assistant_message="read")) == {}
    await until(lambda: logged("outbox.retry"), "the outbox trying a step again")
    assert await post("/session/end", hook("SessionEnd", "s1", transcript, reason="other")) == {}

    # The session goes on: the next prompt is answered as ever.
    assert await post("/session/prompt", hook("UserPromptSubmit", "s2", transcript, prompt="another thing")) == {}
    [retry, *_] = logged("outbox.retry")
    assert (retry["kind"], retry["run_id"], retry["error"]) == ("step", run.id, "step: HTTP 503 (store_unavailable)")
    # Every item the turn owes is still on disk, the steps and the finish, none of them stored.
    await until(lambda: len(outbox_items(project)) == 4, "the three steps and the finish kept in the outbox")
    assert store.steps(run.id) == []
    assert logged("control.hook_deadline") == []

    # Room again: the outbox's next try delivers everything, once, in order; nothing was dropped.
    set_page_limit(service, 1_000_000)
    await until(lambda: not outbox_items(project), "the outbox drained once there was room")
    steps = store.steps(run.id)
    assert [s.step_index for s in steps] == [0, 1, 2]
    assert [s.body["toolInput"] for s in steps] == [{"file_path": f"/notes/{n}.md"} for n in range(3)]
    assert all(OUTPUT in str(s.body["toolOutput"]) for s in steps)
    finished = store.run(run.id)
    assert finished is not None
    assert finished.finish is not None
    assert finished.finish["output"] == "read"
    assert logged("outbox.dropped") == []
    assert [r["step_index"] for r in logged("recording.step_sent")] == [0, 1, 2]
    assert len(logged("recording.finish_sent")) == 1
    assert PROMPT in [r.input for r in store.runs(str(project))]
