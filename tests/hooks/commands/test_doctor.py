"""``bir doctor``: every problem it names is found (a missing hook, a dead proxy, replay on with no
allowlist, nobody to derive), each with the command that fixes it; the replay block comes first."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bir.cli import main
from bir.core import config, credentials
from bir.core.off_switch import OffState
from bir.hooks import api
from bir.hooks.commands import doctor, server_modes
from bir.hooks.commands.doctor import DoctorFacts, EvaluatorFacts, HookFact
from bir.hooks.commands.probes import ControlFacts, ServiceCheck, Serving
from bir.hooks.commands.server_modes import KnownScenario
from bir.hooks.commands.status import StatusFacts
from bir.hooks.discovery import Discovery
from bir.hooks.local.store import Store, default_path
from tests.hooks.ops_facts import replay_view_of


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose user has one stdio MCP server, ``fleet``; Claude Code's config lives under tmp."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    fleet = {"type": "stdio", "command": sys.executable, "args": ["-m", "bir.examples.fleet_server"]}
    (home / ".claude.json").write_text(json.dumps({"mcpServers": {"fleet": fleet}}))
    path = tmp_path / "project"
    path.mkdir()
    return path.resolve()


def doctor_json(capsys: pytest.CaptureFixture[str], project: Path) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--project", str(project), "--json"])
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, data


def finding(data: dict[str, Any], topic: str, words: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [f for f in data["findings"] if f["topic"] == topic and words in f["text"]]
    assert found, f"no {topic} finding with {words!r} in {data['findings']}"
    return found[0]


def test_a_fresh_replay_install_is_told_it_has_no_allowlist_and_nobody_to_derive(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_SERVICE", "remote")
    assert main(["install", "--replay", "--project", str(project)]) == 0
    capsys.readouterr()
    code, data = doctor_json(capsys, project)
    assert code == 1
    assert data["replay"] == {"on": True, "allow": None, "minSteerSimilarity": 0.92, "derives": "nobody"}
    allow = finding(data, "replay", "no allowlist")
    assert allow["level"] == "warning"
    assert allow["fix"].startswith("bir replay allow")
    assert "fleet" in allow["fix"]
    derive = finding(data, "derive", "nobody derives")
    assert derive["level"] == "broken"
    assert "bir login" in derive["fix"]
    assert finding(data, "hooks", "all 7 hooks as expected")["level"] == "ok"
    assert finding(data, "evaluator", "BIR_LOGIC_TIMEOUT_MS=1000 (from default)")["level"] == "ok"


def test_with_no_service_configured_the_local_service_derives_and_doctor_says_how_full_its_store_is(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install", "--replay", "--project", str(project)]) == 0
    capsys.readouterr()
    _, data = doctor_json(capsys, project)
    assert data["replay"]["derives"] == "the service"
    local = finding(data, "service", "the local service, on this machine: 0 runs, 0 ready scenarios, 0.0 of 256 MB")
    assert local["level"] == "ok"


def test_a_home_others_may_write_or_a_link_in_it_is_broken_with_the_command_that_fixes_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install", "--replay", "--project", str(project)]) == 0
    capsys.readouterr()
    home = config.home()
    _, clean = doctor_json(capsys, project)
    assert [f for f in clean["findings"] if f["topic"] == "home"] == []

    (home / "logs").mkdir(exist_ok=True)
    (home / "logs").chmod(0o777)
    (home / "tmp").symlink_to(project)
    code, data = doctor_json(capsys, project)
    assert code == 1
    shared = finding(data, "home", f"{home / 'logs'} is writable by group or others (mode 0777)")
    assert (shared["level"], shared["fix"]) == ("broken", f"chmod 700 {home / 'logs'}")
    link = finding(data, "home", f"{home / 'tmp'} is a link")
    assert link["level"] == "broken"
    assert "move it away" in link["fix"]

    home.chmod(0o777)
    _, whole = doctor_json(capsys, project)
    assert finding(whole, "home", f"{home} is writable by group or others")["fix"] == f"chmod 700 {home}"
    home.chmod(0o700)


def test_a_missing_hook_and_a_wrong_timeout_are_broken_and_fixed_by_bir_install(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_DERIVE_API_KEY", "sk-test")
    assert main(["install", "--replay", "--project", str(project)]) == 0
    assert main(["replay", "allow", "fleet", "--project", str(project)]) == 0
    capsys.readouterr()
    settings_path = project / ".claude" / "settings.local.json"
    settings = json.loads(settings_path.read_text())
    del settings["hooks"]["PreToolUse"]
    settings["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 60
    settings["hooks"]["Stop"][0]["hooks"][0]["async"] = True
    settings_path.write_text(json.dumps(settings))
    code, data = doctor_json(capsys, project)
    assert code == 1
    assert data["replay"]["derives"] == "this machine"
    assert data["replay"]["allow"] == ["fleet"]
    missing = finding(data, "hooks", "PreToolUse: bir's hook is missing")
    assert (missing["level"], missing["fix"]) == ("broken", "bir install")
    wrong = finding(data, "hooks", "Stop: timeout 60, expected 5")
    assert "async" in wrong["text"]
    assert wrong["fix"] == "bir install"
    assert not [f for f in data["findings"] if f["topic"] == "replay"]

    # The text puts replay first, loudly, and every problem with its fix.
    assert main(["doctor", "--project", str(project)]) == 1
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("replay: ON")
    assert text.splitlines()[1] == "allowlist: fleet"
    assert "fix: bir install" in text


def test_a_project_without_bir_is_broken_and_told_to_install(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = doctor_json(capsys, project)
    assert code == 1
    assert finding(data, "install", "not installed")["fix"] == "bir install --replay"


# -- the pure judgement, on facts built by hand ----------------------------------------------------------


def hooks_ok() -> tuple[HookFact, ...]:
    return tuple(
        HookFact(event, 1, timeout, False, f"/bin/bir-hook {event}", True)
        for event, (_, timeout, _, _) in api.HOOK_ROUTES.items()
    )


def doctor_facts(
    health: api.Health | None,
    *,
    allow: tuple[str, ...] | None = ("fleet",),
    derive_key: bool = False,
    signed_in: bool = True,
    local: dict[str, str] | None = None,
    serving: Serving = "remote",
) -> DoctorFacts:
    status = StatusFacts(
        project="/p",
        replay=replay_view_of(replay=True, allow=allow, wrapped=("fleet",)),
        down=False,
        off=OffState(False, False, "/h/off"),
        control=ControlFacts(Discovery("http://127.0.0.1:1", "t", 4242, "0", 0, "/p"), health),
        sign_in=credentials.Effective(
            "https://svc" if signed_in else None, "t" if signed_in else None, "stored", "stored"
        ),
        service=ServiceCheck("accepted" if signed_in else "unconfigured", "https://svc" if signed_in else None),
        log="/h/logs/k.log",
    )
    return DoctorFacts(
        status=status,
        settings_path="/p/.claude/settings.local.json",
        settings_error=None,
        hooks=hooks_ok(),
        local_servers=local if local is not None else {"fleet": "proxy", "bir": "bir"},
        min_steer_similarity=0.92,
        derive_key=derive_key,
        anthropic_key_ignored=False,
        evaluator=EvaluatorFacts("v8", True, "2", "1000", "default"),
        serving=serving,
    )


def health(served: list[str], wrapped: list[str], left: list[str] | None = None) -> api.Health:
    hello = api.LastHello(pid=1, version="0", tools=1, off=False, age_ms=5000)
    return api.Health(
        ok=True,
        pid=4242,
        version="0",
        uptime_ms=1000,
        served=served,
        wrapped=wrapped,
        left=left or [],
        last_hello=hello,
    )


def test_a_proxy_whose_session_closed_is_not_a_dead_proxy_and_asks_for_no_restart() -> None:
    diagnosis = doctor.diagnose(doctor_facts(health(served=[], wrapped=["fleet"], left=["fleet"])))
    found = [f for f in diagnosis.findings if f.topic == "proxies"]
    assert [(f.level, f.fix) for f in found] == [("ok", None)]
    assert "session closed" in found[0].text
    assert not diagnosis.broken


def test_a_proxy_that_registered_and_stopped_polling_is_a_dead_proxy_with_where_to_look() -> None:
    diagnosis = doctor.diagnose(doctor_facts(health(served=[], wrapped=["fleet"])))
    dead = [f for f in diagnosis.findings if f.topic == "proxies"]
    assert len(dead) == 1
    assert dead[0].level == "warning"
    assert "without saying goodbye" in dead[0].text
    assert dead[0].fix is not None
    assert "/h/logs/k.log" in dead[0].fix
    alive = doctor.diagnose(doctor_facts(health(served=["fleet"], wrapped=["fleet"])))
    assert [f.text for f in alive.findings if f.topic == "proxies"] == ["fleet: proxy alive"]
    assert not alive.broken


def test_a_wrapped_server_whose_entry_is_gone_is_broken() -> None:
    diagnosis = doctor.diagnose(doctor_facts(health(["fleet"], ["fleet"]), local={"bir": "bir"}))
    gone = [f for f in diagnosis.findings if f.topic == "proxies"]
    assert gone[0].level == "broken"
    assert gone[0].fix == "bir install"
    assert diagnosis.broken


def test_who_derives_is_this_machine_then_the_service_then_nobody() -> None:
    assert doctor.who_derives(doctor_facts(None, derive_key=True, signed_in=False)) == "this machine"
    assert doctor.who_derives(doctor_facts(None)) == "the service"
    nobody = doctor.diagnose(doctor_facts(None, signed_in=False))
    assert nobody.deriver == "nobody"
    assert any(f.topic == "derive" and f.level == "broken" for f in nobody.findings)


def test_a_control_server_that_does_not_answer_is_broken() -> None:
    diagnosis = doctor.diagnose(doctor_facts(None))
    control = [f for f in diagnosis.findings if f.topic == "control"]
    assert control[0].level == "broken"
    assert control[0].fix == "bir down && bir up"


def test_the_default_mcp_tool_hooks_are_accepted_as_installed_and_broken_once_the_bir_server_is_gone(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install", "--replay", "--project", str(project)]) == 0
    capsys.readouterr()
    _, data = doctor_json(capsys, project)
    ok = finding(data, "hooks", "all 7 hooks as expected")
    assert ok["level"] == "ok"
    assert "PreToolUse, PostToolUse, PostToolUseFailure as mcp_tool hooks" in ok["text"]

    # The bir server taken out by hand: the mcp_tool hooks would reach nothing.
    config_path = Path.home() / ".claude.json"
    config = json.loads(config_path.read_text())
    del config["projects"][str(project)]["mcpServers"]["bir"]
    config_path.write_text(json.dumps(config))
    _, data = doctor_json(capsys, project)
    broken = finding(data, "hooks", "PreToolUse: an mcp_tool hook on the `bir` MCP server, which is not registered")
    assert (broken["level"], broken["fix"]) == ("broken", "bir install")


def test_every_unwrapped_server_is_named_with_the_mode_its_scenarios_get_and_the_command_that_wraps_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp = {"db": {"command": "db-server", "args": ["--ro"]}, "web": {"type": "http", "url": "https://x.invalid"}}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": mcp}))
    assert main(["install", "--replay", "--project", str(project)]) == 0
    capsys.readouterr()
    _, data = doctor_json(capsys, project)
    db = finding(data, "servers", "db: not wrapped (not approved in Claude Code yet (db-server --ro))")
    assert "runs in steer mode instead of direct" in db["text"]
    assert (db["level"], db["fix"]) == ("warning", "bir install --approve db")
    web = finding(data, "servers", "web: not wrapped (http server: not wrapped)")
    assert web["fix"] is None
    assert not [f for f in data["findings"] if f["topic"] == "servers" and "fleet" in f["text"]]

    assert main(["status", "--project", str(project)]) == 0
    text = capsys.readouterr().out
    assert "unwrapped: db (not approved in Claude Code yet (db-server --ro)): its scenarios steer" in text
    assert "bir install --approve db" in text


def store_scenario(store: Store, scenario_id: str, project: Path | str, tools: list[str], state: str = "ready") -> None:
    steps = [{"stepIndex": i, "toolName": t, "toolInputLogic": "return {};"} for i, t in enumerate(tools)]
    store.put_scenario(
        scenario_id,
        project=str(project),
        run_id=None,
        state=state,
        reason=None,
        body={"id": scenario_id, "intent": f"the {scenario_id} task", "steps": steps},
        template=None,
        normalized=None,
    )


def test_an_unwrapped_servers_finding_lists_the_known_scenarios_that_call_it_with_the_mode_each_gets(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BIR_AUTH_URL", raising=False)
    monkeypatch.delenv("BIR_SERVICE", raising=False)
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"db": {"command": "db-server"}}}))
    assert main(["install", "--replay", "--project", str(project)]) == 0
    capsys.readouterr()
    store = Store(default_path(config.home()))
    try:
        store_scenario(store, "scn_only_db", project, ["mcp__db__query", "mcp__db__query"])
        # fleet is wrapped here: with db wrapped too, this one runs direct.
        store_scenario(store, "scn_db_and_fleet", project, ["mcp__fleet__list_devices", "mcp__db__query"])
        store_scenario(store, "scn_db_and_read", project, ["mcp__db__query", "Read"])
        store_scenario(store, "scn_not_ready", project, ["mcp__db__query"], state="not_ready")
        store_scenario(store, "scn_elsewhere", "/another/project", ["mcp__db__query"])
        store_scenario(store, "scn_fleet_only", project, ["mcp__fleet__get_device"])
    finally:
        store.close()

    _, data = doctor_json(capsys, project)
    db = finding(data, "servers", "db: not wrapped")
    assert [(m["scenario"], m["where"], m["mode"], m["modeOnceWrapped"]) for m in db["scenarios"]] == [
        ("scn_only_db", "local store", "steer", "direct"),
        ("scn_db_and_fleet", "local store", "steer", "direct"),
        ("scn_db_and_read", "local store", "steer", "steer"),
    ]
    assert 'scn_only_db "the scn_only_db task" (local store): steer here, direct once it is wrapped' in db["text"]
    assert "scn_db_and_read" in db["text"]
    assert "steer even wrapped (it has steps only the session runs)" in db["text"]
    assert "scn_not_ready" not in db["text"]
    assert "scn_elsewhere" not in db["text"]
    assert db["fix"] == "bir install --approve db"
    assert main(["doctor", "--project", str(project)]) == 0
    assert "scn_db_and_fleet" in capsys.readouterr().out


def test_an_unwrapped_server_no_known_scenario_calls_says_so_and_many_are_counted() -> None:
    assert server_modes.describe("db", []) == "No scenario bir knows calls db's tools yet."
    known = [KnownScenario(f"scn_{i}", "local store", None, ("mcp__db__q",)) for i in range(server_modes.MAX_SHOWN + 3)]
    modes = server_modes.modes_of("db", known, {"fleet"})
    said = server_modes.describe("db", modes)
    assert said.count("steer here, direct once it is wrapped") == server_modes.MAX_SHOWN
    assert said.endswith("; and 3 more.")
    # A packaged example that calls a server of that name is one bir knows too.
    packaged = server_modes.known_scenarios(Path("/nowhere"), local=False)
    fleet = {m.scenario.name: m.once_wrapped for m in server_modes.modes_of("fleet", packaged, set())}
    assert fleet == {"fleet-direct": "direct", "fleet-mixed": "steer"}


def with_walls(walls: dict[str, str]) -> DoctorFacts:
    facts = doctor_facts(health(served=["fleet"], wrapped=["fleet"]))
    return dataclasses.replace(facts, evaluator=dataclasses.replace(facts.evaluator, walls=walls))


def test_doctor_shows_the_kernels_walls_under_the_workers_when_they_are_all_up() -> None:
    up = {"no_new_privs": "up", "landlock": "up: ABI 7: no files", "seccomp": "up: no sockets"}
    [shown] = [f for f in doctor.diagnose(with_walls(up)).findings if "walls" in f.text]
    assert shown.level == "ok"
    assert "landlock up: ABI 7" in shown.text


@pytest.mark.parametrize(
    ("walls", "fix"),
    [
        ({"no_new_privs": "off: BIR_LOGIC_WALLS=0", "landlock": "off: BIR_LOGIC_WALLS=0"}, "unset BIR_LOGIC_WALLS"),
        ({"no_new_privs": "up", "landlock": "down: no Landlock in this kernel", "seccomp": "up"}, "Landlock"),
    ],
)
def test_a_wall_that_is_off_or_down_is_a_warning_with_what_puts_it_up(walls: dict[str, str], fix: str) -> None:
    [shown] = [f for f in doctor.diagnose(with_walls(walls)).findings if "walls" in f.text]
    assert shown.level == "warning"
    assert shown.fix is not None
    assert fix in shown.fix


def test_the_walls_doctor_reports_are_the_ones_this_kernel_has(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["doctor", "--project", str(project), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert any("walls" in finding["text"] for finding in report["findings"])
