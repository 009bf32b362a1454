"""``bir learn`` on transcripts written by the real Claude Code versions the tests install (issue 19 item 1).

Each case is a project with the demo fleet server, a real ``claude`` session fed prompt by prompt against
the scripted fake Messages API (the model's side), and ``bir learn`` as a user runs it, into a store
under a temporary ``BIR_HOME``. The model answers by what it is asked: the latest prompt of its
conversation and how many tool results came back since, so a subagent's conversation gets a subagent's
answers whatever order the session asks in.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bir.benchmarks.fake_model import ApiRequest, FakeMessagesApi, Turn, call, say
from bir.cli import main
from bir.core import config
from bir.core.tool_output import step_output_text
from bir.examples.fleet_server import list_devices_in
from bir.hooks.local.learn import folder_name
from bir.hooks.local.store import Store, StoreError, default_path
from tests.claude_host import ClaudeSession, claude_home, write_project
from tests.peers import INSTALLING_TEST_TIMEOUT_S, claude_code
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(INSTALLING_TEST_TIMEOUT_S)

RISKIEST = "find the riskiest device in {region} and show its details"
NOTES = "read notes.txt and say hi"
HELPER = "ask a helper to list the devices in sa-east-1"
AGENT_PROMPT = "List the devices in sa-east-1"
# Priced by bir's table, so a learned run's cost is a measurement.
MODEL = ("--model", "claude-sonnet-4-5")
BIN = Path(sys.executable).parent


def _user_texts(request: ApiRequest) -> list[tuple[int, str]]:
    found = []
    for i, message in enumerate(request.messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "text":
                found.append((i, str(block.get("text", ""))))
    return found


def _asked(request: ApiRequest, prompts: list[str]) -> tuple[str, int] | None:
    """The latest of ``prompts`` the conversation holds, and how many tool results came after it."""
    for i, said in reversed(_user_texts(request)):
        for known in prompts:
            if known in said:
                later = 0
                for message in request.messages[i + 1 :]:
                    content = message.get("content")
                    blocks = content if isinstance(content, list) else []
                    later += sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result")
                return known, later
    return None


def riskiest(region: str) -> str:
    return str(max(list_devices_in(region), key=lambda r: r["risk"])["id"])


def fleet_model(project: Path) -> Callable[[ApiRequest], Turn]:
    """The scripted model: what each of the case's prompts does, step by step."""
    regions = ("eu-west-1", "us-east-1", "ap-southeast-2", "sa-east-1")
    prompts = [RISKIEST.format(region=r) for r in regions] + [NOTES, HELPER, AGENT_PROMPT]

    def answer(request: ApiRequest) -> Turn:
        asked = _asked(request, prompts)
        if asked is None:
            return say("ok")
        known, step = asked
        if known == AGENT_PROMPT:
            return call("mcp__fleet__list_devices", {"region": "sa-east-1"}) if step == 0 else say("sub done")
        if known == HELPER:
            agent = "Agent" if "Agent" in request.tool_names() else "Task"
            task = {"description": "look", "prompt": AGENT_PROMPT, "subagent_type": "general-purpose"}
            return call(agent, task) if step == 0 else say("main done")
        if known == NOTES:
            plan = [
                call("Read", {"file_path": str(project / "notes.txt")}),
                call("Bash", {"command": "echo hi there", "description": "greet"}),
                call("mcp__fleet__get_device", {"id": "nope"}),
            ]
            return plan[step] if step < len(plan) else say("hi there")
        region = next(r for r in regions if r in known)
        if step == 0:
            return call("mcp__fleet__list_devices", {"region": region})
        if step == 1:
            return call("mcp__fleet__get_device", {"id": riskiest(region)})
        return say(f"{riskiest(region)} is the riskiest")

    return answer


@dataclass
class Case:
    root: Path
    project: Path
    api: FakeMessagesApi

    def session(self, binary: Path) -> ClaudeSession:
        return ClaudeSession(
            binary,
            self.project,
            api_url=self.api.url,
            case_dir=self.root,
            allowed_tools=["mcp__fleet", "Read", "Bash", "Agent", "Task"],
            extra_args=MODEL,
        )

    def learn(self, *args: str) -> dict[str, Any]:
        return learn_json(self.project, *args)


def learn_json(project: Path, *args: str) -> dict[str, Any]:
    out = Path(os.environ["BIR_HOME"]) / "learn.out"
    with out.open("w") as handle, contextlib.redirect_stdout(handle):
        code = main(["learn", "--project", str(project), "--json", *args])
    assert code == 0
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.fixture
def case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Case]:
    root = tmp_path.resolve()
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude_home(root) / ".claude"))
    fleet = {"command": sys.executable, "args": ["-m", "bir.examples.fleet_server"]}
    project = write_project(
        root / "project", mcp_servers={"fleet": fleet}, settings_local={"enabledMcpjsonServers": ["fleet"]}
    )
    (project / "notes.txt").write_text("hello notes\n")
    api = FakeMessagesApi(script=[fleet_model(project)] * 400)
    with api.serve():
        yield Case(root, project, api)


def store() -> Store:
    return Store(default_path(config.home()))


def test_real_sessions_are_learned_as_runs_in_the_recorders_shapes_and_a_grown_one_from_where_it_stopped(
    claude_binary: Path, case: Case
) -> None:
    with case.session(claude_binary) as session:
        session.turn(RISKIEST.format(region="eu-west-1"))
        session.turn(RISKIEST.format(region="us-east-1"))
        # A turn's `result` event can reach us a moment before its last message reaches the transcript.
        wait_for_ended_turns(session.transcript_path, 2)
        first = case.learn()
        assert (first["turns"], first["imported"], first["calculated"]) == (2, 2, 2)
        # The second run repeats the first's task: one scenario, ready, resting on both.
        assert first["ready"] == 1

        session.turn(NOTES)
        session.turn(HELPER)
    second = case.learn()
    assert (second["turns"], second["imported"]) == (2, 2), second
    third = case.learn()
    assert (third["turns"], third["imported"], third["bytesRead"]) == (0, 0, 0)

    db = store()
    try:
        runs = {r.input: r for r in db.runs(None)}
        assert set(runs) == {RISKIEST.format(region="eu-west-1"), RISKIEST.format(region="us-east-1"), NOTES, HELPER}
        assert {r.origin for r in runs.values()} == {"transcript"}
        assert {r.project for r in runs.values()} == {str(case.project)}

        eu = runs[RISKIEST.format(region="eu-west-1")]
        assert eu.metadata["sessionId"] == session.session_id
        listing, detail = (s.body for s in db.steps(eu.id))
        assert listing["toolName"] == "mcp__fleet__list_devices"
        assert listing["toolInput"] == {"region": "eu-west-1"}
        shown = json.loads(listing["toolOutput"])
        # An MCP call's output in its one canonical shape, as the live recorder writes it.
        assert shown == {
            "content": [{"type": "text", "text": json.dumps(list_devices_in("eu-west-1"))}],
            "isError": False,
        }
        assert listing["toolOutput"] == step_output_text(listing["toolName"], shown["content"])
        assert detail["toolInput"] == {"id": riskiest("eu-west-1")}
        assert eu.finish is not None
        assert eu.finish["measured"] is True
        assert eu.finish["costUsd"] > 0
        assert eu.finish["usage"][0]["model"] == "claude-sonnet-4-5"
        assert eu.finish["output"] == f"{riskiest('eu-west-1')} is the riskiest"

        notes = [s.body for s in db.steps(runs[NOTES].id)]
        assert [s["toolName"] for s in notes] == ["Read", "Bash", "mcp__fleet__get_device"]
        assert json.loads(notes[0]["toolOutput"])["file"]["content"] == "hello notes\n"
        assert json.loads(notes[1]["toolOutput"])["stdout"] == "hi there"
        assert "no device with id 'nope'" in notes[2]["error"]

        helper = runs[HELPER]
        helper_steps = [s.body["toolName"] for s in db.steps(helper.id)]
        # The subagent's own call is not a step of the turn; its usage is the turn's cost.
        assert helper_steps in (["Agent"], ["Task"])
        assert helper.metadata["subagents"] == 1
        assert helper.finish is not None
        main_only = sum(
            u["input_tokens"] for u in _main_chain_usage(session.transcript_path, helper.metadata["promptId"])
        )
        assert helper.finish["usage"][0]["inputTokens"] > main_only

        riskiest_scenario = db.scenario_of_run(eu.id) or db.scenario_of_run(
            runs[RISKIEST.format(region="us-east-1")].id
        )
        assert riskiest_scenario is not None
        assert riskiest_scenario.state == "ready"
        assert riskiest_scenario.body["support"] == {"runs": 2}
        helper_scenario = db.scenario_of_run(helper.id)
        assert helper_scenario is not None
        assert helper_scenario.state == "not_ready"
        assert any("subagent" in e["why"] for e in helper_scenario.body["excluded"])
    finally:
        db.close()


def _runs_in(path: Path) -> int:
    """How many runs the store at ``path`` holds, read by another connection (0 while it cannot be read)."""
    try:
        probe = Store(path)
    except StoreError:  # a store the learn is still creating reads as empty
        return 0
    try:
        return probe.counts()["runs"]
    finally:
        probe.close()


def wait_for_ended_turns(transcript: Path, count: int, timeout_s: float = 30.0) -> None:
    """Wait until ``transcript`` holds ``count`` main-chain messages that ended their turn."""

    def ended() -> int:
        found = 0
        for raw in transcript.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(raw)
                message = record.get("message")
                if not record.get("isSidechain") and isinstance(message, dict):
                    found += message.get("stop_reason") == "end_turn"
        return found

    wait_for(lambda: ended() >= count, timeout_s, f"{count} ended turns in {transcript}")


def _main_chain_usage(transcript: Path, prompt_id: str) -> list[dict[str, int]]:
    """The main chain's usage in the turn of ``prompt_id``, once per message."""
    seen: dict[str, dict[str, int]] = {}
    inside = False
    for raw in transcript.read_text().splitlines():
        record = json.loads(raw)
        if record.get("type") == "user" and isinstance(record.get("message", {}).get("content"), str):
            inside = record.get("promptId") == prompt_id
        message = record.get("message")
        if inside and record.get("type") == "assistant" and not record.get("isSidechain") and "usage" in message:
            seen[message["id"]] = message["usage"]
    return list(seen.values())


# --- two hundred turns ------------------------------------------------------------------------------

TEMPLATES = (
    "find the riskiest device in {region} and show its details",
    "list the devices in {region}",
    "show device {device}",
    "how many devices are in {region}",
)
TURNS = 200
SESSIONS = 8


def bulk_model() -> Callable[[ApiRequest], Turn]:
    regions = ("eu-west-1", "us-east-1", "ap-southeast-2", "sa-east-1")

    def answer(request: ApiRequest) -> Turn:
        said = [t for _, t in _user_texts(request) if t.startswith(("find ", "list ", "show ", "how "))]
        if not said:
            return say("ok")
        asked = _asked(request, [said[-1]])
        assert asked is not None
        prompt, step = asked
        region = next((r for r in regions if r in prompt), "eu-west-1")
        if prompt.startswith("show device"):
            return call("mcp__fleet__get_device", {"id": prompt.rsplit(" ", 1)[1]}) if step == 0 else say("shown")
        if step == 0:
            return call("mcp__fleet__list_devices", {"region": region})
        if step == 1 and prompt.startswith("find"):
            return call("mcp__fleet__get_device", {"id": riskiest(region)})
        return say("done")

    return answer


def bulk_prompts() -> list[str]:
    regions = ("eu-west-1", "us-east-1", "ap-southeast-2", "sa-east-1")
    devices = [f"dev-{i:03d}" for i in range(1, 31)]
    return [
        TEMPLATES[i % len(TEMPLATES)].format(region=regions[(i // 4) % 4], device=devices[i % 30]) for i in range(TURNS)
    ]


def test_two_hundred_past_turns_are_learned_resumably_after_a_kill_and_none_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = claude_code("2.1.332")
    root = tmp_path.resolve()
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude_home(root) / ".claude"))
    fleet = {"command": sys.executable, "args": ["-m", "bir.examples.fleet_server"]}
    project = write_project(
        root / "project", mcp_servers={"fleet": fleet}, settings_local={"enabledMcpjsonServers": ["fleet"]}
    )
    api = FakeMessagesApi(script=[bulk_model()] * (TURNS * 4))
    prompts = bulk_prompts()
    began = time.monotonic()
    with api.serve():
        # Two sessions at a time, a share of the prompts each, as a user's history has several.
        shares = [prompts[i::SESSIONS] for i in range(SESSIONS)]
        failures: list[BaseException] = []

        def run(share: list[str]) -> None:
            try:
                with ClaudeSession(
                    binary, project, api_url=api.url, case_dir=root, allowed_tools=["mcp__fleet"], extra_args=MODEL
                ) as session:
                    for prompt in share:
                        session.turn(prompt, timeout_s=120)
            except BaseException as exc:  # noqa: BLE001 - the test thread reports it
                failures.append(exc)

        for pair in (shares[i : i + 2] for i in range(0, SESSIONS, 2)):
            threads = [threading.Thread(target=run, args=(share,)) for share in pair]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        assert not failures, failures
    generated = time.monotonic() - began

    # A learn killed as it imports leaves a store that the next learn completes, nothing twice. The kill lands
    # between two transcripts' commits for sure: a transcript that cannot be read yet (a named pipe nobody
    # writes, its open blocks) sits in the middle of the history, so the learn commits the transcripts older
    # than it and waits there.
    folder = claude_home(root) / ".claude" / "projects" / folder_name(project)
    written = sorted((p.stat().st_mtime_ns, p) for p in folder.glob("*.jsonl"))
    assert len(written) == SESSIONS
    # Between two transcripts' modification times, far enough apart to differ as the float seconds learn sorts by.
    older = next(i for i in range(SESSIONS // 2, SESSIONS) if written[i][0] - written[i - 1][0] > 10_000)
    between = (written[older - 1][0] + written[older][0]) // 2
    blocker = folder / "00000000-0000-4000-8000-00000000fifo.jsonl"
    os.mkfifo(blocker)
    os.utime(blocker, ns=(between, between))
    expected_before_kill = older * (TURNS // SESSIONS)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    killed = subprocess.Popen(
        [str(BIN / "bir"), "learn", "--project", str(project), "--json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    path = default_path(config.home())
    try:
        wait_for(
            lambda: killed.poll() is not None or (path.exists() and _runs_in(path) >= expected_before_kill),
            120,
            f"the first learn's commit of {expected_before_kill} runs",
        )
        assert killed.poll() is None, "the first learn ended before it was killed"
    finally:
        # Whatever happened, no learn is left blocked on the pipe for ever.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(30)
        blocker.unlink()
    imported_before_kill = _runs_in(path)
    assert imported_before_kill == expected_before_kill
    assert 0 < imported_before_kill < TURNS

    began = time.monotonic()
    report = learn_json(project)
    took = time.monotonic() - began
    with capsys.disabled():
        print(
            f"\n[learn] {TURNS} turns of real Claude Code 2.1.332 generated in {generated:.1f} s; the learn after the "
            f"kill took {took:.2f} s ({report['imported']} imported then, {report['calculated']} calculated, "
            f"{report['ready']} ready)"
        )
    db = store()
    try:
        runs = db.runs(None, limit=10_000)
        assert report["imported"] == TURNS - imported_before_kill
        assert len(runs) == TURNS
        assert len({(r.metadata["sessionId"], r.metadata["promptId"]) for r in runs}) == TURNS
        assert db.uncalculated_runs(str(project)) == []
    finally:
        db.close()
    again = learn_json(project)
    assert (again["imported"], again["calculated"]) == (0, 0)
