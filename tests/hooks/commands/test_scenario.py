"""``bir scenario …`` and ``bir investigate`` against the fake BaseIn over real HTTP (spec §16.5).

Each test runs ``bir.cli.main`` in this process (the fake serves from a thread of its own), and reads
what a person or a program would: stdout, stderr and the exit status.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bir.benchmarks.serving import serve_in_thread
from bir.cli import main
from bir.core import installed
from tests.fakes.baseinsvc import Canned, FakeBaseIn
from tests.paths import SCENARIOS

RUN = "run_fleet"
SCN = "scn_fleet_direct"
RECORDED_LIST = json.dumps({"content": [{"type": "text", "text": json.dumps([{"id": "d1", "risk": 9}])}]})
GOOD_OUTPUT_LOGIC = "const r = JSON.parse(toolOutput); return { deviceCount: JSON.parse(r.content[0].text).length };"


def scenario() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SCENARIOS / "fleet-direct.json").read_text(encoding="utf-8"))
    data["steps"][0]["sample"] = {
        "params": {"region": "eu-west-1", "limit": 200},
        "respParams": {},
        "toolOutput": RECORDED_LIST,
    }
    return data


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBaseIn]:
    service = FakeBaseIn()
    service.add_owned_run(RUN, scenario(), iterations=3)
    with serve_in_thread(service.app, service.releaser) as url:
        service.url = url
        monkeypatch.setenv("BIR_AUTH_URL", url)
        monkeypatch.setenv("BIR_TOKEN", service.token)
        yield service


def bir(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def logic_file(tmp_path: Path, text: str, name: str = "logic.js") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def edit_requests(fake: FakeBaseIn) -> list[str]:
    return [r.route for r in fake.requests if r.route in ("check", "save", "revert", "calculate", "recalculate")]


# -- reading -----------------------------------------------------------------------------------------


def test_list_shows_each_run_with_its_iterations_and_scenario_state(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = bir(capsys, "scenario", "list")
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["run", "created", "iterations", "scenario"]
    assert RUN in row
    assert "3" in row.split()
    assert f"{SCN} (ready)" in row


def test_json_prints_the_services_body_unchanged(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bir(capsys, "scenario", "list", "--json")
    assert code == 0
    assert json.loads(out) == {"runs": fake.run_list}


def test_show_by_run_id_resolves_the_whole_run_scenario(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bir(capsys, "scenario", "show", RUN)
    assert code == 0
    assert out.startswith(f"{SCN}  (ready, revision 1)")
    assert "step 1  mcp__fleet__get_device" in out
    assert "\033[" not in out  # no colour off a terminal
    assert "region  target" in out
    assert [r.route for r in fake.requests] == ["run_scenario"]


def test_show_a_step_puts_scenario_id_and_revision_first(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bir(capsys, "scenario", "show", SCN, "--step", "1", "--json")
    assert code == 0
    step = json.loads(out)
    assert list(step)[:3] == ["scenarioId", "chainRevision", "stepIndex"]
    assert (step["scenarioId"], step["chainRevision"], step["toolName"]) == (SCN, 1, "mcp__fleet__get_device")


def test_show_of_a_missing_step_names_the_steps_there_are(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = bir(capsys, "scenario", "show", SCN, "--step", "7")
    assert code == 1
    assert "has no step 7 (its steps: 0, 1)" in err


def test_a_run_with_only_sub_task_scenarios_lists_their_ids(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = {**scenario(), "id": "scn_part_a"}
    fake.add_owned_run("run_parts", None, segments=({**segment}, {**segment, "id": "scn_part_b"}))
    code, _, err = bir(capsys, "scenario", "show", "run_parts")
    assert code == 1
    assert "no whole-run scenario; its sub-task scenarios are: scn_part_a, scn_part_b" in err


def test_someone_else_even_an_admin_is_told_not_found(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    fake.other_tokens.add("admin-token")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BIR_TOKEN", "admin-token")
        code, _, err = bir(capsys, "scenario", "show", SCN)
    assert code == 1
    assert "was not found, or is not yours" in err


def test_a_bad_token_says_how_to_sign_in_again(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BIR_TOKEN", "wrong")
        code, out, err = bir(capsys, "scenario", "list", "--json")
        assert (code, json.loads(out), err) == (1, {"error": "unauthorized"}, "")
        code, _, err = bir(capsys, "scenario", "list")
    assert code == 1
    assert "refused the token (401)" in err
    assert "bir login" in err


def test_the_service_down_is_a_service_error_with_what_to_do(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.down = True
    code, _, err = bir(capsys, "scenario", "edits", SCN)
    assert code == 1
    assert "the service failed (HTTP 503); try again later" in err


def test_no_service_listening_says_it_cannot_reach_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIR_AUTH_URL", "http://127.0.0.1:9")
    code, out, err = bir(capsys, "scenario", "list", "--json")
    assert code == 1
    assert json.loads(out)["error"] == "service_unreachable"
    assert err == ""
    code, _, err = bir(capsys, "scenario", "list", "--json", "--verbose")
    assert "cannot reach the BaseIn service" in err
    assert "BIR_AUTH_URL" in err


def test_a_malformed_answer_is_an_error_not_a_crash(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    fake.forced["runs"] = Canned(200, raw=b"<html>not json")
    code, _, err = bir(capsys, "scenario", "list")
    assert code == 1
    assert "cannot be read (HTTP 200, not a JSON object)" in err


def test_an_id_that_is_neither_run_nor_scenario_is_a_usage_error(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = bir(capsys, "scenario", "show", "exec_12")
    assert code == 2
    assert "expected a run_ or scn_ id" in err
    assert fake.requests == []


# -- calc ----------------------------------------------------------------------------------------------


def test_calc_of_a_scenario_id_without_force_sends_nothing(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = bir(capsys, "scenario", "calc", SCN)
    assert code == 2
    assert "needs --force (nothing was sent)" in err
    assert fake.requests == []


def test_calc_force_on_a_plan_with_hand_edits_is_refused_unless_edits_are_discarded(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert bir(capsys, "scenario", "edit", SCN, "--step", "1", "--freeze")[0] == 0
    code, _, err = bir(capsys, "scenario", "calc", RUN, "--force")
    assert code == 1
    assert "has hand edits" in err
    assert "--discard-edits" in err
    code, out, _ = bir(capsys, "scenario", "calc", SCN, "--force", "--discard-edits")
    assert code == 0
    assert f"Calculating {SCN}" in out
    assert fake.calculations == [{"scenarioId": SCN, "discardEdits": True}]
    assert "mark" not in fake.scenarios[SCN]["steps"][1]


def test_calc_of_a_run_without_a_scenario_starts_one(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    fake.add_owned_run("run_new", None)
    code, out, _ = bir(capsys, "scenario", "calc", "run_new")
    assert (code, out.strip()) == (0, "Calculating scn_new: see it with `bir scenario show scn_new` when it is ready.")
    assert fake.requests_to("calculate")[0].body == {}


# -- check and edit --------------------------------------------------------------------------------------


def test_check_of_a_good_change_writes_nothing_and_exits_0(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = copy.deepcopy(fake.scenarios[SCN])
    path = logic_file(tmp_path, GOOD_OUTPUT_LOGIC)
    code, out, _ = bir(capsys, "scenario", "check", SCN, "--step", "0", "--output-logic", path)
    assert code == 0
    assert "the change reproduces the recording. Nothing was saved" in out
    assert fake.scenarios[SCN] == before
    assert fake.requests_to("check")[0].body == {"outputLogic": GOOD_OUTPUT_LOGIC}


def test_check_with_no_change_says_nothing_would_change_and_exits_0(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    same = fake.scenarios[SCN]["steps"][1]["toolInputLogic"]
    code, out, _ = bir(capsys, "scenario", "check", SCN, "--step", "1", "--input-logic", logic_file(tmp_path, same))
    assert (code, out.strip()) == (0, "Nothing would change: step 1 already has this code and mark.")


def test_check_with_problems_lists_them_and_exits_1(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake.check_problems[(SCN, 1)] = [{"code": "not_reproduced", "message": "step 1 answers another device"}]
    path = logic_file(tmp_path, "return { id: 'd2' };")
    code, out, err = bir(capsys, "scenario", "check", RUN, "--step", "1", "--input-logic", path)
    assert code == 1
    assert "not_reproduced: step 1 answers another device" in out
    assert "--force --note" in err


def test_a_logic_file_that_does_not_compile_is_refused_before_any_request(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = logic_file(tmp_path, "return { id: ")
    code, _, err = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--input-logic", path)
    assert code == 1
    assert "toolInputLogic refused here (compile" in err
    assert "nothing was sent" in err
    assert fake.requests == []


def test_a_logic_file_that_fails_on_the_recorded_sample_is_refused_before_the_check(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = logic_file(tmp_path, "return JSON.parse(toolOutput).content.length;")
    code, _, err = bir(capsys, "scenario", "check", SCN, "--step", "0", "--output-logic", path)
    assert code == 1
    assert "refused here on the recorded sample (result" in err
    assert edit_requests(fake) == []


def test_edit_saves_bumps_the_revision_and_prints_the_undo(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = logic_file(tmp_path, GOOD_OUTPUT_LOGIC)
    code, out, _ = bir(capsys, "scenario", "edit", SCN, "--step", "0", "--output-logic", path, "--revision", "1")
    assert code == 0
    assert "Saved sedit_0 on step 0 of scn_fleet_direct, now at revision 2." in out
    assert f"bir scenario undo {SCN} --edit sedit_0" in out
    assert fake.scenarios[SCN]["steps"][0]["toolOutputLogic"] == GOOD_OUTPUT_LOGIC
    assert fake.requests_to("save")[0].body == {"outputLogic": GOOD_OUTPUT_LOGIC, "expectedRevision": 1}


def test_edit_reads_logic_from_stdin(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("return { id: 'd9' };"))
    code, _, _ = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--input-logic", "-")
    assert code == 0
    assert fake.scenarios[SCN]["steps"][1]["toolInputLogic"] == "return { id: 'd9' };"


def test_a_save_with_problems_is_refused_and_a_forced_one_needs_a_note_and_stays_forced(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake.check_problems[(SCN, 1)] = [{"code": "copy", "message": "the step copies the recording's values"}]
    path = logic_file(tmp_path, "return { id: 'd1' };")
    code, out, err = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--input-logic", path)
    assert code == 1
    assert "copy: the step copies" in out
    assert "not saved: the change fails the check" in err
    code, _, err = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--input-logic", path, "--force")
    assert code == 2
    assert '--force needs --note "<why>"' in err
    args = ("scenario", "edit", SCN, "--step", "1", "--input-logic", path, "--force", "--note", "pinned on purpose")
    code, out, _ = bir(capsys, *args)
    assert code == 0
    assert "(forced: the check had problems" in out
    code, out, _ = bir(capsys, "investigate", SCN)
    assert code == 0
    assert "FORCED sedit_0 on step 1" in out
    assert "pinned on purpose" in out


def test_edit_with_nothing_to_change_is_told_in_words(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    bir(capsys, "scenario", "edit", SCN, "--step", "1", "--freeze")
    code, _, err = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--freeze")
    assert code == 1
    assert "nothing to change: step 1 already has this code and mark" in err


def test_a_stale_revision_is_refused_with_the_current_one(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    bir(capsys, "scenario", "edit", SCN, "--step", "1", "--freeze")
    code, _, err = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--unfreeze", "--revision", "1")
    assert code == 1
    assert "it is at revision 2" in err
    assert "--revision 2" in err


def test_payload_too_large_and_sandbox_unavailable_are_told_in_words(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    big = logic_file(tmp_path, "return { id: 'd1' }; // " + "x" * 60_000)
    code, _, err = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--input-logic", big)
    assert code == 1
    assert "413 payload_too_large" in err
    fake.sandbox_down = True
    small = logic_file(tmp_path, "return { id: 'd1' };", "small.js")
    code, out, err = bir(capsys, "scenario", "check", SCN, "--step", "1", "--input-logic", small, "--json")
    assert (code, json.loads(out), err) == (1, {"error": "logic_sandbox_unavailable"}, "")
    code, _, err = bir(capsys, "scenario", "check", SCN, "--step", "1", "--input-logic", small)
    assert code == 1
    assert "nothing was checked, saved or undone" in err


def test_freeze_and_unfreeze_together_is_a_usage_error(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = bir(capsys, "scenario", "edit", SCN, "--step", "1", "--freeze", "--unfreeze")
    assert code == 2
    assert "cannot be given together" in err
    assert fake.requests == []


# -- edits and undo --------------------------------------------------------------------------------------


def test_undo_walks_back_and_prints_how_to_redo(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    bir(capsys, "scenario", "edit", SCN, "--step", "0", "--freeze")
    bir(capsys, "scenario", "edit", SCN, "--step", "1", "--freeze")
    code, out, _ = bir(capsys, "scenario", "undo", SCN)
    assert code == 0
    assert "Undid sedit_1 of scn_fleet_direct (now at revision 4)." in out
    assert f"To redo it: bir scenario undo {SCN} --edit sedit_2" in out
    code, out, _ = bir(capsys, "scenario", "undo", SCN)
    assert code == 0
    assert "Undid sedit_0" in out
    code, _, err = bir(capsys, "scenario", "undo", SCN)
    assert code == 1
    assert "nothing to undo in scn_fleet_direct" in err
    code, out, _ = bir(capsys, "scenario", "undo", SCN, "--edit", "sedit_2")
    assert code == 0
    assert fake.scenarios[SCN]["steps"][1]["mark"] == "by_hand"


def test_undo_of_a_step_takes_back_that_steps_newest_edit(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    bir(capsys, "scenario", "edit", SCN, "--step", "0", "--freeze")
    bir(capsys, "scenario", "edit", SCN, "--step", "1", "--freeze")
    code, out, _ = bir(capsys, "scenario", "undo", RUN, "--step", "0")
    assert code == 0
    assert "Undid sedit_0" in out


def test_edit_and_step_cannot_be_given_together(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "undo", SCN, "--edit", "sedit_0", "--step", "1"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_an_undo_that_would_break_later_steps_is_refused_unless_forced(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = logic_file(tmp_path, GOOD_OUTPUT_LOGIC)
    bir(capsys, "scenario", "edit", SCN, "--step", "0", "--output-logic", path)
    fake.undo_breaks.add("sedit_0")
    code, _, err = bir(capsys, "scenario", "undo", SCN)
    assert code == 1
    assert "not undone: taking it back would break later steps" in err
    code, _, _ = bir(capsys, "scenario", "undo", SCN, "--force", "--note", "the old parse was right")
    assert code == 0


def test_edits_lists_the_history_newest_first(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    bir(capsys, "scenario", "edit", SCN, "--step", "0", "--freeze", "--note", "keep")
    bir(capsys, "scenario", "undo", SCN)
    code, out, _ = bir(capsys, "scenario", "edits", SCN)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"{SCN}, revision 3, newest first:"
    assert lines[2].startswith("sedit_1")
    assert "undo of sedit_0" in lines[2]
    assert lines[3].startswith("sedit_0")
    assert "undone" in lines[3]
    assert "keep" in lines[3]


# -- replay ---------------------------------------------------------------------------------------------


RECORDED_DEVICE = json.dumps({"content": [{"type": "text", "text": json.dumps({"id": "d1", "name": "pump"})}]})
PROMPT = "the riskiest device in eu-west-1"


def record_source_run(fake: FakeBaseIn) -> None:
    fake.add_run(
        RUN,
        [
            {"stepIndex": 0, "toolName": "mcp__fleet__list_devices", "toolOutput": RECORDED_LIST},
            {"stepIndex": 1, "toolName": "mcp__fleet__get_device", "toolOutput": RECORDED_DEVICE},
        ],
    )


def test_scenario_replay_dry_is_the_services_dry_replay_told_step_by_step(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    record_source_run(fake)
    code, out, err = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--param", "region=EU-West-1", "--dry")
    assert (code, err) == (0, "")
    assert [(r.route, r.method, r.path) for r in fake.requests] == [("dry_replay", "POST", f"/scenarios/{SCN}/replay")]
    assert fake.requests[0].body == {"prompt": PROMPT, "params": {"region": "EU-West-1"}}
    lines = out.splitlines()
    assert lines[0] == f"Dry replay of {SCN} on the service"
    assert "no tool ran, nothing was written" in lines[1]
    assert lines[2] == "Parameters: region=eu-west-1, limit=200"
    assert "step 1  mcp__fleet__get_device  ok" in lines
    assert '  input:  {"id": "d1"}' in lines
    assert "Dry replay done: 2 of 2 steps ran on the recorded outputs." in lines
    assert "  checkedDevices: 1" in lines


# Window title, clipboard (OSC 52), clear screen, a C1 CSI and DEL: what a hostile value would send a terminal.
HOSTILE = "\x1b]0;owned\x07\x1b]52;c;ZWNobyBvd25lZA==\x07\x1b[2J\x9b31m\x7f"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_show_prints_no_escape_sequence_from_a_scenarios_intent(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.scenarios[SCN]["intent"] = f"list devices{HOSTILE} by risk"
    code, out, err = bir(capsys, "scenario", "show", SCN)
    assert code == 0
    assert "list devices]0;owned]52;c;ZWNobyBvd25lZA==[2J31m by risk" in out
    assert CONTROLS.search(out + err) is None
    code, out, _ = bir(capsys, "scenario", "show", SCN, "--json")
    assert code == 0
    assert CONTROLS.search(out) is None
    assert json.loads(out)["intent"] == f"list devices{HOSTILE} by risk"


def test_a_dry_replay_prints_no_escape_sequence_from_a_recorded_output_in_words_or_json(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    record_source_run(fake)
    hostile = json.dumps({"content": [{"type": "text", "text": json.dumps({"id": "d1", "name": f"pump{HOSTILE}"})}]})
    fake.runs[RUN]["steps"][1]["toolOutput"] = hostile
    code, out, err = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--param", "region=eu-west-1", "--dry")
    assert (code, err) == (0, "")
    assert "pump" in out
    assert CONTROLS.search(out) is None
    code, out, _ = bir(
        capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--param", "region=eu-west-1", "--dry", "--json"
    )
    assert code == 0
    assert CONTROLS.search(out) is None
    assert json.loads(out)["responseModel"]["device"]["name"] == f"pump{HOSTILE}"


def test_scenario_replay_dry_json_prints_the_services_body_unchanged(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    record_source_run(fake)
    fake.dry_derived[SCN] = {"region": "eu-west-1"}
    code, out, _ = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--dry", "--json")
    assert code == 0
    body = json.loads(out)
    shape = {"scenarioId", "prompt", "dry", "derived", "costUsd", "missing", "ok", "params", "steps", "responseModel"}
    assert set(body) == {*shape, "error"}
    assert (body["derived"], body["ok"], body["responseModel"]["device"]) == (True, True, {"id": "d1", "name": "pump"})
    assert "params" not in fake.requests[0].body


def test_scenario_replay_dry_without_a_target_value_exits_3_and_names_the_param(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--dry")
    assert code == 3
    assert "Stopped before any step: no value for the target region. Pass --param region=VALUE." in out


def test_scenario_replay_dry_that_fails_on_the_recording_says_where_and_exits_1(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]
) -> None:
    record_source_run(fake)
    fake.scenarios[SCN]["steps"][1]["toolInputLogic"] = "return respParams.nothing.id;"
    code, out, err = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--param", "region=x", "--dry")
    assert code == 1
    assert "step 1  mcp__fleet__get_device  failed" in out
    assert "Stopped at step 1 (input logic): " in out
    assert f"`bir scenario show {SCN} --step 1`" in err


def test_scenario_replay_dry_refusals_are_told_in_words(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    fake.scenarios[SCN]["state"] = "calculating"
    code, _, err = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--dry")
    assert code == 1
    assert f"{SCN} is not ready (calculating)" in err
    fake.other_tokens.add("admin-token")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BIR_TOKEN", "admin-token")
        code, _, err = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--dry")
    assert code == 1
    assert "was not found, or is not yours" in err


@pytest.mark.parametrize(
    ("target", "extra", "words"),
    [
        ("fleet.json", (), "takes a scn_ id"),
        (SCN, ("--wrap", "fleet=python -m x"), "--wrap has no use with --dry"),
        (SCN, ("--param", "=3"), "--param takes NAME=VALUE"),
    ],
)
def test_scenario_replay_dry_usage_errors_send_nothing(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], target: str, extra: tuple[str, ...], words: str
) -> None:
    code, _, err = bir(capsys, "scenario", "replay", target, "--prompt", PROMPT, "--dry", *extra)
    assert code == 2
    assert words in err
    assert "nothing was sent" in err
    assert fake.requests == []


def test_scenario_replay_without_dry_is_bir_replay(fake: FakeBaseIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = bir(capsys, "scenario", "replay", SCN, "--prompt", PROMPT, "--json", "--verbose")
    alias_code, alias_out, _ = bir(capsys, "replay", "--scenario", SCN, "--prompt", PROMPT, "--json", "--verbose")
    assert (code, alias_code) == (3, 3)
    assert json.loads(out) == json.loads(alias_out)
    assert json.loads(out)["outcome"] == "missing_target"
    assert "dry_replay" not in [r.route for r in fake.requests]


# -- the editing switch ------------------------------------------------------------------------------------


def test_editing_switch_is_stored_per_project_and_needs_an_install(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = bir(capsys, "scenario", "editing", "on", "--project", str(tmp_path))
    assert code == 1
    assert "bir install --replay" in err
    installed.update(tmp_path)
    code, out, _ = bir(capsys, "scenario", "editing", "on", "--project", str(tmp_path))
    assert code == 0
    assert "Scenario editing is on" in out
    switches = installed.project(tmp_path)
    assert switches is not None
    assert switches.editing
    code, out, _ = bir(capsys, "scenario", "editing", "status", "--project", str(tmp_path), "--json")
    assert json.loads(out)["editing"] is True
    bir(capsys, "scenario", "editing", "off", "--project", str(tmp_path))
    switches = installed.project(tmp_path)
    assert switches is not None
    assert not switches.editing


@pytest.mark.parametrize("command", ["list", "show", "calc", "replay", "check", "edit", "edits", "undo", "editing"])
def test_every_command_has_help_with_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["scenario", command, "--help"])
    assert exited.value.code == 0
    assert f"bir scenario {command}" in capsys.readouterr().out.split("example")[1]


def test_investigate_keeps_saying_a_save_was_forced_after_it_is_taken_back(
    fake: FakeBaseIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake.check_problems[(SCN, 0)] = [{"code": "not_reproduced", "message": "another count"}]
    path = logic_file(tmp_path, GOOD_OUTPUT_LOGIC)
    args = ("scenario", "edit", SCN, "--step", "0", "--output-logic", path, "--force", "--note", "on purpose")
    assert bir(capsys, *args)[0] == 0
    fake.undo_breaks.add("sedit_0")
    assert bir(capsys, "scenario", "undo", SCN, "--force", "--note", "back to the recording")[0] == 0
    code, out, _ = bir(capsys, "investigate", SCN)
    assert code == 0
    assert "FORCED sedit_0 on step 0: saved although the check had problems (note: on purpose); since undone" in out
    assert "FORCED sedit_1 on step 0: undid sedit_0 although it breaks later steps (note: back to the recording)" in out
