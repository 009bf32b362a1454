"""The ``bir`` commands as a new user meets them, from the installed wheel on the demo fleet (issue 21):
one JSON document on every path of ``--json``, a progress line on a terminal and nothing on a pipe, an
interrupt that says what ran, a sign-in a running server picks up, and processes that end."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from bir.benchmarks.serving import serve_in_thread
from tests.fakes.baseinsvc import FakeBaseIn
from tests.paths import SCENARIOS
from tests.peers import CLAUDE_CODE_VERSIONS, claude_code
from tests.polling import wait_for
from tests.sandbox import Sandbox
from tests.wheel import WHEEL_TEST_TIMEOUT_S

pytestmark = pytest.mark.timeout(WHEEL_TEST_TIMEOUT_S)

FLEET = "fleet=python -m bir.examples.fleet_server"
DIRECT = ["replay", "--scenario", "fleet-direct", "--prompt", "the riskiest device", "--param", "region=eu-west-1"]
# Three quick steps and a slow one between them: an interrupt lands while step 3 is in flight.
SLOW: dict[str, Any] = {
    "id": "scn_slow",
    "intent": "list, read, wait, read again",
    "paramsObject": {"region": {"sampleValue": "eu-west-1", "role": "target"}},
    "steps": [
        {
            "stepIndex": 0,
            "toolName": "mcp__fleet__list_devices",
            "toolInputLogic": "return { region: params.region };",
            "toolOutputLogic": "return { id: JSON.parse(JSON.parse(toolOutput).content[0].text)[0].id };",
        },
        {"stepIndex": 1, "toolName": "mcp__fleet__get_device", "toolInputLogic": "return { id: respParams.id };"},
        {
            "stepIndex": 2,
            "toolName": "mcp__fleet__slow_echo",
            "toolInputLogic": "return { text: respParams.id, delay_ms: 60000 };",
        },
        {"stepIndex": 3, "toolName": "mcp__fleet__get_device", "toolInputLogic": "return { id: respParams.id };"},
    ],
}


@pytest.fixture
def service() -> Iterator[FakeBaseIn]:
    fake = FakeBaseIn()
    with serve_in_thread(fake.app, fake.releaser) as url:
        fake.url = url
        yield fake


# -- --json: one document on every path ---------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "--json", "--nosuch"],
        ["status", "--json", "--project"],
        ["login", "--json", "--url"],
        ["bench", "eval", "--json", "--calls", "many"],
        ["scenario", "show", "--json"],
        ["down", "--json", "--all", "extra"],
        ["learn", "--json", "--since", "notadate"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_usage_error_with_json_is_one_document_on_stdout_and_nothing_on_stderr(
    demo: Sandbox, argv: list[str]
) -> None:
    done = demo.bir(*argv)
    assert (done.returncode, done.stderr) == (2, "")
    doc = json.loads(done.stdout)
    assert doc["error"] == "usage"
    assert doc["message"].startswith("bir ")
    assert doc["usage"].startswith("usage: bir")


@pytest.mark.parametrize(
    ("argv", "env", "exit_code", "error"),
    [
        (["learn", "--json", "--project", "/nonexistent"], {}, 1, "failed"),
        (["learn", "--json"], {"BIR_SERVICE": "remote"}, 1, "remote_service"),
        (["stats", "--json"], {"BIR_SERVICE": "remote"}, 1, "remote_service"),
        (["stats", "--json"], {"BROKEN_STORE": "1"}, 1, "store_unusable"),
        (["scenario", "list", "--json"], {"BROKEN_STORE": "1"}, 1, "store_unusable"),
        (["scenario", "import", "/nonexistent", "--json"], {}, 2, "usage"),
        (["scenario", "export", "/nonexistent/store.json", "--json"], {}, 2, "usage"),
    ],
    ids=[
        "learn no project",
        "learn remote",
        "stats remote",
        "stats broken store",
        "scenario list broken store",
        "scenario import",
        "scenario export",
    ],
)
def test_a_command_added_late_refuses_with_json_in_one_document_and_nothing_on_stderr(
    demo: Sandbox, argv: list[str], env: dict[str, str], exit_code: int, error: str
) -> None:
    if env.pop("BROKEN_STORE", None):
        (demo.bir_home / "local").mkdir(parents=True, exist_ok=True)
        (demo.bir_home / "local" / "store.db").write_text("not a database\n")
    done = demo.bir(*argv, env=env)
    assert (done.returncode, done.stderr) == (exit_code, "")
    doc = json.loads(done.stdout)
    assert doc["error"] == error
    assert doc["message"]
    # Without --json the same refusal is one sentence on stderr, named by its command.
    words = demo.bir(*[a for a in argv if a != "--json"], env=env)
    assert (words.returncode, words.stdout) == (exit_code, "")
    assert words.stderr.startswith("bir ")
    assert doc["message"] in words.stderr


def test_a_refusal_and_a_bad_variable_with_json_are_one_document_on_stdout(demo: Sandbox) -> None:
    refused = demo.bir("replay", "on", "--json")
    assert (refused.returncode, refused.stderr) == (1, "")
    assert json.loads(refused.stdout)["message"].endswith("run `bir install --replay` there first")
    bad = demo.bir("status", "--json", env={"BIR_STEP_TIMEOUT_MS": "abc"})
    assert (bad.returncode, bad.stderr) == (2, "")
    assert json.loads(bad.stdout) == {
        "error": "config",
        "message": "BIR_STEP_TIMEOUT_MS must be a whole number, got 'abc' (fix it or unset it; `bir doctor` "
        "lists every bad value)",
    }


def test_doctor_lists_a_bad_variable_among_its_findings_and_exits_as_its_help_says(demo: Sandbox) -> None:
    bad = {"BIR_STEP_TIMEOUT_MS": "abc"}
    helped = demo.bir("doctor", "--help")
    assert "1    something is broken (each finding says what fixes it)" in helped.stdout
    done = demo.bir("doctor", "--json", env=bad)
    assert (done.returncode, done.stderr) == (1, "")
    report = json.loads(done.stdout)
    assert report["broken"] is True
    [config] = [f for f in report["findings"] if f["topic"] == "config"]
    assert config["level"] == "broken"
    assert config["text"].startswith("BIR_STEP_TIMEOUT_MS must be a whole number, got 'abc'")
    assert "BIR_STEP_TIMEOUT_MS" in config["fix"]
    # The rest of the report is still there: one bad value does not hide the others.
    topics = {f["topic"] for f in report["findings"]}
    assert {"install", "service", "evaluator"} <= topics
    words = demo.bir("doctor", env=bad)
    assert (words.returncode, words.stderr) == (1, "")
    assert "✗ BIR_STEP_TIMEOUT_MS must be a whole number, got 'abc'" in words.stdout
    assert "fix: unset BIR_STEP_TIMEOUT_MS" in words.stdout
    assert "\nservice\n" in words.stdout
    assert "\nevaluator\n" in words.stdout
    # Without the bad value the config finding is gone.
    fine = json.loads(demo.bir("doctor", "--json").stdout)
    assert "config" not in {f["topic"] for f in fine["findings"]}


def test_without_verbose_no_log_line_reaches_stderr_and_with_it_they_do(demo: Sandbox) -> None:
    nobody = {"BIR_AUTH_URL": "http://127.0.0.1:9"}
    quiet = demo.bir("status", "--json", env=nobody)
    assert quiet.stderr == ""
    assert json.loads(quiet.stdout)["service"]["check"] == "unreachable"
    loud = demo.bir("status", "--json", "--verbose", env=nobody)
    assert any(json.loads(line).get("event") == "service.request_failed" for line in loud.stderr.splitlines())
    logged = (demo.bir_home / "logs" / "bir.log").read_text()
    assert "service.request_failed" in logged


# -- never ignore what was asked ------------------------------------------------------------------------


def test_an_unknown_server_in_replay_allow_and_an_unknown_param_are_refused_with_the_names(demo: Sandbox) -> None:
    assert demo.bir("install", "--replay").returncode == 0
    allow = demo.bir("replay", "allow", "flete")
    assert allow.returncode == 2
    assert "'flete' is not a server bir wraps" in allow.stderr
    assert "its wrapped servers: fleet (bir replay allow fleet)" in allow.stderr
    param = demo.bir("replay", "--scenario", "fleet-direct", "--prompt", "x", "--param", "regoin=eu-west-1")
    assert param.returncode == 2
    assert param.stderr == "bir replay: the scenario has no parameter 'regoin'; its parameters: region, limit\n"


def test_an_explicit_wrap_is_used_with_the_projects_control_server_up_and_no_session(demo: Sandbox) -> None:
    assert demo.bir("install", "--replay").returncode == 0
    assert demo.bir("up").returncode == 0
    done = demo.bir(*DIRECT, "--wrap", FLEET)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Done: all 2 steps ran." in done.stdout
    assert done.stderr == ""


def test_a_wrap_that_is_not_an_mcp_server_is_one_sentence(demo: Sandbox) -> None:
    done = demo.bir(*DIRECT, "--wrap", "fleet=cat")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "--wrap fleet: `cat`" in done.stderr
    assert "not a stdio MCP server" in done.stderr
    assert "Future exception" not in done.stderr


def test_the_packaged_scenarios_are_listed_with_a_command_line_that_runs_each(demo: Sandbox) -> None:
    listed = demo.bir("replay", "--list", "--json")
    assert listed.returncode == 0
    scenarios = {s["name"]: s for s in json.loads(listed.stdout)["scenarios"]}
    assert set(scenarios) == {"fleet-direct", "fleet-mixed"}
    assert (scenarios["fleet-direct"]["mode"], scenarios["fleet-mixed"]["builtins"]) == ("direct", ["Read", "Bash"])
    direct = demo.shell(scenarios["fleet-direct"]["command"])
    assert (direct.returncode, direct.stderr) == (0, "")
    assert "Done: all 2 steps ran." in direct.stdout
    mixed = demo.shell(scenarios["fleet-mixed"]["command"])
    assert mixed.returncode == 1
    assert "Stopped, as --partial asked, at step 2 of 3 (Read)" in mixed.stdout


# -- honest advice and checking before acting ----------------------------------------------------------------


def fleet_direct_with(demo: Sandbox, name: str, change: Callable[[dict[str, Any]], None]) -> str:
    """The packaged fleet-direct scenario with ``change`` made, written into the project as ``name``."""
    scenario: dict[str, Any] = json.loads((SCENARIOS / "fleet-direct.json").read_text(encoding="utf-8"))
    change(scenario)
    (demo.project / name).write_text(json.dumps(scenario), encoding="utf-8")
    return name


def test_bench_eval_names_a_body_that_never_finishes_suggests_no_value_and_fails(demo: Sandbox) -> None:
    looping = fleet_direct_with(demo, "loop.json", lambda s: s.update(paramsLogic="while (true) {}"))
    done = demo.bir("bench", "eval", "--scenario", looping, "--calls", "2")
    assert done.returncode == 1, done.stderr
    assert "  paramsLogic: timeout: paramsLogic ran longer than" in done.stdout
    assert "no BIR_LOGIC_TIMEOUT_MS is suggested" in done.stdout
    assert "BIR_LOGIC_TIMEOUT_MS=" not in done.stdout
    doc = json.loads(demo.bir("bench", "eval", "--scenario", looping, "--calls", "2", "--json").stdout)
    assert doc["suggested"] is None
    assert "paramsLogic" in [u["body"] for u in doc["unmeasured"]]


def test_replay_refuses_a_scenario_whose_second_body_does_not_compile_before_its_first_step(demo: Sandbox) -> None:
    def break_step_two(scenario: dict[str, Any]) -> None:
        scenario["steps"][1]["toolOutputLogic"] = "const r = JSON.parse(toolOutput);\nreturn { device: r.. };"

    broken = fleet_direct_with(demo, "broken.json", break_step_two)
    calls = demo.root / "fleet-calls.jsonl"
    argv = ["replay", "--scenario", broken, "--prompt", "x", "--param", "region=eu-west-1", "--wrap", FLEET]
    done = demo.bir(*argv, "--json", env={"FLEET_CALL_LOG": str(calls)})
    assert (done.returncode, done.stderr) == (1, "")
    doc = json.loads(done.stdout)
    assert (doc["error"], doc["steps"]) == ("does_not_compile", [])
    assert "step 1 toolOutputLogic: toolOutputLogic does not compile" in doc["message"]
    words = demo.bir(*argv, env={"FLEET_CALL_LOG": str(calls)})
    assert words.returncode == 1
    assert "does not compile" in words.stdout + words.stderr
    # The fleet server saw no call: step 1 (a list, here; a side effect elsewhere) never ran.
    assert not calls.exists() or calls.read_text(encoding="utf-8") == ""
    # The same scenario mended runs, and the fleet server logs its calls there.
    mended = fleet_direct_with(demo, "mended.json", lambda s: None)
    ran = demo.bir("replay", "--scenario", mended, *argv[3:], env={"FLEET_CALL_LOG": str(calls)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert [json.loads(line)["tool"] for line in calls.read_text(encoding="utf-8").splitlines()] == [
        "list_devices",
        "get_device",
    ]


# -- progress and interrupts -------------------------------------------------------------------------------


def on_a_terminal(demo: Sandbox, argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` with stderr a terminal (a pseudo-terminal read here); exit status, stdout, what the terminal got."""
    reader, writer = pty.openpty()
    process = demo.spawn(argv, stdout=subprocess.PIPE, stderr=writer, stdin=subprocess.DEVNULL)
    os.close(writer)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([reader], [], [], 120)
        if not ready:
            process.kill()
            pytest.fail(f"{argv} printed nothing for 120 s")
        try:
            chunk = os.read(reader, 65536)
        except OSError:  # the last writer closed: EIO
            break
        if not chunk:
            break
        seen += chunk
    os.close(reader)
    out, _ = process.communicate(timeout=60)
    return process.returncode, out, seen.decode("utf-8", "replace")


def test_a_terminal_sees_each_step_as_it_runs_and_a_pipe_sees_nothing(demo: Sandbox) -> None:
    code, out, terminal = on_a_terminal(demo, ["bir", *DIRECT, "--wrap", FLEET])
    assert code == 0
    assert "bir replay: starting fleet:" in terminal
    assert "bir replay: step 1 of 2: mcp__fleet__list_devices…" in terminal
    assert "bir replay: step 2 of 2: mcp__fleet__get_device ok" in terminal
    assert terminal.endswith("\r\x1b[K")  # erased before the account is printed
    assert "\r" not in out
    assert "Done: all 2 steps ran." in out
    piped = demo.bir(*DIRECT, "--wrap", FLEET)
    assert (piped.returncode, piped.stderr) == (0, "")


def test_a_bench_shows_what_it_is_timing_on_a_terminal(demo: Sandbox) -> None:
    _, _, terminal = on_a_terminal(demo, ["bir", "bench", "eval", "--scenario", "fleet-direct", "--calls", "3"])
    assert "bir bench eval: timing paramsLogic (1 of 6), 3 calls…" in terminal
    assert terminal.endswith("\r\x1b[K")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["bench", "match", "--quick"], "bir bench match: matching prompts 1-20 of 60…"),
        (["bench", "workload", "--quick"], "bir bench workload: rule 1 of 2 (ours, 1 run): prompt 1 of "),
        (["demo"], "bir demo: waiting for turn one's scenario being calculated…"),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else None,
)
def test_a_long_command_shows_what_it_is_doing_on_a_terminal(demo: Sandbox, argv: list[str], said: str) -> None:
    code, out, terminal = on_a_terminal(demo, ["bir", *argv])
    assert code == 0, out
    assert said in terminal
    assert terminal.endswith("\r\x1b[K")  # erased before the account is printed
    assert "\r" not in out


@pytest.mark.parametrize("argv", [["bench", "workload", "--quick"], ["demo"]], ids=" ".join)
def test_without_a_terminal_a_long_command_prints_no_progress_and_no_log_line(demo: Sandbox, argv: list[str]) -> None:
    done = demo.bir(*argv)
    assert (done.returncode, done.stderr) == (0, "")
    assert "\r" not in done.stdout
    assert "\x1b[K" not in done.stdout


def interrupted(demo: Sandbox, *extra: str) -> subprocess.CompletedProcess[str]:
    """``bir replay`` of the slow scenario, Ctrl-C (SIGINT to its process group) while step 3 is in flight."""
    (demo.project / "slow.json").write_text(json.dumps(SLOW))
    argv = [str(demo.installed.bin / "bir"), "replay", "--scenario", "slow.json", "--prompt", "x"]
    argv += ["--param", "region=eu-west-1", "--wrap", FLEET, *extra]
    process = subprocess.Popen(
        argv,
        env=demo.env,
        cwd=demo.project,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    log = demo.bir_home / "logs" / "replay.log"
    wait_for(lambda: log.exists() and "fleet.slow_echo_started" in log.read_text(), 60, "the slow step")
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


SAID = (
    "Interrupted (Ctrl-C). Ran: step 1, 2. Step 3 (mcp__fleet__slow_echo) was sent and may or may not have "
    "completed. Not run: step 4."
)


def test_an_interrupt_prints_what_ran_and_what_did_not_and_exits_130(demo: Sandbox) -> None:
    done = interrupted(demo)
    assert (done.returncode, done.stderr) == (130, "")
    assert done.stdout.rstrip().endswith(SAID)
    assert "Step 1 of 4: mcp__fleet__list_devices (ok" in done.stdout
    assert not [p for p in demo.processes() if "bir.proxy" in " ".join(p.cmdline())]


def test_an_interrupt_with_json_is_one_document_saying_so(demo: Sandbox) -> None:
    done = interrupted(demo, "--json")
    assert (done.returncode, done.stderr) == (130, "")
    doc = json.loads(done.stdout)
    assert (doc["error"], doc["message"], doc["exitCode"]) == ("interrupted", SAID, 130)
    assert [s["status"] for s in doc["steps"]] == ["ok", "ok", "skipped"]


# -- a sign-in a running server picks up ------------------------------------------------------------------


def test_a_running_control_server_uses_a_new_sign_in_and_a_sign_out_at_its_next_request(
    demo: Sandbox, service: FakeBaseIn
) -> None:
    assert demo.bir("install", "--replay").returncode == 0
    assert demo.bir("up").returncode == 0
    prompt = {"prompt": "find the riskiest device in eu-west-1"}
    demo.hook("SessionStart", {"source": "startup"})
    demo.hook("UserPromptSubmit", prompt)
    assert service.requests_to("match") == []

    login = demo.bir("login", "--url", service.url, stdin=service.token + "\n")
    assert login.returncode == 0, login.stderr
    # The server served on the local service (no account yet): it is restarted on the service signed in to.
    assert "Restarted 1 running control server(s) on the service (they served on the local service)" in login.stdout
    demo.hook("UserPromptSubmit", prompt)
    wait_for(lambda: len(service.requests_to("match")) == 1, 10, "the match of the prompt after bir login")
    assert service.requests_to("match")[0].headers["authorization"] == f"Bearer {service.token}"

    assert demo.bir("logout").returncode == 0
    demo.hook("UserPromptSubmit", prompt)
    demo.hook("UserPromptSubmit", prompt)
    assert len(service.requests_to("match")) == 1


def test_login_does_not_store_a_url_that_does_not_answer(demo: Sandbox) -> None:
    done = demo.bir("login", "--url", "http://127.0.0.1:9", stdin="tok\n")
    assert done.returncode == 1
    assert "could not be reached" in done.stderr
    assert "nothing was stored" in done.stderr
    assert not (demo.bir_home / "credentials.json").exists()
    # Not signed in, so the local service serves here.
    assert "service:  local (on this machine)" in demo.bir("status").stdout


# -- processes that end ---------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_status_all_lists_every_projects_server_and_down_all_stops_them(demo: Sandbox) -> None:
    other = demo.home / "src" / "other"
    other.mkdir()
    for project in (demo.project, other):
        assert demo.bir("install", "--project", str(project)).returncode == 0
        assert demo.bir("up", "--project", str(project)).returncode == 0
    listed = demo.bir("status", "--all", "--json")
    servers = json.loads(listed.stdout)["servers"]
    assert sorted(s["project"] for s in servers) == sorted([str(demo.project), str(other.resolve())])
    for server in servers:
        assert _alive(server["pid"])
        assert server["rssBytes"] > 10 * 1024 * 1024
        assert server["children"] >= 1  # its evaluator worker
        assert server["uptimeMs"] >= 0
    text = demo.bir("status", "--all").stdout
    assert text.startswith("2 control servers running (RSS ")
    down = demo.bir("down", "--all")
    assert down.returncode == 0
    assert down.stdout.startswith("Stopped 2 control servers:")
    assert not any(_alive(s["pid"]) for s in servers)
    assert demo.bir("status", "--all").stdout == "No control server is running.\n"


def test_uninstall_stops_the_projects_control_server_and_uninstall_replay_does_not(demo: Sandbox) -> None:
    assert demo.bir("install", "--replay").returncode == 0
    assert demo.bir("up").returncode == 0
    pid = json.loads(demo.bir("status", "--json").stdout)["controlServer"]["pid"]
    assert demo.bir("uninstall", "--replay").returncode == 0
    assert _alive(pid)
    done = demo.bir("uninstall")
    assert done.returncode == 0
    assert f"Stopped its control server (pid {pid})." in done.stdout
    assert not _alive(pid)


def test_bench_pin_takes_a_relative_claude_path_from_where_it_was_run_and_refuses_a_wrong_one_at_once(
    demo: Sandbox,
) -> None:
    claude = claude_code(CLAUDE_CODE_VERSIONS[0])
    relative = os.path.relpath(claude, demo.project)
    assert not Path(relative).is_absolute()
    done = demo.bir("bench", "pin", "--quick", "--json", "--claude", relative, cwd=demo.project)
    assert done.returncode == 0, done.stdout + done.stderr
    session = json.loads(done.stdout)["session"]
    assert session["measured"] is True
    assert session["claude"] == os.path.abspath(demo.project / relative)
    # A wrong relative path, or a file that is no program, is refused before anything is measured.
    missing = demo.bir("bench", "pin", "--quick", "--claude", "no/claude", cwd=demo.project)
    assert missing.returncode == 2
    assert f"--claude {demo.project / 'no' / 'claude'}: there is no such file" in missing.stderr
    (demo.project / "not-a-program").write_text("hello\n")
    (demo.project / "not-a-program").chmod(0o755)
    refused = demo.bir("bench", "pin", "--quick", "--json", "--claude", "not-a-program", cwd=demo.project)
    assert (refused.returncode, refused.stderr) == (2, "")
    doc = json.loads(refused.stdout)
    assert doc["error"] == "usage"
    assert doc["message"].startswith(f"--claude {demo.project / 'not-a-program'}: `claude --version` does not run")


def test_bench_pin_takes_a_claude_binary_and_refuses_one_that_is_not_there(demo: Sandbox) -> None:
    done = demo.bir("bench", "pin", "--quick", "--claude", str(demo.root / "no-claude"))
    assert done.returncode == 2
    assert f"--claude {demo.root / 'no-claude'}: there is no such file" in done.stderr
