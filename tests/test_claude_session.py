"""bir inside a real Claude Code session, end to end (issues 8 and 17's acceptance).

Each case is a temporary project never opened in Claude Code: its ``.mcp.json`` has the demo fleet server,
which Claude Code never approved, and it is set up only by ``bir install --replay --yes`` (which approves
the server and wraps it), or ``bir install --replay`` (which leaves it unwrapped: ``claude -p`` starts a
``.mcp.json`` server without asking). The project's control server runs as ``bir-hooks`` does for an
installed project, and a real ``claude -p`` runs offline against the scripted fake Messages API, with the
fake BaseIn as the service. Nothing of bir is faked: the hooks are what ``bir install`` writes (the tool
events as ``mcp_tool`` hooks on a real ``bir-scenario``, the others ``bir-hook`` commands), the fleet
server is behind a real ``bir-proxy``, the bodies run in real V8 workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bir.benchmarks.fake_model import ApiRequest, FakeMessagesApi, ToolCall, Turn, call, calls, say
from bir.benchmarks.serving import serve_in_thread
from bir.core.paths import pid_alive
from bir.evaluator import EvaluatorPool
from bir.examples.fleet_server import list_devices_in
from bir.hooks.discovery import read_discovery
from bir.hooks.local.store import Store, default_path
from bir.proxy.scenario_answer import RESPONSE_MODEL_LEAD
from tests.claude_host import ClaudeRun, claude_home, run_claude, write_project
from tests.fakes.baseinsvc import Canned, FakeBaseIn
from tests.paths import SCENARIOS
from tests.peers import INSTALLING_TEST_TIMEOUT_S
from tests.polling import wait_for

pytestmark = pytest.mark.timeout(INSTALLING_TEST_TIMEOUT_S)

PROMPT = "find the riskiest device in eu-west-1 and show its details"
BIN = Path(sys.executable).parent
DIRECTIVE_TAG = "[BaseInstRunner calculated replay]"
RUN_SCENARIO = "mcp__bir__run_scenario"
# One priced model for the cases that compare costs, whichever version runs them. Each version's own
# default (claude-opus-5-5 on 2.1.332, claude-opus-4-8 on 2.1.197) is priced too: the local two-turn
# test runs on it, so a default session's turn is shown measured.
PRICED_MODEL = ("--model", "claude-sonnet-4-5")
DEFAULT_MODELS = ("claude-opus-5-5", "claude-opus-4-8")


def fleet_direct() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCENARIOS / "fleet-direct.json").read_text())
    return data


@dataclass
class Case:
    """One temporary project with bir installed, its control server and the fake service."""

    root: Path
    project: Path
    fake: FakeBaseIn
    env: dict[str, str]
    server: subprocess.Popen[bytes] | None = None
    runs: list[ClaudeRun] = field(default_factory=list)
    install_output: str = ""

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
        self,
        binary: Path,
        api: FakeMessagesApi,
        prompt: str = PROMPT,
        env: Mapping[str, str] | None = None,
        allowed_tools: Sequence[str] = ("mcp__fleet",),
        *,
        model_args: Sequence[str] = PRICED_MODEL,
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
            extra_args=model_args,
            # The user lets the fleet server's tools run without asking, as a project that uses them does.
            allowed_tools=list(allowed_tools),
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


@contextlib.contextmanager
def new_project(root: Path, *install_args: str) -> Iterator[Case]:
    """A project never opened in Claude Code, whose ``.mcp.json`` server nobody approved, set up only by
    ``bir install`` with ``install_args``; its control server is stopped at the end."""
    fake = FakeBaseIn()
    with serve_in_thread(fake.app, fake.releaser) as url:
        fake.url = url
        fleet = {
            "command": sys.executable,
            "args": ["-m", "bir.examples.fleet_server"],
            "env": {"FLEET_CALL_LOG": str(root / "fleet-calls.jsonl")},
        }
        project = write_project(root / "project", mcp_servers={"fleet": fleet})
        env = {
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
            "HOME": str(claude_home(root)),
            "BIR_HOME": os.environ["BIR_HOME"],
            "BIR_AUTH_URL": url,
            "BIR_TOKEN": fake.token,
        }
        claude_home(root).mkdir(parents=True, exist_ok=True)
        this = Case(root, project, fake, env)
        installed = this.bir("install", *install_args, "--project", str(project))
        assert installed.returncode == 0, installed.stderr
        this.install_output = installed.stdout
        try:
            yield this
        finally:
            this.stop_server()


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    """Set up by ``bir install --replay --yes``: the fleet server approved by bir and wrapped."""
    with new_project(tmp_path.resolve(), "--replay", "--yes") as this:
        yield this


@pytest.fixture
def unwrapped(tmp_path: Path) -> Iterator[Case]:
    """Set up by ``bir install --replay`` with no terminal: the fleet server left unwrapped (and unapproved)."""
    with new_project(tmp_path.resolve(), "--replay") as this:
        yield this


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


def test_by_default_the_tool_events_go_through_the_bir_server_and_with_command_hooks_through_bir_hook(
    claude_binary: Path, case: Case
) -> None:
    settings = json.loads((case.project / ".claude" / "settings.local.json").read_text())
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        assert [h["type"] for g in settings["hooks"][event] for h in g["hooks"]] == ["mcp_tool"]
    # Approved by `bir install --yes`, where Claude Code records the answer to its own dialog.
    assert settings["enabledMcpjsonServers"] == ["fleet"]
    installed = case.bir("install", "--replay", "--command-hooks", "--project", str(case.project))
    assert installed.returncode == 0, installed.stderr
    settings = json.loads((case.project / ".claude" / "settings.local.json").read_text())
    assert [h["type"] for g in settings["hooks"]["PreToolUse"] for h in g["hooks"]] == ["command"]
    ticket = mixed_hit(case)
    case.start_server()
    api = placeholder_model()
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert "mcp__bir__hook" not in api.requests[0].tool_names()
    assert case.fleet_calls() == [{"tool": "list_devices", "arguments": {"region": "eu-west-1", "limit": None}}]
    assert DEPLOY in api.requests[3].tool_result_text("toolu_bash")
    assert len(case.log_events("replay.threaded")) == 3
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert (report["outcome"], report["ticket"], report["stepsPinned"]) == ("steered_full", ticket, 3)


# -- the server left unwrapped (no --yes) --------------------------------------------------------------


def test_with_the_server_left_unwrapped_a_steered_session_pins_every_step_and_threads_its_mcp_step_from_the_hook(
    claude_binary: Path, unwrapped: Case
) -> None:
    case = unwrapped
    # No terminal, no flag: nothing approved, and the one command that wraps the server said.
    assert "fleet: " in case.install_output
    assert "--approve fleet" in case.install_output
    assert (
        "fleet"
        not in json.loads((claude_home(case.root) / ".claude.json").read_text())["projects"][str(case.project)][
            "mcpServers"
        ]
    )
    doctor = case.bir("doctor", "--json", "--project", str(case.project))
    servers = [f for f in json.loads(doctor.stdout)["findings"] if f["topic"] == "servers"]
    assert [f["fix"] for f in servers] == ["bir install --approve fleet"]
    assert "steer mode instead of direct" in servers[0]["text"]
    ticket = mixed_hit(case)
    case.start_server()
    api = placeholder_model()
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert DIRECTIVE_TAG in api.requests[0].text()
    # claude -p started the unapproved server itself, unwrapped: the pinned call reached it directly.
    assert case.fleet_calls() == [{"tool": "list_devices", "arguments": {"region": "eu-west-1", "limit": None}}]
    assert case.log_events("proxy.registered") == []
    assert DEPLOY in api.requests[3].tool_result_text("toolu_bash")
    # The scenario's toolOutputLogic reads the CallToolResult a proxy recorded; the hook's content array
    # threaded in that same shape, and the next steps ran on what it computed.
    assert len(case.log_events("replay.threaded")) == 3
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert (report["outcome"], report["ticket"], report["stepsPinned"]) == ("steered_full", ticket, 3)


def test_a_call_recorded_with_the_server_unwrapped_has_the_proxys_shape_and_replays_wrapped(
    claude_binary: Path, unwrapped: Case
) -> None:
    case = unwrapped
    case.start_server()

    def answer(request: ApiRequest) -> Turn:
        return say(f"{len(tool_json(request, 'toolu_list'))} devices.")

    api = FakeMessagesApi([call("mcp__fleet__list_devices", {"region": "eu-west-1"}, tool_id="toolu_list"), answer])
    with api.serve():
        run = case.claude(claude_binary, api, prompt="how many devices in eu-west-1?")
    assert run.exit_code == 0, run.describe()
    wait_for(lambda: bool(case.fake.requests_to("finish")), 30, "the run finished on the service")
    [run_id] = [r.body["id"] for r in case.fake.requests_to("match")]
    [step] = case.fake.steps_of(run_id)
    # Recorded from the hook's content array, in the CallToolResult shape a proxy records.
    output = json.loads(step["toolOutput"])
    assert set(output) == {"content", "isError"}
    assert output["isError"] is False
    assert json.loads(output["content"][0]["text"]) == case_devices(case)

    # The logic a scenario was calculated with from a wrapped recording reads this one as it is.
    logic = json.loads((SCENARIOS / "fleet-mixed.json").read_text())["steps"][0]["toolOutputLogic"]
    computed = anyio.run(output_logic, logic, step["toolOutput"])
    assert computed["highestRiskDeviceId"] == max(case_devices(case), key=lambda d: d["risk"])["id"]

    # Then the user wraps it (the command install named), and the scenario runs with it wrapped.
    approved = case.bir("install", "--replay", "--approve", "fleet", "--project", str(case.project))
    assert approved.returncode == 0, approved.stderr
    ticket = mixed_hit(case)
    api = placeholder_model()
    with api.serve():
        run = case.claude(claude_binary, api)
    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert case.log_events("proxy.registered")
    # Threaded from its proxy's report this time, the shape it was recorded in before.
    assert case.log_events("replay.thread_fallback") == []
    assert DEPLOY in api.requests[3].tool_result_text("toolu_bash")
    wait_for(lambda: len(reports(case.fake)) == 1, 30, "one execution report")
    (report,) = reports(case.fake)
    assert (report["outcome"], report["ticket"], report["stepsPinned"]) == ("steered_full", ticket, 3)


async def output_logic(body: str, tool_output: str) -> dict[str, Any]:
    """A ``toolOutputLogic`` body run in the real evaluator on a recorded output."""
    async with EvaluatorPool(workers=1) as pool:
        result: dict[str, Any] = await pool.evaluate("toolOutputLogic", body, tool_output, {}, {})
    return result


# -- sessions side by side -------------------------------------------------------------------------------

SECOND_PROMPT = "find the riskiest device in eu-west-1 once more"


def test_two_sessions_open_in_one_project_each_run_their_own_direct_plan_through_their_own_proxies(
    claude_binary: Path, case: Case
) -> None:
    direct_hit(case.fake)
    data = fleet_direct()
    case.fake.add_match(SECOND_PROMPT, data, similarity=0.95)
    case.start_server()
    second_done = threading.Event()

    def first_waits(request: ApiRequest) -> Turn:
        # The first session is open (its hooks and proxies known) while the second one runs its plan.
        assert second_done.wait(120), "the second session did not finish"
        return call(RUN_SCENARIO, {}, tool_id="toolu_run_a")

    first_api = FakeMessagesApi([first_waits, lambda r: say("A: " + r.tool_result_text("toolu_run_a")[:100])])
    second_api = FakeMessagesApi(
        [call(RUN_SCENARIO, {}, tool_id="toolu_run_b"), lambda r: say("B: " + r.tool_result_text("toolu_run_b")[:100])]
    )
    runs: dict[str, ClaudeRun] = {}
    with first_api.serve(), second_api.serve():
        first = threading.Thread(target=lambda: runs.setdefault("a", case.claude(claude_binary, first_api)))
        first.start()
        wait_for(lambda: len(first_api.requests) == 1, 60, "the first session's first model request")
        try:
            runs["b"] = case.claude(claude_binary, second_api, prompt=SECOND_PROMPT)
        finally:
            second_done.set()
            first.join(120)

    for name in ("a", "b"):
        assert runs[name].exit_code == 0, runs[name].describe()
    assert first_api.failures == []
    assert second_api.failures == []
    riskiest = max(case_devices(case), key=lambda d: d["risk"])["id"]
    for api, tool_id in ((first_api, "toolu_run_a"), (second_api, "toolu_run_b")):
        assert f'"id": "{riskiest}"' in api.requests[1].tool_result_text(tool_id)
    assert [c["tool"] for c in case.fleet_calls()] == ["list_devices", "get_device"] * 2
    # Each proxy was its session's from its first registration, by the Claude Code process that started it.
    bound = [e for e in case.log_events("proxy.bound") if e.get("by") == "host"]
    assert {e["session_id"] for e in bound} == {runs["a"].session_id, runs["b"].session_id}
    wait_for(lambda: len(reports(case.fake)) == 2, 30, "two execution reports")
    assert sorted(r["outcome"] for r in reports(case.fake)) == ["steered_full", "steered_full"]


# -- parallel calls at the last step ---------------------------------------------------------------------


def read_then_list() -> dict[str, Any]:
    """fleet-mixed's Read, then its list_devices as the last step (a side effect the fleet server logs)."""
    data: dict[str, Any] = json.loads((SCENARIOS / "fleet-mixed.json").read_text())
    listing, read = data["steps"][0], data["steps"][1]
    data["id"] = "scn_read_then_list"
    data["steps"] = [dict(read, stepIndex=0), dict(listing, stepIndex=1)]
    data["responseParamsLogic"] = "return respParams;"
    return data


@pytest.mark.parametrize("beside", ["mcp__fleet__list_devices", "mcp__fleet__get_device"])
def test_parallel_calls_at_the_last_step_run_the_step_once_whether_the_same_tool_or_another(
    claude_binary: Path, case: Case, beside: str
) -> None:
    (case.project / "config").mkdir(exist_ok=True)
    (case.project / "config" / "thresholds.json").write_text(THRESHOLDS)
    data = read_then_list()
    case.fake.add_match(PROMPT, data, similarity=0.95)
    params = {"region": "eu-west-1", "thresholdsPath": str(case.project / "config" / "thresholds.json")}
    case.fake.derive_answers[data["id"]] = Canned(200, {"params": params, "derived": True, "missing": []})
    case.start_server()
    other = {"region": "us-east-1"} if beside.endswith("list_devices") else {"id": "dev-0000"}
    api = FakeMessagesApi(
        [
            call("Read", {"file_path": "/placeholder.json"}, tool_id="toolu_read"),
            calls(
                ToolCall("mcp__fleet__list_devices", {"region": "somewhere"}, "toolu_last"),
                ToolCall(beside, other, "toolu_beside"),
            ),
            say("done"),
        ]
    )
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    step = {"tool": "list_devices", "arguments": {"region": "eu-west-1", "limit": None}}
    # The last step's side effect happened exactly once, with the step's arguments: nothing ran it again
    # (no second approval of it, no divergence through the proxy). The call beside it is the model's own.
    assert case.fleet_calls().count(step) == 1, case.fleet_calls()
    assert case.log_events("replay.pinned")[0]["tool"] == "Read"


# -- a call made before the `bir` server was connected -----------------------------------------------------


def test_a_call_made_before_the_bir_server_connected_is_recorded_in_its_place(claude_binary: Path, case: Case) -> None:
    # The `bir` server (it carries the tool events' hooks) takes seconds to come up, and Claude Code does
    # not wait for it: 2.1.197 runs a tool call with no hook then, 2.1.332 holds the hook until it connects.
    config_path = claude_home(case.root) / ".claude.json"
    config = json.loads(config_path.read_text())
    entry = config["projects"][str(case.project)]["mcpServers"]["bir"]
    entry["args"] = ["-c", f"sleep 4; exec {entry['command']}"]
    entry["command"] = "/bin/sh"
    config_path.write_text(json.dumps(config))
    case.start_server()
    api = FakeMessagesApi(
        [
            call("Bash", {"command": "echo first", "description": "d"}, tool_id="toolu_first"),
            call("Bash", {"command": "echo second", "description": "d"}, tool_id="toolu_second"),
            say("two echoes"),
        ]
    )
    with api.serve():
        # Claude Code does not wait for its MCP servers before the first model request (its default).
        run = case.claude(
            claude_binary,
            api,
            prompt="echo twice",
            env={"MCP_CONNECTION_NONBLOCKING": "true"},
            allowed_tools=("Bash",),
        )

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    wait_for(lambda: bool(case.fake.requests_to("finish")), 40, "the run finished on the service")
    [run_id] = [r.body["id"] for r in case.fake.requests_to("match")]
    steps = case.fake.steps_of(run_id)
    # Every call is recorded, in the order it was made, in the shape its hook would have given, whether a
    # hook saw it or only the transcript did.
    assert [json.loads(s["toolOutput"])["stdout"].strip() for s in steps] == ["first", "second"]
    assert [s["toolInput"]["command"] for s in steps] == ["echo first", "echo second"]


def test_a_file_that_tries_to_redirect_a_pinned_command_into_another_file_leaves_that_file_untouched(
    claude_binary: Path, case: Case
) -> None:
    # Issue 16: a step reads a file, the next step's Bash command is built from what it read. The file
    # is written by someone else (a repository's contributor, a downloaded archive) and names a redirection.
    victim = case.project / "victim.txt"
    victim.write_text("the user's own file\n")
    (case.project / "README.md").write_text("# project\n")
    notes = case.project / "NOTES.txt"
    notes.write_text(f"README.md > {victim}\n")
    scenario = {
        "id": "scn_read_then_cat",
        "state": "ready",
        "intent": "show the file the notes name",
        "paramsObject": {"notesPath": {"sampleValue": "NOTES.txt", "role": "setting"}},
        "steps": [
            {
                "stepIndex": 0,
                "toolName": "Read",
                "toolInputLogic": "return { file_path: params.notesPath };",
                "toolOutputLogic": "const t = JSON.parse(toolOutput); const text = (t.file && t.file.content) || "
                "t.content || ''; return { file: text.split('\\n')[0] };",
                "reasoning": "read the notes",
            },
            {
                "stepIndex": 1,
                "toolName": "Bash",
                "toolInputLogic": "return { command: 'cat ' + respParams.file, description: 'show it' };",
                "reasoning": "show the file the notes name",
            },
        ],
    }
    case.fake.add_match(PROMPT, scenario, similarity=0.95)
    case.fake.derive_answers["scn_read_then_cat"] = Canned(
        200, {"params": {"notesPath": str(notes)}, "derived": True, "missing": [], "costUsd": 0.0}
    )
    case.start_server()
    api = FakeMessagesApi(
        [
            call("Read", {"file_path": "/placeholder.txt"}, tool_id="toolu_read"),
            call("Bash", {"command": "cat README.md", "description": "show it"}, tool_id="toolu_cat"),
            lambda request: say("Done: " + request.tool_result_text("toolu_cat")[:300]),
        ]
    )
    with api.serve():
        run = case.claude(claude_binary, api)

    assert run.exit_code == 0, run.describe()
    assert api.failures == []
    assert DIRECTIVE_TAG in api.requests[0].text()
    assert "README.md > " in api.requests[1].tool_result_text("toolu_read")
    assert victim.read_text() == "the user's own file\n"
    refusal = api.requests[2].tool_result_text("toolu_cat")
    assert "refused as unsafe" in refusal
    assert "Step 2 of 2 (Bash) did not run" in refusal
    assert [e["step"] for e in case.log_events("replay.input_refused")] == [1]
    assert case.log_events("replay.pinned")[-1]["step"] == 0


LOCAL_SECOND_PROMPT = "find the riskiest device in us-east-1 and show its details"


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
    # A fresh project: its .mcp.json server approved by `bir install --replay --yes`, as a user does it.
    project = write_project(root / "project", mcp_servers={"fleet": fleet})
    env = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "HOME": str(claude_home(root)),
        "BIR_HOME": os.environ["BIR_HOME"],
    }
    claude_home(root).mkdir(parents=True, exist_ok=True)
    case = Case(root, project, FakeBaseIn(), env)
    installed = case.bir("install", "--replay", "--yes", "--project", str(project))
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
        # Both turns on Claude Code's default model, as a user's session runs: priced, so measured.
        with first_api.serve():
            first = case.claude(claude_binary, first_api, model_args=())
        assert first.exit_code == 0, first.describe()
        assert first_api.failures == []
        assert DIRECTIVE_TAG not in first_api.requests[0].text()
        assert {r.body.get("model") for r in first_api.requests} & set(DEFAULT_MODELS)
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
                LOCAL_SECOND_PROMPT,
                api_url=second_api.url,
                env_extra=env,
                case_dir=root,
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
        # Turn one ran on the default model and is measured: the baseline the saving is counted against.
        assert line["baseline"]["costUsd"] is not None, json.dumps(line)
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
