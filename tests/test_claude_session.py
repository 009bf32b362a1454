"""bir inside a real Claude Code session, end to end (issue 8's acceptance).

Each case sets a temporary project up only with ``bir install --replay`` (the project's ``.mcp.json``
has the demo fleet server, approved as a user approves it), runs the project's control server as
``bir-hooks`` does for an installed project, and runs a real ``claude -p`` offline against the scripted
fake Messages API, with the fake BaseIn as the service. Nothing of bir is faked: the hooks are the
installed ``bir-hook`` commands, the fleet server is behind a real ``bir-proxy``, ``run_scenario`` is
served by a real ``bir-scenario``, the bodies run in real V8 workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bir.benchmarks.fake_model import ApiRequest, FakeMessagesApi, Turn, call, say
from bir.benchmarks.serving import serve_in_thread
from bir.core.paths import pid_alive
from bir.examples.fleet_server import list_devices_in
from bir.hooks.discovery import read_discovery
from bir.hooks.local.store import Store, default_path
from bir.proxy.scenario_answer import RESPONSE_MODEL_LEAD
from tests.claude_host import ClaudeRun, claude_home, run_claude, write_project
from tests.fakes.baseinsvc import Canned, FakeBaseIn
from tests.paths import SCENARIOS
from tests.peers import INSTALLING_TEST_TIMEOUT_S

pytestmark = pytest.mark.timeout(INSTALLING_TEST_TIMEOUT_S)

PROMPT = "find the riskiest device in eu-west-1 and show its details"
BIN = Path(sys.executable).parent
DIRECTIVE_TAG = "[BaseInstRunner calculated replay]"
RUN_SCENARIO = "mcp__bir__run_scenario"
# A model the pricing table knows (2.1.332's default, claude-opus-5-5, is not priced yet: unmeasured).
PRICED_MODEL = ("--model", "claude-sonnet-4-5")


def fleet_direct() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCENARIOS / "fleet-direct.json").read_text())
    return data


def wait_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds} s")
        time.sleep(0.05)


@dataclass
class Case:
    """One temporary project with bir installed, its control server and the fake service."""

    root: Path
    project: Path
    fake: FakeBaseIn
    env: dict[str, str]
    server: subprocess.Popen[bytes] | None = None
    runs: list[ClaudeRun] = field(default_factory=list)

    def bir(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "bir"), *args], env=self.env, capture_output=True, text=True, timeout=60, check=False
        )

    def start_server(self) -> None:
        """Start the project's control server and wait until it answers its health route."""
        log = (self.root / "bir-hooks.stderr").open("ab")
        process = subprocess.Popen(
            [str(BIN / "bir-hooks"), "--project", str(self.project)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        self.server = process
        wait_for(self._healthy, 30, "the control server answering /health")

    def _healthy(self) -> bool:
        found = read_discovery(self.project)
        if found is None:
            return False
        try:
            response = httpx.get(
                f"{found.url}/health", headers={"authorization": f"Bearer {found.token}"}, timeout=1.0, trust_env=False
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def stop_server(self) -> None:
        """Stop the control server, whether this case started it or a hook revived it."""
        found = read_discovery(self.project)
        if found is not None and pid_alive(found.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(found.pid, signal.SIGTERM)
            wait_for(lambda: not pid_alive(found.pid), 20, "the control server stopping")
        if self.server is not None:
            self.server.terminate()
            self.server.wait(20)

    def claude(
        self, binary: Path, api: FakeMessagesApi, prompt: str = PROMPT, env: Mapping[str, str] | None = None
    ) -> ClaudeRun:
        extra = {k: v for k, v in self.env.items() if k.startswith("BIR_")}
        extra.update(env or {})
        run = run_claude(
            binary,
            self.project,
            prompt,
            api_url=api.url,
            env_extra=extra,
            case_dir=self.root,
            extra_args=PRICED_MODEL,
            # The user lets the fleet server's tools run without asking, as a project that uses them does.
            allowed_tools=["mcp__fleet"],
        )
        self.runs.append(run)
        return run

    def fleet_calls(self) -> list[dict[str, Any]]:
        """The calls that reached the fleet server, in order."""
        path = self.root / "fleet-calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def log_events(self, name: str) -> list[dict[str, Any]]:
        """The control server's log lines named ``name``."""
        found: list[dict[str, Any]] = []
        for path in sorted((Path(self.env["BIR_HOME"]) / "logs").glob("*.log*")):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if isinstance(record, dict) and record.get("event") == name:
                        found.append(record)
        return found


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    fake = FakeBaseIn()
    with serve_in_thread(fake.app, fake.releaser) as url:
        fake.url = url
        root = tmp_path.resolve()
        fleet = {
            "command": sys.executable,
            "args": ["-m", "bir.examples.fleet_server"],
            "env": {"FLEET_CALL_LOG": str(root / "fleet-calls.jsonl")},
        }
        project = write_project(
            root / "project", mcp_servers={"fleet": fleet}, settings_local={"enabledMcpjsonServers": ["fleet"]}
        )
        env = {
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
            "HOME": str(claude_home(root)),
            "BIR_HOME": os.environ["BIR_HOME"],
            "BIR_AUTH_URL": url,
            "BIR_TOKEN": fake.token,
        }
        claude_home(root).mkdir(parents=True, exist_ok=True)
        this = Case(root, project, fake, env)
        installed = this.bir("install", "--replay", "--project", str(project))
        assert installed.returncode == 0, installed.stderr
        try:
            yield this
        finally:
            this.stop_server()


def direct_hit(fake: FakeBaseIn, similarity: float = 0.95) -> str:
    data = fleet_direct()
    ticket = fake.add_match(PROMPT, data, similarity=similarity)
    fake.derive_answers[data["id"]] = Canned(
        200, {"params": {"region": "eu-west-1", "limit": 200}, "derived": True, "missing": [], "costUsd": 0.0004}
    )
    return ticket


def tool_json(request: ApiRequest, tool_use_id: str) -> Any:
    """A tool result's JSON text, without the reminders the host appends to it."""
    return json.loads(request.tool_result_text(tool_use_id).split("<system-reminder>")[0])


def reports(fake: FakeBaseIn) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests_to("executions")]


def test_a_direct_hit_runs_the_scenario_for_the_model_and_reports_steered_full(claude_binary: Path, case: Case) -> None:
    ticket = direct_hit(case.fake)
    case.start_server()

    def after_run(request: ApiRequest) -> Turn:
        return say("The riskiest device: " + request.tool_result_text("toolu_run")[:200])

    api = FakeMessagesApi([call(RUN_SCENARIO, {}, tool_id="toolu_run"), after_run])
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    first, second = api.requests
    assert DIRECTIVE_TAG in first.text()
    assert "Call mcp__bir__run_scenario once" in first.text()
    answer = second.tool_results()["toolu_run"]
    assert answer.get("is_error") is not True
    text = second.tool_result_text("toolu_run")
    riskiest = max((d for d in case_devices(case) if d["name"].startswith("eu-west-1-")), key=lambda d: d["risk"])
    assert f'"id": "{riskiest["id"]}"' in text
    # The response model the scenario computed reaches the model with the results (§6.3).
    assert RESPONSE_MODEL_LEAD in text
    assert json.loads(text.split(RESPONSE_MODEL_LEAD, 1)[1].split("<system-reminder>")[0])["region"] == "eu-west-1"
    assert [c["tool"] for c in case.fleet_calls()] == ["list_devices", "get_device"]
    assert case.fleet_calls()[1]["arguments"] == {"id": riskiest["id"]}
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert report["outcome"] == "steered_full"
    assert report["ticket"] == ticket
    assert report["stepsPlanned"] == 2
    assert report["sessionCostUsd"] > 0
    assert report["measured"] is True


def case_devices(case: Case) -> list[dict[str, Any]]:
    return list_devices_in("eu-west-1")


def test_a_miss_records_the_runs_steps_as_the_proxy_saw_them_and_its_finish(claude_binary: Path, case: Case) -> None:
    case.start_server()

    def answer(request: ApiRequest) -> Turn:
        devices = tool_json(request, "toolu_list")
        return say(f"{len(devices)} devices.")

    api = FakeMessagesApi([call("mcp__fleet__list_devices", {"region": "eu-west-1"}, tool_id="toolu_list"), answer])
    with api.serve():
        run = case.claude(claude_binary, api, prompt="how many devices in eu-west-1?")

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert DIRECTIVE_TAG not in api.requests[0].text()
    wait_for(lambda: bool(case.fake.requests_to("finish")), 30, "the run finished on the service")
    [run_id] = [r.body["id"] for r in case.fake.requests_to("match")]
    [step] = case.fake.steps_of(run_id)
    assert step["toolName"] == "mcp__fleet__list_devices"
    assert step["toolInput"] == {"region": "eu-west-1"}
    output = json.loads(step["toolOutput"])
    assert json.loads(output["content"][0]["text"]) == case_devices(case)
    [finish] = [r.body for r in case.fake.requests_to("finish")]
    assert finish["output"] == f"{len(case_devices(case))} devices."
    assert reports(case.fake) == []
    assert [c["tool"] for c in case.fleet_calls()] == ["list_devices"]


def test_a_match_below_the_steer_similarity_announces_nothing_and_reports_not_steered(
    claude_binary: Path, case: Case
) -> None:
    direct_hit(case.fake, similarity=0.5)
    case.start_server()
    api = FakeMessagesApi([say("Let me look.")])
    with api.serve():
        run = case.claude(claude_binary, api, env={"BIR_MIN_STEER_SIMILARITY": "0.8"})

    assert run.exit_code == 0, run.describe()
    assert DIRECTIVE_TAG not in api.requests[0].text()
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert report["outcome"] == "not_steered"
    assert case.fleet_calls() == []


def test_with_bir_off_the_session_works_as_without_bir_and_nothing_is_sent(claude_binary: Path, case: Case) -> None:
    direct_hit(case.fake)
    case.start_server()

    def answer(request: ApiRequest) -> Turn:
        return say(f"{len(tool_json(request, 'toolu_list'))} devices.")

    api = FakeMessagesApi([call("mcp__fleet__list_devices", {"region": "eu-west-1"}, tool_id="toolu_list"), answer])
    with api.serve():
        run = case.claude(claude_binary, api, env={"BIR_OFF": "1"})

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert DIRECTIVE_TAG not in api.requests[0].text()
    assert RUN_SCENARIO not in api.requests[0].tool_names()
    assert run.result is not None
    assert run.result["result"] == f"{len(case_devices(case))} devices."
    assert [c["tool"] for c in case.fleet_calls()] == ["list_devices"]
    assert case.fake.requests == []


def test_another_tool_first_vetoes_the_plan_and_the_call_runs_as_written(claude_binary: Path, case: Case) -> None:
    ticket = direct_hit(case.fake)
    case.start_server()

    def answer(request: ApiRequest) -> Turn:
        return say(f"{len(tool_json(request, 'toolu_own'))} devices.")

    own = {"region": "eu-west-1", "limit": 3}
    api = FakeMessagesApi([call("mcp__fleet__list_devices", own, tool_id="toolu_own"), answer])
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert DIRECTIVE_TAG in api.requests[0].text()
    assert len(tool_json(api.requests[1], "toolu_own")) == 3
    assert case.fleet_calls() == [{"tool": "list_devices", "arguments": own}]
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert report["outcome"] == "not_steered"
    assert report["ticket"] == ticket


def test_with_no_server_running_the_first_hook_revives_one_and_the_first_prompt_is_matched(
    claude_binary: Path, case: Case
) -> None:
    direct_hit(case.fake)
    assert read_discovery(case.project) is None

    def after_run(request: ApiRequest) -> Turn:
        return say("Done: " + request.tool_result_text("toolu_run")[:100])

    api = FakeMessagesApi([call(RUN_SCENARIO, {}, tool_id="toolu_run"), after_run])
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert DIRECTIVE_TAG in api.requests[0].text()
    assert [c["tool"] for c in case.fleet_calls()] == ["list_devices", "get_device"]
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    assert reports(case.fake)[0]["outcome"] == "steered_full"


THRESHOLDS = '{"risk": 70}\n'
DEPLOY = "deploy 42: raise the gateway limits"


def mixed_hit(case: Case) -> str:
    """A hit on fleet-mixed: the fleet server's list_devices, then Read, then Bash, in a project with a
    thresholds file and a git history to read."""
    (case.project / "config").mkdir(exist_ok=True)
    (case.project / "config" / "thresholds.json").write_text(THRESHOLDS)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(case.project)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "config"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", DEPLOY], check=True)
    data: dict[str, Any] = json.loads((SCENARIOS / "fleet-mixed.json").read_text())
    ticket = case.fake.add_match(PROMPT, data, similarity=0.95)
    params = {"region": "eu-west-1", "thresholdsPath": str(case.project / "config" / "thresholds.json")}
    case.fake.derive_answers[data["id"]] = Canned(
        200, {"params": params, "derived": True, "missing": [], "costUsd": 0.0004}
    )
    return ticket


def placeholder_model() -> FakeMessagesApi:
    """A model that calls the three tools of fleet-mixed in order with placeholder arguments, then answers."""
    return FakeMessagesApi(
        [
            call("mcp__fleet__list_devices", {"region": "somewhere"}, tool_id="toolu_list"),
            call("Read", {"file_path": "/placeholder.json"}, tool_id="toolu_read"),
            call("Bash", {"command": "git log", "description": "last deploy"}, tool_id="toolu_bash"),
            lambda request: say("Last deploy: " + request.tool_result_text("toolu_bash").strip()),
        ]
    )


def test_a_steered_session_runs_each_call_with_the_steps_arguments_and_reports_steered_full(
    claude_binary: Path, case: Case
) -> None:
    ticket = mixed_hit(case)
    case.start_server()
    api = placeholder_model()
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    first = api.requests[0].text()
    assert DIRECTIVE_TAG in first
    assert "Call exactly these tools, in order, one at a time" in first
    assert case.fleet_calls() == [{"tool": "list_devices", "arguments": {"region": "eu-west-1", "limit": None}}]
    assert tool_json(api.requests[1], "toolu_list") == case_devices(case)
    assert '"risk": 70' in api.requests[2].tool_result_text("toolu_read")
    assert DEPLOY in api.requests[3].tool_result_text("toolu_bash")
    assert len(case.log_events("replay.threaded")) == 3
    # The wrapped step threaded from its proxy's report, the shape it was recorded in.
    assert case.log_events("replay.thread_fallback") == []
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert report["outcome"] == "steered_full"
    assert report["ticket"] == ticket
    assert report["stepsPinned"] == 3
    assert report["measured"] is True


def test_an_off_script_bash_call_prints_the_bundle_as_its_output_and_reports_diverged(
    claude_binary: Path, case: Case
) -> None:
    mixed_hit(case)
    case.start_server()
    api = FakeMessagesApi(
        [
            call("Bash", {"command": "ls -la", "description": "look around"}, tool_id="toolu_ls"),
            lambda request: say("Read: " + request.tool_result_text("toolu_ls")[:300]),
        ]
    )
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    output = api.requests[1].tool_result_text("toolu_ls")
    assert "### Step 1/3 — mcp__fleet__list_devices" in output
    assert "Step 2 of 3 (Read) did not run" in output
    assert [c["tool"] for c in case.fleet_calls()] == ["list_devices"]
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert report["outcome"] == "diverged"
    assert report["stepsPinned"] == 1


def test_with_mcp_hooks_the_tool_events_go_through_the_bir_server_and_a_steered_session_reports_steered_full(
    claude_binary: Path, case: Case
) -> None:
    installed = case.bir("install", "--replay", "--mcp-hooks", "--project", str(case.project))
    assert installed.returncode == 0, installed.stderr
    settings = json.loads((case.project / ".claude" / "settings.local.json").read_text())
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        assert [h["type"] for g in settings["hooks"][event] for h in g["hooks"]] == ["mcp_tool"]
    ticket = mixed_hit(case)
    case.start_server()
    api = placeholder_model()
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert DIRECTIVE_TAG in api.requests[0].text()
    # The hook tool is never offered to the model.
    assert "mcp__bir__hook" not in api.requests[0].tool_names()
    # The PreToolUse answers (updatedInput) came back through the mcp_tool hooks and were applied.
    assert case.fleet_calls() == [{"tool": "list_devices", "arguments": {"region": "eu-west-1", "limit": None}}]
    assert '"risk": 70' in api.requests[2].tool_result_text("toolu_read")
    assert DEPLOY in api.requests[3].tool_result_text("toolu_bash")
    assert len(case.log_events("replay.threaded")) == 3
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert report["outcome"] == "steered_full"
    assert report["ticket"] == ticket
    assert report["stepsPinned"] == 3


SECOND_PROMPT = "find the riskiest device in us-east-1 and show its details"


def test_with_no_service_configured_turn_one_is_recorded_and_turn_two_with_another_region_replays_locally(
    claude_binary: Path, tmp_path: Path
) -> None:
    """Issue 18's "Done when": a project set up only by ``bir install --replay``, no service configured (no
    BIR_AUTH_URL, not signed in), one real session in two turns (the second ``--resume``s the first). The
    control server the first hook revives uses the local service: turn one is recorded and calculated, turn
    two with another region is matched by slot and run by ``run_scenario``, and ``bir stats`` shows the
    booked saving."""
    root = tmp_path.resolve()
    fleet = {
        "command": sys.executable,
        "args": ["-m", "bir.examples.fleet_server"],
        "env": {"FLEET_CALL_LOG": str(root / "fleet-calls.jsonl")},
    }
    # The fleet server approved as a user approves it (`bir install --replay --yes` does this on its own).
    project = write_project(
        root / "project", mcp_servers={"fleet": fleet}, settings_local={"enabledMcpjsonServers": ["fleet"]}
    )
    env = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "HOME": str(claude_home(root)),
        "BIR_HOME": os.environ["BIR_HOME"],
    }
    claude_home(root).mkdir(parents=True, exist_ok=True)
    case = Case(root, project, FakeBaseIn(), env)
    installed = case.bir("install", "--replay", "--project", str(project))
    assert installed.returncode == 0, installed.stderr
    assert read_discovery(project) is None, "no control server yet: the session's first hook revives one"
    eu = max(list_devices_in("eu-west-1"), key=lambda row: row["risk"])
    us = max(list_devices_in("us-east-1"), key=lambda row: row["risk"])
    try:

        def pick(request: ApiRequest) -> Turn:
            rows = tool_json(request, "toolu_list")
            return call("mcp__fleet__get_device", {"id": max(rows, key=lambda r: r["risk"])["id"]}, tool_id="toolu_get")

        first_api = FakeMessagesApi(
            [
                call("mcp__fleet__list_devices", {"region": "eu-west-1"}, tool_id="toolu_list"),
                pick,
                lambda request: say("The riskiest: " + request.tool_result_text("toolu_get")[:200]),
            ]
        )
        with first_api.serve():
            first = case.claude(claude_binary, first_api)
        assert first.exit_code == 0, first.describe()
        assert first_api.failures == []
        assert DIRECTIVE_TAG not in first_api.requests[0].text()
        assert [c["tool"] for c in case.fleet_calls()] == ["list_devices", "get_device"]

        store = Store(default_path(Path(env["BIR_HOME"])))
        try:

            def calculated() -> bool:
                rows = [store.scenario_of_run(run.id) for run in store.runs(str(project))]
                return any(row is not None and row.state == "ready" for row in rows)

            wait_for(calculated, 90, "turn one's scenario calculated and ready in the local store")
        finally:
            store.close()

        second_api = FakeMessagesApi(
            [
                call(RUN_SCENARIO, {}, tool_id="toolu_run"),
                lambda request: say("From the replay: " + request.tool_result_text("toolu_run")[:200]),
            ]
        )
        with second_api.serve():
            second = run_claude(
                claude_binary,
                project,
                SECOND_PROMPT,
                api_url=second_api.url,
                env_extra=env,
                case_dir=root,
                extra_args=PRICED_MODEL,
                allowed_tools=["mcp__fleet"],
                session_id=first.session_id,
                resume=True,
            )
        assert second.exit_code == 0, second.describe()
        assert second_api.failures == []
        asked = second_api.requests[0].text()
        assert DIRECTIVE_TAG in asked
        assert "Call mcp__bir__run_scenario once" in asked
        ran = second_api.requests[1].tool_result_text("toolu_run")
        assert f'"id": "{us["id"]}"' in ran
        assert [(c["tool"], c["arguments"].get("region") or c["arguments"].get("id")) for c in case.fleet_calls()] == [
            ("list_devices", "eu-west-1"),
            ("get_device", eu["id"]),
            ("list_devices", "us-east-1"),
            ("get_device", us["id"]),
        ]

        def booked() -> bool:
            done = case.bir("stats", "--json")
            return done.returncode == 0 and json.loads(done.stdout)["totals"]["replays"] == 1

        wait_for(booked, 60, "turn two booked in the local store")
        [line] = json.loads(case.bir("stats", "--json", "--project", str(project)).stdout)["scenarios"]
        assert line["outcomes"] == {"steered_full": 1}
        assert line["hits"] == 1
        assert line["measuredReplays"] == 1, json.dumps(line)
        assert line["savedUsd"] > 0
        assert line["savedTokens"] > 0
        shown = case.bir("stats", "--project", str(project))
        assert f"saved in all: {line['savedTokens']:,} tokens, ${line['savedUsd']:.4f}" in shown.stdout
        # One session in two turns, on the local service: nothing was asked of a remote one.
        # (The first SessionStart is the hook that revived the server, which was not up to log it.)
        resumed = [e["session_id"] for e in case.log_events("session.started") if e["source"] == "resume"]
        assert resumed == [first.session_id]
        assert [e["service"] for e in case.log_events("control.service")] == ["local"]
    finally:
        case.stop_server()
