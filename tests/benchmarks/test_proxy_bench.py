"""``bir bench proxy`` in a tiny configuration: real servers, real proxies, a real control server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from bir.benchmarks import proxy_bench as bench
from bir.benchmarks.proxy_bench import plan_for, run_proxy_bench
from bir.benchmarks.proxy_bench_report import TOOLS, VARIANTS
from bir.cli import main as bir_main

_STATS = {"n", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "min_ms", "max_ms"}
_COMPARISON = {"added_p50_ms", "added_p99_ms", "ratio_p50", "ratio_p99"}
_META = {
    "bench",
    "version",
    "quick",
    "warmup",
    "iterations",
    "started_at",
    "loadavg_1m",
    "loadavg_1m_end",
    "cpu_count",
    "python",
    "platform",
    "upstream",
    "step_reports",
}


def _descendants() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


@pytest.fixture
def no_process_left() -> Iterator[None]:
    """Fails the test if a process the test started is still running once it is over."""
    before = _descendants()
    yield
    left = []
    for pid in _descendants() - before:
        try:
            left.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    # Give an exiting child its bounded shutdown, then name whatever is still alive.
    _, alive = psutil.wait_procs(left, timeout=10)
    assert [p.cmdline() for p in alive] == []


@pytest.mark.usefixtures("no_process_left")
def test_a_tiny_run_prints_one_json_document_with_every_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_proxy_bench(quick=True, as_json=True, iterations=3) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert set(report) == _META | {"calls", "added", "step_round_trip"}
    assert (report["bench"], report["quick"], report["iterations"], report["warmup"]) == ("proxy", True, 3, 1)
    assert set(report["calls"]) == set(TOOLS)
    for tool in TOOLS:
        assert set(report["calls"][tool]) == set(VARIANTS)
        assert all(set(row) == _STATS and row["n"] == 3 for row in report["calls"][tool].values())
        assert set(report["added"][tool]) == set(VARIANTS) - {"direct"}
        assert all(set(row) == _COMPARISON for row in report["added"][tool].values())
    step = report["step_round_trip"]
    assert set(step) == _STATS | {"vs_direct_get_device", "vs_relayed_control_get_device"}
    assert step["n"] == 3
    assert set(step["vs_direct_get_device"]) == _COMPARISON
    # Every call through the control-known proxy, warm-up included, reached /proxy/step with its id.
    assert report["step_reports"] == (1 + 3) * len(TOOLS)


@pytest.mark.usefixtures("no_process_left")
def test_the_table_names_every_path_and_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_proxy_bench(quick=True, as_json=False, iterations=2) == 0
    out = capsys.readouterr().out
    for label in ("direct", "relayed (--no-control)", "relayed, control known", "direct step (queue)"):
        assert label in out
    ratio_rows = [line for line in out.splitlines() if line.rstrip().endswith("x")]
    assert len(ratio_rows) == len(TOOLS) * (len(VARIANTS) - 1) + 2
    assert any(row.startswith("direct step vs direct get_device") for row in ratio_rows)


@pytest.mark.usefixtures("no_process_left")
def test_a_call_that_fails_ends_the_run_with_one_line_and_stops_every_server(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "_arguments", lambda tool, round_no: {"id": "dev-999"})
    assert run_proxy_bench(quick=True, as_json=False, iterations=2) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    message = [line for line in captured.err.splitlines() if line.startswith("bir bench proxy:")]
    assert len(message) == 1
    assert "answered an error" in message[0]
    assert "Traceback" not in captured.err


def test_a_missing_upstream_is_reported_not_raised(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(bench, "FLEET_MODULE", "bir.examples.no_such_server")
    assert run_proxy_bench(quick=True, as_json=False, iterations=1) == 1
    assert "the demo upstream is missing" in capsys.readouterr().err


def test_the_iteration_override_keeps_a_warm_up_and_refuses_zero() -> None:
    assert plan_for(quick=True) == bench.QUICK
    assert plan_for(quick=False) == bench.FULL
    assert plan_for(quick=True, iterations=50).warmup == 10
    assert plan_for(quick=False, iterations=2).warmup == 1
    with pytest.raises(ValueError, match="at least 1"):
        plan_for(quick=True, iterations=0)


def test_bir_bench_proxy_is_a_subcommand_with_quick_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, bool]] = []

    def fake(*, quick: bool, as_json: bool, progress: object) -> int:
        seen.append({"quick": quick, "as_json": as_json})
        return 0

    monkeypatch.setattr(bench, "run_proxy_bench", fake)
    assert bir_main(["bench", "proxy", "--quick", "--json"]) == 0
    assert bir_main(["bench", "proxy"]) == 0
    assert seen == [{"quick": True, "as_json": True}, {"quick": False, "as_json": False}]
