"""``bir bench pin``: the hook process beside bare command hooks, and the route seam. Shape and honesty, never speed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bir.benchmarks.armed_pin import (
    BenchServer,
    PinMeasureError,
    earlier_output,
    expected_pin,
    pre_tool_body,
    time_pins,
)
from bir.benchmarks.pin_bench import (
    Counts,
    PinBenchError,
    hook_command,
    measure,
    pin_check,
    run_hook_once,
    time_route,
)
from bir.benchmarks.session_bench import NOT_AT_HAND
from bir.cli import main
from bir.hooks.api import CALL_ID_KEY
from bir.hooks.server.control import ControlServer

TINY = Counts(warmup=1, calls=3)
SERIES_KEYS = {"calls", "p50_ms", "p90_ms", "p99_ms"}


def test_a_tiny_run_measures_every_series_and_derives_its_ratios_from_them() -> None:
    report = measure(TINY, mode="tiny")
    hooks = report["hook_process"]
    assert set(hooks) == {"true", "python_bare", "python_site", "bir_hook"}
    server = report["server_side"]
    assert set(server["armed_pin"]) == {"trivial", "reads_24kb"}
    for row in [*hooks.values(), server["route_no_work"], *server["armed_pin"].values()]:
        assert set(row) == SERIES_KEYS
        assert row["calls"] == 3
        assert 0 < row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"]
    ratios = report["ratios"]
    bir, python, true = (hooks[k]["p50_ms"] for k in ("bir_hook", "python_bare", "true"))
    assert ratios["bir_hook_vs_python_bare_p50"] == round(bir / python, 2)
    assert ratios["python_bare_vs_true_p50"] == round(python / true, 2)
    no_work = server["route_no_work"]["p50_ms"]
    shares = server["replay_share_p50_ms"]
    for kind, row in server["armed_pin"].items():
        assert shares[kind] == round(row["p50_ms"] - no_work, 3)
        assert ratios[f"pin_{kind}_vs_route_no_work_p50"] == round(row["p50_ms"] / no_work, 2)
    hook_goal, server_goal, session_goal = report["goals"]
    assert hook_goal["value"] == ratios["bir_hook_vs_python_bare_p50"]
    assert hook_goal["met"] is (hook_goal["value"] <= 1.3)
    assert server_goal["value"] == max(shares.values())
    assert server_goal["met"] is (server_goal["value"] <= 1.0)
    assert report["settings"]["hook"] == hook_command()
    assert isinstance(report["machine"]["editable_install"], bool)
    # No Claude Code binary given: the whole session is said not to be measured, not invented.
    assert report["session"] == {"measured": False, "why": NOT_AT_HAND}
    assert session_goal["met"] is None
    assert session_goal["value"] is None
    assert session_goal["target"] == 1.1


def test_an_armed_plan_is_pinned_through_the_route_with_the_steps_arguments_and_a_call_id(tmp_path: Path) -> None:
    bench = BenchServer()
    url = bench.start()
    try:
        for kind in ("trivial", "reads_24kb"):
            # time_pins checks every answer: an unpinned call would raise.
            samples = time_pins(
                url,
                bench.server.token,
                lambda kind=kind: bench.arm(kind, f"s-{kind}", tmp_path),  # type: ignore[misc]
                pin_check(kind),
                calls=2,
                warmup=0,
            )
            assert len(samples) == 2
        assert expected_pin("reads_24kb")["id"].startswith("dev-")
        assert len(earlier_output()) >= 24 * 1024
    finally:
        bench.stop()


def test_an_answer_that_did_not_pin_is_a_clear_error(tmp_path: Path) -> None:
    bench = BenchServer()
    url = bench.start()
    try:
        # No plan armed on this session: the route answers {} and the bench says so rather than timing it.
        with pytest.raises(PinMeasureError, match="was not pinned"):
            time_pins(
                url,
                bench.server.token,
                lambda: pre_tool_body("no-plan", tmp_path),
                pin_check("trivial"),
                calls=1,
                warmup=0,
            )
    finally:
        bench.stop()
    check = pin_check("trivial")
    allow = {"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"region": "eu-west-1"}}}
    assert check(allow) == "the pinned arguments carry no call id (§7.1)"
    allow["hookSpecificOutput"]["updatedInput"] = {"region": "us-east-1", CALL_ID_KEY: "bir_x"}
    assert "not" in (check(allow) or "")


def test_bir_bench_pin_prints_one_json_document_or_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "pin", "--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "quick"
    assert report["hook_process"]["bir_hook"]["calls"] == 30


def test_the_table_names_each_hook_the_route_and_the_goals() -> None:
    from bir.benchmarks.pin_bench import render_table

    text = render_table(measure(TINY, mode="tiny"))
    for needle in ("true (a command hook", "python3 -S", "bir-hook PreToolUse", "POST /tool/pre", "goals:"):
        assert needle in text
    assert "armed pin, trivial body" in text
    assert "armed pin, 24 KB read" in text
    assert "replay share over the no-work route" in text
    assert "whole session: not measured: no Claude Code binary at hand" in text


def test_a_hook_that_fails_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PinBenchError, match="exited 3"):
        run_hook_once([sys.executable, "-c", "raise SystemExit(3)"], b"{}", dict(os.environ))
    with pytest.raises(PinBenchError, match="not a JSON object"):
        run_hook_once([sys.executable, "-c", "print('hello')"], b"{}", dict(os.environ))


@pytest.mark.anyio
async def test_the_route_seam_times_posts_to_a_real_control_server(tmp_path: Path) -> None:
    import anyio

    control = ControlServer(token="right", replay_enabled=False)
    await control.start()
    try:
        assert control.url is not None
        body: dict[str, Any] = pre_tool_body("s1", tmp_path)
        samples = await anyio.to_thread.run_sync(
            lambda: time_route(control.url or "", "right", "/tool/pre", body, calls=4, warmup=1)
        )
        assert len(samples) == 4
        assert all(s > 0 for s in samples)
        with pytest.raises(PinBenchError, match="401"):
            await anyio.to_thread.run_sync(
                lambda: time_route(control.url or "", "wrong", "/tool/pre", body, calls=1, warmup=0)
            )
    finally:
        await control.stop()
