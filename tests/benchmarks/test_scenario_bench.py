"""``bir bench eval --scenario``: a scenario's own bodies timed in the pool, and the limit that fits them.

Shape and honesty only (every figure comes from the run): never speed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bir.benchmarks.scenario_bench import (
    SUGGEST_FLOOR_MS,
    BenchArgs,
    measure,
    near_limit,
    suggest_timeout,
)
from bir.cli import main
from bir.core.source_run import recorded_text
from tests.fakes.fixtures import running_fake_service
from tests.paths import SCENARIOS

MIXED = SCENARIOS / "fleet-mixed.json"
ROWS = [{"id": "d1", "risk": 3}, {"id": "d7", "risk": 91}, {"id": "d4", "risk": 40}]
OUTPUTS = {
    "0": {"content": [{"type": "text", "text": json.dumps(ROWS)}]},
    "1": {"file": {"content": '{"risk": 70}'}},
    "2": {"stdout": "deploy 42\n"},
}
ROW_KEYS = {
    "body",
    "kind",
    "step_index",
    "tool_name",
    "output_source",
    "arg_bytes",
    "calls",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "near_limit",
    "skipped",
    "error",
}
# A body that cannot take less than 20 ms: what it reports is measured, whatever the machine.
SLOW = "const end = Date.now() + 25; while (Date.now() < end) {} return {slow: true};"


@pytest.fixture
def outputs_file(tmp_path: Path) -> Path:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(OUTPUTS), encoding="utf-8")
    return path


def _scenario_with(tmp_path: Path, **changes: Any) -> Path:
    scenario = json.loads(MIXED.read_text(encoding="utf-8"))
    scenario.update(changes)
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    return path


def _run_json(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> dict[str, Any]:
    assert main(["bench", "eval", *argv, "--json"]) == code
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_every_body_of_the_scenario_is_timed_with_the_outputs_file_in_one_json_document(
    capsys: pytest.CaptureFixture[str], outputs_file: Path
) -> None:
    report = _run_json(capsys, "--scenario", str(MIXED), "--outputs", str(outputs_file), "--calls", "7")
    bodies = report["bodies"]
    assert [b["body"] for b in bodies] == [
        "paramsLogic",
        "step 0 toolInputLogic",
        "step 0 toolOutputLogic",
        "step 1 toolInputLogic",
        "step 1 toolOutputLogic",
        "step 2 toolInputLogic",
        "step 2 toolOutputLogic",
        "responseParamsLogic",
    ]
    for row in bodies:
        assert set(row) == ROW_KEYS
        assert row["calls"] == 7
        assert row["error"] is None
        assert row["skipped"] is None
        assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert {b["output_source"] for b in bodies if b["kind"] == "toolOutputLogic"} == {"--outputs"}
    assert report["outputs"] == {k: {"source": "--outputs", "chars": len(recorded_text(v))} for k, v in OUTPUTS.items()}
    assert report["params"]["sources"] == {"region": "sample", "thresholdsPath": "sample"}
    # The response body read what the chain built from the outputs: its arguments carry the keys.
    response = bodies[-1]
    assert response["arg_bytes"] > len('[{"region": "eu-west-1"}, {}]')
    worst = max(b["max_ms"] for b in bodies)
    assert report["suggested"]["worst_ms"] == pytest.approx(worst, abs=1e-3)
    assert report["suggested"]["value_ms"] == suggest_timeout(worst, 10_000).value_ms
    assert report["current"] == {
        "value_ms": 1000,
        "source": "default",
        "raw": None,
        "default_ms": 1000,
        "ceiling_ms": 10_000,
    }
    assert report["measured_with_timeout_ms"] == 10_000
    assert report["failed"] == []
    assert report["unmeasured"] == []


def test_a_step_without_an_output_is_not_timed_and_then_no_limit_is_called_fitting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "eval", "--scenario", str(MIXED), "--calls", "3"]) == 1
    text = capsys.readouterr().out
    assert "could not measure 3 of 8 bodies:" in text
    assert "  step 0 toolOutputLogic: no output for this step" in text
    assert "no BIR_LOGIC_TIMEOUT_MS is suggested" in text
    assert "BIR_LOGIC_TIMEOUT_MS=" not in text
    assert "BIR_LOGIC_TIMEOUT_MS is 1000 ms, from the default" in text
    assert "within 2x of the current limit: none." in text


def test_a_body_that_never_finishes_is_named_and_no_value_is_suggested(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, outputs_file: Path
) -> None:
    scenario = _scenario_with(tmp_path, paramsLogic="while (true) {}")
    report = _run_json(capsys, "--scenario", str(scenario), "--outputs", str(outputs_file), "--calls", "2", code=1)
    assert report["suggested"] is None
    assert [u["body"] for u in report["unmeasured"]] == ["paramsLogic"]
    assert report["unmeasured"][0]["why"].startswith("timeout: ")
    # The others still ran once and were timed, on the samples paramsLogic would have turned into params.
    assert all(b["calls"] == 2 for b in report["bodies"][1:])


def test_outputs_can_be_what_bir_replay_json_printed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = f"fleet={sys.executable} -m bir.examples.fleet_server"
    argv = ["replay", "--scenario", "fleet-direct", "--prompt", "x", "--param", "region=eu-west-1", "--wrap", fleet]
    assert main([*argv, "--json"]) == 0
    replayed = tmp_path / "replayed.json"
    replayed.write_text(capsys.readouterr().out, encoding="utf-8")
    report = _run_json(capsys, "--scenario", "fleet-direct", "--outputs", str(replayed), "--calls", "2")
    assert report["unmeasured"] == []
    assert {b["output_source"] for b in report["bodies"] if b["kind"] == "toolOutputLogic"} == {"--outputs"}
    assert report["suggested"] is not None


def test_a_slow_body_is_measured_as_slow_and_flagged_near_a_limit_set_in_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outputs_file: Path
) -> None:
    monkeypatch.setenv("BIR_LOGIC_TIMEOUT_MS", "30")
    scenario = _scenario_with(tmp_path, paramsLogic=SLOW)
    report = _run_json(capsys, "--scenario", str(scenario), "--outputs", str(outputs_file), "--calls", "3")
    slow = report["bodies"][0]
    assert slow["body"] == "paramsLogic"
    # Measured under the ceiling, not the 30 ms limit: it ran, every time, and took about its 25 ms
    # (Date.now() is coarse, so the floor asserted is a little under it).
    assert slow["calls"] == 3
    assert slow["error"] is None
    assert slow["p50_ms"] >= 20
    assert slow["near_limit"] is True
    assert "paramsLogic" in report["near_limit"]
    assert report["current"]["source"] == "environment"
    assert report["current"]["raw"] == "30"
    assert report["suggested"]["value_ms"] >= 3 * slow["max_ms"]


def test_a_body_that_throws_is_reported_with_its_error_and_the_others_are_still_timed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, outputs_file: Path
) -> None:
    scenario = _scenario_with(tmp_path, responseParamsLogic="throw new Error('no model today')")
    report = _run_json(capsys, "--scenario", str(scenario), "--outputs", str(outputs_file), "--calls", "2", code=1)
    response = report["bodies"][-1]
    assert response["calls"] == 0
    assert response["error"].startswith("threw: ")
    assert "no model today" in response["error"]
    assert report["failed"] == ["responseParamsLogic"]
    assert report["suggested"] is None
    assert all(b["calls"] == 2 for b in report["bodies"][:-1])


@pytest.mark.anyio
async def test_outputs_come_from_the_source_run_when_the_service_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async with running_fake_service() as fake:
        fake.add_run(
            "run_src",
            [
                {"stepIndex": 0, "toolName": "mcp__fleet__list_devices", "toolOutput": OUTPUTS["0"]},
                {"stepIndex": 1, "toolName": "Read", "toolOutput": OUTPUTS["1"]},
            ],
        )
        monkeypatch.setenv("BIR_AUTH_URL", fake.url)
        monkeypatch.setenv("BIR_TOKEN", fake.token)
        report = await measure(BenchArgs(scenario=str(MIXED), run_id="run_src", calls=2))
    sources = {b["body"]: b["output_source"] for b in report["bodies"] if b["kind"] == "toolOutputLogic"}
    assert sources == {
        "step 0 toolOutputLogic": "source run",
        "step 1 toolOutputLogic": "source run",
        "step 2 toolOutputLogic": None,
    }
    assert report["bodies"][2]["calls"] == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [("not json", "not JSON"), ("[1, 2]", "expected an object"), ('{"first": "x"}', "is not a step index")],
)
def test_a_bad_outputs_file_is_one_line_on_stderr_and_a_usage_exit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "outputs.json"
    path.write_text(content, encoding="utf-8")
    assert main(["bench", "eval", "--scenario", str(MIXED), "--outputs", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert message in err[0]


def test_a_missing_scenario_file_is_a_usage_exit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "eval", "--scenario", str(tmp_path / "nope.json")]) == 2
    assert "is neither a scenario file, a packaged scenario" in capsys.readouterr().err


def test_the_suggested_limit_is_a_margin_over_the_slowest_call_within_the_ceiling() -> None:
    assert suggest_timeout(0.2, 10_000).value_ms == SUGGEST_FLOOR_MS
    assert suggest_timeout(40.0, 10_000).value_ms == 150  # 120 ms, up to the next 50
    assert suggest_timeout(40.0, 10_000).fits is True
    beyond = suggest_timeout(5000.0, 10_000)
    assert (beyond.value_ms, beyond.fits) == (10_000, False)


def test_a_body_is_near_the_limit_when_twice_its_slowest_call_reaches_it() -> None:
    assert near_limit(500.0, 1000) is True
    assert near_limit(499.0, 1000) is False
