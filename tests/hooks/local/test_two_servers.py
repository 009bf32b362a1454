"""Two real control servers on one store (issue 18's reliability goal): ``bir-hooks`` for two projects under
one ``BIR_HOME``, both on the local service, record turns and book replays into the one SQLite file at
once, and one of them is SIGKILLed just after a turn's SessionEnd, while that turn is being finished.

What the design promises: every write is one transaction and a turn's steps and finish go through the
project's durable outbox, so no turn another server or an earlier turn acknowledged is lost; the killed
turn is either delivered whole by the outbox of the server that comes back for its project (its steps
before its finish) or left unfinished; a ticket is redeemed once, whoever sends its report how often.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bir.core import config, installed
from bir.hooks.discovery import Discovery
from bir.hooks.local.store import Store, default_path
from bir.hooks.session.outbox import outbox_dir
from tests.hooks.daemons import start_server
from tests.polling import until

pytestmark = pytest.mark.anyio
BIN = Path(sys.executable).parent
# A recorded turn whose scenario is ready (the path is in the prompt): later ones of the task are hits.
READ = "read the notes in /notes/{name}.md"
# A turn whose only step is a file the model wrote: never replayed, so each one is a miss, recorded.
WRITE = "write down the minutes number {n} of the {project} meeting"
CONTENT = "m" * 20_000


class Hooks:
    """One project's hooks, posted to its control server as ``bir-hook`` would."""

    def __init__(self, project: Path, found: Discovery, client: httpx.AsyncClient) -> None:
        self.project = project
        self.found = found
        self.client = client

    async def post(self, route: str, event: str, session: str, **fields: Any) -> None:
        transcript = self.project / f"{session}.jsonl"
        transcript.touch()
        body = {
            "session_id": session,
            "transcript_path": str(transcript),
            "cwd": str(self.project),
            "prompt_id": "p",
            "permission_mode": "default",
            "hook_event_name": event,
            **fields,
        }
        answer = await self.client.post(
            self.found.url + route, json=body, headers={"authorization": f"Bearer {self.found.token}"}, timeout=30
        )
        assert answer.status_code == 200, answer.text

    async def turn(self, session: str, prompt: str, tool: str, tool_input: dict[str, Any], output: object) -> None:
        """One turn, whole: the prompt, one tool call, Stop, and SessionEnd (which seals it at once)."""
        call = {"tool_name": tool, "tool_input": tool_input, "tool_use_id": f"{session}-t0"}
        await self.post("/session/prompt", "UserPromptSubmit", session, prompt=prompt)
        await self.post("/tool/pre", "PreToolUse", session, **call)
        await self.post("/tool/post", "PostToolUse", session, **call, tool_response=output)
        await self.post("/session/stop", "Stop", session, last_assistant_message="done")
        await self.post("/session/end", "SessionEnd", session, reason="other")

    async def read(self, session: str, name: str) -> None:
        path = f"/notes/{name}.md"
        await self.turn(session, READ.format(name=name), "Read", {"file_path": path}, f"the notes of {name}")

    async def write(self, session: str, n: int) -> None:
        path = f"/minutes/{self.project.name}-{n}.md"
        write = {"file_path": path, "content": f"{n} {CONTENT}"}
        prompt = WRITE.format(n=n, project=self.project.name)
        await self.turn(session, prompt, "Write", write, {"type": "create", "filePath": path})


def rows(store: Store, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with store.raw() as conn:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]


def runs_of(store: Store, project: Path, prompt: str) -> list[tuple[str, bool, list[int]]]:
    """``(run id, finished, step indices)`` of every run of ``project`` with ``prompt``."""
    found = []
    for run in store.runs(str(project), limit=10_000):
        if run.input == prompt:
            found.append((run.id, run.finish is not None, [s.step_index for s in store.steps(run.id)]))
    return found


def finished(store: Store, project: Path, prompt: str) -> bool:
    return any(done for _, done, _ in runs_of(store, project, prompt))


def ready_scenarios(store: Store, project: Path) -> int:
    return len(rows(store, "SELECT id FROM scenarios WHERE project = ? AND state = 'ready'", str(project)))


def outbox_empty(project: Path) -> bool:
    return not list(outbox_dir(project).glob("s*.json"))


@pytest.mark.timeout(300)
async def test_two_control_servers_write_one_store_at_once_and_one_killed_mid_finish_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stopped: list[subprocess.Popen[bytes]]
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    alpha, beta = (tmp_path / "alpha").resolve(), (tmp_path / "beta").resolve()
    for project in (alpha, beta):
        project.mkdir()
        installed.update(project, replay=True)
    a_process, a_found = start_server(alpha)
    b_process, b_found = start_server(beta)
    stopped += [a_process, b_process]
    store = Store(default_path(config.home()))
    writes_a, writes_b = 12, 5
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            a, b = Hooks(alpha, a_found, client), Hooks(beta, b_found, client)
            # Each project's first turn is recorded, both at once; its scenario is what later turns hit.
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.read, "a-0", "alpha-0")
                tg.start_soon(b.read, "b-0", "beta-0")
            await until(lambda: ready_scenarios(store, alpha) and ready_scenarios(store, beta), "both scenarios ready")

            async def alpha_turns() -> None:
                for n in range(writes_a):
                    await a.write(f"a-w{n}", n)
                    await a.read(f"a-r{n}", f"alpha-{n + 1}")

            async def beta_turns() -> None:
                for n in range(writes_b - 1):
                    await b.write(f"b-w{n}", n)
                    await b.read(f"b-r{n}", f"beta-{n + 1}")
                # Every earlier turn of beta is in; its last is killed while it is being finished.
                earlier = [WRITE.format(n=n, project="beta") for n in range(writes_b - 1)]
                await until(lambda: all(finished(store, beta, p) for p in earlier), "beta's earlier turns finished")
                await b.write("b-last", writes_b - 1)
                b_process.send_signal(signal.SIGKILL)

            async with anyio.create_task_group() as tg:
                tg.start_soon(alpha_turns)
                tg.start_soon(beta_turns)
            assert b_process.wait(30) == -signal.SIGKILL

            # A server comes back for beta (the next hook would start one): its outbox delivers what it kept.
            revived, _ = start_server(beta)
            stopped.append(revived)
            await until(lambda: outbox_empty(alpha) and outbox_empty(beta), "both outboxes drained", seconds=60)
            last = WRITE.format(n=writes_b - 1, project="beta")
            await until(lambda: bool(runs_of(store, beta, last)), "beta's last run created")

        # No turn of alpha's is lost, and none of beta's before the kill: each run finished, with its step.
        for project, count in ((alpha, writes_a), (beta, writes_b - 1)):
            for n in range(count):
                [(_, done, steps)] = runs_of(store, project, WRITE.format(n=n, project=project.name))
                assert (done, steps) == (True, [0]), (project.name, n)
        # The killed turn: delivered whole (its step before its finish), or left unfinished; never doubled.
        [(_, done, steps)] = runs_of(store, beta, last)
        assert steps in ([], [0])
        assert not done or steps == [0]
        # Every hit was ticketed, and every ticket redeemed once, by whichever server sent its report.
        tickets = rows(store, "SELECT ticket, project FROM tickets")
        booked = rows(store, "SELECT ticket FROM executions")
        assert len(booked) == len({t for (t,) in booked})
        assert {t for (t,) in booked} == {t for t, _ in tickets}
        assert [p for _, p in tickets].count(str(alpha)) == writes_a
        assert [p for _, p in tickets].count(str(beta)) == writes_b - 1
        with store.raw() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for process in (a_process, revived):
            process.terminate()
            assert process.wait(30) == 0
    finally:
        store.close()
    logged = [
        json.loads(line) for path in (config.home() / "logs").glob("*.log") for line in path.read_text().splitlines()
    ]
    assert [e for e in logged if e.get("event") == "outbox.dropped"] == []
